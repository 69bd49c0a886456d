"""Gathering: the card facts a dream consolidates. The facts of the window's daily cards changed since the
checkpoint that no node cites yet (an old prose card's facts are extracted once, citing its lines), grouped by
what they are about into units, each landing in its subject's node."""

from __future__ import annotations

import re
from datetime import date as Date
from datetime import timedelta

from engine.access.toolbox import read_text
from engine.memory import extraction
from engine.memory.cards import extract_facts, slugify
from engine.memory.objects import CardFact, Unit
from engine.models.llm import LLM, LLMError
from engine.models.usage import Usage, charged
from storage.files import checkpoints
from storage.index.tokenize import terms
from storage.text import facts
from storage.text.markdown import split_frontmatter

DAY_PAGE = re.compile(r"^daily/\d{4}-\d{2}-\d{2}\.md$")
USER_WORDS = {"user", "the user", "me", "i", "myself", "you", "the speaker", "speaker", "person", "the person",
              "the user's", "user's"}
TOPIC_KINDS = ("plan", "question", "decision")


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


def card_facts(path: str, text: str, cited: set[str]) -> list[CardFact]:
    """The facts of a card not yet consolidated (`cited`: the anchors some node fact cites)."""
    day = path.split("/")[1]
    resource = "source_resource" in split_frontmatter(text).meta
    found = [f for f in facts.parse(text) if f.current and f.id]
    said = {f.id: tuple(sorted(f.sources)) for f in found}  # each card fact's messages
    return [CardFact(f.text, kind=f.kind, about=f.about, day=day, date=f.date, card=path, source=f"{path}#^{f.id}",
                     resource=resource, said=said[f.id], siblings=said)
            for f in found if f"^{f.id}" not in cited]


def group(refs: list[CardFact], hint: str | None) -> list[Unit]:
    """Units: the facts grouped by subject, those matching the `hint` first, then the larger groups."""
    groups: dict[str, tuple[str, list[CardFact], list[str]]] = {}
    for ref in refs:
        key, name = subject(ref.about)
        _, found, paths = groups.setdefault(key, (name, [], []))
        found.append(ref)
        if ref.card not in paths:
            paths.append(ref.card)
    wanted = set(terms(hint or ""))
    ranked = sorted(groups.items(), key=lambda kv: (-len(wanted & set(terms(" ".join(
        [kv[1][0], *(f.text for f in kv[1][1])])))), -len(kv[1][1]), kv[0]))
    return [Unit(key, name, bucket=_bucket(found), id=f"u{n}", facts=tuple(found), paths=tuple(paths))
            for n, (key, (name, found, paths)) in enumerate(ranked, 1)]


def _bucket(refs: list[CardFact]) -> str:
    if sum(r.kind == "procedure" for r in refs) * 2 > len(refs):
        return "procedure"
    return "wiki" if all(r.resource for r in refs) else "personal"


def topic_candidates(refs: list[CardFact]) -> list[dict]:
    """Topics to bring up from the gathered facts: plans, open questions and decisions."""
    return [{"title": " ".join(r.text.split()[:12]), "reason": f"a {r.kind} noted on {r.day}",
             "evidence": [r.text], "keywords": [subject(r.about)[1]], "paths": [r.card]}
            for r in refs if r.kind in TOPIC_KINDS]


def gather(memory, done: dict[str, str], date: str, scan_days: int, max_units: int, hint: str | None) -> dict:
    """The facts of the window's cards whose hash differs from `done` (the checkpoint's `{path: hash}`) and not
    consolidated yet, grouped into units (at most `max_units`; the rest wait); an old prose card's facts are
    extracted first. The dream's persisted JSON: `{scanned, changed, hashes, units, deferred, failed, topics,
    usage}`, each unit as `Unit.as_dict()` with its cards' `hashes`."""
    texts = scan(memory, window(date, scan_days))
    changed = changed_files(texts, done)
    refs: list[CardFact] = []
    spent, failed = Usage(), []
    for path in sorted(changed):
        if DAY_PAGE.match(path):
            continue
        cited = {link["anchor"] for link in memory.stat(path)["links_in"]
                 if link["source"].startswith("digest/") and link["predicate"] == "source" and link["anchor"]}
        if facts.has_facts(texts[path]):
            refs += card_facts(path, texts[path], cited)
            continue
        try:
            refs += prose_facts(memory, path, texts[path], cited, spent)
        except LLMError as exc:
            failed.append({"unit": path, "name": path, "paths": [path], "error": str(exc),
                           "usage": getattr(exc, "usage", None)})
    units = group(refs, hint)
    kept, waiting = units[:max_units], units[max_units:]
    in_kept = {p for u in kept for p in u.paths}
    return {"scanned": len(texts), "changed": sorted(changed),
            "hashes": {p: changed[p] for p in changed},
            "units": [{**u.as_dict(), "hashes": {p: changed[p] for p in u.paths}} for u in kept],
            "deferred": sorted({p for u in waiting for p in u.paths} - in_kept),
            "failed": failed, "topics": topic_candidates(refs), "usage": spent.as_dict()}


def prose_facts(memory, path: str, text: str, cited: set[str], spent: Usage) -> list[CardFact]:
    """The facts of an old prose card, extracted once (citing its lines), minus those consolidated already;
    the tokens spent are added to `spent`."""
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
    return [CardFact(f.text, kind=f.kind, about=f.about, day=day, date=f.date, card=path, source=f.sources[0],
                     resource=resource, said=(f.sources[0],))
            for f in screened.kept if f.sources and f.sources[0].partition("#")[2] not in cited]
