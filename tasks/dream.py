"""auto_dream's stages as tasks: extract units from changed daily files, integrate each unit into one digest
node, and finish (checkpoint and report).

The dream checkpoint (`metadata/checkpoints/dream.json`) maps each processed daily file to the content hash
it had; a file is "changed" when its hash differs. Paths of failed units (and of files left out of the
prompt) are never checkpointed, so the next run retries exactly them.

extract and integrate persist their results: retrying a failed run from the Prefect UI reuses the
extraction and the successful units, so only the failed units run again. Prefect's default cache key includes
the flow run id (a new run never reuses an old result), and units carry their files' content hashes.
"""

from __future__ import annotations

import re
import threading
from datetime import date as Date
from datetime import datetime, timedelta, timezone
from pathlib import PurePosixPath
from typing import Literal

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run
from pydantic import BaseModel, Field, field_validator, model_validator

from engine.llm import LLM, LLMError, response_schema
from engine.prefect_env import run_logger
from engine.usage import Usage, charged
from engine.toolbox import Toolbox, WriteRejected, predict, read_text
from storage import dream_log
from storage.errors import JobFailed
from storage.markdown import parse_links, split_frontmatter
from tasks import checkpoints, history, quality, usage
from tasks.cards import slugify, unwrap_link
from tasks.context import memory_of, metadata_of
from tasks.prompts import load_prompt

BUCKETS = ("personal", "procedure", "wiki")
MAX_FILE_CHARS = 8_000      # per daily file in the extract prompt
MAX_PROMPT_CHARS = 60_000   # all files together; files beyond wait for the next run
MAX_NODE_CHARS = 6_000      # per candidate node shown to integrate
CANDIDATES = 5              # node_search hits offered to integrate (the top 3 with their text)
SOURCES = re.compile(r"^##[ \t]+Sources[ \t]*$", re.MULTILINE | re.IGNORECASE)


# ---- structured outputs --------------------------------------------------------------------------------

Bucket = Literal["personal", "procedure", "wiki"]
MAX_UNITS = 50  # per reply, whatever --max-units says (the schema sent asks for at most max_units)


class Unit(BaseModel):
    """One piece of durable knowledge that lands in exactly one digest node."""

    name: str = Field(min_length=1, max_length=200)
    bucket: Bucket = "wiki"
    summary: str = Field(min_length=1, max_length=2_000)
    paths: list[str] = Field(default_factory=list, max_length=20)
    date: str | None = Field(default=None, max_length=40)  # when its facts became true (tasks/history.event_date)

    @field_validator("bucket", mode="before")
    @classmethod
    def _known_bucket(cls, value) -> str:
        value = str(value or "").strip().lower()
        return value if value in BUCKETS else "wiki"


class TopicCandidate(BaseModel):
    title: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=1_000)
    evidence: list[str] = Field(default_factory=list, max_length=10)
    keywords: list[str] = Field(default_factory=list, max_length=10)
    paths: list[str] = Field(default_factory=list, max_length=20)


class Extraction(BaseModel):
    units: list[Unit] = Field(default_factory=list, max_length=MAX_UNITS)
    topics: list[TopicCandidate] = Field(default_factory=list, max_length=10)


class Decision(BaseModel):
    """The integrate agent's answer: which action on which node, and the node's new body (optional for
    CORROBORATE, or when the agent wrote the node with a tool). SUPERSEDE writes a new node that replaces the
    target, which is kept and closed (tasks/history.py)."""

    action: Literal["CREATE", "CORROBORATE", "REFINE", "CORRECT", "SUPERSEDE"]
    target: str | None = Field(default=None, max_length=300)
    name: str | None = Field(default=None, max_length=200)
    description: str | None = Field(default=None, max_length=1_000)
    content: str | None = Field(default=None, max_length=20_000)

    @field_validator("action", mode="before")
    @classmethod
    def _upper(cls, value):
        return str(value or "").strip().upper()

    @model_validator(mode="after")
    def _target_of_an_update(self):
        """An update names its node: a model that leaves `target` out gets a repair turn saying so."""
        if self.action != "CREATE" and not (self.target or "").strip():
            raise ValueError(f"{self.action} needs `target`: the path of the node it updates, one of the listed nodes")
        return self


# ---- plain functions: scanning ------------------------------------------------------------------------

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


def extract_material(texts: dict[str, str], changed: list[str], max_units: int, hint: str | None,
                     date: str) -> tuple[str, list[str]]:
    """The extract prompt's user message and the paths that fit in it (the rest waits for the next run)."""
    parts = [f"Today is {date}. Return at most {max_units} units."]
    if hint:
        parts.append(f"Hint from the user: {hint}")
    sent, size = [], 0
    for path in changed:
        text = texts[path]
        if len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + "\n[... cut]"
        if sent and size + len(text) > MAX_PROMPT_CHARS:
            break
        parts.append(f'<file path="{path}">\n{text}\n</file>')
        sent.append(path)
        size += len(text)
    return "\n\n".join(parts), sent


def extraction_schema(max_units: int, sent: list[str]) -> dict:
    """The reply schema of one extract call: at most `max_units` units, paths only among the files `sent`."""
    schema = response_schema(Extraction)
    schema["properties"]["units"]["maxItems"] = max_units
    for name in ("Unit", "TopicCandidate"):
        schema["$defs"][name]["properties"]["paths"]["items"]["enum"] = list(sent)
    return schema


def clean_units(extraction: Extraction, sent: list[str], max_units: int) -> tuple[list[Unit], list[str]]:
    """Units citing only files that were sent (paths not sent are dropped; units left citing none are
    dropped), at most `max_units`; also returns the paths only dropped units cited, which must not be
    checkpointed."""
    units, dropped = [], []
    for unit in extraction.units:
        paths = given(unit.paths, sent)
        if not paths:
            continue
        unit = unit.model_copy(update={"paths": paths})
        (units if len(units) < max_units else dropped).append(unit)
    kept = {p for u in units for p in u.paths}
    deferred = sorted({p for u in dropped for p in u.paths} - kept)
    return units, deferred


def clean_topics(extraction: Extraction, sent: list[str]) -> list[dict]:
    """Topic candidates with their paths limited to the files that were sent."""
    return [t.model_copy(update={"paths": given(t.paths, sent)}).model_dump() for t in extraction.topics]


def given(paths: list[str], sent: list[str]) -> list[str]:
    """The cited `paths` (wikilink brackets removed, duplicates dropped) that are among the files `sent`."""
    return [p for p in dict.fromkeys(map(unwrap_link, paths)) if p in sent]


# ---- plain functions: integrating ---------------------------------------------------------------------

def link_targets(text: str) -> set[str]:
    return {link.target for link in parse_links(text)}


def link_guard(path: str, before: str, after: str) -> None:
    """Refuse any update of an existing node that would drop one of its wikilinks (sources included)."""
    lost = link_targets(before) - link_targets(after)
    if lost:
        raise WriteRejected(f"update of {path} rejected: it would drop the links {sorted(lost)}")


def ensure_sources(body: str, paths: list[str], summary: str, date: str) -> str:
    """`body` with a `## Sources` sentence linking every path the section does not cite yet."""
    match = SOURCES.search(body)
    if match:
        following = re.search(r"^#{1,2}[ \t]", body[match.end():], re.MULTILINE)
        end = match.end() + following.start() if following else len(body)
        cited = link_targets(body[match.end():end])
    else:
        end, cited = len(body), set()
    missing = [p for p in paths if p not in cited]
    if not missing:
        return body
    sentence = " ".join(summary.split())
    sentence = sentence.split(". ")[0].rstrip(".")[:200]
    lines = "".join(f"- {date}: {sentence} ([[{p}]]).\n" for p in missing)
    if not match:
        return body.rstrip("\n") + "\n\n## Sources\n\n" + lines
    head, tail = body[:end].rstrip("\n"), body[end:]
    return head + "\n" + lines + ("\n" + tail if tail else "")


def integrate_material(unit: dict, date: str, candidates: list[dict], sources: dict[str, str],
                       nodes: dict[str, str]) -> str:
    parts = [
        f"Today is {date}.",
        f"Unit: {unit['name']}\nBucket: {unit['bucket']}\nSummary: {unit['summary']}\n"
        f"Happened on: {history.event_date(unit.get('date'), unit['paths'], date, latest=True)}",
        "Source files:\n" + "\n".join(f'<file path="{p}">\n{t}\n</file>' for p, t in sources.items()),
    ]
    if candidates:
        lines = [f"- {c['path']}: {c.get('name') or ''} — {c.get('description') or ''}"
                 + (f" (true since {c['valid_from']})" if c.get("valid_from") else "") for c in candidates]
        parts.append("Existing digest nodes that may cover it (best first):\n" + "\n".join(lines))
        parts += [f'<node path="{p}">\n{t}\n</node>' for p, t in nodes.items()]
    else:
        parts.append("No existing digest node matches it.")
    return "\n\n".join(parts)


def decision_schema(candidates: list[dict]) -> dict:
    """The reply schema of one integrate call: updates may only target a listed node; with none listed,
    the only action is CREATE."""
    schema = response_schema(Decision)
    paths = [c["path"] for c in candidates]
    if paths:
        schema["properties"]["target"] = {"anyOf": [{"type": "string", "enum": paths}, {"type": "null"}]}
    else:
        schema["properties"]["action"]["enum"] = ["CREATE"]
        schema["properties"]["target"] = {"type": "null"}
    return schema


_writing = threading.Lock()  # units run in threads: read-check-write of a node must not interleave


def apply_decision(memory, unit: dict, decision: Decision, date: str, wrote: list[str]) -> dict:
    """Write the unit's node as decided, enforcing in code: digest/ only, existing targets for updates,
    a `## Sources` sentence per source file, and no dropped link (checked against the node as it is now,
    so a unit never undoes what another unit of the run just added). Returns `{action, target}`."""
    with _writing:
        return _apply(memory, unit, decision, date, wrote)


def _apply(memory, unit: dict, decision: Decision, date: str, wrote: list[str]) -> dict:
    target = (decision.target or "").strip().removeprefix("[[").removesuffix("]]")
    before = read_text(memory, target) if target.startswith("digest/") else None
    if decision.action == "CREATE":
        if target not in wrote:  # a node its tools wrote is this unit's own
            named = [target] if before is not None and history.current_of(memory, target) == target else []
            if _digest_node(target):
                named += _named(memory, PurePosixPath(target).stem, target.split("/")[1])
            stem = slugify(decision.name or unit["name"], "node")
            named += _named(memory, stem, unit["bucket"])
            if named:
                return _create_over(memory, unit, decision, date, named[0])
            target = target if _digest_node(target) else f"digest/{unit['bucket']}/{stem}.md"
            if read_text(memory, target) is not None:  # taken by a closed node: the new one is dated
                target = history.successor_path(memory, target, stem, _since(unit, date))
            before = None
    elif not target.startswith("digest/"):
        raise LLMError(f"{decision.action} needs an existing digest node as target, got {target!r}")
    elif before is None:
        raise LLMError(f"{decision.action} target {target} does not exist")
    if decision.action == "SUPERSEDE":
        return _supersede(memory, unit, decision, date, target, before)
    body = decision.content
    if body is None:
        if before is None:
            raise LLMError(f"{decision.action} of {target}: the model returned no content")
        body = before
    body = split_frontmatter(body).body.strip("\n") + "\n"
    if decision.action in ("REFINE", "CORRECT") and before is not None and target not in wrote \
            and history.same_content(body, split_frontmatter(before).body):
        run_logger().info("%s: %s of %s keeps its body: CORROBORATE instead", unit["name"], decision.action, target)
        decision = decision.model_copy(update={"action": "CORROBORATE"})
        body = split_frontmatter(before).body.strip("\n") + "\n"
    body = ensure_sources(body, unit["paths"], unit["summary"], date)
    metadata = {"updated": date}
    if before is None or target in wrote:  # a new node: its facts hold from the unit's day
        metadata.update(valid_from=_since(unit, date, latest=False), status="current")
    else:
        change = {"REFINE": "refined", "CORRECT": "corrected"}.get(decision.action)
        line = history.history_line(date, f"{change}: {unit['summary'].split('. ')[0]}", unit["paths"]) \
            if change else None
        body = history.with_history(body, split_frontmatter(before).body, line)
    args = {"content": body, "name": decision.name, "description": decision.description, "metadata": metadata}
    if before is not None:
        link_guard(target, before, predict("write", before, args))
    name = decision.name or (None if before is not None else unit["name"])
    memory.write(target, body, name=name, description=decision.description, metadata=metadata)
    return {"action": decision.action, "target": target}


def _since(unit: dict, date: str, latest: bool = True) -> str:
    return history.event_date(unit.get("date"), unit["paths"], date, latest=latest)


def _supersede(memory, unit: dict, decision: Decision, date: str, old: str, before: str) -> dict:
    """Write the node that replaces `old` (valid from the unit's day, `supersedes` it, a History line) and
    close `old`: status superseded, `valid_to` that day, `superseded_by` the new node, a History line; its
    body and evidence stay. Returns `{action, target, superseded}`."""
    if not (decision.content or "").strip():
        raise LLMError(f"SUPERSEDE of {old}: the model returned no content for the new node")
    meta = memory.frontmatter_get(old)["frontmatter"] or {}
    since = history.closing_day(meta, _since(unit, date))
    new = history.successor_path(memory, old, decision.name or unit["name"], since)
    body = ensure_sources(split_frontmatter(decision.content).body.strip("\n") + "\n", unit["paths"],
                          unit["summary"], date)
    body = history.with_history(body, "", history.history_line(since, f"replaces [[{old}]]", unit["paths"]))
    memory.write(new, body, name=decision.name or unit["name"], description=decision.description,
                 metadata={"updated": date, "valid_from": since, "status": "current", "supersedes": f"[[{old}]]"})
    closed = history.with_history(split_frontmatter(before).body, "",
                                  history.history_line(since, f"superseded by [[{new}]]", unit["paths"]))
    closing = {"updated": date, "status": "superseded", "valid_to": since, "superseded_by": f"[[{new}]]"}
    try:
        link_guard(old, before, predict("write", before, {"content": closed, "metadata": closing}))
        memory.write(old, closed, metadata=closing)
    except Exception:
        memory.delete(new)  # never two current nodes for one fact
        raise
    return {"action": "SUPERSEDE", "target": new, "superseded": old}


def judge_decision(memory, unit: dict, decision: Decision, toolbox: Toolbox, material: quality.Material):
    """The content checks on what a decision writes (the body it gives or its tools wrote, and the node's
    name), against the unit's sources, the listed nodes, what its tools read and the node it updates."""
    target = unwrap_link(decision.target)
    body = decision.content
    if body is None and target in toolbox.written:
        body = read_text(memory, target)
    if body is None and decision.action == "CREATE":
        body = ""  # a new node needs a body: refused as empty
    kept = toolbox.before(target) if target in toolbox.written else \
        read_text(memory, target) if _digest_node(target) else None
    name = decision.name or (unit["name"] if decision.action == "CREATE" else None)
    seen = quality.Material("\n".join([material.sources, *toolbox.seen]), kept or "", material.instructions,
                            cited=material.cited)
    return quality.check(name, body, seen)


def _named(memory, stem: str, bucket: str) -> list[str]:
    """The current nodes named `stem` (`digest/<bucket>/<stem>.md`, or the node that superseded it), the
    unit's own bucket first."""
    order = [bucket, *(b for b in BUCKETS if b != bucket)]
    found = (history.current_of(memory, f"digest/{b}/{stem}.md") for b in order)
    return list(dict.fromkeys(p for p in found if p))


def _create_over(memory, unit: dict, decision: Decision, date: str, existing: str) -> dict:
    """A CREATE naming an existing node is decided as an update of it, never a second node (`x-2.md`): a
    REFINE when the new body keeps every link of the node, else a CORROBORATE (the unit's sources added)."""
    update = decision.model_copy(update={"action": "REFINE", "target": existing})
    body = split_frontmatter(decision.content or "").body.strip("\n")
    before = read_text(memory, existing) or ""
    if not body or link_targets(before) - link_targets(history.with_history(body, split_frontmatter(before).body)):
        update = decision.model_copy(update={"action": "CORROBORATE", "target": existing, "content": None,
                                             "name": None, "description": None})
    run_logger().info("%s: CREATE names the existing node %s: %s instead", unit["name"], existing, update.action)
    return _apply(memory, unit, update, date, [])


def _digest_node(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 3 and parts[0] == "digest" and parts[1] in BUCKETS and path.endswith(".md")


# ---- tasks ---------------------------------------------------------------------------------------------

@task(persist_result=True)
def extract(workspace: str, date: str, scan_days: int, max_units: int, hint: str | None) -> dict:
    """Scan the window, keep files changed since the checkpoint, and ask the LLM for units and topics."""
    memory = memory_of(workspace)
    texts = scan(memory, window(date, scan_days))
    done = checkpoints.load(metadata_of(workspace), "dream").get("files", {})
    changed = changed_files(texts, done)
    result = {"scanned": len(texts), "changed": sorted(changed), "hashes": {}, "units": [], "topics": [],
              "deferred": [], "usage": None}
    if not changed:
        return result
    llm = LLM.from_settings()
    material, sent = extract_material(texts, sorted(changed), max_units, hint, date)
    messages = [{"role": "system", "content": load_prompt("extract")}, {"role": "user", "content": material}]
    extraction = llm.structured(messages, Extraction, "extract", json_schema=extraction_schema(max_units, sent))
    units, deferred = clean_units(extraction, sent, max_units)
    result.update(
        hashes={p: changed[p] for p in sent},
        units=[{"id": f"u{i}", **u.model_dump(), "hashes": {p: changed[p] for p in u.paths}}
               for i, u in enumerate(units, 1)],
        topics=clean_topics(extraction, sent),
        deferred=sorted(set(deferred) | (set(changed) - set(sent))),
        usage=llm.usage.as_dict(),
    )
    return result


@task(persist_result=True, task_run_name="integrate-{unit[id]}", tags=["llm"])
def integrate(workspace: str, unit: dict, date: str) -> dict:
    """Land one unit in one digest node: CREATE, CORROBORATE, REFINE or CORRECT."""
    llm = LLM.from_settings()
    memory = memory_of(workspace)
    candidates = memory.node_search(f"{unit['name']}. {unit['summary']}", limit=CANDIDATES)
    nodes = {c["path"]: (read_text(memory, c["path"]) or "")[:MAX_NODE_CHARS] for c in candidates[:3]}
    sources = {p: (read_text(memory, p) or "")[:MAX_NODE_CHARS] for p in unit["paths"]}
    toolbox = Toolbox(memory, metadata_of(workspace), can_write=lambda p: p.startswith("digest/"),
                      write_scope="under digest/", guard=link_guard)
    system = load_prompt("integrate")
    grounds = [*sources.values(), *nodes.values(), *(f"{c.get('name')}. {c.get('description')}" for c in candidates)]

    def judge(decision: Decision):
        material = quality.Material("\n".join(grounds), "", system, cited=tuple(sources.values()))
        return judge_decision(memory, unit, decision, toolbox, material)

    messages = [{"role": "system", "content": system},
                {"role": "user", "content": integrate_material(unit, date, candidates, sources, nodes)}]
    with charged(llm.usage):  # failed calls cost tokens too: finish counts them
        try:
            decision = llm.agent(messages, Decision, toolbox, "integrate", json_schema=decision_schema(candidates),
                                 check=judge)
            outcome = apply_decision(memory, unit, decision, date, toolbox.written)
        except Exception:
            toolbox.undo()
            raise
    run_logger().info("%s: %s %s", unit["name"], outcome["action"], outcome["target"])
    return {"unit": unit["id"], "name": unit["name"], **outcome, "usage": llm.usage.as_dict()}


@task(cache_policy=NO_CACHE)
def finish(workspace: str, date: str, extracted: dict, outcomes: list[dict], failures: list[dict],
           topics: dict) -> dict:
    """Refresh the window's day pages, checkpoint every processed file except failed units' and deferred
    paths, and return the run summary."""
    memory, ws = memory_of(workspace), metadata_of(workspace)
    held = set(extracted["deferred"]) | {p for f in failures for p in f["paths"]}
    days = sorted({d for d in (p.split("/")[1].removesuffix(".md") for p in extracted["changed"])})
    refreshed = {}
    for day in days:
        if read_text(memory, f"daily/{day}.md") is not None or memory.daily_list(day)["cards"]:
            page = memory.daily_reindex(day)["path"]
            refreshed[page] = checkpoints.content_hash(read_text(memory, page) or "")
    usage = Usage().add(extracted["usage"]).add(topics.get("usage"))
    for outcome in [*outcomes, *failures]:
        usage.add(outcome.get("usage"))
    with checkpoints.update(ws, "dream") as data:
        files = data.setdefault("files", {})
        files.update({p: h for p, h in extracted["hashes"].items() if p not in held})
        files.update({p: h for p, h in refreshed.items() if p not in held})
        if topics.get("path"):
            data.setdefault("interests", {})[date] = checkpoints.content_hash(read_text(memory, topics["path"]) or "")
        data["last_run"] = {"date": date, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            "units": len(extracted["units"]), "failed": len(failures)}
    return {
        "date": date,
        "scanned": extracted["scanned"],
        "changed": len(extracted["changed"]),
        "units": len(extracted["units"]),
        "actions": [{k: o[k] for k in ("unit", "name", "action", "target", "superseded") if k in o} for o in outcomes],
        "failed": failures,
        "deferred": extracted["deferred"],
        "topics": len(topics.get("added", [])),
        "interests": topics.get("path"),
        "usage": usage.as_dict(),
    }


@task(cache_policy=NO_CACHE)
def publish_report(workspace: str, summary: dict) -> str:
    """A markdown artifact of the run (units, action taken, target node, failures, tokens per call kind), the
    run's entry in the usage log and its record of decisions (storage/dream_log.py)."""
    lines = [f"# Dream of {summary['date']}", "",
             f"Scanned {summary['scanned']} files, {summary['changed']} changed; {summary['units']} units, "
             f"{len(summary['failed'])} failed; {summary['topics']} new topics.", "",
             "| unit | action | target |", "|---|---|---|"]
    lines += [f"| {a['name']} | {a['action']} | `{a['target']}`"
              + (f" (replaces `{a['superseded']}`)" if a.get("superseded") else "") + " |" for a in summary["actions"]]
    lines += [f"| {f['name']} | **FAILED** | {f['error']} |" for f in summary["failed"]]
    if summary["deferred"]:
        lines += ["", "Left for the next run: " + ", ".join(f"`{p}`" for p in summary["deferred"])]
    u = summary["usage"]
    lines += ["", f"LLM: {u['calls']} calls, {u['total_tokens']} tokens "
                  f"({u['prompt_tokens']} prompt, {u['completion_tokens']} completion), {u['seconds']} s.", "",
              *usage.table(u)]
    markdown = "\n".join(lines)
    usage.publish(workspace, "auto-dream", f"dream of {summary['date']}", u)
    dream_log.record(metadata_of(workspace), summary, flow_run.id)  # the dashboard's day page reads it back
    create_markdown_artifact(markdown=markdown, key=f"dream-{summary['date']}", description="auto_dream run")
    return markdown


class UnitsFailed(JobFailed, LLMError):
    """Some units of a job failed (a planned failure, exit code 9); `summary` is the run summary (their paths
    stay un-checkpointed)."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message, summary)
        self.summary = summary

    def __str__(self) -> str:
        return str(self.args[0])


def settle(futures: list, units: list[dict]) -> tuple[list[dict], list[dict]]:
    """Wait for the mapped integrate runs: (outcomes of completed units, failures with their paths)."""
    outcomes, failures = [], []
    for future, unit in zip(futures, units):
        future.wait()
        state = future.state
        if state.is_completed():
            outcomes.append(state.result())
        else:
            error = state.result(raise_on_failure=False)
            failures.append({"unit": unit["id"], "name": unit["name"], "paths": unit["paths"],
                             "error": str(error) if isinstance(error, BaseException) else (state.message or "failed"),
                             "usage": getattr(error, "usage", None)})
    return outcomes, failures
