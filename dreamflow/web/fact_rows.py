"""A file's facts as the file page shows them (storage/text/facts.py): each fact line a row with its sentence, kind,
subject, validity window and status, what it replaced and what replaced it, its sources, and its "where
from?" (the `trace` operation).

A node's `## History` reads as a timeline: a retired fact "held since → until, replaced by" the fact that
replaced it (a link to that fact's row, `#f3`), and the current fact "replaces" each fact it took over from.
A `replaced_by` whose fact holds from the same day as the one it names is a refinement ("refined by"): the dream
keeps the start of a fact it only adds detail to. A retracted fact (`retracted`, `reason`) is "retracted", on a
card too, and the person's correction that replaced it "corrects" it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from dreamflow.web.markdown_html import LinkTo, block_id, render_inline
from storage.text import facts, validity

REPLACED, ENDED = "replaced", "ended"  # a node fact no longer current: with a successor, or its `until` came
RETRACTED = "retracted"  # a fact a person said is wrong (storage/files/retraction.py): on a node or a card


@dataclass
class Ref:
    """A link a row shows: where it goes, what it says, and the fact it names when that fact is in this file."""

    href: str
    label: str
    fact: facts.Fact | None = None
    refined: bool = False   # between a fact and a rewording of it that holds from the same day
    note: str = ""          # a source's own label (its day, its message's time) beside the file's name


@dataclass
class Row:
    """One fact as the page shows it."""

    fact: facts.Fact
    html: str                   # the sentence: wikilinks working, the query's words marked
    status: str | None          # current, replaced, ended, or the node's (superseded, expired); None on a card
    trace: str                  # the URL of its "where from?"
    replaced_by: Ref | None = None
    replaces: list[Ref] = field(default_factory=list)
    sources: list[Ref] = field(default_factory=list)


def rows(path: str, text: str, link_to: LinkTo, trace_url: Callable[[str], str], node_status: str | None,
         today: dt.date, query: str = "") -> dict[int, Row]:
    """The facts of `text` (the file `path` from its first line) by file line. `node_status` is the digest
    node's status (None for a card or other file: its facts have no validity of their own)."""
    found = facts.parse(text)
    here = {f.id: f for f in found if f.id}

    def ref(link: str, label: str = "") -> Ref:
        target, _, anchor = link.partition("#")
        named = here.get(block_id(anchor) or "") if target.strip() in ("", path, path.removesuffix(".md")) else None
        if named is not None:
            return Ref(f"#{named.id}", label or facts.said(named.text), named)
        href, _, name = link_to(target.strip() or path, anchor.strip() or None)
        return Ref(href, name or label or link, None, note=label if name and label != name else "")

    out = {}
    for fact in found:
        row = Row(fact, render_inline(fact.text, link_to, query), status(fact, node_status, today),
                  trace_url(f"^{fact.id}" if fact.id else str(fact.line)),
                  sources=[ref(s, label) for s, label in zip(fact.sources, fact.labels or ("",) * len(fact.sources))])
        if fact.replaced_by:
            row.replaced_by = ref(fact.replaced_by)
            successor = row.replaced_by.fact
            row.replaced_by.refined = bool(successor and fact.since and successor.since == fact.since)
        out[fact.line] = row
    for row in out.values():
        successor = row.replaced_by.fact if row.replaced_by else None
        if successor is not None and successor.line in out:
            out[successor.line].replaces.append(Ref(f"#{row.fact.id}", facts.said(row.fact.text), row.fact,
                                                    row.replaced_by.refined))
    return out


def status(fact: facts.Fact, node_status: str | None, today: dt.date) -> str | None:
    """A fact's status: `retracted` when a person said it is wrong (a node's or a card's); a node fact's
    `replaced` (or `ended`, when nothing replaced it) once its `until` has come or, without one, under
    `## History`; else its node's (`node_status`; None for a card's fact)."""
    if fact.retracted:
        return RETRACTED
    if node_status is None:
        return None
    if validity.fact_status(None, fact.until, today) == validity.SUPERSEDED or not (fact.current or fact.until):
        return REPLACED if fact.replaced_by else ENDED
    return node_status
