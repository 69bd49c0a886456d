"""auto_dream's stages as tasks, thin `@task` wrappers over engine/memory/: gather the facts of recently changed
daily cards (gathering.py), consolidate each subject's facts into its digest node (consolidation.py), and
finish (dream_run.py: checkpoint and report). gather and consolidate persist their results as JSON: a Retry
from the Prefect UI reuses the gathering and the finished units."""

from __future__ import annotations

import threading
from functools import lru_cache

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from engine.access.job_workspace import memory_of, metadata_of
from engine.config.prefect_env import run_logger
from engine.config.settings import Settings
from engine.memory import dream_run, gathering
from engine.memory.consolidation import Embed, consolidate_fact, similarity
from engine.memory.objects import Unit
from engine.models import usage_log
from engine.models.embedders import make_embedder, unavailable
from engine.models.llm import LLM
from engine.models.usage import charged
from storage.files import checkpoints, dream_log


@lru_cache(maxsize=1)
def _similarity() -> Embed | None:
    """The configured embedder's similarity, loaded once per process; None when vectors are off or cannot run
    here (a package of the `local` extra missing: `gather` says so)."""
    settings = Settings()
    if unavailable(settings):
        return None
    embedder = make_embedder(settings)
    return similarity(embedder) if embedder is not None else None


_by_words: dict[str, str] = {}  # flow run id -> why that run compares facts by their words only
_by_words_lock = threading.Lock()


def words_only(reason: str) -> None:
    """Say once in the run's log that its facts are compared by their words only, and why (the run's summary
    says it too: `words_only`)."""
    run = str(flow_run.id or "")
    with _by_words_lock:
        if run in _by_words:
            return
        _by_words[run] = reason
    run_logger().warning("facts are compared by their words only: %s", reason)


@task(persist_result=True)
def gather(workspace: str, date: str, scan_days: int, max_units: int, hint: str | None) -> dict:
    """The units to consolidate (`gathering.gather`), and why facts are compared by words only, if they are."""
    reason = unavailable(Settings())
    if reason:
        words_only(reason)
    done = checkpoints.load(metadata_of(workspace), "dream").get("files", {})
    return {**gathering.gather(memory_of(workspace), done, date, scan_days, max_units, hint), "words_only": reason}


@task(persist_result=True, task_run_name="consolidate-{unit[id]}", tags=["llm"])
def consolidate(workspace: str, unit: dict, date: str) -> dict:
    """Land each fact of one subject in its node: created, added, same (a source added), refined or replaced."""
    llm, memory, embed, subject = LLM.from_settings(), memory_of(workspace), _similarity(), Unit.from_dict(unit)
    actions = []
    with charged(llm.usage):  # failed calls cost tokens too: finish counts them
        for ref in subject.facts:
            actions.append(consolidate_fact(memory, llm, subject, ref, date, embed, words_only))
            run_logger().info("%s: %s in %s", ref.source, actions[-1]["action"], actions[-1]["node"])
    return {"unit": subject.id, "name": subject.about, "actions": actions, "usage": llm.usage.as_dict(),
            "words_only": _by_words.get(str(flow_run.id or ""))}


@task(cache_policy=NO_CACHE)
def finish(workspace: str, date: str, gathered: dict, outcomes: list[dict], failures: list[dict],
           topics: dict) -> dict:
    """Refresh the window's day pages, checkpoint what was processed and return the run summary (`dream_run`)."""
    return dream_run.finish(memory_of(workspace), metadata_of(workspace), date, gathered, outcomes, failures,
                            topics, _by_words.pop(str(flow_run.id or ""), None))


@task(cache_policy=NO_CACHE)
def publish_report(workspace: str, summary: dict) -> str:
    """The run's report as a markdown artifact, its entry in the usage log and its record of decisions
    (storage/files/dream_log.py)."""
    markdown = dream_run.report(summary)
    usage_log.publish(workspace, "auto-dream", f"dream of {summary['date']}", summary["usage"])
    dream_log.record(metadata_of(workspace), summary, flow_run.id)  # the dashboard's day page reads it back
    create_markdown_artifact(markdown=markdown, key=f"dream-{summary['date']}", description="auto_dream run")
    return markdown


def settle(futures: list, units: list[dict]) -> tuple[list[dict], list[dict]]:
    """Wait for the mapped unit runs: (outcomes of completed units, failures with their paths)."""
    outcomes, failures = [], []
    for future, unit in zip(futures, units):
        future.wait()
        state = future.state
        if state.is_completed():
            outcomes.append(state.result())
        else:
            error = state.result(raise_on_failure=False)
            failures.append({"unit": unit["id"], "name": unit.get("about") or unit.get("name"), "paths": unit["paths"],
                             "error": str(error) if isinstance(error, BaseException) else (state.message or "failed"),
                             "usage": getattr(error, "usage", None)})
    return outcomes, failures
