"""What each dream decided, fact by fact: one JSON record per dream run under `metadata/dreams/`, read back by
day (the dashboard's day page and overview).

A record (`metadata/dreams/<date>--<run id>.json`, written atomically; derived state, like the usage log):

    {"date": "2024-05-08",                  # the day the dream ran for (auto_dream's `date`)
     "at": "2024-05-09T03:00:12+00:00",     # when the record was written (UTC)
     "run_id": "0f6c...",                   # its Prefect flow run, None when unknown
     "units": [{"name": "Ana",              # the subject of the fact (a failed unit: its subject)
                "fact": "Ana works at a cafe.",     # the fact as its card says it (None for a failed unit)
                "source": "daily/2024-05-08/ana.md#^f2",
                "action": "replaced",       # created, added, same, refined, replaced, or FAILED
                "target": "digest/personal/ana.md",  # the node written (None for a failed unit)
                "replaced": "Ana works at a bakery.",  # the fact it replaced or refined, now in History
                "error": None}]}            # why a failed unit failed (a refusal names the content check)

A retried run (same run id) replaces its record; the newest KEEP records are kept.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone

from storage.files.workspace import Workspace

FOLDER = "metadata/dreams"
KEEP = 1_000  # records kept (a nightly dream: almost three years)
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def record(ws: Workspace, summary: dict, run_id: str | None = None) -> dict:
    """Write the record of a dream run from its summary (engine/memory/dream_run.py `finish`: `date`, `actions`, `failed`);
    returns it."""
    units = [{"name": a.get("name"), "fact": a.get("fact"), "source": a.get("source"), "action": a.get("action"),
              "target": a.get("node"), "replaced": a.get("replaced"), "error": None}
             for a in summary.get("actions", [])]
    units += [{"name": f.get("name"), "fact": None, "source": None, "action": "FAILED", "target": None,
               "replaced": None, "error": f.get("error")} for f in summary.get("failed", [])]
    now = datetime.now(timezone.utc)
    entry = {"date": summary["date"], "at": now.isoformat(timespec="seconds"), "run_id": run_id, "units": units}
    key = _SAFE.sub("_", run_id) if run_id else now.strftime("%Y%m%dT%H%M%S%f")
    ws.write_text(f"{FOLDER}/{summary['date']}--{key}.json", json.dumps(entry, ensure_ascii=False, indent=1))
    _prune(ws)
    return entry


def for_day(ws: Workspace, date: str) -> list[dict]:
    """The records of the dreams that ran for `date` (YYYY-MM-DD), newest first."""
    return _load(ws, [name for name in _names(ws) if name.startswith(f"{date}--")])


def latest(ws: Workspace) -> dict | None:
    """The newest record, None before the first dream."""
    names = sorted(_names(ws), key=lambda name: _mtime(ws, name), reverse=True)
    records = _load(ws, names[:1])
    return records[0] if records else None


def _names(ws: Workspace) -> list[str]:
    try:
        with os.scandir(ws.root / FOLDER) as entries:
            return [e.name for e in entries if e.name.endswith(".json") and e.is_file()]
    except OSError:
        return []


def _mtime(ws: Workspace, name: str) -> float:
    try:
        return (ws.root / FOLDER / name).stat().st_mtime
    except OSError:
        return 0.0


def _load(ws: Workspace, names: list[str]) -> list[dict]:
    records = []
    for name in names:
        try:
            data = json.loads((ws.root / FOLDER / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # half-deleted or damaged: derived state, skipped
        if isinstance(data, dict) and isinstance(data.get("units"), list):
            records.append(data)
    return sorted(records, key=lambda r: str(r.get("at") or ""), reverse=True)


def _prune(ws: Workspace) -> None:
    names = _names(ws)
    if len(names) <= KEEP:
        return
    for name in sorted(names, key=lambda name: _mtime(ws, name))[:len(names) - KEEP]:
        (ws.root / FOLDER / name).unlink(missing_ok=True)
