"""Conversation records: `session/dialog/<session_id>.jsonl`, one filtered message per line.

Plain functions (no prefect), shared by auto_memory and by whatever records turns (CLI `turn`, the service):
`append_messages` filters and appends; `pending` returns the records auto_memory has not summarised yet,
using the per-session checkpoint `metadata/checkpoints/sessions/<id>.json` (`{"records": N, ...}`: the first
N non-blank lines are summarised). `mark_summarised` moves that checkpoint forward, after the card is written.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from storage.errors import NotFound
from storage.files import checkpoints, redaction_log
from storage.files.text_view import read_all
from storage.files.workspace import Workspace, check_session_id
from storage.search.timeref import local_date
from storage.text import redact
from storage.text.model import split_lines

TIME_KEYS = ("created_at", "timestamp", "createdAt", "time_created", "timeCreated", "created_time")
DROP_ROLES = {"tool", "function", "ipython"}
DROP_BLOCKS = {"tool_result", "function_call_output", "tool_output", "computer_call_output"}
DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/=\r\n]+")
MAX_PROMPT_CHARS = 12_000  # of records summarised at once (a small local model reads ~25 tokens/s); the rest next
MAX_ID_CHARS = 200  # a message `id` longer than this is not kept
TAIL_STEP = 1 << 16  # bytes read at a time from the end of a dialog file


def dialog_path(session_id: str) -> str:
    return f"session/dialog/{check_session_id(session_id)}.jsonl"


def checkpoint_name(session_id: str) -> str:
    return f"sessions/{check_session_id(session_id)}"


# ---- filtering ---------------------------------------------------------------------------------------------

def message_time(message: dict) -> str | None:
    """The message timestamp (top level or in `metadata`, under any usual key) as ISO 8601, else None."""
    for holder in (message, message.get("metadata") if isinstance(message.get("metadata"), dict) else {}):
        for key in TIME_KEYS:
            if holder.get(key) not in (None, ""):
                return _iso(holder[key])
    return None


def _iso(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        seconds = value / 1000 if value > 1e11 else value  # epoch milliseconds or seconds
        return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()
    text = str(value).strip()
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat()
    except ValueError:
        return text  # kept as given; it just cannot date the card


def _has_binary(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get("type") == "base64" or "b64_json" in value:
            return True
        return any(_has_binary(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_binary(v) for v in value)
    return isinstance(value, str) and value.startswith("data:") and ";base64," in value[:100]


class Kept:
    """What a message's text loses before it is written: base64 payloads, `<private>` spans, secrets
    (storage/text/redact.py, with the workspace's own `patterns`); `counts` and `private` tally what went."""

    def __init__(self, patterns: tuple = ()):
        self.patterns, self.counts, self.private = patterns, Counter(), 0

    def text(self, text: str) -> str:
        text, dropped = redact.drop_private(DATA_URI.sub("[base64 omitted]", text))
        text, counts = redact.redact(text, self.patterns)
        self.private += dropped
        self.counts.update(counts)
        return text

    def value(self, value: Any) -> Any:
        """Every string inside a content block (its `text`, a tool call's input...)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value


def _clean_content(content: Any, kept: Kept) -> Any:
    if content is None:
        return None
    if isinstance(content, str):
        return kept.text(content)
    blocks = content if isinstance(content, list) else [content]
    out = []
    for block in blocks:
        if isinstance(block, str):
            out.append(kept.text(block))
        elif isinstance(block, dict) and block.get("type") not in DROP_BLOCKS and not _has_binary(block):
            out.append(kept.value(block))
    return out


def clean_message(message: dict, kept: Kept | None = None) -> dict | None:
    """The record kept for a message (role, content, created_at, id) or None when nothing is worth keeping:
    tool results and base64 payloads are dropped, `<private>` spans and secrets replaced by markers (tallied
    in `kept`), timestamps and the caller's message id kept."""
    if not isinstance(message, dict):
        return None
    kept = kept or Kept()
    role = str(message.get("role") or "user")
    if role in DROP_ROLES:
        return None
    content = _clean_content(message.get("content"), kept)
    if content in (None, "", []) or (isinstance(content, str) and not content.strip()):
        return None
    record = {"role": role, "content": content}
    created = message_time(message)
    if created:
        record["created_at"] = created
    if isinstance(message.get("id"), str) and 0 < len(message["id"]) <= MAX_ID_CHARS:
        record["id"] = message["id"]
    return record


def append_messages(memory, session_id: str, messages: list[dict]) -> dict:
    """Filter `messages` and append them to the session's jsonl: `{path, appended, dropped, redacted,
    private}` (`redacted`: secrets replaced, by kind; `private`: spans dropped; both counted in the workspace's
    redaction log). A message whose `id` is among the session's last records (a delivery sent again) is not
    appended twice."""
    ws = redaction_log.workspace_of(memory)
    kept = Kept(redact.workspace_patterns(ws.root) if ws is not None else ())
    records = [r for r in (clean_message(m, kept) for m in messages) if r]
    path = dialog_path(session_id)
    if any("id" in r for r in records):
        recorded = {r.get("id") for r in last_records(memory, session_id, len(records)) if r}
        records = [r for r in records if r.get("id") is None or r["id"] not in recorded]
    if records:
        memory.append(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        if ws is not None:
            redaction_log.add(ws, kept.counts, kept.private)
    return {"path": path, "appended": len(records), "dropped": len(messages) - len(records),
            "redacted": dict(kept.counts), "private": kept.private}


def redact_line(line: bytes, kept: Kept) -> bytes:
    """One line of a dialog file from elsewhere (an import) with its secrets and private spans replaced: a
    record's strings, or the line's text when it is no JSON object; the line as it was when nothing went."""
    record = _record(line)
    before = (sum(kept.counts.values()), kept.private)
    if record is None:
        text = kept.text(line.decode("utf-8", "replace"))
        changed = text.encode("utf-8")
    else:
        changed = (json.dumps(kept.value(record), ensure_ascii=False) + "\n").encode("utf-8")
    return line if (sum(kept.counts.values()), kept.private) == before else changed


# ---- what is left to summarise -----------------------------------------------------------------------------

@dataclass
class Pending:
    """Records `start`..`end` (0-based, end exclusive, counting non-blank lines) not yet summarised."""

    session_id: str
    start: int
    end: int
    records: list[dict] = field(default_factory=list)
    total: int = 0  # records in the file
    lines: list[int] = field(default_factory=list)  # each record's line in the file

    @property
    def dates(self) -> list[str]:
        """The days of the records' timestamps (local time), sorted."""
        return sorted(d for d in (local_date(r.get("created_at")) for r in self.records) if d)

    @property
    def latest_date(self) -> str | None:
        return self.dates[-1] if self.dates else None


def outside_span(date: str, days: list[str], slack: int = 1) -> bool:
    """Whether a card's `date` lies more than `slack` days outside the span of its messages' `days`."""
    if not days:
        return False
    day = dt.date.fromisoformat(date)
    return day < dt.date.fromisoformat(days[0]) - dt.timedelta(days=slack) or \
        day > dt.date.fromisoformat(days[-1]) + dt.timedelta(days=slack)


def read_records(memory, session_id: str) -> list[dict | None]:
    """Every non-blank line of the session jsonl, parsed (None for a line that is not a JSON object)."""
    return [record for _, record in numbered_records(memory, session_id)]


def numbered_records(memory, session_id: str) -> list[tuple[int, dict | None]]:
    """`(line number, record)` of every non-blank line of the session jsonl, numbered as `read` numbers them
    (so `session/dialog/<id>.jsonl#L<n>` opens the record)."""
    try:
        text = read_all(memory, dialog_path(session_id))
    except NotFound:
        return []
    return [(n, _record(line)) for n, line in enumerate(split_lines(text), 1) if line.strip()]


def last_records(memory, session_id: str, count: int) -> list[dict | None]:
    """The session's last `count` records, as `read_records`; read from the end of the file when the
    workspace is local, so a long session costs no more than those records."""
    ws = getattr(memory, "ws", None)
    if ws is None:
        return read_records(memory, session_id)[-count:]
    try:
        path = ws.regular(dialog_path(session_id))
    except NotFound:
        return []
    with path.open("rb") as fh:
        data, at = b"", fh.seek(0, 2)
        while at > 0 and data.count(b"\n") <= count:
            step = min(TAIL_STEP, at)
            at -= step
            fh.seek(at)
            data = fh.read(step) + data
    return [_record(line) for line in data.splitlines()[-count:] if line.strip()]


def _record(line: bytes | str) -> dict | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def pending(memory, ws: Workspace, session_id: str, max_chars: int | None = None) -> Pending:
    """The records after the session checkpoint, up to about `max_chars` (`MAX_PROMPT_CHARS`) of text (the rest
    waits for the next run)."""
    max_chars = max_chars or MAX_PROMPT_CHARS
    numbered = numbered_records(memory, session_id)
    done = int(checkpoints.load(ws, checkpoint_name(session_id)).get("records", 0))
    start = min(done, len(numbered))  # a shortened file restarts from its end rather than skipping
    taken, lines, size, end = [], [], 0, start
    for line, record in numbered[start:]:
        cost = len(json.dumps(record, ensure_ascii=False)) if record else 0
        if taken and size + cost > max_chars:
            break
        if record and record.get("content") not in (None, "", []):
            taken.append(record)
            lines.append(line)
        size += cost
        end += 1
    return Pending(session_id, start, end, taken, len(numbered), lines)


def mark_summarised(ws: Workspace, session_id: str, end: int, card: str | None) -> dict:
    """Record that the first `end` records of the session are summarised (into `card`, when given)."""
    with checkpoints.update(ws, checkpoint_name(session_id)) as data:
        data.update(records=end, updated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        if card:
            data["card"] = card
        return dict(data)


def transcript(records: list[dict]) -> str:
    """Records as plain text for a prompt: `[time] role: text`."""
    lines = []
    for r in records:
        stamp = f"[{r['created_at']}] " if r.get("created_at") else ""
        lines.append(f"{stamp}{r.get('role', 'user')}: {content_text(r.get('content'))}")
    return "\n".join(lines)


def content_text(content: Any) -> str:
    """A message's `content` as text: a string as it is, content blocks by their text (another block by its
    type, `[image]`)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            text = block.get("text") or block.get("content")
            parts.append(text if isinstance(text, str) else f"[{block.get('type', 'block')}]")
    return "\n".join(parts)
