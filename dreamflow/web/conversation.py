"""A conversation file (`session/dialog/<id>.jsonl`, one message a line, storage/files/dialog.py) shown as a
conversation: who said what, when, each message at its line's anchor (`#L3`), so a trace's link to
`session/dialog/x.jsonl#L3` lands on that message. A line that is not a message record is shown as it is."""

from __future__ import annotations

import json
from dataclasses import dataclass

from storage.files.dialog import content_text, message_time
from storage.index.tokenize import terms
from storage.text.model import split_lines

from dreamflow.web.markdown_html import mark

ROLES = {"user": "User", "assistant": "Assistant", "system": "System", "developer": "Developer"}


@dataclass
class Message:
    line: int  # of the file: the message's anchor is `L<line>`
    role: str | None  # None: the line is not a message record
    who: str
    at: str | None  # ISO time, when the record has one
    html: str  # its text (or the raw line), escaped, the query's words marked
    hit: bool  # within the lines the page was opened at
    id: str | None = None


def is_conversation(path: str) -> bool:
    """Whether a workspace path is a conversation file."""
    return path.startswith("session/dialog/") and path.endswith(".jsonl")


def messages(text: str, first_line: int, query: str = "", lines: tuple[int, int] | None = None) -> list[Message]:
    """The messages of a page of a conversation file whose first line is file line `first_line`; blank lines
    are left out, `lines` marked as hits."""
    marked = frozenset(terms(query)) if query else frozenset()
    shown = []
    for n, line in enumerate(split_lines(text), first_line):
        if not line.strip():
            continue
        hit = lines is not None and lines[0] <= n <= lines[1]
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):
            shown.append(Message(n, None, "not a message", None, mark(line, marked), hit))
            continue
        role = str(record.get("role") or "user")
        shown.append(Message(n, role, ROLES.get(role, role.capitalize()), message_time(record),
                             mark(content_text(record.get("content")), marked), hit,
                             str(record["id"]) if record.get("id") is not None else None))
    return shown
