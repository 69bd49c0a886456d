"""auto_dream's stages as tasks: gather the facts of recently changed daily cards, consolidate each subject's
facts into its digest node, and finish (checkpoint and report).

A card's facts are structured already (storage/facts.py), so the dream asks the model no extraction (an old
prose card is the exception: its facts are extracted once, citing its lines). Facts are grouped by what they
are about; each group is one unit, landing in that subject's node. Per fact, code finds the node facts it
touches (search over current facts) and asks the model one small question only when there are some: is it
the `same`, a refinement (`refines`), does it `replace` one, or is it `new`. Code writes the node: what holds
now under the kind sections, and each replaced fact moved to `## History` with the day it stopped holding and
a link to what replaced it (validity per fact: `since::`, `until::`).

A fact is consolidated once a node fact cites it (`source:: [[card#^f2]]`), which makes consolidation
idempotent: a repeated or retried run never adds a fact twice. The dream checkpoint
(`metadata/checkpoints/dream.json`) maps each processed daily file to its content hash; files of failed or
deferred units are never checkpointed, so the next run retries exactly them. gather and consolidate persist
their results: a Retry from the Prefect UI reuses the gathering and the finished units.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from datetime import date as Date
from datetime import datetime, timedelta, timezone
from typing import Literal

import numpy as np
from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from pydantic import BaseModel, field_validator

from engine import extraction, usage_log
from engine.embedders import EmbedderError, make_embedder, unavailable
from engine.job_workspace import memory_of, metadata_of
from engine.llm import LLM, LLMError, response_schema
from engine.prefect_env import run_logger
from engine.settings import Settings
from engine.toolbox import read_text
from engine.usage import Usage, charged
from storage import checkpoints, dream_log, facts, validity
from storage.errors import DreamflowError
from storage.markdown import split_frontmatter
from storage.workspace import digest_buckets
from storage.tokenize import terms
from tasks.cards import extract_facts, fact_key, slugify, unwrap_link
from tasks.prompts import load_prompt

CANDIDATES = 5          # node facts one new fact is compared with
SIMILAR = 0.35          # cosine from which a fact of the subject's node is shown though it shares no word
KEPT_WORDS = 0.67       # share of a listed fact's words a `same` or `refines` answer must keep
SHARED_WORDS = 2        # words shared with a listed fact that make a low-overlap `refines` a replacement
MEANT = 0.5             # cosine from which a listed fact is the one a change means, though it shares one word
MEANT_MARGIN = 0.1      # ... when no other listed fact comes this close
ASKED_PAIRS = 2         # listed facts sharing one word with a change the model is asked about one by one
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
SEARCHED = 12           # search hits read for candidates
MAX_BACK = timedelta(days=3653)  # a fact's own date may reach this far before the day it was said
MAX_CHAIN = 20          # superseded_by hops followed to a node's current successor
DAY_PAGE = re.compile(r"^daily/\d{4}-\d{2}-\d{2}\.md$")
USER_WORDS = {"user", "the user", "me", "i", "myself", "you", "the speaker", "speaker", "person", "the person",
              "the user's", "user's"}
TOPIC_KINDS = ("plan", "question", "decision")
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


# ---- plain functions: gathering -----------------------------------------------------------------------------

def window(date: str, scan_days: int) -> list[str]:
    """The `scan_days` days ending at `date`, oldest first."""
    end = Date.fromisoformat(date)
    return [(end - timedelta(days=n)).isoformat() for n in range(max(scan_days, 1) - 1, -1, -1)]


def scan(memory, days: list[str]) -> dict[str, str]:
    """Text of `daily/<d>.md` and `daily/<d>/**/*.md` for each day (interests.yaml is not Markdown)."""
    texts: dict[str, str] = {}
    for day in days:
        page = read_text(memory, f"daily/{day}.md")
        if page is not None:
            texts[f"daily/{day}.md"] = page
        for entry in memory.list(f"daily/{day}", recursive=True, limit=100_000)["entries"]:
            if entry.get("type") == "file" and entry["path"].endswith(".md"):
                text = read_text(memory, entry["path"])
                if text is not None:
                    texts[entry["path"]] = text
    return texts


def changed_files(texts: dict[str, str], done: dict[str, str]) -> dict[str, str]:
    """The files whose content hash differs from the checkpoint: `{path: hash}`."""
    hashes = {path: checkpoints.content_hash(text) for path, text in texts.items()}
    return {path: h for path, h in hashes.items() if done.get(path) != h}


def subject(about: str | None) -> tuple[str, str]:
    """(key, display name) of what a fact is about: the user under one key whatever the model called them."""
    words = " ".join(re.sub(r"[^\w\s'-]", " ", str(about or "")).split())
    plain = re.sub(r"^(?:the|a|an)\s+", "", words.lower()).removesuffix("'s")
    if not plain or words.lower() in USER_WORDS or plain in USER_WORDS:
        return "user", "The user"
    return slugify(plain, "note"), words


def card_facts(path: str, text: str, cited: set[str]) -> list[dict]:
    """The facts of a card not yet consolidated (`cited`: the anchors some node fact cites), as references."""
    day = path.split("/")[1]
    resource = "source_resource" in split_frontmatter(text).meta
    found = [f for f in facts.parse(text) if f.current and f.id]
    said = {f.id: sorted(f.sources) for f in found}  # each card fact's messages
    return [{"source": f"{path}#^{f.id}", "card": path, "day": day, "text": f.text, "kind": f.kind,
             "about": f.about, "date": f.date, "resource": resource, "said": said[f.id], "siblings": said}
            for f in found if f"^{f.id}" not in cited]


def group(refs: list[dict], hint: str | None) -> list[dict]:
    """Units: the facts grouped by subject, those matching the `hint` first, then the larger groups."""
    groups: dict[str, dict] = {}
    for ref in refs:
        key, name = subject(ref["about"])
        unit = groups.setdefault(key, {"key": key, "about": name, "facts": [], "paths": []})
        unit["facts"].append(ref)
        if ref["card"] not in unit["paths"]:
            unit["paths"].append(ref["card"])
    wanted = set(terms(hint or ""))
    ranked = sorted(groups.values(), key=lambda u: (-len(wanted & set(terms(" ".join(
        [u["about"], *(f["text"] for f in u["facts"])])))), -len(u["facts"]), u["key"]))
    for n, unit in enumerate(ranked, 1):
        unit["id"] = f"u{n}"
        unit["bucket"] = _bucket(unit["facts"])
    return ranked


def _bucket(refs: list[dict]) -> str:
    if sum(r["kind"] == "procedure" for r in refs) * 2 > len(refs):
        return "procedure"
    return "wiki" if all(r["resource"] for r in refs) else "personal"


def topic_candidates(refs: list[dict]) -> list[dict]:
    """Topics to bring up from the gathered facts: plans, open questions and decisions."""
    return [{"title": " ".join(r["text"].split()[:12]), "reason": f"a {r['kind']} noted on {r['day']}",
             "evidence": [r["text"]], "keywords": [subject(r["about"])[1]], "paths": [r["card"]]}
            for r in refs if r["kind"] in TOPIC_KINDS]


# ---- plain functions: consolidating ------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """A current node fact a new fact may touch."""

    node: str
    fact: facts.Fact
    near: float = 0.0  # cosine to the new fact (0 without an embedder)


def candidates(memory, ref: dict, node: str | None, embed: Embed | None) -> list[Candidate]:
    """The current node facts `ref` may touch, best first: those sharing a word with it besides its subject's
    name (a search over digest facts), then the facts of its subject's `node` closest in meaning (`SIMILAR` or
    more, when an embedder is configured): `moved to Porto` is compared with `lives in Lisbon`. Each carries its
    cosine to `ref` when an embedder is configured. Facts of the card `ref` comes from are never shown: what is
    said together is not a change."""
    mine = fact_key(ref["text"]) - set(terms(ref["about"] or "")) - CHANGE_WORDS
    texts: dict[str, str] = {}
    found: dict[tuple[str, str], tuple[int, Candidate]] = {}
    for rank, hit in enumerate(memory.search(ref["text"], path_prefix="digest/", limit=SEARCHED, per_file=0,
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
        scores = embed(ref["text"], [c.fact.text for c in by_words] + [f.text for f in others])
    except EmbedderError as exc:  # an endpoint down, a model that fails to load: the words still compare
        words_only(str(exc))
        return by_words
    shown = [replace(c, near=score) for c, score in zip(by_words, scores)]
    near = sorted(((score, n) for n, score in enumerate(scores[len(by_words):]) if score >= SIMILAR), reverse=True)
    return shown + [Candidate(node, others[n], score) for score, n in near[:CANDIDATES - len(shown)]]


def _said_with(fact: facts.Fact, ref: dict) -> bool:
    """Whether a node fact comes from a message `ref` comes from too: facts said together never replace each
    other (a small model read `Sam and I broke up. My partner is now Alex.` as one change replacing the
    other)."""
    mine = f"{ref['card']}#^"
    return any(set(ref["siblings"].get(source[len(mine):], ())) & set(ref["said"])
               for source in fact.sources if source.startswith(mine))


def similarity(embedder) -> Embed:
    """`embed(text, others) -> cosine of each other text to text`, with `embedder` (engine/embedders.py)."""
    def embed(text: str, others: list[str]) -> list[float]:
        vectors = np.asarray(embedder.embed([text, *others]), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
        return (vectors[1:] @ vectors[0]).tolist()
    return embed


def ask(llm: LLM, ref: dict, shown: list[Candidate]) -> Relation:
    """The model's answer on how `ref` relates to the `shown` facts (numbered from 1)."""
    listing = "\n".join(f"{n}. {c.fact.text}" + (f" (since {c.fact.since})" if c.fact.since else "")
                        for n, c in enumerate(shown, 1))
    messages = [{"role": "system", "content": load_prompt("compare")},
                {"role": "user", "content": f"New fact (said on {ref['day']}): {ref['text']}\n\n"
                                            f"Facts in memory:\n{listing}"}]

    return llm.structured(messages, Relation, "compare", json_schema=relation_schema(len(shown)))


def decide(llm: LLM, ref: dict, shown: list[Candidate]) -> tuple[str, Candidate | None]:
    """`judge`'s answer, except that a fact is never replaced on the day it began to hold: two facts said the
    same day are both kept (the 1.5B model chained same-day facts of one conversation into replacements),
    unless the new one says it corrects (`CORRECTION`: `it's actually Friday, not Thursday`)."""
    relation, target = judge(llm, ref, shown)
    if relation == "replaces" and target.fact.since == ref["day"] and not CORRECTION.search(ref["text"]):
        return "new", None
    return relation, target


def judge(llm: LLM, ref: dict, shown: list[Candidate]) -> tuple[str, Candidate | None]:
    """(relation, the node fact it concerns): `weigh`'s answer, except that a change it finds `new` is asked
    about once more when a listed fact shares a word with it besides its subject's name: the model is asked
    of that one fact alone whether it still holds (`still_holds`). Compared with a list, the 1.5B model called
    `Dorota moved to Wroclaw` new beside `My sister Dorota lives in Gdansk`, and `We took Biscuit to a new vet`
    beside `Biscuit sees Dr. Haines`; asked of the one fact, it answers."""
    relation, target = weigh(llm, ref, shown)
    if relation != "new" or not shown or not CHANGE.search(ref["text"]):
        return relation, target
    said = {t for t in fact_key(ref["text"]) - CHANGE_WORDS - set(terms(ref["about"] or "")) if not t.isdigit()}
    tied = [c for c in shown if fact_key(c.fact.text) & said]
    if not tied:
        return "new", None
    closest = max(tied, key=lambda c: (len(fact_key(c.fact.text) & said), c.near))
    return ("new", None) if still_holds(llm, ref, closest) else ("replaces", closest)


class Holds(BaseModel):
    """Whether a fact in memory still holds after a newer statement."""

    still_true: bool


def still_holds(llm: LLM, ref: dict, candidate: Candidate) -> bool:
    """The model's answer on whether `candidate` still holds after `ref` was said."""
    messages = [{"role": "system", "content": load_prompt("still_true")},
                {"role": "user", "content": f"Fact in memory: {candidate.fact.text}\n"
                                            f"Said later, on {ref['day']}: {ref['text']}"}]
    return llm.structured(messages, Holds, "still_true").still_true


def weigh(llm: LLM, ref: dict, shown: list[Candidate]) -> tuple[str, Candidate | None]:
    """(relation, the node fact it concerns) from the listed facts: code answers what it can (no candidate: new; the same words:
    same); the model the rest, and code checks its answer against the words and, with an embedder, the sense:
    - the fact the model names is taken only when no listed fact is closer (more shared words, then nearer in
      sense): the 0.5B model named the wrong number for `same`, `refines` and `replaces` alike; an answer naming
      no fact concerns the one sharing `SHARED_WORDS` words or meant by its sense (`MEANT` close or more, no
      other within `MEANT_MARGIN`: `My daughter changed schools to Riverside` means `My daughter goes to Oak
      Primary`);
    - a fact that shares no word with it and is not the one meant is not replaced nor refined: `new` (the 0.5B
      model replaced `I moved to Porto` with a new landlord);
    - a `same` or `refines` must keep `KEPT_WORDS` of the listed fact's words: one that keeps fewer but still
      shares `SHARED_WORDS` of them (or says a change of the fact it means) says the same thing anew, so it
      `replaces` it; one sharing fewer is about something else, so it is `new` (a small model called `I work
      at Acme` a refinement of `I live in Lisbon`); one that denies what the listed fact does not (`..., not
      an espresso`, `no longer`) replaces it;
    - a `new` fact that says a value changed (`I moved my gym sessions from Mondays to Thursdays`) replaces the
      listed fact it shares `SHARED_WORDS` or more words with, else the one it means (a 0.5B model called most
      changes new); a correction said in words (`CORRECTION`) is such a change.
    Numbers and change words (`moved`, `now`: `CHANGE_WORDS`) are not counted as shared words: two facts of one
    day share its date, two changes a change word, not their subject."""
    if not shown:
        return "new", None
    for candidate in shown:
        if fact_key(candidate.fact.text) == fact_key(ref["text"]):
            return "same", candidate
    about = set(terms(ref["about"] or ""))
    said = {t for t in fact_key(ref["text"]) - CHANGE_WORDS if not t.isdigit()}  # a day both name, a change
    # word both use is no shared subject

    def shared(candidate: Candidate) -> int:
        return len((fact_key(candidate.fact.text) - about) & said)

    def closeness(candidate: Candidate) -> tuple[int, float]:
        return shared(candidate), candidate.near

    closest = max(shown, key=closeness)
    meant = _meant(shown)
    changes = bool(CHANGE.search(ref["text"]))
    answer = ask(llm, ref, shown)
    if answer.relation == "new":
        if changes and shared(closest) >= SHARED_WORDS:
            return "replaces", closest
        return ("replaces", meant) if changes and meant else ("new", None)
    picked = shown[answer.fact - 1] if 1 <= answer.fact <= len(shown) else None
    if picked is None:  # no number: the fact the words or the sense point at
        target = closest if shared(closest) >= SHARED_WORDS else meant
    else:
        target = closest if closeness(closest) > closeness(picked) else picked
    if target is None or (not shared(target) and target is not meant):
        return "new", None  # nothing in its words or its sense ties it to a listed fact
    if answer.relation == "replaces" or (NEGATION.search(ref["text"]) and not NEGATION.search(target.fact.text)):
        return "replaces", target
    theirs = fact_key(target.fact.text) - about
    if shared(target) < KEPT_WORDS * len(theirs):
        changed = shared(target) >= SHARED_WORDS or (changes and target is meant)
        return ("replaces", target) if changed else ("new", None)
    return answer.relation, target


def prefer_user(memory, ref: dict, relation: str, target: Candidate | None) -> tuple[str, Candidate | None]:
    """The user's statement over the assistant's echo: a new fact citing the user's message that says the same
    as a node fact citing only assistant messages (`Ms. Varga is your landlord now.`) `refines` it, so the
    user's words stand and the echo's wording goes to History."""
    if relation != "same" or "user" not in speakers(memory, ref["said"]):
        return relation, target
    said = [s for source in target.fact.sources for s in _card_sources(memory, source)]
    return ("refines", target) if said and speakers(memory, said) == {"assistant"} else (relation, target)


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
    """The listed fact a new fact means by its sense (see `judge`), or None."""
    ranked = sorted(shown, key=lambda c: c.near, reverse=True)
    runner_up = ranked[1].near if len(ranked) > 1 else 0.0
    return ranked[0] if ranked[0].near >= MEANT and ranked[0].near - runner_up >= MEANT_MARGIN else None


def since(ref: dict) -> str:
    """The day a fact holds from: its own date when that is not after the day it was said (a future date is
    a plan's, not the start of its truth), else the day it was said."""
    day, own = Date.fromisoformat(ref["day"]), ref.get("date")
    try:
        given = Date.fromisoformat(own) if own else None
    except ValueError:
        given = None
    return given.isoformat() if given and day - MAX_BACK <= given <= day else day.isoformat()


def node_for(memory, unit: dict) -> str:
    """The node of the unit's subject: `digest/<bucket>/<key>.md` in any bucket, your own folders too (the
    current one, if it was superseded as a whole), else a node search hit about it, else a new node in the
    unit's bucket."""
    stem = unit["key"]

    def buckets():  # digest/ is listed only when the unit's own bucket has no such node
        yield unit["bucket"]
        folders = [e["path"] for e in memory.list("digest", recursive=False, limit=1000)["entries"]
                   if e.get("type") == "folder"]
        yield from (b for b in digest_buckets(folders) if b != unit["bucket"])

    for bucket in buckets():
        found = current_of(memory, f"digest/{bucket}/{stem}.md")
        if found:
            return found
    for hit in memory.node_search(unit["about"], limit=5):
        meta = memory.frontmatter_get(hit["path"])["frontmatter"] or {}
        if meta.get("about") == stem and hit.get("status", "current") == "current":
            return hit["path"]
    return f"digest/{unit['bucket']}/{stem}.md"


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


_writing = threading.Lock()  # units run in threads: read-change-write of a node must not interleave


def land(memory, unit: dict, ref: dict, relation: str, target: Candidate | None, date: str) -> dict:
    """Write `ref` into its node as decided; returns what was done: `{fact, source, action, node, replaced}`."""
    with _writing:
        node = target.node if target else node_for(memory, unit)
        before = read_text(memory, node)
        body = split_frontmatter(before).body if before is not None else f"# {facts.plain_text(unit['about'])}\n"
        label = ref["day"]
        new = facts.Fact(ref["text"], kind=ref["kind"], since=since(ref), sources=(ref["source"],), labels=(label,))
        action, replaced = {"new": "created" if before is None else "added", "same": "same",
                            "refines": "refined", "replaces": "replaced"}[relation], None
        if relation == "same":
            body = facts.with_source(body, target.fact.id, ref["source"], label)
        elif target is None:
            new = _with_id(new, body)
            body = facts.add(body, new)
        else:
            old = target.fact
            start = old.since if relation == "refines" and old.since else new.since
            new = _with_id(new, body, since=start)
            until = max(new.since if relation == "replaces" else since(ref), old.since or "")
            body = facts.retire(facts.add(body, new), old.id, until, f"{node}#^{new.id}")
            replaced = old.text
        body = _with_source_file(body, ref)
        starts = [f.since for f in facts.parse(body) if f.since]
        meta = {"about": unit["key"], "status": "current", "updated": date}
        if starts:
            meta["valid_from"] = min(starts)
        memory.write(node, body, name=None if before is not None else unit["about"], description=facts.describe(body),
                     metadata=meta)
    return {"fact": ref["text"], "source": ref["source"], "action": action, "node": node, "replaced": replaced}


def _with_id(fact: facts.Fact, body: str, **changes) -> facts.Fact:
    return replace(fact, id=facts.next_id(body), **changes)


def _with_source_file(body: str, ref: dict) -> str:
    """`body` with its `## Sources` listing the card `ref` comes from."""
    link = f"[[{ref['card']}]]"
    if link in body:
        return body
    line = f"- {ref['day']}: {link}"
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


@lru_cache(maxsize=1)
def _similarity() -> Embed | None:
    """The configured embedder's similarity, loaded once per process; None when vectors are off or cannot run
    here (a package of the `local` extra missing: `gather` says so)."""
    settings = Settings()
    if unavailable(settings):
        return None
    embedder = make_embedder(settings)
    return similarity(embedder) if embedder is not None else None


_by_words: dict[str, str] = {}  # flow run id -> why that run compares facts by their words only
_by_words_lock = threading.Lock()


def words_only(reason: str) -> None:
    """Say once in the run's log that its facts are compared by their words only, and why (the run's summary
    says it too: `words_only`)."""
    run = str(flow_run.id or "")
    with _by_words_lock:
        if run in _by_words:
            return
        _by_words[run] = reason
    run_logger().warning("facts are compared by their words only: %s", reason)


def _words_only_said() -> str | None:
    return _by_words.get(str(flow_run.id or ""))


# ---- tasks ---------------------------------------------------------------------------------------------

@task(persist_result=True)
def gather(workspace: str, date: str, scan_days: int, max_units: int, hint: str | None) -> dict:
    """The facts of the window's cards changed since the checkpoint and not consolidated yet, grouped into
    units (at most `max_units`; the rest wait); an old prose card's facts are extracted first."""
    memory = memory_of(workspace)
    reason = unavailable(Settings())
    if reason:
        words_only(reason)
    texts = scan(memory, window(date, scan_days))
    done = checkpoints.load(metadata_of(workspace), "dream").get("files", {})
    changed = changed_files(texts, done)
    refs, spent, failed = [], Usage(), []
    for path in sorted(changed):
        if DAY_PAGE.match(path):
            continue
        cited = {link["anchor"] for link in memory.stat(path)["links_in"]
                 if link["source"].startswith("digest/") and link["predicate"] == "source" and link["anchor"]}
        if facts.has_facts(texts[path]):
            refs += card_facts(path, texts[path], cited)
            continue
        try:
            refs += _prose_facts(memory, path, texts[path], cited, spent)
        except LLMError as exc:
            failed.append({"unit": path, "name": path, "paths": [path], "error": str(exc),
                           "usage": getattr(exc, "usage", None)})
    units = group(refs, hint)
    kept, waiting = units[:max_units], units[max_units:]
    in_kept = {p for u in kept for p in u["paths"]}
    return {"scanned": len(texts), "changed": sorted(changed),
            "hashes": {p: changed[p] for p in changed},
            "units": [{**u, "hashes": {p: changed[p] for p in u["paths"]}} for u in kept],
            "deferred": sorted({p for u in waiting for p in u["paths"]} - in_kept),
            "failed": failed, "topics": topic_candidates(refs), "usage": spent.as_dict(), "words_only": reason}


def _prose_facts(memory, path: str, text: str, cited: set[str], spent: Usage) -> list[dict]:
    """The facts of an old prose card, extracted once (citing its lines), minus those consolidated already."""
    parsed = split_frontmatter(text)
    day = path.split("/")[1]
    items = extraction.block_items(path, parsed.body, Date.fromisoformat(day), first_line=parsed.body_line)
    if not items:
        return []
    llm = LLM.from_settings()
    try:
        with charged(llm.usage):
            screened = extract_facts(llm, items, f"Notes {path} of {day}. Their lines:", "extract")
    finally:
        spent.add(llm.usage)
    resource = "source_resource" in parsed.meta
    return [{"source": f.sources[0], "card": path, "day": day, "text": f.text, "kind": f.kind, "about": f.about,
             "date": f.date, "resource": resource, "said": [f.sources[0]], "siblings": {}}
            for f in screened.kept if f.sources and f.sources[0].partition("#")[2] not in cited]


@task(persist_result=True, task_run_name="consolidate-{unit[id]}", tags=["llm"])
def consolidate(workspace: str, unit: dict, date: str) -> dict:
    """Land each fact of one subject in its node: created, added, same (a source added), refined or replaced."""
    llm = LLM.from_settings()
    memory = memory_of(workspace)
    embed = _similarity()
    actions = []
    with charged(llm.usage):  # failed calls cost tokens too: finish counts them
        for ref in unit["facts"]:
            node = node_for(memory, unit)
            shown = candidates(memory, ref, node if read_text(memory, node) is not None else None, embed)
            relation, target = prefer_user(memory, ref, *decide(llm, ref, shown))
            actions.append(land(memory, unit, ref, relation, target, date))
            run_logger().info("%s: %s in %s", ref["source"], actions[-1]["action"], actions[-1]["node"])
    return {"unit": unit["id"], "name": unit["about"], "actions": actions, "usage": llm.usage.as_dict(),
            "words_only": _words_only_said()}


@task(cache_policy=NO_CACHE)
def finish(workspace: str, date: str, gathered: dict, outcomes: list[dict], failures: list[dict],
           topics: dict) -> dict:
    """Refresh the window's day pages, checkpoint every processed file except failed units' and deferred
    paths, and return the run summary."""
    memory, ws = memory_of(workspace), metadata_of(workspace)
    failures = gathered["failed"] + failures
    held = set(gathered["deferred"]) | {p for f in failures for p in f["paths"]}
    days = sorted({p.split("/")[1].removesuffix(".md") for p in gathered["changed"]})
    refreshed = {}
    for day in days:
        if read_text(memory, f"daily/{day}.md") is not None or memory.daily_list(day)["cards"]:
            page = memory.daily_reindex(day)["path"]
            refreshed[page] = checkpoints.content_hash(read_text(memory, page) or "")
    spent = Usage().add(gathered["usage"]).add(topics.get("usage"))
    for outcome in [*outcomes, *failures]:
        spent.add(outcome.get("usage"))
    actions = [{"unit": o["unit"], "name": o["name"], **a} for o in outcomes for a in o["actions"]]
    said = [gathered.get("words_only"), *(o.get("words_only") for o in outcomes),
            _by_words.pop(str(flow_run.id or ""), None)]
    with checkpoints.update(ws, "dream") as data:
        files = data.setdefault("files", {})
        files.update({p: h for p, h in gathered["hashes"].items() if p not in held})
        files.update({p: h for p, h in refreshed.items() if p not in held})
        if topics.get("path"):
            data.setdefault("interests", {})[date] = checkpoints.content_hash(read_text(memory, topics["path"]) or "")
        data["last_run"] = {"date": date, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            "units": len(gathered["units"]), "facts": len(actions), "failed": len(failures)}
    return {
        "date": date,
        "scanned": gathered["scanned"],
        "changed": len(gathered["changed"]),
        "units": len(gathered["units"]),
        "facts": len(actions),
        "actions": actions,
        "failed": failures,
        "deferred": gathered["deferred"],
        "topics": len(topics.get("added", [])),
        "interests": topics.get("path"),
        "usage": spent.as_dict(),
        "words_only": next((s for s in said if s), None),  # why facts were compared by their words only
    }


@task(cache_policy=NO_CACHE)
def publish_report(workspace: str, summary: dict) -> str:
    """A markdown artifact of the run (per fact: what was done in which node, by path; failures; tokens per
    call kind), the run's entry in the usage log and its record of decisions (storage/dream_log.py)."""
    lines = [f"# Dream of {summary['date']}", "",
             f"Scanned {summary['scanned']} files, {summary['changed']} changed; {summary['facts']} facts in "
             f"{summary['units']} subjects, {len(summary['failed'])} failed; {summary['topics']} new topics.", "",
             "| fact | action | node |", "|---|---|---|"]  # no memory text: it stays in the workspace
    lines += [f"| `{a['source']}` | {a['action']} | `{a['node']}` |" for a in summary["actions"]]
    lines += [f"| {', '.join(f'`{p}`' for p in f['paths'])} | **FAILED** | {f['error']} |" for f in summary["failed"]]
    if summary.get("words_only"):
        lines += ["", f"Facts compared by their words only: {summary['words_only']}"]
    if summary["deferred"]:
        lines += ["", "Left for the next run: " + ", ".join(f"`{p}`" for p in summary["deferred"])]
    u = summary["usage"]
    lines += ["", f"LLM: {u['calls']} calls, {u['total_tokens']} tokens "
                  f"({u['prompt_tokens']} prompt, {u['completion_tokens']} completion), {u['seconds']} s.", "",
              *usage_log.table(u)]
    markdown = "\n".join(lines)
    usage_log.publish(workspace, "auto-dream", f"dream of {summary['date']}", u)
    dream_log.record(metadata_of(workspace), summary, flow_run.id)  # the dashboard's day page reads it back
    create_markdown_artifact(markdown=markdown, key=f"dream-{summary['date']}", description="auto_dream run")
    return markdown


def settle(futures: list, units: list[dict]) -> tuple[list[dict], list[dict]]:
    """Wait for the mapped unit runs: (outcomes of completed units, failures with their paths)."""
    outcomes, failures = [], []
    for future, unit in zip(futures, units):
        future.wait()
        state = future.state
        if state.is_completed():
            outcomes.append(state.result())
        else:
            error = state.result(raise_on_failure=False)
            failures.append({"unit": unit["id"], "name": unit.get("about") or unit.get("name"), "paths": unit["paths"],
                             "error": str(error) if isinstance(error, BaseException) else (state.message or "failed"),
                             "usage": getattr(error, "usage", None)})
    return outcomes, failures
