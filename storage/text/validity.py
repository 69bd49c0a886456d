"""When a digest node's facts hold: its validity window and status, read from its frontmatter.

A digest node may carry (README "Layout"):
- `valid_from`: the day its facts became true (from its sources' event dates, not the day of the dream);
- `valid_to`: the day they stopped being true (exclusive: on that day the successor holds);
- `expires`: a day after which the node no longer holds, set by a person or a job;
- `status`: `current`, `superseded` (replaced by the node in `superseded_by`) or `expired`;
- `superseded_by` / `supersedes`: wikilinks between a node and the node that replaced it.

Daily cards are history: they have no status, and their day is when their facts were said.

Facts (storage/text/facts.py) carry a validity of their own: a node fact holds `since` .. `until` (exclusive), a fact
under `## History` has ended and names what replaced it (`replaced_by`); `fact_status` and `fact_problems` read
it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from typing import Any, Container

from storage.text import facts as facts_

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


def fact_status(node_status: str | None, until: Any, today: dt.date) -> str:
    """A node fact's status on `today`: superseded once its `until` has come, else its node's (current when the
    node has none)."""
    end = as_date(until)
    if end and end <= today:
        return SUPERSEDED
    return node_status or CURRENT


def replaced_by(line: str) -> str | None:
    """What replaced the fact on `line` (a history entry's `replaced_by` target, `node#^id`), else None."""
    fact = facts_.parse_line(line.split("\n", 1)[0])
    return fact.replaced_by if fact is not None else None


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


_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$")


def fact_problems(texts: dict[str, str], exists: Container[str], today: dt.date) -> list[dict]:
    """Broken validity among the facts of `texts` ({path: Markdown text} of the files holding facts; `exists`:
    the workspace's files): `{path, line, id, problem, detail}` rows for a `replaced_by` naming no fact
    (`successor_missing`), a fact under `## History` without `until` (`no_until`), `until` before `since`
    (`window`), a `since`/`until` that is not a YYYY-MM-DD day (`bad_date`), a fact outside History whose `until`
    has come (`ended`) or that names a `replaced_by` (`replaced_current`), a block id twice in one file
    (`duplicate_id`), and replacements that loop (`cycle`)."""
    parsed = {path: facts_.parse(text) for path, text in texts.items()}
    ids = {path: {f.id: f for f in found if f.id} for path, found in parsed.items()}
    rows = []

    def add(path: str, fact: facts_.Fact, problem: str, detail: str) -> None:
        rows.append({"path": path, "line": fact.line, "id": fact.id, "problem": problem, "detail": detail})

    for path, found in sorted(parsed.items()):
        retired = _history_lines(texts[path])
        counts = Counter(f.id for f in found if f.id)
        for fact in found:
            if counts[fact.id] > 1:
                add(path, fact, "duplicate_id", f"^{fact.id} is the block id of {counts[fact.id]} facts")
            bad = [k for k in ("since", "until") if getattr(fact, k) and not _iso_day(getattr(fact, k))]
            for key in bad:
                add(path, fact, "bad_date", f"{key} {getattr(fact, key)!r} is not a YYYY-MM-DD day")
            start, end = as_date(fact.since), as_date(fact.until)
            if start and end and end < start:
                add(path, fact, "window", f"until {end} is before since {start}")
            if fact.line in retired:
                if not fact.until:
                    add(path, fact, "no_until", "under History, but no until says when it stopped holding")
            else:
                if end and end <= today:
                    add(path, fact, "ended", f"its until {end} has come, but it is not under History")
                if fact.replaced_by:
                    add(path, fact, "replaced_current", f"replaced_by {fact.replaced_by}, but not under History")
            if fact.replaced_by:
                target, _, anchor = fact.replaced_by.partition("#")
                target = target or path
                if target not in exists:
                    add(path, fact, "successor_missing", f"replaced_by {fact.replaced_by}: {target} does not exist")
                elif not anchor.startswith("^") or anchor[1:] not in ids.get(target, {}):
                    add(path, fact, "successor_missing", f"replaced_by {fact.replaced_by} names no fact of {target}")
                else:
                    seen, step = [f"{path}#^{fact.id}"], f"{target}#{anchor}"
                    while step not in seen and (nxt := _fact_at(ids, step)) is not None:
                        seen.append(step)
                        step = _ref(step.partition("#")[0], nxt.replaced_by)
                    if step == seen[0]:
                        add(path, fact, "cycle", " -> ".join(seen + [step]))
    return rows


def _ref(path: str, link: str | None) -> str:
    """A `replaced_by` link written in `path` as `path#^id` (a link into the same file names no path)."""
    target, _, anchor = (link or "").partition("#")
    return f"{target or path}#{anchor}" if link else ""


def _fact_at(ids: dict[str, dict[str, facts_.Fact]], ref: str) -> facts_.Fact | None:
    """The fact `path#^id` names, if any."""
    target, _, anchor = ref.partition("#")
    return ids.get(target, {}).get(anchor[1:]) if anchor.startswith("^") else None


def _history_lines(text: str) -> set[int]:
    """1-based numbers of the lines under a `History` heading, up to the next heading (as storage.text.facts.parse
    reads sections: fenced code skipped)."""
    lines, under, fence = set(), False, None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if fence or stripped.startswith(("```", "~~~")):
            fence = None if fence and stripped.startswith(fence) else (fence or stripped[:3])
            continue
        heading = _HEADING.match(line)
        if heading:
            under = heading.group(1).strip().lower() == facts_.HISTORY.lower()
        elif under:
            lines.add(number)
    return lines


_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _iso_day(value: str) -> bool:
    return bool(_DAY.match(value)) and as_date(value) is not None


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
