"""Index maintenance flows, so they can be scheduled and run from the UI: reindex and optimize."""

from __future__ import annotations

from prefect import flow

from engine.access.job_workspace import workspace_root
from tasks.maintenance import compact_index, index_stats, rebuild_index, reconcile_index


@flow(name="reindex", persist_result=True)
def reindex(workspace: str | None = None) -> dict:
    """Rebuild the whole index from the files (metadata/ is derived state; nothing is lost)."""
    root = workspace_root(workspace)
    rebuilt = rebuild_index(root)
    return {"rebuilt": rebuilt, "stats": index_stats(root)}


@flow(name="optimize", persist_result=True)
def optimize(workspace: str | None = None) -> dict:
    """Nightly maintenance: catch up with files changed behind our back, then compact the index (and drop
    vectors no chunk uses any more)."""
    root = workspace_root(workspace)
    reconciled = reconcile_index(root)
    return {"reconciled": reconciled, **compact_index(root)}
