"""auto_dream: recent daily cards -> long-term digest nodes, plus the topics of the day."""

from __future__ import annotations

from prefect import flow, unmapped
from prefect.states import Failed

from engine.access.job_workspace import llm_or_skipped, workspace_root
from engine.config.days import check_date, today
from flows.unit_pool import UnitPool
from storage.errors import UnitsFailed
from tasks.dream import consolidate, finish, gather, publish_report, settle
from tasks.topics import select_topics


@flow(name="auto-dream", persist_result=True, task_runner=UnitPool)
def auto_dream(date: str | None = None, hint: str | None = None, scan_days: int = 2, max_units: int = 5,
               topic_count: int = 3, topic_diversity_days: int = 7, workspace: str | None = None) -> dict:
    """Consolidate the facts of the daily cards changed in the `scan_days` days ending at `date` (default
    today) into digest nodes, one unit per subject (at most `max_units`, those matching `hint` first), and
    write the day's interests. Ends Failed when any unit failed; those units' files stay un-checkpointed, and
    a retry of the run re-runs only them."""
    root = workspace_root(workspace)
    if (skipped := llm_or_skipped()) is not None:
        return skipped
    date = check_date(date) if date else today()
    gathered = gather(root, date, scan_days, max_units, hint)
    futures = consolidate.map(unmapped(root), gathered["units"], unmapped(date))
    outcomes, failures = settle(futures, gathered["units"])
    topics = select_topics(root, date, gathered["topics"], topic_count, topic_diversity_days)
    summary = finish(root, date, gathered, outcomes, failures, topics)
    publish_report(root, summary)
    if summary["failed"]:
        message = f"{len(summary['failed'])} of {summary['units']} units failed; their files will be retried"
        return Failed(message=message, data=UnitsFailed(message, summary))
    return summary
