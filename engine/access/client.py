"""The one client seam: how a process reaches a workspace's memory. Every surface (CLI, hooks, stdio MCP) and
every job gets its memory from `open_memory(workspace)` and nowhere else.

The rule, decided once per process and workspace (the first `open_memory` call; later calls get the same object):

- the process that owns the workspace's index works in it in-process: the service for the workspaces it hosts
  (`local_memory(keep_open=True)` claims them), and any process when no service runs for the workspace;
- every other process, while `dreamflow start` runs for the workspace (its `metadata/service.json` names a live
  pid that answers), talks to that service over HTTP (`RemoteMemory`), since DuckDB lets one process open the
  index: the CLI, the hook, the stdio MCP server, and a Prefect worker's flow run. The service's own runner runs
  its flows in the service's process (deployments/runner.py): they get its memory. A process never talks over
  HTTP to itself.

Both objects have the same interface: every `engine.ops` operation, with the same JSON-ready values and the same
`DreamflowError` classes, and `turn` (engine.access.turns.record_turn, run once: here, or by the service). The choice is
made again only when the workspace's service.json changes (a service started or stopped: one stat per call), or
when it proved wrong (`reopen`): after `IndexBusy` (a service took the index over meanwhile) or a refused
connection (the service went away). This module stays import-light (stdlib http.client, no
httpx/pydantic).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from engine.config.settings import Settings
from storage.errors import DreamflowError, RemoteError, ServiceUnavailable
from storage.files.workspace import pid_alive

SERVICE_FILE = "metadata/service.json"


_chosen: dict[Path, tuple[Any, Any]] = {}  # workspace folder -> (service.json's stamp, this process's memory)
_choosing = threading.Lock()


def open_memory(workspace: str | os.PathLike[str] | None = None, *, timeout: float = 600.0, check: bool = True):
    """The memory of the workspace folder `workspace` (default: `DREAMFLOW_WORKSPACE` or the registry's choice,
    engine.config.registry.resolve), by the module's rule: the same object while the workspace's service.json stays
    as it was. A `RemoteMemory` made now waits `timeout` seconds for each answer; `check=False` takes the service
    service.json names without asking its health first (the hook: its one request says if it answers)."""
    if workspace is None:
        from engine.config.registry import resolve

        workspace = resolve()[1]
    key = Path(workspace).absolute()
    stamp = _stamp(key)
    with _choosing:
        stamped, chosen = _chosen.get(key, (None, None))
        if chosen is None or (stamped != stamp and not _owned(chosen)):
            chosen = connect(key, timeout, check) or local_memory(key)
            _chosen[key] = (stamp, chosen)
        return chosen


def service_for(workspace: str | os.PathLike[str]) -> RemoteMemory | None:
    """The running service this process talks to for `workspace` (`open_memory`'s choice), or None when it
    works in the workspace itself: what decides whether a job runs as the service's deployment run."""
    memory = open_memory(workspace)
    return memory if isinstance(memory, RemoteMemory) else None


def reopen(workspace: str | os.PathLike[str]):
    """Decide again for `workspace` when the choice proved wrong (the module docstring) and return the memory
    now chosen; a workspace this process owns (the service's) stays as it is."""
    key = Path(workspace).absolute()
    with _choosing:
        if not _owned(_chosen.get(key, (None, None))[1]):
            _chosen.pop(key, None)
    return open_memory(key)


def _owned(memory) -> bool:
    """Whether `memory` is one this process holds the index of for good (the service's, `keep_open`)."""
    return getattr(memory, "watched", False) is True


def _stamp(root: Path):
    """What says service.json changed (a service started or stopped): its mtime and size, None without it."""
    try:
        st = (root / SERVICE_FILE).stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def local_memory(workspace: str | os.PathLike[str], keep_open: bool = False):
    """An in-process memory (`InProcess`), opened for writing (`storage.memory.recover`: what a killed process
    left is finished first); `keep_open=True` holds the index for the life of the process and claims the
    workspace for this process (the service only: its watcher keeps the index up to date, so its reads never
    look at the files first). Without it, each read first indexes what changed on disk, within
    `DREAMFLOW_CATCH_UP_SECONDS` (storage/index/freshness.py)."""
    from storage.memory import recover

    if not keep_open:
        from engine.models.semantic import attach

        memory = _in_process()(workspace)
        recover(memory)
        attach(memory)  # vector search in-process only with DREAMFLOW_CLI_VECTORS=1 (the service always has it)
        return memory
    from storage.index.db import IndexDB
    from storage.files.workspace import Workspace

    memory = _in_process()(workspace, db=IndexDB(Workspace(workspace), keep_open=True), watched=True)
    recover(memory)
    with _choosing:
        _chosen[Path(workspace).absolute()] = (None, memory)
    return memory


def release(memory) -> None:
    """Forget the service's claim on `memory`'s workspace (its hosting closed it)."""
    with _choosing:
        for key, (_, chosen) in list(_chosen.items()):
            if chosen is memory:
                del _chosen[key]


@functools.cache
def _in_process() -> type:
    """`InProcess`: a `storage.memory.Memory` with `turn`, as `RemoteMemory` has (built on first use, so a
    process talking to the service never imports the index)."""
    from storage.memory import Memory

    class InProcess(Memory):
        """The workspace's memory in this process (`local_memory`)."""

        def turn(self, *args: Any, **kwargs: Any) -> dict:
            """Record a conversation turn here (engine.access.turns.record_turn: `engine.jobs.TURN`'s arguments); a due
            auto_memory waits for the service."""
            from engine.access.turns import record_turn

            return record_turn(self.ws.root, *args, memory=self, **kwargs)

    return InProcess


def service_info(workspace: str | os.PathLike[str]) -> dict | None:
    """`metadata/service.json` of the workspace when it names a live process, else None. The pid is checked
    only for a service of this machine (`host`); one of another machine sharing the folder is asked instead
    (`connect`: its health)."""
    try:
        info = json.loads((Path(workspace) / SERVICE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("pid"), int):
        return None
    if info.get("host", socket.gethostname()) == socket.gethostname() and not pid_alive(info["pid"]):
        return None
    return info


def connect(workspace: str | os.PathLike[str], timeout: float = 600.0, check: bool = True) -> RemoteMemory | None:
    """A `RemoteMemory` for the workspace's running service (waiting at most `timeout` seconds for each
    answer), or None when no service answers. `check=False`: for the service service.json names, without
    asking its health first (a caller making one request learns from it whether the service answers)."""
    info = service_info(workspace)
    if info is None:
        return None
    remote = RemoteMemory(info["url"], token=Settings().api_token, workspace=info.get("name"), root=Path(workspace),
                          timeout=timeout)
    if not check:
        return remote
    try:
        remote.health()
    except ServiceUnavailable:  # a stale file whose pid was reused, or a service shutting down
        return None
    except DreamflowError:  # it answered (e.g. 401 without a token): the service is there
        pass
    return remote


class RemoteMemory:
    """The running service's memory over HTTP: each `Memory` operation is a method with the same signature
    (callback parameters such as `progress` left out; `workspaces` added where an operation reads across
    workspaces) posting to `/workspaces/<workspace>/ops/<name>` (`/ops/<name>`: the service's default); plus
    `turn`, `launch`, `status` and `health`. One keep-alive connection per thread."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 600.0, workspace: str | None = None,
                 root: Path | None = None):
        parts = urlsplit(url)
        self.url = url.rstrip("/")
        self.workspace = workspace  # the served workspace's name; None: the service's default
        self.scope = f"/workspaces/{quote(workspace, safe='')}" if workspace else ""
        self.root = root  # the workspace's folder when it is on this machine (downloads never land in its metadata/)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._token = token
        self._timeout = timeout
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"RemoteMemory({self.url!r}, workspace={self.workspace!r})"

    def __getattr__(self, name: str):
        from engine import ops

        op = next((o for o in ops.OPS if o.method_name == name), None)
        if op is None:
            raise AttributeError(f"{type(self).__name__} has no operation {name!r}")
        method = _remote_method(self, op)
        setattr(self, name, method)  # build once per instance
        return method

    # -- operations that name files on this machine: the bytes travel, never the path

    def upload(self, source: str, name: str | None = None, date: str | None = None, overwrite: bool = False) -> dict:
        """Copy a file of this machine into resource/[DATE/] of the service's workspace."""
        from storage.files.outside import read_source

        data, source_name = read_source(source)
        payload = {"content": base64.b64encode(data).decode("ascii"), "name": name or source_name,
                   "date": date, "overwrite": overwrite}
        result = self.request("POST", f"{self.scope}/ops/upload", payload)
        return {**result, "source": str(Path(source).expanduser().resolve())}

    def download(self, path: str, dest: str, overwrite: bool = False) -> dict:
        """Copy a workspace file of the service to `dest` on this machine (see `Memory.download`)."""
        from storage.files.outside import save

        rel, data = self.download_content(path)
        out = save(data, dest, rel.rsplit("/", 1)[-1], overwrite, self._served_root())
        return {"path": rel, "dest": str(out.resolve()), "bytes": len(data)}

    def _served_root(self) -> Path | None:
        """The workspace's folder (to keep downloads out of its metadata/): known from service.json, else what
        the service tells an admin caller (`GET /workspaces`); None when it tells nothing."""
        if self.root is None:
            rows = self.request("GET", "/workspaces")
            row = next((r for r in rows if (r["name"] == self.workspace if self.workspace else r["default"])), None)
            self.root = Path(row["path"]) if row and row.get("path") else None
        return self.root

    def download_content(self, path: str) -> tuple[str, bytes]:
        """(workspace path, bytes) of a file of the service's workspace, as `Memory.download_content`."""
        data, headers = self.request("POST", f"{self.scope}/ops/download", {"path": path}, raw=True)
        return unquote(headers.get("X-Dreamflow-Path") or path), data

    # -- routes beyond the operations

    def health(self) -> dict:
        return self.request("GET", "/health")

    def status(self) -> dict:
        """What the service runs, index size, turn counters, last/next dream, runs in progress."""
        return self.request("GET", f"{self.scope}/status")

    def turn(self, *args: Any, **kwargs: Any) -> dict:
        """Record a conversation turn (`engine.jobs.TURN`: record_turn's arguments; the service counts it and
        launches auto_memory when due)."""
        from engine.jobs import TURN

        return self.request("POST", f"{self.scope}/turn", TURN.bind(*args, **kwargs))

    def launch(self, flow: str, parameters: dict | None = None) -> dict:
        """Start a run of a flow's deployment: `{id, name, deployment, state}`."""
        return self.request("POST", f"{self.scope}/flows/{flow}", parameters or {})

    def run_status(self, run_id: str) -> dict:
        """A flow run's state and, once finished, its summary (`GET /flows/runs/{run_id}`)."""
        return self.request("GET", f"/flows/runs/{quote(str(run_id), safe='')}")

    def run_logs(self, run_id: str, offset: int = 0) -> list[dict]:
        """A flow run's log lines from `offset` on."""
        return self.request("GET", f"/flows/runs/{quote(str(run_id), safe='')}/logs?offset={int(offset)}")

    # -- transport

    def request(self, method: str, path: str, payload: Any = None, raw: bool = False) -> Any:
        """Send one request; return the decoded JSON (with `raw`: the body's bytes and the headers) or raise
        the error the service reported."""
        import http.client  # imported on first use: in-process CLI calls never need it (~15 ms)

        body = None if payload is None else json.dumps(payload, ensure_ascii=False, default=str).encode()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except ConnectionRefusedError as exc:
                self._local.conn = None
                raise ServiceUnavailable(f"the Dreamflow service at {self.url} does not answer ({exc})") from exc
            except TimeoutError as exc:
                self._local.conn = None
                raise ServiceUnavailable(f"the Dreamflow service at {self.url} did not answer within "
                                         f"{self._timeout:.0f} s") from exc
            except (http.client.HTTPException, OSError) as exc:
                self._local.conn = None  # a dropped keep-alive connection: retry once on a fresh one
                if attempt == 2:
                    raise ServiceUnavailable(f"the Dreamflow service at {self.url} dropped the request ({exc})") from exc
        if resp.status >= 400:
            raise _error_from(resp.status, json.loads(data) if data else None)
        if raw:
            return data, resp.headers
        return json.loads(data) if data else None

    def _connection(self) -> http.client.HTTPConnection:
        import http.client

        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
        return conn


def _remote_method(remote: RemoteMemory, op):
    """A callable with the signature of `Memory.<op>` (without self/callbacks) that calls the service."""
    import inspect

    from engine import ops

    params = ops.surface_parameters(op)
    signature = inspect.Signature([
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p.default, annotation=p.annotation)
        for p in params
    ])
    def call(*args, **kwargs):
        return remote.request("POST", f"{remote.scope}/ops/{op.name}", dict(signature.bind(*args, **kwargs).arguments))

    call.__name__ = op.method_name
    call.__doc__ = op.help
    call.__signature__ = signature
    return call


def _error_classes() -> dict[str, type[DreamflowError]]:
    found, todo = {}, [DreamflowError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def _error_from(status: int, body: Any) -> DreamflowError:
    """The DreamflowError the service reported (same class, message and exit code when known here)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return RemoteError(f"the service answered HTTP {status}: {body!r}", http_status=status)
    return error_from_detail(error, status)


def error_from_detail(error: dict, status: int = 500) -> DreamflowError:
    """The DreamflowError an `{type, message, exit_code}` detail describes (its class when known here, else a
    RemoteError keeping the exit code)."""
    message, exit_code = str(error.get("message", "")), int(error.get("exit_code") or 1)
    cls = _error_classes().get(str(error.get("type")))
    if cls is not None and cls is not RemoteError and cls.exit_code == exit_code:
        try:
            return cls(message)
        except TypeError:  # a subclass with a different constructor
            pass
    return RemoteError(message, exit_code=exit_code, http_status=status)
