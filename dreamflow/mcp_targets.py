"""Where MCP tool calls go: the memory to call, and the job tools (turn, dream, auto_memory, job_status).

`Target` declares the job tools once (their signatures and docstrings become MCP tool schemas, like the
`Memory` methods do for the operations) on top of four primitives a concrete target supplies:

- `ServiceTarget`: inside `dreamflow start` (the `/mcp` mount): the service's own memory, turn counter and
  Prefect launches.
- `WorkspaceTarget`: the stdio server (`dreamflow mcp`). On every call it looks for the workspace's running
  service (metadata/service.json, a file read and a pid check) and forwards to it, so it never fights the
  service for the DuckDB file, and a service started later takes over at once. Without a service it works
  in this process with short index sessions; turns are recorded and counted (their auto_memory run starts
  when the service does), while dream, auto_memory and job_status need the service and say so.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from storage.errors import DreamflowError, IndexBusy


class ServiceNeeded(DreamflowError):
    """A job tool was called while no `dreamflow start` runs for the workspace."""

    exit_code = 8
    http_status = 503


class Target:
    """The job tools, built on `memory()`, `record_turn`, `launch` and `run_status` of a subclass."""

    # -- job tools (public methods: each becomes an MCP tool; docstrings are the tool descriptions)

    def turn(self, session_id: str, messages: list[dict[str, Any]] | None = None, compact: bool = False,
             turn_id: str | None = None) -> dict:
        """Remember a conversation turn: the messages are appended to session/dialog/<session_id>.jsonl at once;
        every N turns (or with `compact`, also without messages) auto_memory summarises the session. A turn sent
        again with the same `turn_id` (a retry) is counted once and its messages are not appended twice."""
        return self.record_turn(session_id, messages or [], compact, turn_id)

    def dream(self, date: str | None = None, hint: str | None = None, scan_days: int = 2, max_units: int = 5,
              topic_count: int = 3, topic_diversity_days: int = 7) -> dict:
        """Start a dream (auto_dream): consolidate recent daily cards into digest nodes and pick the day's
        topics. Returns at once with the run id; job_status reports its state and summary."""
        _check_date(date)
        params = {"date": date, "hint": hint, "scan_days": scan_days, "max_units": max_units,
                  "topic_count": topic_count, "topic_diversity_days": topic_diversity_days}
        return self.launch("auto_dream", {k: v for k, v in params.items() if v is not None})

    def auto_memory(self, session_id: str, date: str | None = None, hint: str | None = None) -> dict:
        """Start an auto_memory run: summarise the session's not-yet-summarised turns into its daily card now.
        Returns at once with the run id; job_status reports its state and summary."""
        from engine.turns import check_session_id

        check_session_id(session_id)
        _check_date(date)
        params = {"session_id": session_id, "date": date, "hint": hint}
        return self.launch("auto_memory", {k: v for k, v in params.items() if v is not None})

    def job_status(self, run_id: str) -> dict:
        """State of a dream or auto_memory run (Prefect state, message, summary, link to the Prefect UI)."""
        return self.run_status(run_id)

    # -- primitives

    def memory(self):
        raise NotImplementedError

    def file_bytes(self, path: str) -> bytes:
        """A workspace file's bytes (what resources serve), by the same path rules as `read`."""
        return self.memory().download_content(path)[1]  # (workspace path, bytes)

    def record_turn(self, session_id: str, messages: list[dict], compact: bool, turn_id: str | None) -> dict:
        raise NotImplementedError

    def launch(self, flow: str, parameters: dict) -> dict:
        raise NotImplementedError

    def run_status(self, run_id: str) -> dict:
        raise NotImplementedError

    def changed(self) -> None:
        """Called after a writing operation (the service embeds new chunks soon)."""

    def retry_elsewhere(self) -> bool:
        """After IndexBusy: True when the call should be retried because a service took the index over."""
        return False

    def retry_here(self, call):
        """After a refused connection to the service: `call()` again without it, or raise LookupError."""
        raise LookupError


def _check_date(date: str | None) -> None:
    """Refuse a malformed date now, as a tool error, rather than in a run that fails later."""
    if date:
        from tasks.context import check_date

        check_date(date)  # `today` stays as given: the run resolves it in the service's timezone


JOB_TOOLS: tuple[str, ...] = ("turn", "dream", "auto_memory", "job_status")
# What a host may assume about each job tool (MCP annotations besides openWorldHint, which is always false):
# turn only appends to the session's dialog; dream rewrites digest nodes and auto_memory the session's card
# (both LLM-written, so neither is idempotent); job_status only reads.
JOB_HINTS: dict[str, dict[str, bool]] = {
    "turn": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "dream": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    "auto_memory": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    "job_status": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
}


class ServiceTarget(Target):
    """Calls inside the running service (a `dreamflow.service.Service`)."""

    def __init__(self, service):
        self.service = service

    def memory(self):
        return self.service.memory

    def record_turn(self, session_id: str, messages: list[dict], compact: bool, turn_id: str | None) -> dict:
        return self.service.record_turn(session_id, messages, compact, turn_id)

    def launch(self, flow: str, parameters: dict) -> dict:
        return self.service.launch(flow, parameters)

    def run_status(self, run_id: str) -> dict:
        return self.service.run_status(run_id)

    def changed(self) -> None:
        self.service.changed()


class WorkspaceTarget(Target):
    """Calls from a stdio server: through the workspace's running service when there is one, else here."""

    def __init__(self, workspace: str | Path):
        self.root = Path(workspace)
        self._remote = None
        self._local = None
        self._bypass = threading.local()  # `active` while a call runs here because the service refused it

    def remote(self):
        """The service's `RemoteMemory`, or None when no service runs for the workspace."""
        from engine.client import RemoteMemory, service_info
        from engine.settings import Settings

        info = service_info(self.root)
        if info is None or getattr(self._bypass, "active", False):
            return None
        if self._remote is None or self._remote.url != info["url"].rstrip("/"):
            self._remote = RemoteMemory(info["url"], token=Settings().api_token)
        return self._remote

    def memory(self):
        remote = self.remote()
        if remote is not None:
            return remote
        if self._local is None:
            from engine.client import local_memory

            self._local = local_memory(self.root)
        return self._local

    def record_turn(self, session_id: str, messages: list[dict], compact: bool, turn_id: str | None) -> dict:
        remote = self.remote()
        if remote is not None:
            return remote.turn(session_id, messages, compact, turn_id)
        from dreamflow.service import record_turn  # in-process: counted; a due run waits for the service

        return record_turn(self.root, session_id, messages, compact, turn_id)

    def launch(self, flow: str, parameters: dict) -> dict:
        return self._service("start a run").launch(flow, parameters)

    def run_status(self, run_id: str) -> dict:
        return self._service("report a run").run_status(run_id)

    def retry_elsewhere(self) -> bool:
        return self.remote() is not None  # the service started while we waited for the index lock

    def retry_here(self, call):
        # service.json names a live pid whose port refuses connections: a service shutting down (its API
        # stops before the file goes) or a stale file whose pid was reused. The request never reached a
        # server, so running it here cannot do anything twice; the index lock waits for a stopping service.
        self._bypass.active = True
        try:
            return call()
        finally:
            self._bypass.active = False

    def _service(self, what: str):
        remote = self.remote()
        if remote is None:
            raise ServiceNeeded(f"no Dreamflow service runs for {self.root}: start it with "
                                f"`dreamflow --workspace {self.root} start` to {what}")
        return remote


def call_retrying(target: Target, call):
    """`call()`; once more when it met IndexBusy because a service took the index over meanwhile (the lock is
    taken before anything is written, so nothing happens twice), or in this process when the service's port
    refused the connection (nothing was sent)."""
    from engine.client import ServiceUnavailable

    try:
        return call()
    except IndexBusy:
        if not target.retry_elsewhere():
            raise
        return call()
    except ServiceUnavailable as exc:
        if not isinstance(exc.__cause__, ConnectionRefusedError):
            raise  # a timeout or a dropped request may have been applied: say so rather than repeat it
        try:
            return target.retry_here(call)
        except LookupError:
            raise exc from None
