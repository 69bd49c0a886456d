"""`status`'s row for each workspace: name, folder, index counts, last and next dream, and its lines in
`dreamflow status`.

The service (dreamflow/service/supervisor.py) makes a row for every workspace it serves that the caller's token grants
(the folder for the admin only); without a service, `dreamflow status` makes one for every registered workspace
(dreamflow/cli/service_commands.py). The same rows go out as JSON (`--json`, `GET /status`).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

COUNTS = ("files", "chunks", "links")


def row(name: str, folder: Path | None, stats: dict, default: bool, last_dream: dict | None,
        next_dream: dict | None, schedule: dict | None = None) -> dict:
    """One workspace's row; `folder` None leaves it out (a caller that is not the admin), `stats` its index's
    (`{"error": ...}` when it could not be read), `schedule` its nightly dream's `{cron, timezone}` when the
    service schedules it."""
    index = {"error": stats["error"]} if "error" in stats else {key: stats.get(key, 0) for key in COUNTS}
    return {"name": name, "default": default, **({"path": str(folder)} if folder is not None else {}),
            "index": index, "last_dream": last_dream, "next_dream": next_dream, "schedule": schedule}


def recorded_dream(ws) -> dict | None:
    """What the workspace's last dream recorded (any process, with or without the service): when, and what."""
    from storage.files import checkpoints

    dream = checkpoints.load(ws, "dream").get("last_run")
    return dream and {"start_time": dream.get("at"), "state": (
        f"of {dream.get('date')}: {dream.get('units', 0)} units, {dream.get('failed', 0)} failed")}


def lines(rows: list[dict], running: bool) -> list[str]:
    """The `Workspaces` block of `dreamflow status` (nothing for a single workspace: the lines above are its)."""
    if len(rows) < 2:
        return []
    head = (f"Workspaces  {len(rows)} served" if running else
            f"Workspaces  {len(rows)} registered, none served while no service runs")
    out = [head + "; `dreamflow --workspace NAME status` shows one's turns, usage and runs"]
    for each in rows:
        label = each["name"] + (" (default)" if each["default"] else "")
        out.append(f"  {label:<22} {each.get('path', '')}".rstrip())
        index = each["index"]
        facts = [f"index unreadable: {index['error']}" if "error" in index
                 else f"{index['files']} files, {index['chunks']} chunks, {index['links']} links"]
        schedule = each.get("schedule") or {}
        dream = each.get("last_dream")
        facts.append(f"last dream {_moment(dream['start_time'], schedule.get('timezone'))} ({dream['state']})"
                     if dream and dream.get("start_time") else "last dream none yet")
        upcoming = each.get("next_dream")
        if upcoming and upcoming.get("expected_start_time"):
            facts.append(f"next dream {_moment(upcoming['expected_start_time'], schedule.get('timezone'))}"
                         + (f" (cron {schedule['cron']})" if schedule.get("cron") else ""))
        else:
            facts.append("next dream none scheduled" if running else "next dream when a service runs")
        out.append(f"  {'':<22} " + "; ".join(facts))
    return out


def _moment(when: str, timezone: str | None) -> str:
    """An ISO time to the minute, in `timezone` (the workspace's schedule's) when known."""
    try:
        moment = datetime.fromisoformat(when)
        if timezone and moment.tzinfo is not None:
            from zoneinfo import ZoneInfo

            return f"{moment.astimezone(ZoneInfo(timezone)):%Y-%m-%d %H:%M} {timezone}"
        return moment.isoformat(timespec="minutes")
    except (TypeError, ValueError, KeyError):  # not a time, or a timezone this machine lacks: as given
        return str(when)
