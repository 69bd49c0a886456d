"""proactive: the topics an agent should bring up on a day (from the dream's interests.yaml)."""

from __future__ import annotations

from prefect import flow

from engine.access.job_workspace import workspace_root
from engine.config.days import check_date, today
from tasks.topics import read_topics


@flow(name="proactive", persist_result=True)
def proactive(date: str | None = None, include_content: bool = False, workspace: str | None = None) -> dict:
    """Topics of `daily/<date>/interests.yaml` (title, reason, keywords, paths; with `include_content`, the
    text of those paths). No file: success with `skipped`; unreadable YAML: a clear failure."""
    return read_topics(workspace_root(workspace), check_date(date) if date else today(), include_content)
