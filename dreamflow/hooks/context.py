"""`dreamflow hook claude-code` on `SessionStart` and `UserPromptSubmit`: memory put before the agent unasked.

`UserPromptSubmit` (input: `session_id`, `cwd`, `prompt`): `recall` for the prompt (storage/search/recall.py) within
`inject_prompt_tokens` under the session's id, so nothing the session was given comes again, and only when
something new in it comes from a keyword match holding `inject_min_words` distinct words of the prompt and
scoring at least `inject_min_score` and `inject_min_relevance` times the prompt's term weight, numbers that
mean the same on a memory of 2 files or 200,000 (storage/search/relevance.py), or, where vectors are searched (the
service), from one holding a rare word of the prompt and as close to it as `DREAMFLOW_VECTOR_CLOSE`: nothing
relevant enough, nothing injected.
`SessionStart` (input: `source` startup/resume/clear/compact): a digest read without an LLM: the digest nodes
(digest/personal first, then procedure, wiki and the folders of your own under digest/ by name, then notes
right in digest/, newest first in each: storage/files/workspace.digest_buckets) and the cards of the latest days,
each as its name, description and first lines, within `inject_start_tokens`; the lines it shows are
recorded as given to the session, so its prompts' recall does not repeat them. Every item is cited
`[path:start-end]` (the lines `read` shows) so the agent can read on.
Both put memory before the agent as quoted data: under a frame line saying so (storage/text/instructions.FRAME,
paid from the budget), with a line that reads as an instruction to the agent given as `[instruction left
out: path:line]`.

Both read what the session's workspace's searches read: itself and the workspaces its registry entry `reads`
(engine/access/scoped.py), in one budget; an item of another workspace is cited `[NAME:path:start-end]`, which `read`
takes as it is; the session's record stays in its own workspace.

Both answer on stdout as Claude Code reads it: `{"hookSpecificOutput": {"hookEventName": EVENT,
"additionalContext": TEXT}}`, kept under Claude Code's 10,000 characters (MAX_CHARS); nothing at all when
there is nothing to say. The session's workspace is hooks.session_workspace's. With a running service the hook process
asks it in one request (`POST /inject`: the service works `inject` out on its open index), so the process
imports no more than that needs (dreamflow/entry.py); without one, it opens the workspace itself. Never in
the prompt's way: the service's answer is waited for `inject_timeout` seconds, in-process the index lock as
long; a service named in service.json that does not answer is not worked around (it owns the index), and
any problem means nothing injected, one line on stderr, exit 0 (dreamflow/hooks/events.py).
"""

from __future__ import annotations

from pathlib import Path

EVENTS = ("SessionStart", "UserPromptSubmit")
MAX_CHARS = 9_500  # Claude Code shows longer additionalContext as a ~2,000-character preview only
MAX_PROMPT_CHARS = 4_000  # of the prompt, as recall's query (a pasted log is not a question)
NODES_PER_FOLDER = 12  # newest nodes looked at per digest folder
RECENT_DAYS = 3  # days of daily cards looked at
FIRST_LINES = 3  # body lines shown per node or card
READ_CHARS = 2_000  # of each node or card read for its frontmatter and first lines
MIN_ITEM = 16  # tokens: below this left in the budget, packing stops


def context(workspace: tuple[str, Path], payload: dict) -> str | None:
    """The text to inject for the hook `payload` (None: nothing), from workspace (name, folder) and those it
    reads: asked of its running service in one request (`POST /inject`, answered by `inject` there), else
    worked out here."""
    from engine.config.settings import Settings

    settings = Settings()
    asked = question(payload, settings)
    if asked is None:
        return None
    name, root = workspace
    from engine.access.client import RemoteMemory, open_memory

    memory = open_memory(root, timeout=settings.inject_timeout, check=False)
    if isinstance(memory, RemoteMemory):
        return memory.request("POST", f"{memory.scope}/inject", asked)["text"]
    from engine.access import scoped
    from engine.config.grants import ADMIN

    _wait_at_most(settings.inject_timeout)
    return inject(scoped.LocalCatalog(name, root), ADMIN, name, **asked)


def question(payload: dict, settings) -> dict | None:
    """`inject`'s arguments for the hook `payload` under `settings` (None: nothing to ask: another event, one
    switched off, an empty prompt)."""
    event, session = payload.get("hook_event_name"), payload.get("session_id")
    asked = {"event": event, "session": session if isinstance(session, str) and session else None}
    if event == "UserPromptSubmit" and settings.inject_prompt:
        prompt = payload.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return None
        return {**asked, "prompt": prompt[:MAX_PROMPT_CHARS], "budget": settings.inject_prompt_tokens,
                "min_score": settings.inject_min_score, "min_relevance": settings.inject_min_relevance,
                "min_words": settings.inject_min_words}
    if event == "SessionStart" and settings.inject_start:
        return {**asked, "budget": settings.inject_start_tokens}
    return None


def inject(catalog, grant, name: str, event: str, session: str | None, budget: int, prompt: str | None = None,
           min_score: float | None = None, min_relevance: float | None = None,
           min_words: int | None = None) -> str | None:
    """The text for `event` from workspace `name` of `catalog` (engine/access/scoped.py: in the hook's process or in
    the service) and the workspaces it reads that `grant` covers; None: nothing."""
    if event == "UserPromptSubmit":
        return prompt_context(catalog, grant, name, prompt or "", session, budget, min_score, min_relevance,
                              min_words)
    return start_context(catalog, grant, name, budget, session)


def answer(event: str, text: str) -> dict:
    """The hook's answer in Claude Code's format."""
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def prompt_context(catalog, grant, name: str, prompt: str, session: str | None, budget: int,
                   min_score: float | None, min_relevance: float | None, min_words: int | None = None) -> str | None:
    """Recall for the prompt under the session's id, across what the workspace reads: the cited evidence under
    recall's frame line (quoted memory, not instructions; storage/text/instructions.py), or None."""
    from dreamflow.mcp.text import behind_note
    from engine.access import scoped

    if not prompt.strip():
        return None
    result = scoped.recall_across(catalog, grant, name, {
        "query": prompt[:MAX_PROMPT_CHARS], "budget": _fit(budget), "session": session or None,
        "min_score": min_score, "min_relevance": min_relevance, "min_words": min_words})
    if not result["items"]:
        return None
    behind = f"\n\n{behind_note(result['index_behind'])}" if result.get("index_behind") else ""
    return result["text"] + behind  # framed by recall as quoted memory, instructions left out


def start_context(catalog, grant, name: str, budget: int, session: str | None = None) -> str | None:
    """The session-start digest of workspace `name` and those it reads: digest nodes (its own first), then the
    latest days' cards, as many as fit `budget`; with `session`, the lines it shows are recorded as given to it
    (storage/search/recall.py, in the workspace's own record), so recall for its prompts does not repeat them."""
    from engine.access import scoped
    from storage.text.instructions import FRAME
    from storage.search.recall import FRAMED
    from storage.index.tokenize import tokens

    name, names = scoped.reading(catalog, grant, name, None)
    memories = {other: catalog.memory(other) for other in names}
    budget = _fit(budget) - FRAMED  # the frame line is paid from the budget
    sections: list[tuple[str, list[str]]] = []
    given: list[str] = []
    cited: list[dict] = []
    used = 0
    nodes = [(other, path) for other, memory in memories.items() for path in _nodes(memory)]
    cards = [(other, path) for other, memory in memories.items() for path in _cards(memory)]
    for title, paths in (("Digest", nodes), ("Recent cards", cards)):
        items: list[str] = []
        for other, path in paths:
            if budget - used < MIN_ITEM:
                break
            item, keys, cite = _item(memories[other], path, scoped.address(name, other, path))
            cost = tokens(item) + 1 if item else 0
            if item and used + cost <= budget:
                items.append(item)
                given += keys
                cited.append({**cite, "workspace": other})
                used += cost
        if items:
            sections.append((title, items))
    if not sections:
        return None
    own = memories[name]
    if session and hasattr(own, "ws") and not own.db.read_only:
        from storage.search.recall import remember

        remember(own.ws, session, given, kind="session-start", items=cited)  # as recall records what it gives
    parts = [FRAME]
    for title, items in sections:
        parts.append(f"## {title}\n\n" + "\n\n".join(items))
    return "\n\n".join(parts)


def _fit(budget: int) -> int:
    """The budget, capped so the text stays under MAX_CHARS."""
    return max(MIN_ITEM, min(budget, MAX_CHARS // 4 - 100))


def _nodes(memory) -> list[str]:
    from storage.files.workspace import digest_buckets

    top = memory.list("digest", recursive=False, limit=1000)["entries"]
    paths = []
    for bucket in digest_buckets(e["path"] for e in top if e.get("type") == "folder"):
        listed = memory.list(f"digest/{bucket}", limit=NODES_PER_FOLDER, sort="mtime", extensions=["md"])
        paths += [e["path"] for e in listed["entries"] if e.get("type") == "file"]
    loose = [e for e in top if e.get("type") == "file" and e["path"].endswith(".md")]  # digest/x.md: no bucket
    return paths + [e["path"] for e in sorted(loose, key=lambda e: -e.get("mtime_ns", 0))][:NODES_PER_FOLDER]


def _cards(memory) -> list[str]:
    paths = []
    for day in memory.daily_list(limit=RECENT_DAYS)["days"]:
        cards = memory.daily_list(date=day["date"])["cards"]
        paths += sorted(c["path"] for c in cards)
    return paths


def _item(memory, path: str, where: str) -> tuple[str | None, list[str], dict | None]:
    """`[where:start-end] name: description` (`where`: the path as the session's workspace names it) and the
    first body lines of a node or card (None: nothing in it,
    or a superseded or expired node), the keys (storage.search.recall.line_key) of the lines it shows (those and the
    name and description lines) and its citation (`{path, start_line, end_line}`)."""
    from datetime import date

    from storage.text import facts, validity
    from storage.text.instructions import neutralise
    from storage.text.markdown import split_frontmatter
    from storage.search.recall import line_key

    page = memory.read(path, numbered=False, max_chars=READ_CHARS)
    lines = page["content"].removesuffix("\n").split("\n")
    body_start = 0
    if lines and lines[0].strip() == "---":
        ends = [n for n, text in enumerate(lines[1:], 1) if text.strip() == "---"]
        body_start = ends[0] + 1 if ends else len(lines)
    meta = split_frontmatter("\n".join(lines[:body_start]) + "\n").meta if body_start else {}
    if path.startswith("digest/") and validity.status(meta, date.today()) != validity.CURRENT:
        return None, [], None  # what no longer holds is not a current fact
    name, description = (str(meta.get(k) or "").strip() for k in ("name", "description"))
    shown = [(n + page["start_line"], text) for n, text in enumerate(lines) if n >= body_start and text.strip()]
    shown = [(n, text) for n, text in shown if text.lstrip("# ").strip() != name]
    if path.startswith("daily/"):  # a card: its facts a dream made node facts are the digest's (one truth each)
        consumed = _consumed(memory, path)
        if consumed:
            read = [(n, text, facts.parse_line(text)) for n, text in shown]
            shown = [(n, text) for n, text, fact in read if fact is None or fact.id not in consumed]
            if not any(fact is not None and fact.id not in consumed for _, _, fact in read):
                return None, [], None  # all its facts are the digest's
    shown = shown[:FIRST_LINES]
    if not (name or description or shown):
        return None, [], None
    where += (f":{shown[0][0]}" if shown else "") + (f"-{shown[-1][0]}" if len(shown) > 1 else "")
    head = f"[{where}] " + neutralise(": ".join(x for x in (name, description) if x), f"{path}:1")[0]
    said = [text for text in lines[:body_start] if text.startswith(("name:", "description:"))]
    cite = {"path": path, "start_line": shown[0][0] if shown else 1, "end_line": shown[-1][0] if shown else 1}
    return ("\n".join([head.rstrip(), *(neutralise(text, f"{path}:{n}")[0] for n, text in shown)]),
            [line_key(path, t) for t in said + [text for _, text in shown]], cite)


def _consumed(memory, card: str) -> set[str]:
    """Block ids of the card's facts that digest node facts cite (storage/index/indexer.py: the chain's node fact is what
    holds, or held)."""
    return {link["anchor"][1:] for link in memory.stat(card)["links_in"]
            if link["source"].startswith("digest/") and (link.get("anchor") or "").startswith("^")}


def _wait_at_most(timeout: float) -> None:
    """In this hook process, the index locks waited for at most `timeout` seconds."""
    import os

    from storage.index.db import lock_timeout

    os.environ["DREAMFLOW_LOCK_TIMEOUT"] = str(min(timeout, lock_timeout()))  # this hook process only
