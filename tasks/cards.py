"""The card jobs' tasks (auto_memory, auto_resource): thin `@task` wrappers over engine/memory/cards.py, which
says what a card is and how its facts are extracted, screened and written."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from engine.access.job_workspace import memory_of, metadata_of
from engine.config.prefect_env import run_logger
from engine.memory import cards
from engine.models import usage_log
from engine.models.llm import LLM
from storage.files import checkpoints


def check_resource(workspace: str, path: str) -> tuple[str, bool, str | None]:
    """(normalised path, whether it exists, reason to skip it or None); a path outside resource/ is an error."""
    return cards.check_resource(metadata_of(workspace), memory_of(workspace), path)


@task(cache_policy=NO_CACHE)
def summarise_session(workspace: str, session_id: str, records: list[dict], lines: list[int], date: str,
                      hint: str | None) -> dict:
    """Add the facts of the session's new `records` (at dialog `lines`) to its card of `date` (`cards.summarise_session`)."""
    card = cards.summarise_session(memory_of(workspace), LLM.from_settings(), session_id, records, lines, date, hint)
    if "recited" in card:
        run_logger().info("session %s: %d facts into %s card %s (%d dropped)", session_id, len(card["added"]),
                          "a new" if card["created"] else "its", card["path"], len(card["dropped"]))
    return card


@task(cache_policy=NO_CACHE)
def summarise_resource(workspace: str, path: str, date: str) -> dict:
    """Write or update the card of resource `path` in `daily/<date>/` (`cards.summarise_resource`)."""
    ws = metadata_of(workspace)
    seen = checkpoints.load(ws, "resources").get(path, {})
    return cards.summarise_resource(memory_of(workspace), ws.root, seen, path, date)


@task(cache_policy=NO_CACHE)
def remove_resource_card(workspace: str, path: str, date: str) -> dict:
    """Delete the card of a deleted resource, if there is one (`cards.remove_resource_card`)."""
    seen = checkpoints.load(metadata_of(workspace), "resources").get(path)
    return cards.remove_resource_card(memory_of(workspace), seen, path, date)


@task(cache_policy=NO_CACHE)
def record_resource(workspace: str, path: str, result: dict) -> None:
    """Checkpoint what the resource's card was made from (None: nothing worth remembering), or forget a
    deleted resource."""
    with checkpoints.update(metadata_of(workspace), "resources") as data:
        if result["action"] == "deleted" or "hash" not in result:
            data.pop(path, None)
        else:
            data[path] = {"hash": result["hash"], "card": result["path"]}


@task(cache_policy=NO_CACHE)
def publish_usage(workspace: str, job: str, title: str, spent: dict | None) -> str:
    """The run's LLM usage per call kind: a `<job>-usage` artifact and an entry in the usage log."""
    return usage_log.publish(workspace, job, title, spent)


@task(cache_policy=NO_CACHE)
def refresh_day(workspace: str, date: str) -> dict:
    """Rewrite the day index page `daily/<date>.md`."""
    return memory_of(workspace).daily_reindex(date)
