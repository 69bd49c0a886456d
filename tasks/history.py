"""Time in the digest: the day a unit's facts happened, a node's `## History`, and supersession (a node whose
facts stopped being true is kept, closed and linked to the node that replaced it; nothing is deleted).

Frontmatter keys and statuses: storage/validity.py. History lines are the system's: a model's update that
leaves them out gets them back, so a node's record of changes only grows.
"""

from __future__ import annotations

import re
from datetime import date as Date
from datetime import timedelta

from engine.toolbox import read_text
from storage import validity
from tasks.cards import slugify, unique_path, unwrap_link
from tasks.quality import NEXT_SECTION, SOURCES_HEADING, without_sources

DAY_PATH = re.compile(r"^daily/(\d{4}-\d{2}-\d{2})(?:/|\.md$)")
HISTORY = re.compile(r"^##[ \t]+History[ \t]*$", re.MULTILINE | re.IGNORECASE)
MAX_BACK = timedelta(days=3653)  # a date a unit gives may reach this far before its sources (a fact said later)
MAX_CHAIN = 20  # superseded_by hops followed to a node's current successor


def source_days(paths: list[str]) -> list[str]:
    """The days of the daily files among `paths` (YYYY-MM-DD), sorted."""
    return sorted({m.group(1) for m in map(DAY_PATH.match, paths) if m})


def event_date(said: str | None, paths: list[str], fallback: str, latest: bool = False) -> str:
    """The day a unit's facts became true: the day the unit gives, when it is a date no later than its
    latest source's day and at most MAX_BACK before its earliest; else its earliest source's day (`latest`:
    the latest one, for a change, which is true from when it was said); else `fallback`."""
    days = source_days(paths)
    given = validity.as_date(said)
    if given and days:
        first, last = Date.fromisoformat(days[0]), Date.fromisoformat(days[-1])
        if first - MAX_BACK <= given <= last:
            return given.isoformat()
    if days:
        return days[-1] if latest else days[0]
    return given.isoformat() if given and given <= Date.fromisoformat(fallback) else fallback


def history_line(date: str, what: str, paths: list[str]) -> str:
    """`- date: what ([[source]], ...)`, one line."""
    what = " ".join(what.split()).rstrip(".")[:300]
    links = ", ".join(f"[[{p}]]" for p in paths)
    return f"- {date}: {what}" + (f" ({links})" if links else "") + "\n"


def with_history(body: str, before: str, line: str | None = None) -> str:
    """`body` with a `## History` section holding the history lines of `before` the body lost, then `line`
    (when given); the section stands before `## Sources`."""
    kept, rest = _history(body)
    earlier, _ = _history(before)
    lines = kept + [entry for entry in earlier if entry not in kept]
    if line and line not in lines:
        lines.append(line)
    if not lines:
        return body
    section = "## History\n\n" + "".join(lines)
    match = SOURCES_HEADING.search(rest)
    if not match:
        return rest.rstrip("\n") + "\n\n" + section
    head = rest[:match.start()].rstrip("\n")
    return (head + "\n\n" if head else "") + section + "\n" + rest[match.start():]


def same_content(body: str, before: str) -> bool:
    """Whether `body` says what `before` says: the same text once History and Sources sections are left out
    and whitespace is folded (an update that only adds sources is a corroboration, not a refinement)."""
    def said(text: str) -> str:
        return " ".join(without_sources(_history(text)[1]).split())
    return said(body) == said(before)


def _history(body: str) -> tuple[list[str], str]:
    """(the lines of the body's History section, the body without it)."""
    match = HISTORY.search(body)
    if not match:
        return [], body
    following = NEXT_SECTION.search(body, match.end())
    end = following.start() if following else len(body)
    lines = [line + "\n" for line in body[match.end():end].splitlines() if line.strip()]
    return lines, body[:match.start()] + body[end:]


def current_of(memory, path: str) -> str | None:
    """The current node that `path` is, or that replaced it through `superseded_by` links; None when the
    chain ends at a missing, expired or looping node."""
    seen = set()
    while path and path not in seen and len(seen) < MAX_CHAIN:
        seen.add(path)
        if read_text(memory, path) is None:
            return None
        meta = memory.frontmatter_get(path)["frontmatter"] or {}
        state = validity.status(meta, Date.today())
        if state == validity.CURRENT:
            return path
        if state == validity.EXPIRED:
            return None
        path = unwrap_link(meta.get("superseded_by"))
    return None


def successor_path(memory, old: str, name: str, since: str) -> str:
    """Where the node replacing `old` goes: its bucket, named after `name`; `<name>-<since>.md` when that
    name is taken (by `old` itself, typically)."""
    bucket = old.split("/")[1]
    stem = slugify(name, "node")
    path = f"digest/{bucket}/{stem}.md"
    if read_text(memory, path) is None:
        return path
    return unique_path(memory, f"digest/{bucket}", f"{stem}-{since}")


def closing_day(meta: dict, since: str) -> str:
    """The day the old node's facts stop: `since`, never before the old node's own `valid_from`."""
    start = validity.as_date(meta.get("valid_from"))
    return max(since, start.isoformat()) if start else since
