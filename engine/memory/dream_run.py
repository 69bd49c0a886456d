"""A dream run's end: the day pages refreshed, the checkpoint written (`metadata/checkpoints/dream.json`: each
processed daily file's content hash; failed units' and deferred files are never recorded, so the next run
retries exactly them) and the run's summary and report."""

from __future__ import annotations

from datetime import datetime, timezone

from engine.access.toolbox import read_text
from engine.models import usage_log
from engine.models.usage import Usage
from storage.files import checkpoints


def finish(memory, ws, date: str, gathered: dict, outcomes: list[dict], failures: list[dict], topics: dict,
           words_only: str | None = None) -> dict:
    """Refresh the window's day pages, checkpoint every processed file except failed units' and deferred
    paths, and return the run summary."""
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
    said = [gathered.get("words_only"), *(o.get("words_only") for o in outcomes), words_only]
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


def report(summary: dict) -> str:
    """The run's report in Markdown: per fact what was done in which node, by path (no memory text: it stays
    in the workspace); failures; what waits; tokens per call kind."""
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
    return "\n".join(lines)
