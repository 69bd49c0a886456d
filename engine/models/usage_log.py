"""What memory costs: each LLM job's token usage and wall time per call kind, in its Prefect artifact and in
a small log, `metadata/usage.jsonl` (derived state: the last `KEEP` runs), which `dreamflow status` sums up.

No Prefect import at module level: `dreamflow status` reads the log without paying for it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from engine.models.usage import Usage
from storage.errors import NotFound
from storage.files import checkpoints
from storage.files.workspace import Workspace

LOG = "metadata/usage.jsonl"
KEEP = 200


def table(usage: dict | None) -> list[str]:
    """Markdown lines: one row per call kind, then the total."""
    usage = Usage().add(usage).as_dict()
    lines = ["| call kind | calls | first try | repairs | failures | prompt tokens | completion tokens | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for kind, k in sorted(usage["kinds"].items()):
        lines.append(f"| {kind} | {k['calls']} | {k['first_try']}/{k['answers']} | {k['repairs']} | {k['failures']} "
                     f"| {k['prompt_tokens']} | {k['completion_tokens']} | {k['seconds']} |")
    lines.append(f"| **total** | {usage['calls']} | | | | {usage['prompt_tokens']} | {usage['completion_tokens']} "
                 f"| {usage['seconds']} |")
    return lines + ["", gates_line(usage)]


def gates_line(usage: dict | None) -> str:
    """What the content checks refused: `Content checks (...) refused: ungrounded 2, markup 1.` (or none)."""
    from engine.memory.quality import RULES

    gates = (usage or {}).get("gates") or {}
    refused = ", ".join(f"{rule} {gates[rule]}" for rule in sorted(gates, key=lambda r: (RULES + (r,)).index(r)))
    return f"Content checks ({', '.join(RULES)}) refused: {refused or 'none'}."


def record(workspace: str, job: str, usage: dict | None, run_id: str | None = None) -> dict:
    """Append one run's usage to the log (keeping the last `KEEP` runs); returns the entry. A retried run
    (same `run_id`) replaces its earlier entry: its usage holds what its finished units spent already."""
    total = Usage().add(usage).as_dict()
    entry = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "job": job, "run_id": run_id,
             **total}
    ws = Workspace(workspace)
    with checkpoints.lock(ws, "usage"):
        kept = [line for line in _lines(ws) if not (run_id and _entry(line).get("run_id") == run_id)]
        lines = kept[-(KEEP - 1):] + [json.dumps(entry, ensure_ascii=False)]
        ws.write_text(ws.normalize(LOG), "\n".join(lines) + "\n")
    return entry


def recent(workspace: str, limit: int = 10) -> list[dict]:
    """The last `limit` runs' entries, newest first (unreadable lines skipped)."""
    entries = []
    for line in reversed(_lines(Workspace(workspace))):
        entry = _entry(line)
        if entry:
            entries.append(entry)
        if len(entries) >= limit:
            break
    return entries


def summary(workspace: str, limit: int = 10) -> dict:
    """`{runs: [last runs: job, at, calls, tokens, seconds], total: Usage of them}` for `status`."""
    runs = recent(workspace, limit)
    total = Usage()
    for run in runs:
        total.add(run)
    keys = ("at", "job", "run_id", "calls", "prompt_tokens", "completion_tokens", "total_tokens", "seconds")
    return {"runs": [{k: r.get(k) for k in keys} for r in runs], "total": total.as_dict()}


def publish(workspace: str, job: str, title: str, usage: dict | None) -> str:
    """Record the run's usage in the log and as a markdown artifact of the current Prefect flow run (key
    `<job>-usage`); returns the markdown. Outside a flow run only the log is written; a run without
    LLM calls writes nothing."""
    if not usage or not usage.get("calls"):
        return ""  # no LLM call (e.g. an unchanged resource): nothing spent
    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    run_id = flow_run.id
    record(workspace, job, usage, run_id)
    markdown = "\n".join([f"# LLM usage: {title}", "", *table(usage)])
    if run_id:
        create_markdown_artifact(markdown=markdown, key=f"{job}-usage", description=f"{job}: LLM usage")
    return markdown


def _lines(ws: Workspace) -> list[str]:
    try:
        return [line for line in ws.read_text(ws.normalize(LOG)).splitlines() if line.strip()]
    except (OSError, NotFound, ValueError):
        return []


def _entry(line: str) -> dict:
    """One log line's entry ({} when unreadable)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}
