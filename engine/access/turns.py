"""Turn counters: every N conversation turns of a session (or on `compact`), auto_memory summarises it.

A turn is appended to `session/dialog/<session_id>.jsonl` at once; the per-session counts live in
`metadata/turns.json` (under a file lock, written atomically) so counting survives restarts and is shared
by the service and an in-process CLI. `record_turn` is the one way a turn is recorded, run once per turn in the
process that owns the workspace (engine/access/client.py: a surface calls its memory's `turn`, which is `record_turn`
in this process, or the service's `POST /turn`, where the service runs it); launching the auto_memory run is the
service's `launch` function. What has been summarised is auto_memory's own per-session checkpoint, so a
lost or failed launch loses nothing: the next launch for that session picks up every unsummarised record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from engine.config.settings import Settings
from storage.errors import InvalidInput
from storage.files.dialog import append_messages
from storage.files.locks import FileLock
from storage.files.workspace import Workspace, check_session_id

TURN_ID_CHARS = 200


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
        self.lock = FileLock(ws.metadata / "turns.lock")  # re-entrant: record_turn holds it around a turn

    def sessions(self) -> dict[str, dict]:
        """The whole persisted state."""
        with self.lock:
            return self._load()

    def count(self, session_id: str, turn_id: str | None = None) -> dict:
        """Count one turn of `session_id` (not again when `turn_id` is the last one counted); returns its
        updated state."""
        with self.lock:
            state = self._load()
            entry = state.setdefault(session_id, {"turns": 0, "pending": 0, "runs": 0, "last_run": None})
            if turn_id is not None and entry.get("last_turn_id") == turn_id:
                return dict(entry)
            if turn_id is not None:
                entry["last_turn_id"] = turn_id
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
        with self.lock:
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
    workspace: str | Path,
    session_id: str,
    messages: list[dict] | None = None,
    compact: bool = False,
    turn_id: str | None = None,
    *,
    memory: Any = None,
    counter: TurnCounter | None = None,
    launch: Callable[[str], str] | None = None,
) -> dict:
    """Record a conversation turn in `session/dialog/<session_id>.jsonl`, count it, and launch auto_memory when
    due, in this process: what a memory's `turn` runs where the workspace is open (engine/access/client.py), so it runs
    once per turn whatever the surface (CLI `turn`, the Claude Code hook, MCP, `POST /turn`, Python).

    `memory`: the workspace's in-process memory (default: opened here; with a service running, call
    `engine.access.client.open_memory(workspace).turn(...)` instead, which reaches it). The service passes its open
    `memory`, its `counter` and `launch(session_id)`, which starts auto_memory and returns a run id, or raises; a
    failed launch keeps the turns pending, so the next turn tries again. Without `launch` a due session waits
    for the service to start. `compact` asks for the session's summary now.

    Messages with an `id` already among the session's last records are not appended again. With a `turn_id`
    (a caller that may deliver a turn again, e.g. after being killed) the turn is recorded once: append and
    count run under the counter's lock, and the turn is counted only when it holds a user message and its id
    is not the last one counted; sending the same id again with more messages (the rest of an answer)
    appends just those.
    """
    if memory is None:
        from storage.memory import Memory, recover

        memory = Memory(workspace)
        recover(memory)
    counter = counter or TurnCounter(memory.ws, Settings().turns_per_summary)
    check_session_id(session_id)
    messages = [] if messages is None else messages
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidInput("messages must be a JSON list of message objects")
    if not messages and not compact:
        raise InvalidInput("a turn needs at least one message (or use compact to summarise now)")
    if turn_id is not None and (not isinstance(turn_id, str) or not 0 < len(turn_id) <= TURN_ID_CHARS):
        raise InvalidInput(f"turn_id must be a string of 1-{TURN_ID_CHARS} characters")
    result: dict = {"session_id": session_id, "appended": 0, "launched": None}
    with counter.lock if turn_id is not None else nullcontext():  # a retried turn waits for the first try
        if messages:
            added = append_messages(memory, session_id, messages)
            result.update(appended=added["appended"], redacted=added["redacted"], private=added["private"])
        if messages and (turn_id is None or any(m.get("role") == "user" for m in messages)):
            entry = counter.count(session_id, turn_id)
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
