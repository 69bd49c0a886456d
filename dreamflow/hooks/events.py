"""`dreamflow hook claude-code`: capture Claude Code conversations from its hooks, without the agent's help
(and, on `SessionStart` and `UserPromptSubmit`, put memory before the agent: dreamflow/hooks/context.py).

Claude Code runs the command on `Stop`, `PreCompact` and `SessionEnd` with a JSON object on stdin
(`session_id`, `transcript_path`, `hook_event_name`, ...). The transcript is the session's JSONL file, one
record per line, appended to as the session goes on. Each delivery reads the lines not read before, as a
stream, and records them turn by turn (one turn per user prompt) through the turn counter, so auto_memory
summarises the session every N turns as for any other caller; `PreCompact` and `SessionEnd` summarise now
(compact), since Claude Code is about to drop detail or the session is over. Claude Code writes the
transcript behind its events, so the end of a turn may come with the next delivery: it is appended then
without counting another turn (a turn with no user message is never counted).

Which workspace: `--workspace` when given, else the registered workspace whose `folders` hold the session's
`cwd` (`dreamflow workspace add web-app DIR --folder ~/src/web-app`), else the registry's default: each
repository gets its own memory (`session_workspace`).

What is kept: the main conversation's user prompts (a slash command as `/name args`) and assistant text (and
tool calls, their long arguments cut). Dropped: tool results, thinking, base64 images (storage/files/dialog.py filters
as for every turn), sidechains (subagents), meta records (a slash command's expanded body), local-command
output and caveats, `<system-reminder>` blocks, Claude Code's own compaction summaries and the answers it
writes itself (model `<synthetic>`), summary/system/snapshot records. A partly written last line waits for
the next delivery.

Bounded, whatever the transcript: lines are read one at a time up to `hook_max_line_bytes` (a longer line is
skipped and reported), a record that is not JSON or nests too deep for the parser is skipped and reported,
content nested deeper than `MAX_DEPTH` is cut, a turn is recorded in parts of at most `MAX_TURN_BYTES`, and a
delivery stops after `hook_max_turns` turns, `hook_max_bytes` read or `hook_max_seconds` (engine/config/settings.py,
`DREAMFLOW_HOOK_*`): the next delivery goes on from there.

Exactly once: a per-session checkpoint `metadata/checkpoints/claude-code/<session_id>.json` holds the byte
offset read so far and the uuids of the latest records taken, under a lock, saved after each turn, so a
transcript delivered twice (PreCompact may fire several times per compaction) adds nothing. A delivery killed
after recording a turn but before saving its checkpoint sends that turn again: it goes with a `turn_id` (the
uuid of its first record) and its messages with their record uuids as `id`, so the receiving side
(engine/access/turns.py) neither appends nor counts it twice. A hook must never break the host: any error is one
line on stderr and exit status 0 (Claude Code would otherwise show a hook failure in the session, or block
on Stop).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENTS = ("Stop", "PreCompact", "SessionEnd")
COMPACTING = ("PreCompact", "SessionEnd")
CHECKPOINT = "claude-code/{session_id}"
LOCK_TIMEOUT = 10.0  # seconds: deliveries of one session take turns; with hook_max_seconds, under the hook timeout
TOOL_INPUT_CHARS = 300  # tool-call arguments longer than this are cut (a Write's whole file is not memory)
MAX_DEPTH = 24  # content nested deeper than this is cut, so no later step can run out of stack on it
MAX_TURN_BYTES = 4 << 20  # transcript bytes behind one record_turn call; a longer turn is recorded in parts
UUID_WINDOW = 1000  # uuids of the latest messages taken, kept in the checkpoint (a transcript read again)
MAX_INPUT_BYTES = 1 << 20  # the hook's JSON on stdin
READ_CHUNK = 1 << 20  # bytes read at a time while skipping an over-long line
SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
COMMAND_MARKUP = ("<command-name>", "<command-message>", "<command-args>")
DROPPED_PREFIXES = ("<local-command-", "Caveat: ", "[Request interrupted by user")
PRIVATE_BLOCKS = {"thinking", "redacted_thinking"}
SYNTHETIC = "<synthetic>"  # the model name on answers Claude Code writes itself ("No response requested.")


# ---- reading the transcript --------------------------------------------------------------------------------

class Lines:
    """A transcript read as a stream of complete lines from byte `offset`, each at most `max_line` bytes.

    `offset` is always the end of what was consumed; `skipping` says it lies inside an over-long line (which
    is read past in chunks, once, even across deliveries). A partly written last line is left for later."""

    def __init__(self, fh, offset: int, skipping: bool, max_line: int):
        self.fh, self.offset, self.skipping, self.max_line = fh, offset, skipping, max_line
        self.read = 0  # bytes read by this delivery
        self.too_long = 0  # over-long lines skipped
        fh.seek(offset)

    def __iter__(self):
        """Each complete line's bytes; None for each chunk of an over-long line read past."""
        while True:
            piece = self.fh.readline(READ_CHUNK if self.skipping else self.max_line + 1)
            if not piece:
                return
            complete = piece.endswith(b"\n")
            if not self.skipping and not complete and len(piece) <= self.max_line:
                return  # still being written
            self.read += len(piece)
            self.offset += len(piece)
            if self.skipping or not complete:
                self.skipping = not complete
                self.too_long += complete
                yield None
            else:
                yield piece


def parse(line: bytes) -> dict | None:
    """The record on a transcript line, or None when it is not a JSON object (or nests too deep to parse)."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def message_of(record: dict) -> dict | None:
    """The chat message a transcript record contributes ({role, content, created_at, uuid, message_id}), or None."""
    kind = record.get("type")
    if kind not in ("user", "assistant") or record.get("isSidechain"):
        return None
    if record.get("isMeta") or record.get("isCompactSummary") or record.get("isApiErrorMessage"):
        return None
    message = record.get("message")
    if not isinstance(message, dict) or message.get("model") == SYNTHETIC:
        return None
    content = _content(message.get("content"))
    if not content:
        return None
    return {"role": kind, "content": content, "created_at": _stamp(record.get("timestamp")),
            "uuid": _id(record.get("uuid")), "message_id": _id(message.get("id"))}


def _message(record: dict) -> dict | None | bool:
    """`message_of(record)`, or False for a record whose fields have shapes no Claude Code record has."""
    try:
        return message_of(record)
    except (TypeError, ValueError, AttributeError, RecursionError):
        return False


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


def _stamp(value: Any) -> str | int | float | None:
    if isinstance(value, str):
        return value[:64]
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _content(content: Any) -> Any:
    from storage.files.dialog import DROP_BLOCKS  # tool results: a user record of only these is no prompt

    if isinstance(content, str):
        text = _text(content)
        return text or None
    if not isinstance(content, list):
        return None
    kept = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") in PRIVATE_BLOCKS | DROP_BLOCKS:
            continue
        if block.get("type") == "text":
            text = _text(block.get("text"))
            if text:
                kept.append({"type": "text", "text": text})
        elif block.get("type") == "tool_use":
            kept.append({"type": "tool_use", "name": _cut(block.get("name")), "input": _cut(block.get("input"))})
        else:
            kept.append(_cut(block))  # images and the like: storage/files/dialog.py drops base64 payloads
    return kept or None


def _text(value: Any) -> str:
    """The user's or assistant's words in a text: a slash command's markup becomes `/name args`; local-command
    output, caveats and interruption notes are none."""
    if not isinstance(value, str):
        return ""
    text = SYSTEM_REMINDER.sub("", value).strip()
    if text.startswith(COMMAND_MARKUP):
        name, args = COMMAND_NAME.search(text), COMMAND_ARGS.search(text)
        if not name or not name.group(1):
            return ""
        command = name.group(1) if name.group(1).startswith("/") else "/" + name.group(1)
        return f"{command} {args.group(1).strip()}".strip() if args else command
    return "" if text.startswith(DROPPED_PREFIXES) else text


def _cut(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= TOOL_INPUT_CHARS else value[:TOOL_INPUT_CHARS] + " [...]"
    if isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
        return "[...]"
    if isinstance(value, dict):
        return {k: _cut(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, depth + 1) for v in value]
    return value


@dataclass
class Turn:
    """The messages gathered for one record_turn call: a user prompt and what follows it (or, first in a
    delivery, the rest of an earlier turn); streamed pieces of one assistant message (same message id on
    consecutive lines) joined."""

    messages: list[dict] = field(default_factory=list)
    size: int = 0  # transcript bytes behind the messages

    def add(self, message: dict, size: int) -> None:
        last = self.messages[-1] if self.messages else None
        self.size += size
        if (last and message["role"] == "assistant" == last["role"] and message["message_id"]
                and message["message_id"] == last["message_id"]):
            last["content"] = _blocks(last["content"]) + _blocks(message["content"])
            last["uuids"].append(message["uuid"])
        else:
            self.messages.append({**message, "uuids": [message["uuid"]]})


def _blocks(content: Any) -> list:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


# ---- one delivery ------------------------------------------------------------------------------------------

@dataclass
class Limits:
    """What one delivery may do before it leaves the rest to the next (engine/config/settings.py `hook_*`)."""

    seconds: float
    turns: int
    bytes: int
    line_bytes: int

    @classmethod
    def from_settings(cls) -> Limits:
        from engine.config.settings import Settings

        s = Settings()
        return cls(s.hook_max_seconds, s.hook_max_turns, s.hook_max_bytes, s.hook_max_line_bytes)


class Delivery:
    """One delivery of a session's transcript: reads from the checkpoint on, records turn by turn, saves the
    checkpoint after each turn, and stops at its limits."""

    def __init__(self, ws, session_id: str, limits: Limits):
        self.ws, self.session_id, self.limits = ws, session_id, limits
        self.name = CHECKPOINT.format(session_id=session_id)
        self.started = time.monotonic()
        self.results: list[dict] = []
        self.turns = self.calls = self.unreadable = self.too_long = self.left = 0
        self.refused: list[str] = []

    def read(self, path: Path) -> None:
        from storage.files import checkpoints

        state = checkpoints.load(self.ws, self.name)
        uuids = state.get("uuids") if isinstance(state.get("uuids"), list) else []
        self.seen = dict.fromkeys(u for u in uuids[-UUID_WINDOW:] if isinstance(u, str))
        self.path = str(path)
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            offset = state.get("offset") if state.get("transcript") == self.path else None
            resume = isinstance(offset, int) and 0 <= offset <= size
            lines = Lines(fh, offset if resume else 0, resume and state.get("skipping") is True,
                          self.limits.line_bytes)
            turn, end = Turn(), lines.offset
            for line in lines:
                start, end = end, lines.offset
                record = parse(line) if line is not None else None
                message = _message(record) if record is not None and _id(record.get("uuid")) not in self.seen else None
                self.unreadable += line is not None and (record is None or message is False)
                message = message or None
                if message is not None and message["uuid"] is None:
                    message["uuid"] = f"@{start}"  # no uuid: its place in the transcript names it
                if message is not None and message["role"] == "user" and turn.messages:
                    self.record(turn, start)
                    turn = Turn()
                    if self.spent(lines):
                        end, stopped = start, True  # the prompt is read again by the next delivery
                        break
                if message is not None:
                    turn.add(message, len(line))
                if turn.size >= MAX_TURN_BYTES:
                    self.record(turn, end)
                    turn = Turn()
                if self.spent(lines):
                    stopped = True
                    break
            else:
                stopped = False
            if turn.messages:
                self.record(turn, end)
            self.save(end, lines.skipping and end == lines.offset)
            self.too_long, self.left = lines.too_long, max(0, fh.seek(0, 2) - end) if stopped else 0

    def spent(self, lines: Lines) -> bool:
        return (self.calls >= self.limits.turns or lines.read >= self.limits.bytes
                or time.monotonic() - self.started >= self.limits.seconds)

    def record(self, turn: Turn, end: int) -> None:
        """Record the turn (idempotent: ids as in the module docstring), then checkpoint the transcript up
        to `end`. A turn the receiving side refuses as invalid is reported and passed over, not retried forever."""
        from engine.access.client import open_memory
        from storage.errors import InvalidInput

        messages = [{"role": m["role"], "content": m["content"], "created_at": m["created_at"], "id": m["uuid"]}
                    for m in turn.messages]
        try:
            self.results.append(open_memory(self.ws.root).turn(self.session_id, [
                {k: v for k, v in m.items() if v} for m in messages], turn_id=messages[0]["id"]))
        except InvalidInput as exc:
            self.refused.append(f"turn {messages[0]['id']}: {exc}")
        self.calls += 1
        self.turns += any(m["role"] == "user" for m in messages)
        for message in turn.messages:
            for uuid in message["uuids"]:
                self.seen[uuid] = None
        while len(self.seen) > UUID_WINDOW:
            del self.seen[next(iter(self.seen))]
        self.save(end, False)

    def save(self, offset: int, skipping: bool) -> None:
        from storage.files import checkpoints

        checkpoints.save(self.ws, self.name, {"transcript": self.path, "offset": offset, "skipping": skipping,
                                              "uuids": list(self.seen)})


def capture(workspace: Path, payload: dict, limits: Limits | None = None) -> dict:
    """Record the new turns of the payload's transcript: `{session_id, event, appended, turns, results,
    unreadable, too_long, refused, left}` (`results`: what each record_turn call answered; `left`: transcript
    bytes left for the next delivery)."""
    from engine.access.client import open_memory
    from engine.access.turns import check_session_id
    from storage.files import checkpoints
    from storage.errors import InvalidInput
    from storage.files.workspace import Workspace

    event = payload.get("hook_event_name")
    session_id = check_session_id(payload.get("session_id"))
    summary = {"session_id": session_id, "event": event, "appended": 0, "turns": 0, "results": [],
               "unreadable": 0, "too_long": 0, "refused": [], "left": 0}
    if event not in EVENTS:
        return summary
    transcript = payload.get("transcript_path")
    if not isinstance(transcript, str) or not transcript:
        raise InvalidInput("the hook input has no transcript_path")
    path = Path(transcript).expanduser()
    if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
        raise InvalidInput(f"the transcript {path} is not a regular file")
    if not path.exists() and event == "SessionEnd":  # a session that ended before writing anything
        return summary
    ws = Workspace(workspace)
    delivery = Delivery(ws, session_id, limits or Limits.from_settings())
    memory = open_memory(ws.root)
    with checkpoints.lock(ws, delivery.name, timeout=LOCK_TIMEOUT), _index_held(memory):
        delivery.read(path)
        if event in COMPACTING and (_unsummarised(delivery.results) or _pending(ws, session_id)):
            delivery.results.append(memory.turn(session_id, [], compact=True))
    return {**summary, "appended": sum(r["appended"] for r in delivery.results), "turns": delivery.turns,
            "results": delivery.results, "unreadable": delivery.unreadable, "too_long": delivery.too_long,
            "refused": delivery.refused, "left": delivery.left}


def session_workspace(given: str | None, payload: dict) -> Path:
    """The folder of the workspace a session's turns go to (`session_target`)."""
    return session_target(given, payload)[1]


def session_target(given: str | None, payload: dict) -> tuple[str, Path]:
    """(name, folder) of the workspace a session's turns go to: `--workspace` or `DREAMFLOW_WORKSPACE` when
    given, else the registered workspace whose `folders` hold the session's `cwd` (one memory per repository),
    else the registry's default (engine.config.registry.resolve)."""
    from engine.config.registry import resolve

    cwd = payload.get("cwd")
    return resolve(given, cwd=cwd if isinstance(cwd, str) and cwd else None)


def _index_held(memory):
    """In-process: the index opened once for the whole delivery (nested sessions of this process reuse it), not
    once per turn: a first delivery of a long session is hundreds of turns. Through the service: nothing."""
    from contextlib import nullcontext

    db = getattr(memory, "db", None)  # an in-process memory's index (engine/access/client.py)
    return nullcontext() if db is None else db.session()


def _unsummarised(results: list[dict]) -> bool:
    """Whether this delivery appended messages after its last auto_memory launch."""
    for result in reversed(results):
        if result.get("launched"):
            return False
        if result.get("appended"):
            return True
    return False


def _pending(ws, session_id: str) -> bool:
    from engine.access.turns import TurnCounter

    return TurnCounter(ws, 1).sessions().get(session_id, {}).get("pending", 0) > 0


# ---- CLI: dreamflow hook claude-code (registered in dreamflow/cli/app.py; dreamflow/entry.py calls it directly) --

def claude_code(workspace_arg: str | None, verbose: bool = False) -> None:
    """Answer one Claude Code hook event from the JSON on stdin: capture (Stop, PreCompact, SessionEnd) or
    inject (SessionStart, UserPromptSubmit: the answer on stdout). Never raises: a problem is one stderr line."""
    from dreamflow.hooks import context as hook_context

    try:
        text = sys.stdin.read(MAX_INPUT_BYTES + 1)
        if len(text) > MAX_INPUT_BYTES:
            raise ValueError(f"the hook input is over {MAX_INPUT_BYTES} characters")
        payload = json.loads(text or "{}")
        if not isinstance(payload, dict):
            raise ValueError("the hook input is not a JSON object")
        event = payload.get("hook_event_name")
        if event in hook_context.EVENTS:
            injected = hook_context.context(session_target(workspace_arg, payload), payload)
        else:
            result = capture(session_workspace(workspace_arg, payload), payload)
    except Exception as exc:  # never fail the host: say what went wrong and carry on
        print(f"dreamflow hook claude-code: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    if event in hook_context.EVENTS:
        if injected:
            print(json.dumps(hook_context.answer(event, injected), ensure_ascii=False))
        if verbose:
            print(f"dreamflow hook claude-code: {event}: {len(injected or '')} characters injected", file=sys.stderr)
        return
    said = f"dreamflow hook claude-code: {result['event']} {result['session_id']}"
    skipped = [f"{n} {what}" for n, what in ((result["too_long"], "line(s) over DREAMFLOW_HOOK_MAX_LINE_BYTES"),
                                             (result["unreadable"], "unreadable record(s)")) if n]
    if skipped:
        print(f"{said}: skipped {' and '.join(skipped)} of the transcript", file=sys.stderr)
    for refused in result["refused"]:
        print(f"{said}: skipped {refused}", file=sys.stderr)
    if verbose:
        left = f"; {result['left']} bytes left for the next delivery" if result["left"] else ""
        print(f"{said}: {result['appended']} message(s) in {result['turns']} turn(s){left}", file=sys.stderr)
