"""Where MCP tool calls go: the workspaces to call, and the job tools (turn, dream, auto_memory, job_status).

The job tools' parameters come from the jobs' declarations (engine/jobs.py: `turn` from `TURN`, `dream` and
`auto_memory` from their flows), as the operations' come from `engine.ops`; `job_status` and `workspaces` are
methods of `Target` whose signatures and docstrings are their schemas. A call runs on `target.scoped(grant, workspace)`: the caller's grant
(engine/config/grants.py) and the workspace it names (None: the connection's default). A concrete target is a catalog
of workspaces (engine/access/scoped.py) plus the job primitives:

- `ServiceTarget`: inside `dreamflow start` (the `/mcp` mount): the service's workspaces, turn counters and
  Prefect launches; the grant comes from the request's bearer token.
- `WorkspaceTarget`: the stdio server (`dreamflow mcp --workspace NAME`), run by the local user (every
  registered workspace), each reached as engine/access/client.py decides for this process: through the workspace's
  running service (decided again when its service.json changes, so a service started later takes over at
  once and the server never fights it for the DuckDB file), else here with short index sessions. Without a
  service turns are recorded and counted (their auto_memory run starts when the service does), while dream,
  auto_memory and job_status need the service and say so.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from engine.access import scoped
from engine.config.grants import ADMIN, Grant
from engine.jobs import TURN
from storage.errors import IndexBusy, ServiceNeeded, ServiceUnavailable


class Target:
    """The job tools, built on the catalog and the `_turn`, `_launch` and `_run_status` primitives of a subclass."""

    grant: Grant = ADMIN
    workspace: str | None = None  # the workspace the current call names (None: the default)
    default_name: str = "default"

    def scoped(self, grant: Grant, workspace: str | None) -> Target:
        """This target for one call: with the caller's grant and the workspace it names."""
        bound = copy.copy(self)
        bound.grant, bound.workspace = grant, workspace or self.workspace
        return bound

    # -- job tools (public methods: each becomes an MCP tool; docstrings are the tool descriptions)

    def turn(self, *args: Any, **kwargs: Any) -> dict:
        """Remember a conversation turn: the messages are appended to session/dialog/<session_id>.jsonl at once;
        every N turns (or with `compact`, also without messages) auto_memory summarises the session. A turn sent
        again with the same `turn_id` (a retry) is counted once and its messages are not appended twice."""
        params = TURN.bind(*args, **kwargs)
        name, _ = self.open(writes=True)
        return self._turn(name, params)

    def launch(self, job: str, params: dict) -> dict:
        """Start a run of `job` (a key of engine.jobs.JOBS) with `params`; returns at once with the run id."""
        from engine.access.turns import check_session_id

        _check_date(params.get("date"))
        if "session_id" in params:
            check_session_id(params["session_id"])
        name, _ = self.open(writes=True)
        return self._launch(name, job, {k: v for k, v in params.items() if v is not None})

    def job_status(self, run_id: str) -> dict:
        """State of a dream or auto_memory run (Prefect state, message, summary, link to the Prefect UI)."""
        return self._run_status(run_id)

    def workspaces(self) -> list[dict]:
        """The workspaces this connection may use: name, whether it is the default, which others its searches
        also read, whether it may be changed. Pass a name as `workspace` to any tool."""
        return scoped.list_workspaces(self, self.grant)

    # -- calls

    def open(self, writes: bool):
        """(name, memory) of the call's workspace, after the grant check."""
        return scoped.open_scoped(self, self.grant, self.workspace, writes)

    def call_op(self, op, args: dict) -> Any:
        return scoped.call(self, self.grant, self.workspace, op, args)

    def file_bytes(self, path: str) -> bytes:
        """A workspace file's bytes (what resources serve), by the same path rules as `read`."""
        return self.open(writes=False)[1].download_content(path)[1]  # (workspace path, bytes)

    def changed(self) -> None:
        """Called after a writing operation (the service embeds new chunks soon)."""

    def retry_elsewhere(self) -> bool:
        """After IndexBusy: True when the call should be retried because a service took the index over."""
        return False

    def retry_here(self, call):
        """After a refused connection to the service: `call()` again without it, or raise LookupError."""
        raise LookupError

    # -- primitives of a concrete target (which is also a catalog: names, serves, reads, root, memory)

    def _turn(self, name: str, params: dict) -> dict:
        raise NotImplementedError

    def _launch(self, name: str, flow: str, parameters: dict) -> dict:
        raise NotImplementedError

    def _run_status(self, run_id: str) -> dict:
        raise NotImplementedError


def _check_date(date: str | None) -> None:
    """Refuse a malformed date now, as a tool error, rather than in a run that fails later."""
    if date:
        from engine.config.days import check_date

        check_date(date)  # `today` stays as given: the run resolves it in the service's timezone


JOB_TOOLS: tuple[str, ...] = ("turn", "dream", "auto_memory", "job_status", "workspaces")  # `Job.tool`s and these
# What a host may assume about each job tool (MCP annotations besides openWorldHint, which is always false):
# turn only appends to the session's dialog; dream rewrites digest nodes and auto_memory the session's card
# (both LLM-written, so neither is idempotent); job_status and workspaces only read.
JOB_HINTS: dict[str, dict[str, bool]] = {
    "turn": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
    "dream": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    "auto_memory": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    "job_status": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    "workspaces": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
}


class ServiceTarget(Target):
    """Calls inside the running service (a `dreamflow.service.supervisor.Service`)."""

    def __init__(self, service):
        self.service = service

    @property
    def default_name(self) -> str:
        return self.service.hosts.default_name

    def names(self) -> list[str]:
        return self.service.hosts.names()

    def serves(self, name: str) -> bool:
        return self.service.hosts.serves(name)

    def reads(self, name: str) -> list[str]:
        return self.service.hosts.reads(name)

    def memory(self, name: str):
        return self.service.hosts.memory(name)

    def root(self, name: str) -> Path:
        return self.service.hosts.root(name)

    def _turn(self, name: str, params: dict) -> dict:
        return self.service.jobs.turn(**params, workspace=name)

    def _launch(self, name: str, flow: str, parameters: dict) -> dict:
        return self.service.jobs.launch(flow, parameters, workspace=name)

    def _run_status(self, run_id: str) -> dict:
        return self.service.jobs.run_status(run_id, visible=self.grant.sees)

    def changed(self) -> None:
        self.service.changed(self.workspace or scoped.default_for(self, self.grant))


class WorkspaceTarget(Target, scoped.LocalCatalog):
    """Calls from a stdio server: the registered workspaces (`LocalCatalog`), each reached as engine/access/client.py
    decides for this process (through its running service, else here)."""

    def __init__(self, default: str | Path | None = None):
        from engine.config.registry import Registry, resolve

        registry = Registry.load()
        name, root = resolve(str(default) if default is not None else None, registry=registry)
        scoped.LocalCatalog.__init__(self, name, root, registry)

    def remote(self, name: str | None = None):
        """The `RemoteMemory` of the workspace's running service, or None when this process works in it."""
        from engine.access.client import service_for

        return service_for(self.root(name or self.workspace or self.default_name))

    def _turn(self, name: str, params: dict) -> dict:
        return self.memory(name).turn(**params)

    def _launch(self, name: str, flow: str, parameters: dict) -> dict:
        return self._service(name, "start a run").launch(flow, parameters)

    def _run_status(self, run_id: str) -> dict:
        return self._service(self.workspace or self.default_name, "report a run").run_status(run_id)

    def retry_elsewhere(self) -> bool:
        return self._reopened() is not None  # the service started while we waited for the index lock

    def retry_here(self, call):
        # service.json names a live pid whose port refuses connections: a service shutting down (its API
        # stops before the file goes) or a stale file whose pid was reused. The request never reached a
        # server, so running it again where engine.access.client now decides cannot do anything twice; the index
        # lock waits for a stopping service.
        self._reopened()
        return call()

    def _reopened(self):
        """Decide again where the call's workspace is (engine.access.client.reopen): its `RemoteMemory` or None."""
        from engine.access.client import RemoteMemory, reopen

        memory = reopen(self.root(self.workspace or self.default_name))
        return memory if isinstance(memory, RemoteMemory) else None

    def _service(self, name: str, what: str):
        remote = self.remote(name)
        if remote is None:
            raise ServiceNeeded(f"no Dreamflow service runs for {self.root(name)}: start it with "
                                f"`dreamflow --workspace {self.root(name)} start` to {what}")
        return remote


def call_retrying(target: Target, call):
    """`call()`; once more when it met IndexBusy because a service took the index over meanwhile (the lock is
    taken before anything is written, so nothing happens twice), or in this process when the service's port
    refused the connection (nothing was sent)."""
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
