"""Consolidation: how one new card fact is judged against the node facts it touches and landed in its node.

Per fact, code finds the node facts it touches (`candidates`: search over current facts, and with an embedder
the subject's node facts closest in meaning) and asks the model one small question only when there are some:
is it the `same`, a refinement (`refines`), does it `replace` one, or is it `new` (`ask`). Code checks the
answer (`weigh`, `judge`, `decide`, `prefer_user`; the rules and the model incidents behind them are in
docs/dream.md) and writes the node (`land`): what holds now under the kind sections, and each replaced fact
moved to `## History` with the day it stopped holding and a link to what replaced it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import date as Date
from typing import Literal

import numpy as np
from pydantic import BaseModel, field_validator

from engine.memory.cards import fact_key, unwrap_link
from engine.memory.objects import Candidate, CardFact, Decision, Unit
from engine.models.embedders import EmbedderError
from engine.models.llm import LLM, response_schema
from engine.memory.thresholds import (ASKED_NEAR, CANDIDATES, KEPT_WORDS, MAX_BACK, MAX_CHAIN, MEANT, MEANT_MARGIN,
                                      SEARCHED, SHARED_WORDS, SIMILAR)
from engine.access.toolbox import read_text
from engine.prompts import load_prompt
from storage.errors import DreamflowError
from storage.files.workspace import digest_buckets
from storage.index.tokenize import terms
from storage.text import facts, validity
from storage.text.markdown import split_frontmatter

# a fact that says its value changed (`I moved my gym sessions from Mondays to Thursdays`, `I left Acme`)
NEGATION = re.compile(r"\b(?:not|no longer|any ?more|instead of|never)\b|n't\b", re.I)  # the old value denied
# a correction said in words (`it's actually Friday, not Thursday`, `forget what I said about the dentist`): it
# replaces what it corrects, even on the day that began to hold
CORRECTION = re.compile(r"\b(?:actually|forget (?:what|about|that)|scratch that|i meant|i misspoke|i was wrong|"
                        r"correction|mistake|not\b.{1,40}\bbut)\b", re.I)
CHANGE = re.compile(r"\b(?:now|moved|switched|changed|left|quit|stopped|dropped|sold|broke up|became|renamed|"
                    r"postponed|rescheduled|delayed|pushed (?:back|up)|brought forward|cancell?ed|replaced|"
                    r"(?:a|an|my|our|his|her|their) new|from\b.{1,60}\bto)\b|" + NEGATION.pattern + "|"
                    + CORRECTION.pattern, re.I)  # or denies it
# words that say a change, not what changed: sharing one ties no two facts to one subject (a new piano teacher
# is not retired by `we moved to Birch Lane`)
CHANGE_WORDS = frozenset(terms("now moved move moving switched switch changed change left quit stopped dropped "
                               "sold became become started actually instead longer anymore forget meant renamed rename "
                               "postponed rescheduled delayed pushed cancelled canceled replaced new"))
Embed = Callable[[str, list[str]], list[float]]


# ---- what the model answers ------------------------------------------------------------------------------

class Relation(BaseModel):
    """How a new fact relates to the numbered facts it was shown; `fact` is 0 for `new`."""

    relation: Literal["new", "same", "refines", "replaces"]
    fact: int = 0

    @field_validator("relation", mode="before")
    @classmethod
    def _lower(cls, value):
        return str(value or "").strip().lower()


def relation_schema(count: int) -> dict:
    schema = response_schema(Relation)
    schema["properties"]["fact"] = {"type": "integer", "enum": list(range(count + 1))}
    return schema



# ---- finding what a new fact touches ----------------------------------------------------------------------

def candidates(memory, ref: CardFact, node: str | None, embed: Embed | None,
               warn: Callable[[str], None] = lambda reason: None) -> list[Candidate]:
    """The current node facts `ref` may touch, best first: those sharing a word with it besides its subject's
    name (a search over digest facts), then the facts of its subject's `node` closest in meaning (`SIMILAR` or
    more, when an embedder is configured): `moved to Porto` is compared with `lives in Lisbon`. Each carries its
    cosine to `ref` when an embedder is configured; an embedder that fails is reported to `warn` and the
    words alone compare. Facts of the card `ref` comes from are never shown: what is
    said together is not a change."""
    mine = fact_key(ref.text) - set(terms(ref.about or "")) - CHANGE_WORDS
    texts: dict[str, str] = {}
    found: dict[tuple[str, str], tuple[int, Candidate]] = {}
    for rank, hit in enumerate(memory.search(ref.text, path_prefix="digest/", limit=SEARCHED, per_file=0,
                                             expand=0)):
        text = texts.setdefault(hit["path"], read_text(memory, hit["path"]) or "")
        for fact in facts.parse(text):
            if fact.current and fact.id and hit["start_line"] <= fact.line <= hit["end_line"] \
                    and mine & fact_key(fact.text) and not _said_with(fact, ref):
                found.setdefault((hit["path"], fact.id), (rank, Candidate(hit["path"], fact)))
    ordered = sorted(found.values(), key=lambda rc: (-len(mine & fact_key(rc[1].fact.text)), rc[0]))
    by_words = [c for _, c in ordered[:CANDIDATES]]
    if embed is None:
        return by_words
    others = [f for f in facts.parse(texts.get(node) or read_text(memory, node) or "")
              if f.current and f.id and (node, f.id) not in found and not _said_with(f, ref)] if node else []
    if not by_words and not others:
        return []
    try:
        scores = embed(ref.text, [c.fact.text for c in by_words] + [f.text for f in others])
    except EmbedderError as exc:  # an endpoint down, a model that fails to load: the words still compare
        warn(str(exc))
        return by_words
    shown = [replace(c, near=score) for c, score in zip(by_words, scores)]
    near = sorted(((score, n) for n, score in enumerate(scores[len(by_words):]) if score >= SIMILAR), reverse=True)
    return shown + [Candidate(node, others[n], score) for score, n in near[:CANDIDATES - len(shown)]]


def _said_with(fact: facts.Fact, ref: CardFact) -> bool:
    """Whether a node fact comes from a message `ref` comes from too: facts said together never replace each
    other (docs/dream.md, "said together")."""
    mine = f"{ref.card}#^"
    return any(set(ref.siblings.get(source[len(mine):], ())) & set(ref.said)
               for source in fact.sources if source.startswith(mine))


def similarity(embedder) -> Embed:
    """`embed(text, others) -> cosine of each other text to text`, with `embedder` (engine/models/embedders.py)."""
    def embed(text: str, others: list[str]) -> list[float]:
        vectors = np.asarray(embedder.embed([text, *others]), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
        return (vectors[1:] @ vectors[0]).tolist()
    return embed


# ---- judging ----------------------------------------------------------------------------------------------

def ask(llm: LLM, ref: CardFact, shown: list[Candidate]) -> Relation:
    """The model's answer on how `ref` relates to the `shown` facts (numbered from 1)."""
    listing = "\n".join(f"{n}. {c.fact.text}" + (f" (since {c.fact.since})" if c.fact.since else "")
                        for n, c in enumerate(shown, 1))
    messages = [{"role": "system", "content": load_prompt("compare")},
                {"role": "user", "content": f"New fact (said on {ref.day}): {ref.text}\n\n"
                                            f"Facts in memory:\n{listing}"}]

    return llm.structured(messages, Relation, "compare", json_schema=relation_schema(len(shown)))


def decide(llm: LLM, ref: CardFact, shown: list[Candidate]) -> Decision:
    """`judge`'s decision, except that a fact is never replaced on the day it began to hold (two facts said the
    same day are both kept, `new`) unless `ref` says it corrects (`CORRECTION`)."""
    decision = judge(llm, ref, shown)
    if decision.relation == "replaces" and decision.target.fact.since == ref.day and not CORRECTION.search(ref.text):
        return Decision("new")
    return decision


def judge(llm: LLM, ref: CardFact, shown: list[Candidate]) -> Decision:
    """`weigh`'s decision, except that a change (`CHANGE`) it finds `new` while a listed fact shares a word with
    it besides its subject's name, a number or a change word is asked about once more: the model is asked of
    that one fact alone whether it still holds (`still_holds`); if not, `ref` replaces it. With an embedder,
    only a fact `ASKED_NEAR` close in sense is asked about (`Priya moved to the Berlin office` is not asked
    about `Priya Nair approved my time off`)."""
    decision = weigh(llm, ref, shown)
    if decision.relation != "new" or not shown or not CHANGE.search(ref.text):
        return decision
    said = _said(ref) - set(terms(ref.about or ""))
    embedded = any(c.near for c in shown)  # cosines to tell by, with an embedder
    tied = [c for c in shown if fact_key(c.fact.text) & said and (c.near >= ASKED_NEAR or not embedded)]
    if not tied:
        return Decision("new")
    closest = max(tied, key=lambda c: (len(fact_key(c.fact.text) & said), c.near))
    return Decision("new") if still_holds(llm, ref, closest) else Decision("replaces", closest)


def _said(ref: CardFact) -> set[str]:
    """The words of `ref` that can tie it to a listed fact: not a number (a day both name) nor a change word (a
    change word both use is no shared subject)."""
    return {t for t in fact_key(ref.text) - CHANGE_WORDS if not t.isdigit()}


class Holds(BaseModel):
    """Whether a fact in memory still holds after a newer statement."""

    still_true: bool


def still_holds(llm: LLM, ref: CardFact, candidate: Candidate) -> bool:
    """The model's answer on whether `candidate` still holds after `ref` was said."""
    messages = [{"role": "system", "content": load_prompt("still_true")},
                {"role": "user", "content": f"Fact in memory: {candidate.fact.text}\n"
                                            f"Said later, on {ref.day}: {ref.text}"}]
    return llm.structured(messages, Holds, "still_true").still_true


def weigh(llm: LLM, ref: CardFact, shown: list[Candidate]) -> Decision:
    """How `ref` relates to the `shown` facts. Code answers what it can (nothing shown: `new`; a listed fact with
    the same words: `same`), the model (`ask`) the rest, and code checks its answer against the words and, with
    an embedder, the sense. Words shared are content terms besides the subject's name, numbers and change words
    (`CHANGE_WORDS`) left out:
    - the target is the fact the model names unless another is closer (more shared words, then nearer in
      sense); with no number it is the one sharing `SHARED_WORDS` words, else the one meant by sense (`_meant`);
    - a target sharing no word that is not the one meant: `new`;
    - `replaces`, or `ref` denying what the target does not (`NEGATION`): `replaces`;
    - a `same` or `refines` keeping less than `KEPT_WORDS` of the target's words: `replaces` when it shares
      `SHARED_WORDS` of them (or is a change of the fact it means), else `new`;
    - a `new` that says a change (`CHANGE`, a correction included) replaces the listed fact sharing
      `SHARED_WORDS` words, else the one it means.
    Why each rule exists: docs/dream.md."""
    if not shown:
        return Decision("new")
    for candidate in shown:
        if fact_key(candidate.fact.text) == fact_key(ref.text):
            return Decision("same", candidate)
    about = set(terms(ref.about or ""))
    said = _said(ref)

    def shared(candidate: Candidate) -> int:
        return len((fact_key(candidate.fact.text) - about) & said)

    def closeness(candidate: Candidate) -> tuple[int, float]:
        return shared(candidate), candidate.near

    closest = max(shown, key=closeness)
    meant = _meant(shown)
    changes = bool(CHANGE.search(ref.text))
    answer = ask(llm, ref, shown)
    if answer.relation == "new":
        if changes and shared(closest) >= SHARED_WORDS:
            return Decision("replaces", closest)
        return Decision("replaces", meant) if changes and meant else Decision("new")
    picked = shown[answer.fact - 1] if 1 <= answer.fact <= len(shown) else None
    if picked is None:  # no number: the fact the words or the sense point at
        target = closest if shared(closest) >= SHARED_WORDS else meant
    else:
        target = closest if closeness(closest) > closeness(picked) else picked
    if target is None or (not shared(target) and target is not meant):
        return Decision("new")  # nothing in its words or its sense ties it to a listed fact
    if answer.relation == "replaces" or (NEGATION.search(ref.text) and not NEGATION.search(target.fact.text)):
        return Decision("replaces", target)
    theirs = fact_key(target.fact.text) - about
    if shared(target) < KEPT_WORDS * len(theirs):
        changed = shared(target) >= SHARED_WORDS or (changes and target is meant)
        return Decision("replaces", target) if changed else Decision("new")
    return Decision(answer.relation, target)


def prefer_user(memory, ref: CardFact, decision: Decision) -> Decision:
    """The user's statement over the assistant's echo: a `same` whose `ref` cites a user message while the node
    fact cites only assistant messages becomes `refines`, so the user's words stand and the echo's wording goes
    to History."""
    target = decision.target
    if decision.relation != "same" or "user" not in speakers(memory, list(ref.said)):
        return decision
    said = [s for source in target.fact.sources for s in _card_sources(memory, source)]
    return Decision("refines", target) if said and speakers(memory, said) == {"assistant"} else decision


def speakers(memory, anchors: list[str]) -> set[str]:
    """The roles of the dialog lines `anchors` name (`session/dialog/s.jsonl#L3`); other anchors are left out."""
    found = set()
    for anchor in anchors:
        path, _, line = anchor.partition("#L")
        if not (path.startswith("session/dialog/") and line.isdigit()):
            continue
        try:
            record = json.loads(memory.read(path, int(line), int(line), numbered=False)["content"])
        except (DreamflowError, ValueError):
            continue
        found.add(str(record.get("role") or "user") if isinstance(record, dict) else "user")
    return found


def _card_sources(memory, source: str) -> list[str]:
    """The sources of the card fact `daily/d/card.md#^f1` names."""
    path, _, block = source.partition("#^")
    fact = facts.by_id(read_text(memory, path) or "").get(block) if block else None
    return list(fact.sources) if fact else []


def _meant(shown: list[Candidate]) -> Candidate | None:
    """The listed fact a new fact means by its sense: the nearest, `MEANT` close or more with no other within
    `MEANT_MARGIN`; or None."""
    ranked = sorted(shown, key=lambda c: c.near, reverse=True)
    runner_up = ranked[1].near if len(ranked) > 1 else 0.0
    return ranked[0] if ranked[0].near >= MEANT and ranked[0].near - runner_up >= MEANT_MARGIN else None


def since(day: str, date: str | None) -> str:
    """The day a fact said on `day` holds from: its own `date` when that is not after `day` nor more than
    `MAX_BACK` before it (a future date is a plan's, not the start of its truth), else `day`."""
    said = Date.fromisoformat(day)
    try:
        given = Date.fromisoformat(date) if date else None
    except ValueError:
        given = None
    return given.isoformat() if given and said - MAX_BACK <= given <= said else said.isoformat()


def node_for(memory, unit: Unit) -> str:
    """The node of the unit's subject: `digest/<bucket>/<key>.md` in any bucket, your own folders too (the
    current one, if it was superseded as a whole), else a node search hit about it, else a new node in the
    unit's bucket."""
    stem = unit.key

    def buckets():  # digest/ is listed only when the unit's own bucket has no such node
        yield unit.bucket
        folders = [e["path"] for e in memory.list("digest", recursive=False, limit=1000)["entries"]
                   if e.get("type") == "folder"]
        yield from (b for b in digest_buckets(folders) if b != unit.bucket)

    for bucket in buckets():
        found = current_of(memory, f"digest/{bucket}/{stem}.md")
        if found:
            return found
    for hit in memory.node_search(unit.about, limit=5):
        meta = memory.frontmatter_get(hit["path"])["frontmatter"] or {}
        if meta.get("about") == stem and hit.get("status", "current") == "current":
            return hit["path"]
    return f"digest/{unit.bucket}/{stem}.md"


def current_of(memory, path: str) -> str | None:
    """The current node that `path` is, or that replaced it as a whole through `superseded_by` links (a node
    superseded before facts carried their own validity); None when the chain ends at a missing, expired or
    looping node."""
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


_node_locks: dict[tuple[int, str], threading.Lock] = {}  # (memory, node path) -> its lock
_node_locks_guard = threading.Lock()


def _node_lock(memory, node: str) -> threading.Lock:
    """The lock of one node of one memory: units run in threads, and the read-change-write of a node must not
    interleave; other nodes and other workspaces are written meanwhile."""
    with _node_locks_guard:
        return _node_locks.setdefault((id(memory), node), threading.Lock())


def land(memory, unit: Unit, ref: CardFact, decision: Decision, date: str) -> dict:
    """Write `ref` into its node as decided; returns what was done: `{fact, source, action, node, replaced}`."""
    relation, target = decision
    node = target.node if target else node_for(memory, unit)
    with _node_lock(memory, node):
        before = read_text(memory, node)
        body = split_frontmatter(before).body if before is not None else f"# {facts.plain_text(unit.about)}\n"
        label = ref.day
        new = facts.Fact(ref.text, kind=ref.kind, since=since(ref.day, ref.date), sources=(ref.source,), labels=(label,))
        action, replaced = {"new": "created" if before is None else "added", "same": "same",
                            "refines": "refined", "replaces": "replaced"}[relation], None
        if relation == "same":
            body = facts.with_source(body, target.fact.id, ref.source, label)
        elif target is None:
            new = _with_id(new, body)
            body = facts.add(body, new)
        else:
            old = target.fact
            start = old.since if relation == "refines" and old.since else new.since
            new = _with_id(new, body, since=start)
            until = max(new.since if relation == "replaces" else since(ref.day, ref.date), old.since or "")
            body = facts.retire(facts.add(body, new), old.id, until, f"{node}#^{new.id}")
            replaced = old.text
        body = _with_source_file(body, ref)
        starts = [f.since for f in facts.parse(body) if f.since]
        meta = {"about": unit.key, "status": "current", "updated": date}
        if starts:
            meta["valid_from"] = min(starts)
        memory.write(node, body, name=None if before is not None else unit.about, description=facts.describe(body),
                     metadata=meta)
    return {"fact": ref.text, "source": ref.source, "action": action, "node": node, "replaced": replaced}


def _with_id(fact: facts.Fact, body: str, **changes) -> facts.Fact:
    return replace(fact, id=facts.next_id(body), **changes)


def _with_source_file(body: str, ref: CardFact) -> str:
    """`body` with its `## Sources` listing the card `ref` comes from."""
    link = f"[[{ref.card}]]"
    if link in body:
        return body
    line = f"- {ref.day}: {link}"
    lines = body.rstrip("\n").split("\n")
    heading = next((i for i, l in enumerate(lines) if l.strip().lower() == f"## {facts.SOURCES.lower()}"), None)
    if heading is None:
        return "\n".join(lines + ["", f"## {facts.SOURCES}", "", line]) + "\n"
    end = heading + 1
    while end < len(lines) and not lines[end].startswith("#"):
        end += 1
    while end > heading + 1 and not lines[end - 1].strip():
        end -= 1
    lines.insert(end, line)
    return "\n".join(lines) + "\n"


def consolidate_fact(memory, llm: LLM, unit: Unit, ref: CardFact, date: str, embed: Embed | None = None,
                     warn: Callable[[str], None] = lambda reason: None) -> dict:
    """Judge `ref` against the node facts it touches and land it in its node: what was done (`land`)."""
    node = node_for(memory, unit)
    shown = candidates(memory, ref, node if read_text(memory, node) is not None else None, embed, warn)
    return land(memory, unit, ref, prefer_user(memory, ref, decide(llm, ref, shown)), date)
