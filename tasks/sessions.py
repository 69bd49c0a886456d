"""Tasks around a session's conversation records (the record format in `storage.files.dialog`)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from engine.access.job_workspace import memory_of, metadata_of
from storage.files import checkpoints, dialog


def session_lock(workspace: str, session_id: str):
    """Held while a session is summarised, so two runs for one session never summarise a turn twice.
    (A lock file of its own: the checkpoint's lock is taken inside it.)"""
    return checkpoints.lock(metadata_of(workspace), dialog.checkpoint_name(session_id) + ".run")


@task(cache_policy=NO_CACHE)
def record_messages(workspace: str, session_id: str, messages: list[dict]) -> dict:
    """Append the filtered messages to `session/dialog/<session_id>.jsonl`."""
    return dialog.append_messages(memory_of(workspace), session_id, messages)


@task(cache_policy=NO_CACHE)
def unsummarised(workspace: str, session_id: str) -> dict:
    """The session's next records after its checkpoint: `{start, end, total, records, lines, dates,
    latest_date}` (`lines`: each record's line in the dialog file; `dates`: the days of their timestamps)."""
    todo = dialog.pending(memory_of(workspace), metadata_of(workspace), session_id)
    return {"start": todo.start, "end": todo.end, "total": todo.total, "records": todo.records,
            "lines": todo.lines, "dates": todo.dates, "latest_date": todo.latest_date}


@task(cache_policy=NO_CACHE)
def mark_summarised(workspace: str, session_id: str, end: int, card: str | None) -> dict:
    """Move the session checkpoint to `end` (only after its card is written)."""
    return dialog.mark_summarised(metadata_of(workspace), session_id, end, card)
