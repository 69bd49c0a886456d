"""auto_resource: a resource file under resource/[YYYY-MM-DD/] -> its daily card (written, updated or removed)."""

from __future__ import annotations

from prefect import flow

from engine.access.job_workspace import llm_or_skipped, workspace_root
from engine.config.days import today
from storage.text.markdown import path_date
from tasks.cards import (check_resource, publish_usage, record_resource, refresh_day, remove_resource_card,
                         summarise_resource)


@flow(name="auto-resource", persist_result=True)
def auto_resource(path: str, workspace: str | None = None) -> dict:
    """Write or update the card of text resource `path` in its date's daily folder (root-level resources:
    today); a deleted resource's card is removed; then the day index page is refreshed."""
    root = workspace_root(workspace)
    if (skipped := llm_or_skipped()) is not None:
        return skipped
    path, exists, skip = check_resource(root, path)
    if skip:
        return {"resource": path, "skipped": skip}
    day = path_date(path) or today()
    try:
        card = summarise_resource(root, path, day) if exists else remove_resource_card(root, path, day)
    except Exception as exc:  # e.g. the card was refused (exit 9): nothing checkpointed, its usage logged
        publish_usage(root, "auto-resource", path, getattr(exc, "usage", None))
        raise
    if card["action"] in ("created", "updated", "deleted"):
        refresh_day(root, path_date(card["path"]) or day)
    record_resource(root, path, card)
    publish_usage(root, "auto-resource", path, card.get("usage"))
    return {"resource": path, **card}
