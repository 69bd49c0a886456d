"""Daily cards: `daily/<date>/<name>.md`, one per conversation per day or per resource, and day pages.

A card is found again by an identity key in its frontmatter (`session_id` or `source_resource`). The agent
drafts it (`CardDraft`) and may write only that card with its tools; the file name comes from the validated
`name` (sanitised, de-duplicated), and a better name renames the card with `move`, which retargets links.
Every draft passes the content checks (tasks/quality.py) before it is written; a refused one (after its
repair turn) fails the job with nothing written, its tool writes undone.
"""

from __future__ import annotations

import html
import re
from datetime import date as Date
import unicodedata
from pathlib import PurePosixPath

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field, field_validator

from engine.client import read_all
from engine.llm import LLM, LLMError
from engine.prefect_env import run_logger
from engine.toolbox import Toolbox, read_text
from engine.usage import charged
from storage.errors import Conflict, InvalidInput, NotFound
from storage.markdown import split_frontmatter
from tasks import checkpoints, dialog, quality, usage
from tasks.context import memory_of, metadata_of
from tasks.prompts import load_prompt

MAX_RESOURCE_CHARS = 40_000
TEXT_RESOURCES = {".md", ".markdown", ".txt", ".json", ".jsonl", ".csv", ".yaml", ".yml", ".html", ".htm"}


class CardDraft(BaseModel):
    """What the agent returns for a card; `content` may be None when it wrote the card with a tool."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=1_000)
    content: str | None = Field(default=None, max_length=30_000)

    @field_validator("name")
    @classmethod
    def _name_has_letters(cls, value: str) -> str:
        if not slugify(value, fallback=""):
            raise ValueError("name needs at least one letter or digit")
        return " ".join(value.split())


# ---- plain functions -----------------------------------------------------------------------------------

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


def save_card(memory, folder: str, current: str | None, draft_path: str, draft: CardDraft,
              identity: dict, wrote_with_tools: bool) -> dict:
    """Write the card named by `draft` into `folder`, renaming `current` (or the tool-written `draft_path`)
    when the name changed; identity keys are set in the frontmatter. Returns `{path, created, renamed_from}`."""
    body = draft.content
    if body is None and wrote_with_tools:
        body = read_text(memory, draft_path)
    if not body or not body.strip():
        raise LLMError("the model returned no card content and wrote no card")
    body = split_frontmatter(body).body.lstrip("\n")  # the system owns the frontmatter
    existing = current or (draft_path if wrote_with_tools else None)
    target = unique_path(memory, folder, slugify(draft.name), keep=existing)
    renamed_from = None
    if existing and existing != target:
        memory.move(existing, target)
        renamed_from = existing
    memory.write(target, body, name=draft.name, description=draft.description, metadata=identity)
    return {"path": target, "created": current is None, "renamed_from": renamed_from if current else None}


def draft_card(llm: LLM, memory, workspace: str, prompt: str, material: str, draft_path: str,
               kind: str, kept: str = "", dialog_text: str | None = None) -> tuple[CardDraft, bool]:
    """Run the card agent: it may read memory and write only `draft_path` (with tools off it answers from
    the material alone and the caller writes the card). The draft must pass the content checks against the
    material (plus what its tools read), the card it updates (`kept`) and, for a session, the dialog it
    must not copy. Returns (draft, wrote_with_tools); on failure the tools' writes are undone."""
    toolbox = Toolbox(memory, metadata_of(workspace), can_write=lambda p: p == draft_path,
                      write_scope=f"the card {draft_path}")
    system = load_prompt(prompt)

    def judge(draft: CardDraft):
        body = draft.content
        if body is None:
            body = (read_text(memory, draft_path) if draft_path in toolbox.written else None) or ""
        seen = quality.Material("\n".join([material, *toolbox.seen]), kept, system, dialog_text)
        return quality.check(draft.name, body, seen)

    messages = [{"role": "system", "content": system}, {"role": "user", "content": material}]
    try:
        draft = llm.agent(messages, CardDraft, toolbox, kind, check=judge)
    except Exception:
        toolbox.undo()
        raise
    return draft, draft_path in toolbox.written


def _existing_section(memory, path: str | None) -> str:
    if not path:
        return "There is no card yet."
    return f"The current card ({path}):\n<card>\n{read_text(memory, path) or ''}\n</card>"


def check_resource(workspace: str, path: str) -> tuple[str, bool, str | None]:
    """(normalised path, whether it exists, reason to skip it or None); a path outside resource/ is an error."""
    rel = metadata_of(workspace).normalize(path)
    if not rel.startswith("resource/"):
        raise InvalidInput(f"{rel} is not a resource: resources live under resource/[YYYY-MM-DD/]")
    if PurePosixPath(rel).suffix.lower() not in TEXT_RESOURCES:
        return rel, False, f"not a text resource ({', '.join(sorted(TEXT_RESOURCES))})"
    try:
        exists = read_text(memory_of(workspace), rel) is not None
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


# ---- tasks ---------------------------------------------------------------------------------------------

@task(cache_policy=NO_CACHE)
def summarise_session(workspace: str, session_id: str, records: list[dict], date: str, hint: str | None) -> dict:
    """Write or update the session's card of `date` from its new records."""
    llm = LLM.from_settings()
    memory = memory_of(workspace)
    folder = f"daily/{date}"
    current = find_card(memory, folder, "session_id", session_id)
    draft_path = current or unique_path(memory, folder, slugify(f"session-{session_id}"))
    material = "\n\n".join(filter(None, [
        f"Date: {date} ({Date.fromisoformat(date):%A})\nSession: {session_id}\nCard path you may write: {draft_path}",
        f"Hint from the user: {hint}" if hint else "",
        _existing_section(memory, current),
        f"New messages:\n<messages>\n{dialog.transcript(records)}\n</messages>",
    ]))
    with charged(llm.usage):  # a refused card cost tokens too: the flow publishes them
        draft, with_tools = draft_card(llm, memory, workspace, "auto_memory", material, draft_path, "card",
                                       kept=read_text(memory, current) or "" if current else "",
                                       dialog_text=dialog.transcript(records))
    identity = {"session_id": session_id, "source_conversation": f"[[{dialog.dialog_path(session_id)}]]"}
    card = save_card(memory, folder, current, draft_path, draft, identity, with_tools)
    run_logger().info("session %s: %s card %s", session_id, "new" if card["created"] else "updated", card["path"])
    return {**card, "usage": llm.usage.as_dict()}


@task(cache_policy=NO_CACHE)
def summarise_resource(workspace: str, path: str, date: str) -> dict:
    """Write or update the card of resource `path` in `daily/<date>/`; unchanged content is skipped."""
    memory = memory_of(workspace)
    raw = read_all(memory, path)
    digest = checkpoints.content_hash(raw)
    seen = checkpoints.load(metadata_of(workspace), "resources").get(path, {})
    folder = f"daily/{date}"
    link = f"[[{path}]]"
    current = find_card(memory, folder, "source_resource", link) or _checkpointed_card(memory, seen, link)
    if current and seen.get("hash") == digest:
        return {"path": current, "action": "unchanged", "hash": digest, "usage": None}
    llm = LLM.from_settings()
    draft_path = current or unique_path(memory, folder, slugify(PurePosixPath(path).stem))
    material = "\n\n".join([
        f"Resource: {path}\nDate: {date}\nCard path you may write: {draft_path}",
        _existing_section(memory, current),
        f"The resource:\n<resource>\n{resource_text(raw, path)}\n</resource>",
    ])
    with charged(llm.usage):
        draft, with_tools = draft_card(llm, memory, workspace, "auto_resource", material, draft_path,
                                       "resource", kept=read_text(memory, current) or "" if current else "")
    card = save_card(memory, str(PurePosixPath(current).parent) if current else folder, current, draft_path,
                     draft, {"source_resource": link}, with_tools)
    return {"path": card["path"], "action": "created" if card["created"] else "updated",
            "renamed_from": card["renamed_from"], "hash": digest, "usage": llm.usage.as_dict()}


def _checkpointed_card(memory, seen: dict, link: str) -> str | None:
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


@task(cache_policy=NO_CACHE)
def remove_resource_card(workspace: str, path: str, date: str) -> dict:
    """Delete the card of a deleted resource (found by `source_resource`), if there is one. A path that is
    neither a file nor a resource ever carded is not found (a typo, not a deletion)."""
    memory = memory_of(workspace)
    seen = checkpoints.load(metadata_of(workspace), "resources").get(path)
    link = f"[[{path}]]"
    card = find_card(memory, f"daily/{date}", "source_resource", link) or _checkpointed_card(memory, seen or {}, link)
    if card is None and seen is None:
        raise NotFound(f"{path} not found, and no card was ever made of it")
    if card is None:
        return {"path": None, "action": "none"}
    memory.delete(card)
    return {"path": card, "action": "deleted"}


@task(cache_policy=NO_CACHE)
def record_resource(workspace: str, path: str, result: dict) -> None:
    """Checkpoint what the resource's card was made from (or forget a deleted resource)."""
    with checkpoints.update(metadata_of(workspace), "resources") as data:
        if result["action"] == "deleted" or result["path"] is None:
            data.pop(path, None)
        else:
            data[path] = {"hash": result["hash"], "card": result["path"]}


@task(cache_policy=NO_CACHE)
def publish_usage(workspace: str, job: str, title: str, spent: dict | None) -> str:
    """The run's LLM usage per call kind: a `<job>-usage` artifact and an entry in the usage log."""
    return usage.publish(workspace, job, title, spent)


@task(cache_policy=NO_CACHE)
def refresh_day(workspace: str, date: str) -> dict:
    """Rewrite the day index page `daily/<date>.md`."""
    return memory_of(workspace).daily_reindex(date)
