"""`dreamflow hook claude-code`: capture Claude Code conversations from its hooks, without the agent's help.

Claude Code runs the command on `Stop`, `PreCompact` and `SessionEnd` with a JSON object on stdin
(`session_id`, `transcript_path`, `hook_event_name`, ...). The transcript is the session's JSONL file, one
record per line, appended to as the session goes on. Each delivery appends the records not seen before to
`session/dialog/<session_id>.jsonl` and counts them through the turn counter (one turn per user prompt), so
auto_memory summarises the session every N turns as for any other caller; `PreCompact` and `SessionEnd`
summarise now (compact), since Claude Code is about to drop detail or the session is over. Claude Code
writes the transcript behind its events, so the end of a turn may come with the next delivery: it is
appended then without counting another turn.

What is kept: the main conversation's user prompts and assistant text (and tool calls, their long arguments
cut). Dropped: tool results, thinking, base64 images (tasks/dialog.py filters as for every turn), sidechains
(subagents), meta and local-command records, `<system-reminder>` blocks, Claude Code's own compaction
summaries, summary/system/snapshot records. A partly written last line waits for the next delivery.

Idempotent: a per-session checkpoint `metadata/checkpoints/claude-code/<session_id>.json` holds the byte
offset read so far and the uuids taken, under a lock, so a transcript delivered twice (PreCompact may fire
several times per compaction) adds nothing. A hook must never break the host: any error is one line on stderr
and exit status 0 (Claude Code would otherwise show a hook failure in the session, or block on Stop).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

EVENTS = ("Stop", "PreCompact", "SessionEnd")
COMPACTING = ("PreCompact", "SessionEnd")
CHECKPOINT = "claude-code/{session_id}"
LOCK_TIMEOUT = 20.0  # seconds: deliveries of one session take turns; the host's hook timeout is longer
TOOL_INPUT_CHARS = 300  # tool-call arguments longer than this are cut (a Write's whole file is not memory)
SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
COMMAND_PREFIXES = ("<command-name>", "<command-message>", "<command-args>", "<local-command-", "Caveat: ")
INTERRUPTED = "[Request interrupted by user"
PRIVATE_BLOCKS = {"thinking", "redacted_thinking"}


# ---- reading the transcript --------------------------------------------------------------------------------

def read_new(path: Path, offset: int) -> tuple[list[dict], int]:
    """The complete records after byte `offset` (a shorter file is read from the start) and the new offset."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        start = offset if 0 <= offset <= size else 0
        fh.seek(start)
        data = fh.read()
    end = data.rfind(b"\n") + 1  # a partly written last line waits for the next delivery
    records = []
    for line in data[:end].splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(value)
    return records, start + end


def message_of(record: dict) -> dict | None:
    """The chat message a transcript record contributes ({role, content, created_at, uuid}), or None."""
    if record.get("type") not in ("user", "assistant") or record.get("isSidechain"):
        return None
    if record.get("isMeta") or record.get("isCompactSummary") or record.get("isApiErrorMessage"):
        return None
    message = record.get("message")
    if not isinstance(message, dict):
        return None
    content = _content(message.get("content"))
    if not content:
        return None
    return {"role": message.get("role") or record["type"], "content": content, "created_at": record.get("timestamp"),
            "uuid": record.get("uuid"), "message_id": message.get("id")}


def _content(content: Any) -> Any:
    from tasks.dialog import DROP_BLOCKS  # tool results: a user record of only these is no prompt

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
            kept.append({"type": "tool_use", "name": block.get("name"), "input": _cut(block.get("input"))})
        else:
            kept.append(block)  # images and the like: tasks/dialog.py drops base64 payloads
    return kept or None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    text = SYSTEM_REMINDER.sub("", value).strip()
    if text.startswith(COMMAND_PREFIXES) or text.startswith(INTERRUPTED):
        return ""
    return text


def _cut(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= TOOL_INPUT_CHARS else value[:TOOL_INPUT_CHARS] + " [...]"
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v) for v in value]
    return value


def messages_of(records: list[dict], seen: set[str]) -> list[dict]:
    """The new messages of `records` (uuids in `seen` skipped), with the pieces of one streamed assistant
    message (same message id on consecutive lines) joined."""
    messages: list[dict] = []
    for record in records:
        if record.get("uuid") in seen:
            continue
        message = message_of(record)
        if message is None:
            continue
        last = messages[-1] if messages else None
        if (last and message["role"] == "assistant" == last["role"] and message["message_id"]
                and message["message_id"] == last["message_id"]):
            last["content"] = _blocks(last["content"]) + _blocks(message["content"])
            last["uuids"].append(message["uuid"])
            continue
        message["uuids"] = [message["uuid"]]
        messages.append(message)
    return messages


def _blocks(content: Any) -> list:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def turns_of(messages: list[dict]) -> list[tuple[list[dict], list[str]]]:
    """Messages grouped into turns, each with the transcript uuids it holds: a user prompt starts one
    (tool-result-only user records were dropped)."""
    turns: list[tuple[list[dict], list[str]]] = []
    for message in messages:
        if message["role"] == "user" or not turns:
            turns.append(([], []))
        turns[-1][0].append({k: message[k] for k in ("role", "content", "created_at") if message.get(k)})
        turns[-1][1].extend(u for u in message["uuids"] if u)
    return turns


# ---- one delivery ------------------------------------------------------------------------------------------

def capture(workspace: Path, payload: dict) -> dict:
    """Append the new turns of the payload's transcript and count them: `{session_id, event, appended, turns,
    results}` (`results`: what each recorded turn answered)."""
    from dreamflow.service import record_turn
    from engine.turns import check_session_id
    from storage.errors import InvalidInput
    from storage.workspace import Workspace
    from tasks import checkpoints

    event = payload.get("hook_event_name")
    session_id = check_session_id(payload.get("session_id"))
    if event not in EVENTS:
        return {"session_id": session_id, "event": event, "appended": 0, "turns": 0, "results": []}
    transcript = payload.get("transcript_path")
    if not isinstance(transcript, str) or not transcript:
        raise InvalidInput("the hook input has no transcript_path")
    path = Path(transcript).expanduser()
    if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
        raise InvalidInput(f"the transcript {path} is not a regular file")
    ws = Workspace(workspace)
    name = CHECKPOINT.format(session_id=session_id)
    results = []
    with checkpoints.lock(ws, name, timeout=LOCK_TIMEOUT), _index_held(ws):
        state = checkpoints.load(ws, name)
        start = int(state.get("offset", 0)) if state.get("transcript") == str(path) else 0
        records, offset = read_new(path, start)
        seen = set(state.get("uuids", []))
        turns, rest = continued(turns_of(messages_of(records, seen)), bool(seen))
        if rest:  # the end of a turn counted before (Claude Code writes the transcript behind the Stop event)
            results.append(_append_uncounted(ws.root, session_id, rest[0]))
            seen.update(rest[1])
            checkpoints.save(ws, name, {"transcript": str(path), "offset": start, "uuids": sorted(seen)})
        for i, (turn, uuids) in enumerate(turns):
            results.append(record_turn(ws.root, session_id, turn, compact=event in COMPACTING and i == len(turns) - 1))
            seen.update(uuids)  # saved per turn: if a later turn fails, a redelivery skips the recorded ones
            checkpoints.save(ws, name, {"transcript": str(path), "offset": start, "uuids": sorted(seen)})
        if not turns and event in COMPACTING and (rest or _pending(ws, session_id)):
            results.append(record_turn(ws.root, session_id, [], compact=True))
        checkpoints.save(ws, name, {"transcript": str(path), "offset": offset, "uuids": sorted(seen)})
    return {"session_id": session_id, "event": event, "appended": sum(r["appended"] for r in results),
            "turns": len(turns), "results": results}


def continued(turns: list[tuple[list[dict], list[str]]], recorded_before: bool):
    """(turns to count, the messages that end an earlier turn or None). Messages before the delivery's first
    user prompt, when earlier records were taken, finish the previous turn (an answer written after its Stop
    fired): they go with the next prompt's turn, or are appended uncounted when no prompt follows, so the
    counter counts one turn per user prompt."""
    if not recorded_before or not turns or turns[0][0][0]["role"] == "user":
        return turns, None
    head, turns = turns[0], turns[1:]
    if not turns:
        return [], head
    return [(head[0] + turns[0][0], head[1] + turns[0][1]), *turns[1:]], None


def _index_held(ws):
    """Without a service: the index opened once for the whole delivery (nested sessions of this process reuse
    it), not once per turn: a first delivery of a long session is hundreds of turns. With one: nothing."""
    from contextlib import nullcontext

    from engine.client import service_info
    from storage.db import IndexDB

    return nullcontext() if service_info(ws.root) is not None else IndexDB(ws).session()


def _append_uncounted(root: Path, session_id: str, messages: list[dict]) -> dict:
    """Append messages to the session's dialog (through the service when it runs) without counting a turn."""
    from engine.client import open_memory
    from tasks.dialog import append_messages

    return append_messages(open_memory(root), session_id, messages)


def _pending(ws, session_id: str) -> bool:
    from engine.turns import TurnCounter

    return TurnCounter(ws, 1).sessions().get(session_id, {}).get("pending", 0) > 0


# ---- CLI: dreamflow hook claude-code (registered in dreamflow/cli.py) -----------------------------------------

def register(cli) -> None:
    """Add the `hook` group to the `dreamflow` command group."""
    import click

    @cli.group("hook")
    def hook() -> None:
        """Capture conversations from agent hosts' hooks (see docs/agents.md)."""

    @hook.command("claude-code")
    @click.option("--verbose", "-v", is_flag=True, help="Print what was captured on stderr.")
    @click.pass_obj
    def claude_code(obj, verbose: bool) -> None:
        """Claude Code hook (Stop, PreCompact, SessionEnd): record the transcript's new turns.

        Reads the hook's JSON from stdin. Always exits 0, so memory trouble never interrupts the session;
        problems are reported on stderr (Claude Code shows them in its debug log).
        """
        try:
            payload = json.loads(sys.stdin.read() or "{}")
            if not isinstance(payload, dict):
                raise ValueError("the hook input is not a JSON object")
            result = capture(Path(obj.workspace), payload)
        except Exception as exc:  # never fail the host: say what went wrong and carry on
            print(f"dreamflow hook claude-code: {type(exc).__name__}: {exc}", file=sys.stderr)
            return
        if verbose:
            print(f"dreamflow hook claude-code: {result['event']} {result['session_id']}: "
                  f"{result['appended']} message(s) in {result['turns']} turn(s)", file=sys.stderr)
