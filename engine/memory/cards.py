"""Cards: `daily/<date>/<name>.md`, one per conversation per day or per resource.

A card is a list of facts (storage/text/facts.py) grouped by kind, each citing the messages or resource lines it
comes from. The model only lists facts (engine/memory/extraction.py); code checks each one and writes the card:
a card is found again by an identity key in its frontmatter (`session_id` or `source_resource`), new facts are
added to it with new block ids (a fact it already states is not added twice), and nothing else in it is
rewritten. Its title is the model's (when the content checks pass it) or its first fact's words.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import unicodedata
from dataclasses import replace
from pathlib import PurePosixPath

from engine.access.toolbox import read_text
from engine.memory import extraction, quality
from engine.memory.thresholds import MAX_CALL_CHARS, MAX_RESOURCE_CHARS, TITLE_WORDS
from engine.models.llm import LLM, AnswerRefused
from engine.models.usage import charged
from engine.prompts import load_prompt
from storage.errors import Conflict, InvalidInput, NotFound
from storage.files import checkpoints, dialog, retraction
from storage.files.text_view import read_all
from storage.index.tokenize import terms
from storage.text import facts, redact
from storage.text.markdown import split_frontmatter

GENERIC_TITLE = frozenset(terms("conversation chat session messages message notes note summary facts day user"))
TEXT_RESOURCES = {".md", ".markdown", ".txt", ".json", ".jsonl", ".csv", ".yaml", ".yml", ".html", ".htm"}

# ---- finding and naming cards ------------------------------------------------------------------------------

def slugify(name: str, fallback: str = "card", max_len: int = 80) -> str:
    """A file-name stem from a title: lowercase words joined by `-`, any script's letters kept."""
    text = unicodedata.normalize("NFKC", name).lower()
    text = re.sub(r"[^\w]+", "-", text, flags=re.UNICODE).strip("-_")
    return text[:max_len].rstrip("-_") or fallback


def unique_path(memory, folder: str, stem: str, keep: str | None = None) -> str:
    """`folder/stem.md`, or `folder/stem-2.md`... when taken by another file than `keep`."""
    n = 1
    while True:
        path = f"{folder}/{stem}.md" if n == 1 else f"{folder}/{stem}-{n}.md"
        if path == keep or read_text(memory, path) is None:
            return path
        n += 1


def unwrap_link(value) -> str:
    """A path without the wikilink brackets a model or a frontmatter value may wrap it in."""
    return str(value or "").strip().removeprefix("[[").removesuffix("]]").strip()


def find_card(memory, folder: str, key: str, value: str) -> str | None:
    """The card in `folder` whose frontmatter `key` equals `value` (wikilink brackets ignored)."""
    try:
        entries = memory.list(folder, recursive=False, limit=10_000)["entries"]
    except NotFound:
        return None
    for entry in entries:
        path = entry["path"]
        if entry.get("type") != "file" or not path.endswith(".md"):
            continue
        meta = memory.frontmatter_get(path)["frontmatter"] or {}
        if unwrap_link(meta.get(key)) == unwrap_link(value):
            return path
    return None



def check_resource(metadata, memory, path: str) -> tuple[str, bool, str | None]:
    """(normalised path, whether it exists, reason to skip it or None); a path outside resource/ is an error."""
    rel = metadata.normalize(path)
    if not rel.startswith("resource/"):
        raise InvalidInput(f"{rel} is not a resource: resources live under resource/[YYYY-MM-DD/]")
    if PurePosixPath(rel).suffix.lower() not in TEXT_RESOURCES:
        return rel, False, f"not a text resource ({', '.join(sorted(TEXT_RESOURCES))})"
    try:
        exists = read_text(memory, rel) is not None
    except Conflict as exc:  # binary content under a text suffix
        return rel, True, str(exc)
    return rel, exists, None


def resource_text(raw: str, path: str) -> str:
    """Resource text for a prompt: HTML reduced to its text, everything cut to a budget."""
    if PurePosixPath(path).suffix.lower() in (".html", ".htm"):
        raw = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", raw)
        raw = html.unescape(re.sub(r"(?s)<[^>]+>", " ", raw))
        raw = re.sub(r"[ \t]+", " ", re.sub(r"\n\s*\n+", "\n\n", raw)).strip()
    if len(raw) > MAX_RESOURCE_CHARS:
        raw = raw[:MAX_RESOURCE_CHARS] + f"\n[... cut: the resource has {len(raw)} characters]"
    return raw


def extract_facts(llm: LLM, items: list[extraction.Item], header: str, kind: str) -> extraction.Screened:
    """Ask for the facts of the numbered `items`, screen each one, and return what is kept and dropped (each
    dropped fact counted as a refusal of its rule). A conversation is asked turn by turn (`turns`: a small model
    given several messages mixed speakers up: docs/dream.md), other material in runs of at most
    `MAX_CALL_CHARS`. A fact that only an assistant's echo of the user cites is taken from the user's message
    (`extraction.from_user`, counted as gate `echo`); a user's statement no kept fact cites is kept in their words
    (`extraction.unsaid`, counted in `unsaid`). A call whose facts are all dropped gets one repair turn; refused
    again, its facts count as dropped and the others stand. When no call kept a fact and one was refused, the job
    fails (`AnswerRefused`, exit 9): its input stays unconsumed. Any other failed call fails the job at once."""
    system = load_prompt("facts")
    out, refused = extraction.Screened(), None
    for batch in turns(items) if any(item.speaker for item in items) else _batches(items):
        screened: dict[str, extraction.Screened] = {}

        def judge(answer: extraction.FactList, batch=batch):
            result = screened["last"] = extraction.screen(answer, batch, system)
            if answer.facts and not result.kept:
                first = result.dropped[0]
                return first["rule"], f"none of its facts can be kept (e.g. {first['text'][:80]!r}: {first['why']})"
            return None

        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": extraction.prompt_material(header, batch)}]
        try:
            answer = llm.structured(messages, extraction.FactList, kind,
                                    json_schema=extraction.fact_schema(len(batch)), check=judge)
        except AnswerRefused as exc:
            refused = refused or exc
            answer = None
        result = screened["last"]
        for dropped in result.dropped:
            llm.usage.gate(dropped["rule"])
        out.kept += result.kept
        out.dropped += result.dropped
        out.recited += result.recited
        out.restated += result.restated
        out.title = out.title or (_title(answer.title, batch, system, header) if answer else "")
    if refused is not None and not out.kept:
        raise refused
    out.kept, out.echoes = extraction.from_user(out.kept, items, system)
    for _ in range(out.echoes):
        llm.usage.gate("echo")
    unsaid = extraction.unsaid(out.kept, items, system)  # conversations only: it reads user messages
    out.kept, out.unsaid = out.kept + unsaid, len(unsaid)
    return out


def turns(items: list[extraction.Item]) -> list[list[extraction.Item]]:
    """A conversation's items as turns, renumbered from 1: each user message with the message before it (the
    question it may answer); replies after the last user message join the last turn."""
    starts = [i for i, item in enumerate(items) if item.speaker == "user"] or [0]
    out = []
    for n, start in enumerate(starts):
        first = start - 1 if start > 0 and items[start - 1].speaker != "user" else start
        last = len(items) if n == len(starts) - 1 else start + 1
        out.append([replace(item, number=k) for k, item in enumerate(items[first:last], 1)])
    return out


def _batches(items: list[extraction.Item]) -> list[list[extraction.Item]]:
    """`items` cut into runs of at most `MAX_CALL_CHARS`, renumbered from 1 (each call cites its own numbers)."""
    runs, run, size = [], [], 0
    for item in items:
        if run and size + len(item.text) > MAX_CALL_CHARS:
            runs.append(run)
            run, size = [], 0
        run.append(replace(item, number=len(run) + 1))
        size += len(item.text)
    return runs + ([run] if run else [])


def _title(title: str, items: list[extraction.Item], system: str, header: str) -> str:
    """The model's title when the name checks pass it and it says more than the prompt's header (`Conversation
    s1 on 2026-11-03`), else '' (the card then takes its first fact's words)."""
    title = " ".join((title or "").split())
    material = quality.Material("\n".join(item.text for item in items), "", system)
    if not title or len(title.split()) > 2 * TITLE_WORDS or quality.check(title, None, material):
        return ""
    if set(terms(title)) <= set(terms(header)) | GENERIC_TITLE:
        return ""
    return title


def fact_key(text: str) -> frozenset[str]:
    """What a fact says, for finding it again: its content terms."""
    return frozenset(terms(text)) - extraction.FRAMING


def add_facts(body: str, new: list[facts.Fact], used: int = 0) -> tuple[str, list[facts.Fact]]:
    """`body` with the `new` facts it does not state yet, each given a block id it never had (past `used`, the
    highest number it held before); and those facts."""
    known = {fact_key(f.text) for f in facts.parse(body)}
    added = []
    for fact in new:
        if fact_key(fact.text) in known:
            continue
        fact = replace(fact, id=facts.next_id(body, used))
        body = facts.add(body, fact)
        known.add(fact_key(fact.text))
        added.append(fact)
    return body, added


def write_card(memory, folder: str, current: str | None, screened: extraction.Screened, identity: dict,
               restate: bool = False) -> dict:
    """Add the kept facts to the card `current` (or a new card in `folder` named by its title): `{path, created,
    added: [ids]}`. With `restate` (a changed resource) the card's facts the material no longer states go;
    the ones it still states keep their ids, so links to them hold. Identity keys are set in its frontmatter;
    its name stays once given."""
    before = read_text(memory, current) if current else None
    title = screened.title or " ".join(screened.kept[0].text.rstrip(".").split()[:TITLE_WORDS])
    body = split_frontmatter(before).body if before is not None else f"# {facts.plain_text(title)}\n"
    used = facts.highest_id(body)
    if restate:
        stated = {fact_key(f.text) for f in screened.kept}
        body = "\n".join(line for line in body.split("\n")  # a retracted fact stays: the record of it
                         if (fact := facts.parse_line(line)) is None or fact.retracted
                         or fact_key(fact.text) in stated)
    body, added = add_facts(body, screened.kept, used)
    path = current or unique_path(memory, folder, slugify(title))
    if before is not None and body == split_frontmatter(before).body:
        return {"path": path, "created": False, "added": []}
    memory.write(path, body, name=None if current else title, description=facts.describe(body), metadata=identity)
    return {"path": path, "created": current is None, "added": [f.id for f in added]}


def refuse_retracted(memory, said: str, screened: extraction.Screened) -> extraction.Screened:
    """`screened` without the facts a person retracted: a fact citing a line of `said` (a conversation or a
    resource) that a retracted card fact cites, saying at least that fact's words, is dropped (rule
    `retracted`). The cards citing `said` are found by their links (any day's card, so a re-run after a lost
    checkpoint, filed under another day, does not learn it again either)."""
    retracted: dict[str, list[frozenset[str]]] = {}
    cards = {link["source"] for link in memory.stat(said).get("links_in", [])
             if link["source"].startswith("daily/") and link.get("anchor")}
    for card in sorted(cards):
        for anchor, sentences in retraction.retracted_keys(read_text(memory, card) or "", said).items():
            retracted.setdefault(anchor, []).extend(fact_key(s) for s in sentences)
    if not retracted:
        return screened
    kept, dropped = [], list(screened.dropped)
    for fact in screened.kept:
        keys = [k for s in fact.sources for k in retracted.get(s.partition("#")[2], [])]
        if any(k and k <= fact_key(fact.text) for k in keys):
            dropped.append({"text": fact.text, "rule": "retracted",
                            "why": "a person retracted this fact from the line it cites"})
        else:
            kept.append(fact)
    return replace(screened, kept=kept, dropped=dropped)


# ---- a conversation's and a resource's card ---------------------------------------------------------------

def summarise_session(memory, llm: LLM, session_id: str, records: list[dict], lines: list[int], date: str,
                      hint: str | None) -> dict:
    """Add the facts of the session's new `records` (at dialog `lines`) to its card of `date`: `{path (None:
    nothing worth remembering), created, added, dropped, ..., usage}`."""
    folder = f"daily/{date}"
    source = dialog.dialog_path(session_id)
    day = dt.date.fromisoformat(date)
    items = extraction.message_items(source, records, lines, day)
    header = f"Conversation {session_id} on {date} ({day:%A}). Messages:"
    if hint:
        header = f"Hint from the user: {hint}\n{header}"
    with charged(llm.usage):  # a refused answer cost tokens too: the flow publishes them
        screened = extract_facts(llm, items, header, "card")
    current = find_card(memory, folder, "session_id", session_id)
    screened = refuse_retracted(memory, source, screened)
    if not screened.kept:
        return {"path": current, "created": False, "added": [], "dropped": screened.dropped,
                "usage": llm.usage.as_dict()}
    identity = {"session_id": session_id, "source_conversation": f"[[{source}]]"}
    card = write_card(memory, folder, current, screened, identity)
    return {**card, "dropped": screened.dropped, "recited": screened.recited,
            "restated": screened.restated, "echoes": screened.echoes, "unsaid": screened.unsaid,
            "usage": llm.usage.as_dict()}


def summarise_resource(memory, root, seen: dict, path: str, date: str) -> dict:
    """Write or update the card of resource `path` in `daily/<date>/` from its facts, each citing the lines it
    comes from, redacted with the patterns of the workspace at `root` (storage/text/redact.py) before the model
    reads it; content whose hash the checkpoint's `seen` record holds is skipped, no model asked. An updated resource's card is rewritten from its
    current facts. `{path, action: unchanged|none|created|updated, hash, ..., usage}`."""
    raw = read_all(memory, path)
    digest = checkpoints.content_hash(raw)
    folder = f"daily/{date}"
    link = f"[[{path}]]"
    current = find_card(memory, folder, "source_resource", link) or checkpointed_card(memory, seen, link)
    if seen.get("hash") == digest and (current or "card" in seen and seen["card"] is None):
        return {"path": current, "action": "unchanged", "hash": digest, "usage": None}
    llm = LLM.from_settings()
    with charged(llm.usage):
        kept, _ = redact.redact(raw, redact.workspace_patterns(root))  # never to the model
        screened = extract_facts(llm, resource_items(kept, path, dt.date.fromisoformat(date)),
                                 f"Resource {path}. Its lines:", "resource")
    screened = refuse_retracted(memory, path, screened)
    if not screened.kept:
        return {"path": current, "action": "none", "hash": digest, "dropped": screened.dropped,
                "usage": llm.usage.as_dict()}
    card = write_card(memory, str(PurePosixPath(current).parent) if current else folder, current, screened,
                      {"source_resource": link}, restate=True)
    return {"path": card["path"], "action": "created" if card["created"] else "updated", "added": card["added"],
            "dropped": screened.dropped, "hash": digest, "usage": llm.usage.as_dict()}


def resource_items(raw: str, path: str, said: dt.date) -> list[extraction.Item]:
    """A resource's numbered blocks: its lines (past a frontmatter block) cited by line number; HTML as its
    text, cited as a whole file. At most `MAX_RESOURCE_CHARS` are read."""
    if PurePosixPath(path).suffix.lower() in (".html", ".htm"):
        return extraction.block_items(path, resource_text(raw, path), said, anchored=False)
    parsed = split_frontmatter(raw) if PurePosixPath(path).suffix.lower() in (".md", ".markdown") else None
    body, first = (parsed.body, parsed.body_line) if parsed else (raw, 1)
    return extraction.block_items(path, body[:MAX_RESOURCE_CHARS], said, first_line=first)


def checkpointed_card(memory, seen: dict, link: str) -> str | None:
    """The card the checkpoint remembers for a resource (e.g. a root-level resource carded on an earlier
    day), if it still carries the resource link."""
    card = seen.get("card")
    if not card:
        return None
    try:
        meta = memory.frontmatter_get(card)["frontmatter"] or {}
    except NotFound:
        return None
    return card if unwrap_link(meta.get("source_resource")) == unwrap_link(link) else None



def remove_resource_card(memory, seen: dict | None, path: str, date: str) -> dict:
    """Delete the card of a deleted resource (found by `source_resource`, or the checkpoint's `seen` record),
    if there is one. A path that is neither a file nor a resource ever carded is not found (a typo, not a
    deletion)."""
    link = f"[[{path}]]"
    card = find_card(memory, f"daily/{date}", "source_resource", link) or checkpointed_card(memory, seen or {}, link)
    if card is None and seen is None:
        raise NotFound(f"{path} not found, and no card was ever made of it")
    if card is None:
        return {"path": None, "action": "none"}
    memory.delete(card)
    return {"path": card, "action": "deleted"}
