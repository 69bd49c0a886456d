"""The dashboard's pages that read: overview, search, a file, where a fact comes from, the graph, days, what agents
were given, a job run, and the overview's parts that load after it (health, jobs). docs/dashboard.md says what
each shows."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from fastapi import APIRouter, Depends, Query
from markupsafe import Markup

from dreamflow.web import conversation
from dreamflow.web.app import URLS, Visitor, number, visitor
import dreamflow.web.fact_rows as fact_rows
from dreamflow.web.graph_layout import layout
from dreamflow.web.markdown_html import (block_id, compact, instruction_lines, line_range, mark, render_body,
                                         render_source)
from engine.access import scoped
from storage.arguments import parse_date
from storage.errors import DreamflowError, InvalidInput
from storage.files import dream_log, redaction_log
from storage.index import doctor
from storage.index.tokenize import terms
from storage.search import recall
from storage.text import facts, validity
from storage.text.markdown import split_frontmatter
from storage.text.outline import parse_blocks

router = APIRouter()

FILE_CHARS = 300_000  # of a file shown on one page (whole lines); the page links to the rest
GIVEN_ITEMS = 60  # cited pieces of one session shown with their text
FINDINGS_SHOWN = 8  # rows of each health finding
HISTORY_HOPS = 20  # supersedes / superseded_by links followed each way
ALL = "*"  # the search scope "every workspace I may use"


def _lines(value: str | None) -> tuple[int, int] | None:
    """`12-20` or `12` as a line range."""
    if not value:
        return None
    first, _, last = value.partition("-")
    try:
        start, end = int(first), int(last or first)
    except ValueError:
        raise InvalidInput(f"lines must look like 12-20, got {value!r}") from None
    if start < 1 or end < start:
        raise InvalidInput(f"bad line range {value!r}: lines are 1-based and start <= end")
    return start, end


# ---- overview --------------------------------------------------------------------------------------------------

@router.get("/")
def overview(who: Visitor = Depends(visitor)):
    """Each workspace the token grants: counts, the last dream; health and jobs load after the page. Above them,
    once, what `dreamflow status` warns of (the service's warnings: no LLM, so no cards or dreams...)."""
    cards = []
    for row in scoped.list_workspaces(who.catalog, who.grant):
        name, memory = who.open(row["name"])
        latest = dream_log.latest(memory.ws)
        cards.append({**row, "stats": memory.index_stats(), "dream": latest and _dream_counts(latest),
                      "redacted": redaction_log.summary(memory.ws)})
    who.workspace = None
    service = who.dashboard.service
    return who.dashboard.render(who, "overview.html", cards=cards, warnings=service.warnings if service else [])


def _dream_counts(record: dict) -> dict:
    """A dream's record with how many units got each decision."""
    return {**record, "counts": dict(Counter(unit.get("action") or "?" for unit in record["units"]))}


@router.get("/w/{ws}/health")
def health(ws: str, fresh: bool = False, who: Visitor = Depends(visitor)):
    """The doctor's findings (a part of the overview, loaded after it: the report reads every file)."""
    name, memory = who.open(ws)
    report, age = who.dashboard.doctor(name, memory, fresh)
    findings = [{"key": key, "problem": key in doctor.PROBLEMS, "count": len(report[key]),
                 "rows": [{"path": row.get("path") or row.get("source") or row.get("from"),
                           "line": row.get("line"), "text": doctor.describe(key, row).replace("`", "")}
                          for row in report[key][:FINDINGS_SHOWN]]}
                for key in doctor.PROBLEMS + doctor.NOTES if report and report.get(key)]
    return _part(who, "health.html", "Health", ws=name, report=report, findings=findings, age=round(age))


@router.get("/w/{ws}/jobs")
def jobs(ws: str, who: Visitor = Depends(visitor)):
    """Last and next dream and the recent job runs, from Prefect (a part of the overview, loaded after it)."""
    name, _ = who.open(ws)
    service = who.dashboard.service
    runs = service.jobs.job_runs(name, limit=8) if service is not None else None
    return _part(who, "jobs.html", "Jobs", ws=name, runs=runs, writable=not who.grant.read_only)


def _part(who: Visitor, template: str, heading: str, **context):
    """A part of the overview: alone when the overview's script fetches it, else as a page of its own."""
    if who.request.headers.get("x-dreamflow-fragment"):
        return who.dashboard.render(who, template, **context)
    return who.dashboard.render(who, "part.html", part=template, heading=heading, **context)


# ---- search ----------------------------------------------------------------------------------------------------

@router.get("/search")
def search(q: str = "", ws: str | None = Query(None, alias="in"), start: str = "", end: str = "", as_of: str = "",
           history: bool = False, archived: bool = False, prefix: str = "", limit: str | None = None,
           who: Visitor = Depends(visitor)):
    """The agents' search (keywords and vectors, dates, as-of, history) in one workspace and those it reads, or
    in every workspace the token grants."""
    visible = who.visible()
    scope = ws or who.home()
    hits: list[dict] | None = None
    if q.strip():
        args: dict[str, Any] = {"query": q, "limit": number(limit, "limit", 1, 100, 20), "history": history,
                                "include_archived": archived, "start_date": start or None, "end_date": end or None,
                                "as_of": as_of or None, "path_prefix": prefix or None, "per_file": 1, "expand": 3}
        if scope == ALL:
            args["workspaces"] = visible
        hits = scoped.search_across(who.catalog, who.grant, None if scope == ALL else scope, "search", args)
        words, today = set(terms(q)), dt.date.today()
        for hit in hits:
            text = compact(hit["text"])
            hit["fact"] = facts.parse_line(text) if "\n" not in text else None
            if hit["fact"] is not None:  # a fact's own window: shown as on its file's page
                hit["status"] = fact_rows.status(hit["fact"], hit.get("status"), today)
            hit["html"] = mark(facts.said(hit["fact"].text) if hit["fact"] else text, words)
    who.workspace = scope if scope in visible else None
    return who.dashboard.render(who, "search.html", q=q, scope=scope, visible=visible, hits=hits, start=start,
                                end=end, as_of=as_of, history=history, archived=archived, prefix=prefix,
                                several=scope == ALL or len({h["workspace"] for h in hits or []}) > 1)


# ---- a file ----------------------------------------------------------------------------------------------------

@router.get("/w/{ws}/file/{path:path}")
def file(ws: str, path: str, lines: str | None = None, q: str = "", view: str = "", start: str | None = None,
         saved: bool = False, who: Visitor = Depends(visitor)):
    """A file: its Markdown rendered (its facts as facts), a conversation as its messages, or its text with line
    numbers; frontmatter as fields, links out and in, sources, and for a digest node its history chain."""
    name, memory = who.open(ws)
    wanted = _lines(lines)
    info = memory.stat(path)
    if info.get("type") == "dir":
        raise InvalidInput(f"{info['path']} is a folder, not a file")
    first = number(start, "start", 1, 10**9, 1)
    page = _text(memory, info, first)
    if start is None and wanted and page and page["end_line"] < wanted[0] and info["kind"] != "markdown":
        first, page = wanted[0], _text(memory, info, wanted[0])  # a line past the first page: open at it
    body = source_html = None
    meta = info.get("frontmatter") or {}
    links = memory.traverse([info["path"]], depth=1, direction="forward", limit=500) if info["links_out"] else None
    exists = {n["path"]: n for n in (links or {}).get("nodes", [])}

    def link_to(target: str, anchor: str | None) -> tuple[str, bool, str | None]:
        known = exists.get(target) or {}
        return (URLS.file(name, target, line_range(anchor), fact=block_id(anchor)), known.get("exists", True),
                known.get("name"))

    node = info["path"].startswith("digest/") and info["kind"] == "markdown"
    sections: dict[str, tuple[int, int]] = {}
    shown_facts: dict[int, fact_rows.Row] = {}
    if page is not None and info["kind"] == "markdown" and first == 1:
        text = page["text"]
        parts = split_frontmatter(text)
        body_line = parts.body_line  # the body's first line in the file
        sections = _sections(parts.body, body_line, page["end_line"])
        shown_facts = {line: row for line, row in fact_rows.rows(
            info["path"], text, link_to, lambda fact: URLS.trace(name, info["path"], fact),
            validity.status(meta, dt.date.today()) if node else None, dt.date.today(), q).items() if line >= body_line}
        if view != "source":
            body = render_body(parts.body, body_line, link_to, q, wanted, shown_facts)
    instructions = instruction_lines(page["text"], page["start_line"]) if page is not None else []
    said = conversation.is_conversation(info["path"])
    messages = conversation.messages(page["text"], page["start_line"], q, wanted) \
        if page is not None and said and view != "source" else None
    if page is not None and body is None and messages is None:
        source_html = render_source(page["text"], page["start_line"], q, wanted, instructions)
    for link in info["links_out"]:
        link["exists"] = exists.get(link["target"], {}).get("exists", True)
        link["name"] = exists.get(link["target"], {}).get("name")
    return who.dashboard.render(
        who, "file.html", ws=name, info=info, meta=meta, page=page, body=body, facts=shown_facts,
        source_html=source_html, messages=messages, said=said, traceable=_traceable(info["path"]), q=q, view=view,
        lines=wanted,
        sources=[k for k in info["links_out"] if _within(k["line"], sections, "sources")],
        links_out=[k for k in info["links_out"]
                   if not _within(k["line"], sections, "sources", "history") and k["line"] not in shown_facts],
        links_in=[k for k in info["links_in"] if k["source"] != info["path"]],  # a fact's replaced_by: its row says it
        history=_chain(memory, info["path"], meta) if node else [], node=node,
        archived=info["path"].startswith("digest/archive/"), writable=not who.grant.read_only, saved=saved,
        instructions=instructions)


def _traceable(path: str) -> bool:
    """Whether the lines of a file get a "where from?": memory the jobs write (cards and nodes), not raw
    material (it is where things come from)."""
    return path.startswith(("digest/", "daily/"))


def _text(memory, info: dict, first: int) -> dict | None:
    """The page of text shown (`{text, start_line, end_line, total_lines, next_start_line}`), None for a binary
    file."""
    if info["kind"] == "binary":
        return None
    try:
        read = memory.read(info["path"], start_line=first, numbered=False, max_chars=FILE_CHARS)
    except DreamflowError:  # binary under a text suffix
        return None
    return {"text": read["content"], "start_line": read["start_line"], "end_line": read["end_line"],
            "total_lines": read["total_lines"], "next_start_line": read["next_start_line"]}


def _sections(body: str, first_line: int, last_line: int) -> dict[str, tuple[int, int]]:
    """File line ranges of the body's `Sources` and `History` sections (from their heading, of any level, to
    the next heading of level 1-2); the body starts at file line `first_line`."""
    heads = [(b.start + first_line, b.level, b.title.strip().lower())
             for b in parse_blocks(body).blocks if b.kind == "heading"]
    found = {}
    for at, (line, _, title) in enumerate(heads):
        if title in ("sources", "history"):
            found[title] = (line, next((later - 1 for later, level, _ in heads[at + 1:] if level <= 2), last_line))
    return found


def _within(line: int, sections: dict, *names: str) -> bool:
    return any(name in sections and sections[name][0] <= line <= sections[name][1] for name in names)


def _chain(memory, path: str, meta: dict) -> list[dict]:
    """The node's supersession chain, oldest first: each node it replaced (`supersedes`), itself, each node that
    replaced it (`superseded_by`), with name, status and validity window; nothing for a current node that
    replaced none (its facts carry their own history)."""
    today = dt.date.today()

    def row(at: str, fm: dict) -> dict:
        return {"path": at, "name": fm.get("name"), "status": validity.status(fm, today), "here": at == path,
                **validity.window(fm)}

    rows = [row(path, meta)]
    for key, forward in (("supersedes", False), ("superseded_by", True)):
        step, fm, seen = validity.target(meta.get(key)), meta, {path}
        while step and step not in seen and len(seen) <= HISTORY_HOPS:
            seen.add(step)
            try:
                fm = memory.frontmatter_get(step)["frontmatter"] or {}
            except DreamflowError:
                rows.insert(len(rows) if forward else 0, {"path": step, "missing": True})
                break
            rows.insert(len(rows) if forward else 0, row(step, fm))
            step = validity.target(fm.get(key))
    return rows if len(rows) > 1 or rows[0]["status"] != validity.CURRENT else []


# ---- where a fact comes from ----------------------------------------------------------------------------------

@router.get("/w/{ws}/trace/{path:path}")
def trace(ws: str, path: str, fact: str = "", who: Visitor = Depends(visitor)):
    """The chain from a fact (`fact=^f2`) or a line (`fact=12`) of a file down to the messages or resource lines
    it comes from (the `trace` operation); alone when a file page's script fetches it under the fact."""
    name, memory = who.open(ws)
    answer = memory.trace(path, fact or None)
    words = set(terms(answer["chain"].get("text") or ""))  # the traced sentence's words, marked where they stand
    return _part(who, "trace.html", "Where this comes from", ws=name, answer=answer,
                 marked=lambda text: Markup(mark(text or "", words)))


# ---- the graph -------------------------------------------------------------------------------------------------

@router.get("/w/{ws}/graph/{path:path}")
def graph(ws: str, path: str, depth: str | None = None, who: Visitor = Depends(visitor)):
    """The neighbourhood of a file, a few hops both ways, typed links labelled; each file a link."""
    name, memory = who.open(ws)
    hops = number(depth, "depth", 1, 3, 2)
    walked = memory.traverse([path], depth=hops, direction="both", limit=80)
    center = walked["nodes"][0]["path"] if walked["nodes"] else path
    return who.dashboard.render(who, "graph.html", ws=name, center=center, hops=hops, drawing=layout(center, walked),
                                walked=walked)


# ---- days ------------------------------------------------------------------------------------------------------

@router.get("/w/{ws}/days")
def days(ws: str, who: Visitor = Depends(visitor)):
    """The days that have cards, newest first."""
    name, memory = who.open(ws)
    listed = memory.daily_list(limit=120)
    return who.dashboard.render(who, "days.html", ws=name, days=listed["days"], truncated=listed["truncated"],
                                writable=not who.grant.read_only)


@router.get("/w/{ws}/day/{date}")
def day(ws: str, date: str, who: Visitor = Depends(visitor)):
    """A day: its cards, and what each dream that ran for it decided per fact."""
    name, memory = who.open(ws)
    date = parse_date(date)
    listed = memory.daily_list(date=date)
    when = dt.date.fromisoformat(date)
    dreams = dream_log.for_day(memory.ws, date)
    for unit in (u for dream in dreams for u in dream["units"]):  # a fact links to where its card says it
        card, _, anchor = (unit.get("source") or "").partition("#")
        unit["source_url"] = URLS.file(name, card, line_range(anchor), fact=block_id(anchor)) if card else None
    return who.dashboard.render(
        who, "day.html", ws=name, date=date, cards=listed["cards"], index_page=listed["index_page"],
        dreams=dreams, writable=not who.grant.read_only, before=(when - dt.timedelta(days=1)).isoformat(),
        after=(when + dt.timedelta(days=1)).isoformat())


# ---- what agents were given ------------------------------------------------------------------------------------

@router.get("/w/{ws}/sessions")
def sessions(ws: str, who: Visitor = Depends(visitor)):
    """The agent sessions memory was put before (recall with a session id, the Claude Code hooks)."""
    name, memory = who.open(ws)
    return who.dashboard.render(who, "sessions.html", ws=name, sessions=recall.sessions(memory.ws))


@router.get("/w/{ws}/session/{session_id}")
def session(ws: str, session_id: str, who: Visitor = Depends(visitor)):
    """What one session was given, each time, newest first, with the lines' text as it is now."""
    name, memory = who.open(ws)
    log = recall.log(memory.ws, session_id)
    shown = 0
    for entry in log:
        for item in entry["items"]:
            if shown >= GIVEN_ITEMS:
                break
            shown += 1
            try:
                item["text"] = memory.read(item["path"], start_line=item["start_line"], end_line=item["end_line"],
                                           numbered=False, max_chars=4_000)["content"]
            except DreamflowError as exc:
                item["gone"] = str(exc)
    return who.dashboard.render(who, "session.html", ws=name, session=session_id, log=log)


# ---- a job run -------------------------------------------------------------------------------------------------

@router.get("/runs/{run_id}")
def run(run_id: str, who: Visitor = Depends(visitor)):
    """A job run: its state, what it did (a dream's units, a governance flow's items), its Prefect UI page."""
    service = who.dashboard.service
    if service is None:
        raise InvalidInput("job runs need the service (`dreamflow start`)")
    status = service.jobs.run_status(run_id, visible=who.grant.sees)
    final = status["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
    return who.dashboard.render(who, "run.html", run=status, final=final, writable=not who.grant.read_only,
                                summary=status["summary"] if isinstance(status["summary"], dict) else None)
