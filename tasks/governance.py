"""Graph governance as tasks: the doctor's report, link mining, merge, split and archive.

Each LLM task reads what it needs, asks the model, then writes through memory operations only. The text
compositions live in storage/text/graph_edit.py and keep every link by construction; each write is still checked
here before it happens (`link_guard` for link mining, the union of both nodes' links for merge,
the original's links for split) and refused with `WriteRejected` if a link would be lost. Every task returns
an outcome `{item, status: done|skipped, detail, changed, deleted}`; a failed task leaves its files as they were.
"""

from __future__ import annotations

import re
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field, field_validator

from engine.access.job_workspace import memory_of, metadata_of
from engine.access.toolbox import predict, read_text
from engine.memory import quality
from engine.memory.cards import slugify, unique_path
from engine.models import usage_log
from engine.models.llm import LLM, response_schema
from engine.models.usage import Usage, charged
from engine.prompts import load_prompt
from storage.arguments import OVERLONG_LINES, STALE_DAYS
from storage.errors import WriteRejected
from storage.files import checkpoints
from storage.index.doctor import describe
from storage.text import facts
from storage.text.graph_edit import ARCHIVE, Proposal, link_targets, merge_body, split_bodies, weave
from storage.text.markdown import render_frontmatter, split_frontmatter

MAX_NODE_CHARS = 12_000   # node text shown to the model
CHECKPOINT = "link-mine"  # metadata/checkpoints/link-mine.json: {files: {path: "size:mtime"}}
_PREDICATE = re.compile(r"^\w[\w-]*$")


def link_guard(path: str, before: str, after: str) -> None:
    """Refuse any update of an existing node that would drop one of its wikilinks (sources included)."""
    lost = link_targets(before) - link_targets(after)
    if lost:
        raise WriteRejected(f"update of {path} rejected: it would drop the links {sorted(lost)}")


# ---- structured outputs --------------------------------------------------------------------------------

def _path(value) -> str:
    return str(value or "").strip().removeprefix("[[").removesuffix("]]").split("|")[0].split("#")[0].strip()


class LinkChoice(BaseModel):
    target: str
    old: str | None = None
    new: str | None = None
    reason: str = ""
    predicate: str | None = None

    @field_validator("target", mode="before")
    @classmethod
    def _unwrap(cls, value) -> str:
        return _path(value)

    @field_validator("predicate", mode="before")
    @classmethod
    def _word(cls, value):
        value = str(value or "").strip()
        return value if _PREDICATE.match(value) else None


class LinkJudgement(BaseModel):
    links: list[LinkChoice] = Field(default_factory=list, max_length=50)


class MergedNode(BaseModel):
    content: str = Field(min_length=1)
    name: str | None = None
    description: str | None = None


class Part(BaseModel):
    name: str = Field(min_length=1)
    description: str = ""
    content: str = Field(min_length=1)
    sources: list[str] = Field(default_factory=list)

    @field_validator("sources", mode="before")
    @classmethod
    def _paths(cls, value) -> list[str]:
        return [_path(v) for v in value or []]


class SplitPlan(BaseModel):
    overview: str = Field(min_length=1)
    parts: list[Part] = Field(min_length=2, max_length=20)


# ---- plain functions -----------------------------------------------------------------------------------

FACTS_KEPT = "a node of facts: the dream keeps it (merge and split rewrite prose, which would lose each fact's validity)"


def outcome(item: str, status: str, detail: str = "", changed=(), deleted=(), usage: dict | None = None) -> dict:
    return {"item": item, "status": status, "detail": detail, "changed": sorted(set(changed)),
            "deleted": sorted(set(deleted)), "usage": usage}


def digest_node(path: str) -> bool:
    """A live digest node: Markdown under digest/, not archived."""
    return path.startswith("digest/") and not path.startswith(ARCHIVE) and path.endswith(".md")


def load_node(memory, path: str) -> tuple[tuple[str, Any] | None, dict | None]:
    """((text, frontmatter), None) for a live digest node with readable frontmatter, else (None, skipped outcome)."""
    text = read_text(memory, path) if digest_node(path) else None
    if text is None:
        return None, outcome(path, "skipped", "not a live digest node")
    fm = split_frontmatter(text)
    if fm.error:
        return None, outcome(path, "skipped", "malformed frontmatter")
    return (text, fm), None


def stamps(memory) -> dict[str, str]:
    """`{path: "size:mtime"}` of every live digest node: what tells a changed node from a mined one."""
    entries = memory.list("digest", recursive=True, limit=10_000_000)["entries"]
    return {e["path"]: f"{e['size']}:{e['mtime']}" for e in entries
            if e.get("type") == "file" and digest_node(e["path"])}


def summarize(flow: str, outcomes: list[dict], failures: list[dict], **extra) -> dict:
    """The run summary every governance flow returns (and the CLI prints)."""
    changed = sorted({p for o in outcomes for p in o["changed"]} - {p for o in outcomes for p in o["deleted"]})
    spent = Usage()
    for o in [*outcomes, *failures]:
        spent.add(o.get("usage"))
    return {"flow": flow, "outcomes": outcomes, "failed": failures, "changed": changed,
            "deleted": sorted({p for o in outcomes for p in o["deleted"]}), "usage": spent.as_dict(), **extra}


def collect(states: list, items: list[str]) -> tuple[list[dict], list[dict]]:
    """Outcomes of completed task runs, and `{item, error}` for failed ones (states or futures)."""
    outcomes, failures = [], []
    for state, item in zip(states, items):
        if hasattr(state, "wait"):
            state.wait()
            state = state.state
        if state.is_completed():
            outcomes.append(state.result())
        else:
            error = state.result(raise_on_failure=False)
            failures.append({"item": item, "error": str(error) if isinstance(error, BaseException)
                             else (state.message or "failed"), "usage": getattr(error, "usage", None)})
    return outcomes, failures


def judge_split(plan: SplitPlan, material: quality.Material) -> tuple[str, str] | None:
    """The content checks on a split's overview and every part (name and body), against the original."""
    found = quality.check(None, plan.overview, material)
    for part in plan.parts:
        found = found or quality.check(part.name, part.content, material)
    return found


def mining_material(path: str, text: str, candidates: list[dict]) -> str:
    lines = [f"- {c['path']}: {c.get('name') or ''} — {c.get('description') or ''}" for c in candidates]
    return (f'<node path="{path}">\n{text[:MAX_NODE_CHARS]}\n</node>\n\nCandidate nodes:\n' + "\n".join(lines))


def _as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _must_keep(path: str, expected: set[str], after: str) -> None:
    lost = expected - link_targets(after)
    if lost:
        raise WriteRejected(f"update of {path} rejected: it would drop the links {sorted(lost)}")


# ---- tasks: doctor ---------------------------------------------------------------------------------------

@task(cache_policy=NO_CACHE)
def doctor_report(workspace: str, fix: bool = False, dup_threshold: float | None = None,
                  stale_days: int = STALE_DAYS, overlong_lines: int = OVERLONG_LINES) -> dict:
    """The graph health report (see storage/index/doctor.py), after mechanical repairs with `fix`."""
    memory = memory_of(workspace)
    check = memory.doctor_fix if fix else memory.doctor
    return check(dup_threshold=dup_threshold, stale_days=stale_days, overlong_lines=overlong_lines)


@task(cache_policy=NO_CACHE)
def publish_doctor_report(report: dict) -> str:
    """A markdown artifact of the report: counts, then the rows of every finding (first 50 each)."""
    state = "healthy" if report["ok"] else "needs attention"
    lines = [f"# Memory graph: {state}", "",
             f"{report['files']} files, {report['digest_nodes']} digest nodes, {report['links']} links; "
             f"checked in {report['seconds']} s.", "", "| finding | count |", "|---|---|"]
    lines += [f"| {key.replace('_', ' ')} | {count} |" for key, count in report["counts"].items()]
    fixed = report.get("fixed")
    if fixed:
        lines += ["", f"Fixed: re-indexed {len(fixed['reindexed'])} files, retargeted links to "
                      f"{len(fixed['retargeted'])} moved files."]
    for key, count in report["counts"].items():
        if count:
            lines += ["", f"## {key.replace('_', ' ')}", ""]
            lines += [f"- {describe(key, row)}" for row in report[key][:50]]
            if count > 50:
                lines.append(f"- … {count - 50} more")
    markdown = "\n".join(lines)
    create_markdown_artifact(markdown=markdown, key="doctor", description="memory graph health")
    return markdown


# ---- tasks: link mining ----------------------------------------------------------------------------------

@task(cache_policy=NO_CACHE)
def mining_queue(workspace: str, paths: list[str] | None, max_nodes: int) -> dict:
    """The nodes to mine: `paths`, else live digest nodes changed since the last run (at most `max_nodes`;
    the rest are `deferred` to the next run)."""
    memory = memory_of(workspace)
    if paths:
        return {"paths": list(dict.fromkeys(paths)), "deferred": []}
    done = checkpoints.load(metadata_of(workspace), CHECKPOINT).get("files", {})
    changed = [p for p, stamp in sorted(stamps(memory).items()) if done.get(p) != stamp]
    return {"paths": changed[:max_nodes], "deferred": changed[max_nodes:]}


@task(persist_result=True, task_run_name="mine-{path}", tags=["llm"])
def mine_links(workspace: str, path: str, candidates: int) -> dict:
    """Propose links from one node to related nodes (node_search + LLM judgement) and weave them in."""
    memory = memory_of(workspace)
    node, skipped = load_node(memory, path)
    if skipped:
        return skipped
    text, fm = node
    linked = link_targets(text)
    query = f"{fm.meta.get('name') or ''}. {fm.meta.get('description') or ''}. {fm.body[:500]}"
    found = [c for c in memory.node_search(query, limit=candidates + len(linked) + 1)
             if c["path"] != path and c["path"] not in linked][:candidates]
    if not found:
        return outcome(path, "skipped", "no new candidates")
    llm = LLM.from_settings()
    with charged(llm.usage):
        messages = [{"role": "system", "content": load_prompt("link_mine")},
                    {"role": "user", "content": mining_material(path, text, found)}]
        schema = response_schema(LinkJudgement)
        schema["$defs"]["LinkChoice"]["properties"]["target"]["enum"] = [c["path"] for c in found]
        judgement = llm.structured(messages, LinkJudgement, "link_mine", json_schema=schema)
        names = {c["path"]: c.get("name") for c in found}
        proposals = {c.target: Proposal(c.target, c.old, c.new, c.reason, c.predicate, names[c.target])
                     for c in judgement.links if c.target in names}
        if not proposals:
            return outcome(path, "done", "no candidate accepted", usage=llm.usage.as_dict())
        body, how = weave(fm.body, list(proposals.values()))
        link_guard(path, text, predict("write", text, {"content": body}))
        memory.write(path, body)
        detail = ", ".join(f"{h['target']} ({h['how']})" for h in how)
        return outcome(path, "done", detail, changed=[path], usage=llm.usage.as_dict())


@task(cache_policy=NO_CACHE)
def checkpoint_mined(workspace: str, outcomes: list[dict]) -> None:
    """Record the current stamp of every node mined (done or skipped), so only later changes bring it back."""
    now = stamps(memory_of(workspace))
    with checkpoints.update(metadata_of(workspace), CHECKPOINT) as data:
        files = data.setdefault("files", {})
        files.update({o["item"]: now[o["item"]] for o in outcomes if o["item"] in now})


# ---- tasks: merge, split, archive ------------------------------------------------------------------------

@task(persist_result=True, task_run_name="merge-{victim}", tags=["llm"])
def merge_pair(workspace: str, survivor: str, victim: str, date: str) -> dict:
    """Fold `victim` into `survivor`: LLM-merged prose, union of sources and links, `merged_from`, inbound
    links retargeted (line anchors follow their text), victim deleted."""
    memory = memory_of(workspace)
    item = f"{victim} → {survivor}"
    if survivor == victim or not (digest_node(survivor) and digest_node(victim)):
        return outcome(item, "skipped", "merge needs two different live digest nodes")
    kept, gone = read_text(memory, survivor), read_text(memory, victim)
    if kept is None or gone is None:
        return outcome(item, "skipped", "one of the nodes no longer exists (merged already?)")
    kept_fm, gone_fm = split_frontmatter(kept), split_frontmatter(gone)
    if kept_fm.error or gone_fm.error:
        return outcome(item, "skipped", "malformed frontmatter")
    if facts.parse(kept) or facts.parse(gone):
        return outcome(item, "skipped", FACTS_KEPT)
    llm = LLM.from_settings()
    with charged(llm.usage):
        system = load_prompt("merge")
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": f'<node path="{survivor}">\n{kept[:MAX_NODE_CHARS]}\n</node>\n\n'
                                                f'<node path="{victim}">\n{gone[:MAX_NODE_CHARS]}\n</node>'}]
        both = quality.Material(f"{kept}\n{gone}", instructions=system)
        merged = llm.structured(messages, MergedNode, "merge",
                                check=lambda m: quality.check(m.name, m.content, both))
        meta = {k: v for k, v in gone_fm.meta.items() if k not in kept_fm.meta and k not in ("name", "description")}
        meta["merged_from"] = list(dict.fromkeys(
            [*_as_list(kept_fm.meta.get("merged_from")), victim, *_as_list(gone_fm.meta.get("merged_from"))]))
        tags = list(dict.fromkeys(_as_list(kept_fm.meta.get("tags")) + _as_list(gone_fm.meta.get("tags"))))
        if tags:
            meta["tags"] = tags
        meta["updated"] = date
        frontmatter_links = link_targets(render_frontmatter({**kept_fm.meta, **meta}, ""))
        body = merge_body(merged.content, kept, gone, survivor, victim, frontmatter_links)
        args = {"content": body, "name": merged.name, "description": merged.description, "metadata": meta}
        _must_keep(survivor, (link_targets(kept) | link_targets(gone)) - {survivor, victim},
                   predict("write", kept, args))
        memory.write(survivor, body, name=merged.name, description=merged.description, metadata=meta)
        relinked = memory.relink(victim, survivor)["rewritten"]
        memory.delete(victim)
        return outcome(item, "done", f"{len(relinked)} files relinked",
                       changed=[survivor, *(r["path"] for r in relinked)], deleted=[victim], usage=llm.usage.as_dict())


@task(persist_result=True, task_run_name="split-{path}", tags=["llm"])
def split_node(workspace: str, path: str, max_parts: int, date: str) -> dict:
    """Break one node into focused parts that link to each other and to the node, which stays as their
    overview; sources are carried along and no link of the original is lost."""
    memory = memory_of(workspace)
    node, skipped = load_node(memory, path)
    if skipped:
        return skipped
    text, fm = node
    if facts.parse(text):
        return outcome(path, "skipped", FACTS_KEPT)
    llm = LLM.from_settings()
    with charged(llm.usage):
        system = load_prompt("split").replace("{max_parts}", str(max_parts))
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": f'<node path="{path}">\n{text[:MAX_NODE_CHARS]}\n</node>'}]
        plan = llm.structured(messages, SplitPlan, "split",
                              check=lambda p: judge_split(p, quality.Material(text, instructions=system)))
        parts = plan.parts[:max_parts]
        folder = path.rsplit("/", 1)[0]
        part_paths: list[str] = []
        for part in parts:
            stem = slugify(part.name, "part")
            candidate = unique_path(memory, folder, stem)
            n = 2
            while candidate in part_paths or candidate == path:
                candidate = unique_path(memory, folder, f"{stem}-{n}")
                n += 1
            part_paths.append(candidate)
        hub, bodies = split_bodies(text, path, plan.overview, [p.model_dump() for p in parts], part_paths)
        hub_args = {"content": hub, "metadata": {"updated": date, "split_into": part_paths}}
        after = predict("write", text, hub_args) + "".join(bodies)
        _must_keep(path, link_targets(text) - {path}, after)
        for part_path, part, body in zip(part_paths, parts, bodies):
            memory.create(part_path, body, name=part.name, description=part.description,
                          metadata={"split_from": path, "updated": date})
        memory.write(path, hub, metadata=hub_args["metadata"])
        relinked = memory.relink(path, path, before=text)["rewritten"]
        return outcome(path, "done", f"into {len(parts)} parts",
                       changed=[path, *part_paths, *(r["path"] for r in relinked)],
                       usage=llm.usage.as_dict())


@task(persist_result=True, task_run_name="archive-{path}")
def archive_node(workspace: str, path: str, date: str) -> dict:
    """Move a node to digest/archive/ (same sub-path; links to it retargeted) and mark it `archived: date`."""
    memory = memory_of(workspace)
    _, skipped = load_node(memory, path)
    if skipped:
        return skipped
    dest = ARCHIVE + path.removeprefix("digest/")
    if read_text(memory, dest) is not None:
        return outcome(path, "skipped", f"{dest} already exists")
    moved = memory.move(path, dest)
    memory.frontmatter_update(dest, {"archived": date})
    return outcome(path, "done", f"→ {dest}", changed=[dest, *(r["path"] for r in moved["rewritten"])],
                   deleted=[path])


@task(cache_policy=NO_CACHE)
def publish_changes(workspace: str, summary: dict) -> str:
    """A markdown artifact of a governance run (each item's outcome, every file changed, LLM usage per call
    kind) and the run's entry in the usage log."""
    flow = summary["flow"]
    lines = [f"# {flow}", "", "| item | status | detail |", "|---|---|---|"]
    lines += [f"| `{o['item']}` | {o['status']} | {o['detail']} |" for o in summary["outcomes"]]
    lines += [f"| `{f['item']}` | **FAILED** | {f['error']} |" for f in summary["failed"]]
    for title, paths in (("Changed", summary["changed"]), ("Deleted or moved away", summary["deleted"])):
        if paths:
            lines += ["", f"{title}: " + ", ".join(f"`{p}`" for p in paths)]
    if summary.get("deferred"):
        lines += ["", f"Left for the next run: {len(summary['deferred'])} nodes."]
    if summary["usage"]["calls"]:
        lines += ["", *usage_log.table(summary["usage"])]
        usage_log.publish(workspace, flow, flow, summary["usage"])
    markdown = "\n".join(lines)
    create_markdown_artifact(markdown=markdown, key=flow, description=f"{flow} run")
    return markdown
