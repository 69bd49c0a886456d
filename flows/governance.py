"""Graph governance flows: doctor (the health report), link mining, merge, split and archive.

Each LLM flow runs on explicit paths, or on what the doctor finds (merge: near-duplicates, split: overlong
nodes, archive: stale nodes; link mining: digest nodes changed since its last run), reports every file it
changed in its result and a markdown artifact, and ends Failed when an item failed (that item's files are
left as they were).
"""

from __future__ import annotations

from prefect import flow, unmapped
from prefect.states import Failed

from engine.access.job_workspace import llm_or_skipped, workspace_root
from engine.config.days import today
from flows.unit_pool import UnitPool
from storage.arguments import OVERLONG_LINES, STALE_DAYS
from storage.errors import UnitsFailed
from tasks.governance import (archive_node, checkpoint_mined, collect, doctor_report, merge_pair, mine_links,
                              mining_queue, publish_changes, publish_doctor_report, split_node, summarize)


@flow(name="doctor", persist_result=True)
def doctor(fix: bool = False, dup_threshold: float | None = None, stale_days: int = STALE_DAYS,
           overlong_lines: int = OVERLONG_LINES, workspace: str | None = None) -> dict:
    """Report the memory graph's health (and with `fix`, first repair drift and moved files): schedulable."""
    root = workspace_root(workspace)
    report = doctor_report(root, fix, dup_threshold, stale_days, overlong_lines)
    publish_doctor_report(report)
    return report


@flow(name="link-mine", persist_result=True, task_runner=UnitPool)
def link_mine(paths: list[str] | None = None, max_nodes: int = 20, candidates: int = 8,
              workspace: str | None = None) -> dict:
    """Weave links to related nodes into digest nodes changed since the last run (or `paths`)."""
    root = workspace_root(workspace)
    if (skipped := llm_or_skipped()) is not None:
        return skipped
    queue = mining_queue(root, paths, max_nodes)
    futures = mine_links.map(unmapped(root), queue["paths"], unmapped(candidates))
    outcomes, failures = collect(futures, queue["paths"])
    checkpoint_mined(root, outcomes)
    return _finish(root, summarize("link-mine", outcomes, failures, deferred=queue["deferred"]))


@flow(name="merge", persist_result=True)
def merge(pairs: list[list[str]] | None = None, max_pairs: int = 5, dup_threshold: float | None = None,
          workspace: str | None = None) -> dict:
    """Fold each [survivor, victim] pair (default: the doctor's near-duplicates) into its survivor."""
    root = workspace_root(workspace)
    if (skipped := llm_or_skipped()) is not None:
        return skipped
    if pairs is None:
        pairs = [d["paths"] for d in doctor_report(root, dup_threshold=dup_threshold)["near_duplicates"]]
    pairs = pairs[:max_pairs]
    date = today()
    states = [merge_pair(root, survivor, victim, date, return_state=True) for survivor, victim in pairs]
    outcomes, failures = collect(states, [f"{v} → {s}" for s, v in pairs])
    return _finish(root, summarize("merge", outcomes, failures))


@flow(name="split", persist_result=True)
def split(paths: list[str] | None = None, max_nodes: int = 3, max_parts: int = 4, overlong_lines: int = OVERLONG_LINES,
          workspace: str | None = None) -> dict:
    """Break overlong nodes (default: the doctor's) into focused nodes linked to each other."""
    root = workspace_root(workspace)
    if (skipped := llm_or_skipped()) is not None:
        return skipped
    if paths is None:
        paths = [n["path"] for n in doctor_report(root, overlong_lines=overlong_lines)["overlong"]]
    paths = paths[:max_nodes]
    date = today()
    states = [split_node(root, path, max_parts, date, return_state=True) for path in paths]
    outcomes, failures = collect(states, paths)
    return _finish(root, summarize("split", outcomes, failures))


@flow(name="archive", persist_result=True)
def archive(paths: list[str] | None = None, stale_days: int = STALE_DAYS, workspace: str | None = None) -> dict:
    """Move stale and expired nodes (default: the doctor's: nobody links to them and not updated for
    `stale_days`, or past their expiry day) to digest/archive/, links retargeted; they stay readable, and
    searchable with include_archived."""
    root = workspace_root(workspace)
    if paths is None:
        report = doctor_report(root, stale_days=stale_days)
        paths = list(dict.fromkeys(n["path"] for n in report["stale"] + report["expired"]))
    date = today()
    states = [archive_node(root, path, date, return_state=True) for path in paths]
    outcomes, failures = collect(states, paths)
    return _finish(root, summarize("archive", outcomes, failures))


def _finish(root: str, summary: dict):
    publish_changes(root, summary)
    if summary["failed"]:
        message = f"{len(summary['failed'])} of {len(summary['failed']) + len(summary['outcomes'])} items failed"
        return Failed(message=message, data=UnitsFailed(message, summary))
    return summary
