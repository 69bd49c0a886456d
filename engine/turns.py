"""Turn counters: every N conversation turns of a session (or on `compact`), auto_memory summarises it.

A turn is appended to `session/dialog/<session_id>.jsonl` at once; the per-session counts live in
`metadata/turns.json` (under a file lock, written atomically) so counting survives restarts and is shared
by the service and an in-process CLI. This module only counts and decides; launching the auto_memory run is
the caller's `launch` function. What has been summarised is auto_memory's own per-session checkpoint, so a
lost or failed launch loses nothing: the next launch for that session picks up every unsummarised record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from filelock import FileLock

from storage.errors import InvalidInput
from storage.workspace import Workspace, check_session_id

class TurnCounter:
    """Per-session turn counts in `metadata/turns.json`: `{session_id: {turns, pending, runs, last_run, ...}}`.

    `turns` counts every turn ever recorded; `pending` the turns since the last successful launch.
    """

    def __init__(self, ws: Workspace, every: int):
        if every < 1:
            raise InvalidInput(f"turns per summary must be at least 1, got {every}")
        self.ws = ws
        self.every = every
        self.path = ws.metadata / "turns.json"
        self._lock = FileLock(str(ws.metadata / "turns.lock"))

    def sessions(self) -> dict[str, dict]:
        """The whole persisted state."""
        with self._lock:
            return self._load()

    def count(self, session_id: str) -> dict:
        """Count one turn of `session_id`; returns its updated state."""
        with self._lock:
            state = self._load()
            entry = state.setdefault(session_id, {"turns": 0, "pending": 0, "runs": 0, "last_run": None})
            entry["turns"] += 1
            entry["pending"] += 1
            entry["last_turn_at"] = _now()
            self._save(state)
            return dict(entry)

    def due_sessions(self) -> list[str]:
        """Sessions that reached the threshold but whose launch has not happened (e.g. counted offline)."""
        return sorted(s for s, e in self.sessions().items() if e.get("pending", 0) >= self.every)

    def launched(self, session_id: str, run: str) -> dict:
        """Record a successful launch: the session's pending turns are now the run's to summarise."""
        with self._lock:
            state = self._load()
            entry = state.setdefault(session_id, {"turns": 0, "pending": 0, "runs": 0, "last_run": None})
            entry.update(pending=0, runs=entry.get("runs", 0) + 1, last_run=run, last_run_at=_now())
            self._save(state)
            return dict(entry)

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError:  # derived state: a damaged file restarts the counts, the jsonl records are intact
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, state: dict) -> None:
        self.ws.write_text("metadata/turns.json", json.dumps(state, indent=1, sort_keys=True))


def record_turn(
    counter: TurnCounter,
    append: Callable[[str, list[dict]], dict],
    launch: Callable[[str], str] | None,
    session_id: str,
    messages: list[dict],
    compact: bool = False,
) -> dict:
    """Append a turn, count it, and launch auto_memory when due.

    `append(session_id, messages)` writes the records (returning what it wrote); `launch(session_id)` starts
    auto_memory and returns a run id, or raises; with `launch=None` (no service) a due session waits for the
    service to start. A failed launch keeps the turns pending, so the next turn tries again.
    """
    check_session_id(session_id)
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidInput("messages must be a JSON list of message objects")
    if not messages and not compact:
        raise InvalidInput("a turn needs at least one message (or use compact to summarise now)")
    result: dict = {"session_id": session_id, "appended": 0, "launched": None}
    if messages:
        written = append(session_id, messages)
        result["appended"] = written.get("appended", len(messages)) if isinstance(written, dict) else len(messages)
        entry = counter.count(session_id)
    else:
        entry = counter.sessions().get(session_id, {"turns": 0, "pending": 0})
    if compact or entry["pending"] >= counter.every:
        if launch is None:
            result["waiting"] = "auto_memory is due; it runs when `dreamflow start` is running"
        else:
            try:
                run = launch(session_id)
            except Exception as exc:  # keep the turns pending; the next turn retries
                result["launch_error"] = f"{type(exc).__name__}: {exc}"
            else:
                entry = counter.launched(session_id, run)
                result["launched"] = run
    result.update(turns=entry["turns"], pending=entry["pending"], every=counter.every)
    return result


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
