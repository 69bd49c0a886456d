"""Retracting a wrong fact everywhere it came from (`Memory.retract`, `dreamflow retract`).

A person says a digest node's fact is wrong. One journaled operation then rewrites, line by line:
- the node: the fact moves to `## History` with `(retracted:: DAY)`, `(reason:: ...)` and `until` that day (so
  `--as-of` an earlier day and the audit still see what was believed when); with a correction, the person's
  words become the fact that holds from that day (`since`, `(source:: person DAY)`) and the retracted fact's
  `replaced_by` names it;
- each card fact it was consolidated from (`source:: [[daily/...md#^f2]]`): `(retracted:: DAY)` in place. A
  retracted card fact is never current, so no dream consolidates it again, and the messages it cites
  (`session/dialog/<id>.jsonl#L3`) are retracted with it: the card writer refuses a new fact citing such a line
  with the same words (engine/memory/cards.py), whichever card it would land in. The conversation record stays as
  it was said (dialog files are append-only source records); the retracted card fact is the record of its
  retraction.

Nothing is deleted. The plan (each file's hash before and its whole new text) is journaled before the first
write (storage/files/journal.py, kind `retract`), so a crash between the node and the card writes is finished by the
next process that opens the workspace (`replay`: each file still as planned gets its new text; idempotent).
"""

from __future__ import annotations

import duckdb

from storage.errors import Conflict, NotFound
from storage.files.workspace import Workspace, content_hash
from storage.index import indexer as index
from storage.text import facts, graph_edit

PERSON = "person"  # a correction's source: the person who made it, and the day


def fact_id(fact: str) -> str:
    """A fact's block id as given: `f3`, `^f3`, `#^f3`."""
    return fact.strip().lstrip("#").lstrip("^").strip()


def node_text(text: str, path: str, fact: str, day: str, reason: str | None,
              correct: str | None) -> tuple[str, facts.Fact, facts.Fact | None]:
    """(the node's new text, the fact as it was, the correction or None): the fact retracted on `day`."""
    wrong = facts.by_id(text).get(fact)
    if wrong is None:
        raise NotFound(f"{path} has no fact ^{fact}")
    if wrong.retracted:
        raise Conflict(f"{path}#^{fact} was retracted already, on {wrong.retracted}")
    fixed = None
    if correct:
        fixed = facts.Fact(facts.plain_text(correct), id=facts.next_id(text), kind=wrong.kind, about=wrong.about,
                           since=day, extra={"source": f"{PERSON} {day}"})
        text = facts.add(text, fixed)
    replaced_by = f"{path.removesuffix('.md')}#^{fixed.id}" if fixed else None
    marked = facts.update(text, fact, retracted=day, reason=facts.plain_value(reason) if reason else None)
    if wrong.current:
        marked = facts.retire(marked, fact, until=day, replaced_by=replaced_by)
    elif replaced_by and not wrong.replaced_by:
        marked = facts.update(marked, fact, replaced_by=replaced_by)
    return _ending(marked, text), wrong, fixed


def card_text(text: str, fact: str, day: str) -> str | None:
    """The card with fact `fact` marked retracted on `day` (None: no such fact, or retracted already)."""
    found = facts.by_id(text).get(fact)
    if found is None or found.retracted:
        return None
    return _ending(facts.update(text, fact, retracted=day), text)


def card_sources(fact: facts.Fact) -> list[tuple[str, str]]:
    """(card path, fact id) of the card facts a node fact cites."""
    out = []
    for source in fact.sources:
        target, _, anchor = source.partition("#")
        if anchor.startswith("^") and target.startswith("daily/"):
            out.append((target if target.endswith(".md") else target + ".md", anchor[1:]))
    return out


def retracted_keys(text: str, said: str) -> dict[str, list[str]]:
    """{dialog or resource line anchor: [sentences of retracted facts citing it]} among a card's facts, for the
    lines of the file `said`."""
    out: dict[str, list[str]] = {}
    for fact in facts.parse(text):
        if fact.retracted:
            for source in fact.sources:
                target, _, anchor = source.partition("#")
                if target == said and anchor:
                    out.setdefault(anchor, []).append(fact.text)
    return out


def plan(node: str, texts: dict[str, str], new: dict[str, str]) -> dict:
    """The journal plan: each file's hash now and its new text."""
    return {"node": node, "files": {rel: content_hash(texts[rel].encode("utf-8", "surrogateescape"))
                                    for rel in new},
            "texts": new}


def replay(con: duckdb.DuckDBPyConnection, ws: Workspace, plan: dict) -> list[str]:
    """Write each planned file still as planned (its hash unchanged) with its new text, then re-index them all
    (nodes first, then cards: a card fact takes the window of the node fact citing it); returns those written.
    The same steps as a move's or a relink's replay (storage/text/graph_edit.py)."""
    written = []
    for rel, _ in graph_edit.unchanged(ws, plan["files"]):
        graph_edit.write_text(ws, rel, plan["texts"][rel])
        written.append(rel)
    graph_edit.reindex(con, ws, sorted(plan["files"], key=lambda r: not r.startswith("digest/")))
    return written


def derived(con: duckdb.DuckDBPyConnection, ws: Workspace, node: str, fact: facts.Fact,
            cards: list[tuple[str, str]]) -> list[dict]:
    """Facts written from the retracted one, for a person to review: other node facts citing the same card
    facts, and facts citing the retracted node fact itself: [{path, fact, line, text}]."""
    anchors = [(card, f"^{fid}") for card, fid in cards] + [(node, f"^{fact.id}")]
    seen, out = set(), []
    for target, anchor in anchors:
        for link in index.inbound(con, target):
            if link["anchor"] != anchor or not link["source"].startswith("digest/"):
                continue
            source, line = link["source"], link["line"]
            if (source, line) in seen or (source == node and line == fact.line):
                continue
            seen.add((source, line))
            try:
                text = ws.read_text(source)
            except (NotFound, OSError):
                continue
            hit = next((f for f in facts.parse(text) if f.line == line), None)
            if hit is not None and not hit.retracted and not (source == node and hit.id == fact.id):
                out.append({"path": source, "fact": hit.id, "line": line, "text": hit.text, "current": hit.current})
    return out


def _ending(new: str, old: str) -> str:
    """`new` ending with a newline exactly when `old` did (line edits keep the file's ending)."""
    return new if new.endswith("\n") == old.endswith("\n") else (new + "\n" if old.endswith("\n") else new.rstrip("\n"))

