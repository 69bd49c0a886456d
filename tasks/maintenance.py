"""Index maintenance as tasks: rebuild from the files, and optimize (reconcile + compaction)."""

from __future__ import annotations

import inspect
import time

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from engine.access.job_workspace import memory_of


class Progress:
    """A `progress(done, total)` callback that shows in the Prefect UI (progress artifact + log lines),
    updated at most every `every` seconds."""

    def __init__(self, label: str, every: float = 1.0):
        self.label, self.every = label, every
        self.artifact = create_progress_artifact(progress=0.0, description=label)
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if total and (done >= total or now - self._last >= self.every):
            self._last = now
            update_progress_artifact(self.artifact, progress=100.0 * done / total)
            get_run_logger().info("%s: %d/%d files", self.label, done, total)


def _with_progress(method, label: str) -> dict:
    """Call a Memory maintenance method, reporting progress when it takes a callback (in-process Memory)."""
    if "progress" in inspect.signature(method).parameters:
        return method(progress=Progress(label))
    return method()


@task(cache_policy=NO_CACHE)
def rebuild_index(workspace: str) -> dict:
    """Drop and rebuild the index from the files."""
    return _with_progress(memory_of(workspace).reindex, "reindex")


@task(cache_policy=NO_CACHE)
def reconcile_index(workspace: str) -> dict:
    """Index files changed outside Dreamflow, forget deleted ones."""
    return _with_progress(memory_of(workspace).reconcile, "reconcile")


@task(cache_policy=NO_CACHE)
def compact_index(workspace: str) -> dict:
    """Compact the index now (drop stale search rows, re-sort postings): `{compacted, files, chunks, ...}`."""
    return memory_of(workspace).optimize()


@task(cache_policy=NO_CACHE)
def index_stats(workspace: str) -> dict:
    return memory_of(workspace).index_stats()
