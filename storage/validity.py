"""When a digest node's facts hold: its validity window and status, read from its frontmatter.

A digest node may carry (README "Layout"):
- `valid_from`: the day its facts became true (from its sources' event dates, not the day of the dream);
- `valid_to`: the day they stopped being true (exclusive: on that day the successor holds);
- `expires`: a day after which the node no longer holds, set by a person or a job;
- `status`: `current`, `superseded` (replaced by the node in `superseded_by`) or `expired`;
- `superseded_by` / `supersedes`: wikilinks between a node and the node that replaced it.

Daily cards are history: they have no status, and their day is when their facts were said.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

CURRENT, SUPERSEDED, EXPIRED = "current", "superseded", "expired"
STATUSES = (CURRENT, SUPERSEDED, EXPIRED)
KEYS = ("valid_from", "valid_to", "expires", "status", "superseded_by", "supersedes")


def as_date(value: Any) -> dt.date | None:
    """A frontmatter date (a YAML date, or text starting with YYYY-MM-DD), else None."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value).strip()[:10]) if value else None
    except ValueError:
        return None


def status(meta: dict, today: dt.date) -> str:
    """The node's status on `today`: superseded when it says so, expired when it says so or its `expires` or
    `valid_to` day has come, else current."""
    said = str(meta.get("status") or "").strip().lower()
    if said == SUPERSEDED:
        return SUPERSEDED
    ended = [d for d in (as_date(meta.get("expires")), as_date(meta.get("valid_to"))) if d]
    if said == EXPIRED or any(d <= today for d in ended):
        return EXPIRED
    return CURRENT


def window(meta: dict) -> dict:
    """`{valid_from, valid_to}` as YYYY-MM-DD text (None when open)."""
    start, end = as_date(meta.get("valid_from")), as_date(meta.get("valid_to"))
    return {"valid_from": start.isoformat() if start else None, "valid_to": end.isoformat() if end else None}


def target(value: Any) -> str:
    """A frontmatter link's path (`[[digest/x.md]]` or a bare path)."""
    return str(value or "").strip().removeprefix("[[").removesuffix("]]").split("|")[0].split("#")[0].strip()


def chain_problems(metas: dict[str, dict], today: dt.date) -> list[dict]:
    """Broken validity and supersession among digest nodes (`{path: frontmatter}`): `{path, problem, detail}`
    rows for a successor that is missing, a superseded node naming none, a `superseded_by` chain that loops,
    a node and successor that do not name each other, `valid_to` before `valid_from`, and a node still marked
    current after its `expires` or `valid_to` day."""
    rows = []

    def add(path: str, problem: str, detail: str) -> None:
        rows.append({"path": path, "problem": problem, "detail": detail})

    for path, meta in sorted(metas.items()):
        start, end = as_date(meta.get("valid_from")), as_date(meta.get("valid_to"))
        if start and end and end < start:
            add(path, "window", f"valid_to {end} is before valid_from {start}")
        said = str(meta.get("status") or "").strip().lower()
        ended = min((d for d in (as_date(meta.get("expires")), end) if d), default=None)
        if said == CURRENT and ended and ended <= today:
            add(path, "expired", f"expired on {ended} but still marked current")
        successor = target(meta.get("superseded_by"))
        if said == SUPERSEDED and not successor:
            add(path, "no_successor", "superseded, but superseded_by names no node")
        if successor:
            if successor not in metas:
                add(path, "successor_missing", f"superseded_by {successor}, which does not exist")
            elif target(metas[successor].get("supersedes")) != path:
                add(path, "one_way", f"{successor} does not name it in supersedes")
        seen, step = [path], successor
        while step in metas and step not in seen:
            seen.append(step)
            step = target(metas[step].get("superseded_by"))
        if step == path:
            add(path, "cycle", " -> ".join(seen + [path]))
    return rows


def label(hit: dict) -> str | None:
    """How a hit's time reads in a citation: a dated file's day; a digest node's status and validity
    (`current since 2026-03-01`, `superseded 2026-01-05..2026-03-01`); None when there is nothing to say."""
    state = hit.get("status")
    if state is None:
        return hit.get("date")
    start, end = hit.get("valid_from"), hit.get("valid_to")
    if end:
        return f"{state} {start or ''}..{end}"
    return f"{state} since {start}" if start else (None if state == CURRENT else state)
