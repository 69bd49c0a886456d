"""The task runner of the flows that map LLM units (auto_dream's consolidation, link mining)."""

from __future__ import annotations

from prefect.task_runners import ThreadPoolTaskRunner

from engine.config.settings import Settings


class UnitPool(ThreadPoolTaskRunner):
    """A thread pool of `DREAMFLOW_DREAM_CONCURRENCY` threads, read when a run starts (Prefect runs each flow
    run on a `duplicate()` of its runner), so importing a flow reads no settings."""

    def duplicate(self) -> ThreadPoolTaskRunner:
        return ThreadPoolTaskRunner(max_workers=Settings().dream_concurrency)
