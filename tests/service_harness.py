"""A real `dreamflow start` in a subprocess for tests and benchmarks, and a small reader of its Prefect API.

`RunningService.start(root, ...)` launches the console script on free ports over `root/ws` with
`DREAMFLOW_HOME=root/home` (so the Prefect server's database lands there), waits until `/health` says ready,
and gives a `RemoteMemory`. Prefect is read over its REST API with httpx, so the test process never imports
prefect settings that other tests' harnesses use. Every wait is a bounded poll that fails with a message.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from engine.access.client import RemoteMemory

DREAMFLOW = str(Path(sys.executable).with_name("dreamflow"))
# Prefect's settings for a service's own server: no test reads Prefect's block types, whose registration is ~1 s
# of each server's start. Its scheduler keeps Prefect's 60 s loop: the service plans a nightly run when it
# registers the deployment (deployments/runner.py); a 2 s loop here cost an idle service 20% more CPU.
PREFECT_SETTINGS = {"PREFECT_API_BLOCKS_REGISTER_ON_START": "false"}
SERVICE_TURNS = 3  # turns per auto_memory run in the shared test service (conftest `dreamflow_service`)


# The tests' own HTTP calls to the services and Prefect servers they start (all http:// on 127.0.0.1). Not
# `httpx.get(...)`: that makes a client per call, and every httpx client parses certifi's ~150 certificates
# (~20 ms of CPU) even for plain http; polled every 0.2 s while a service starts, that was ~5% of the suite's
# CPU. No keep-alive: a service restarted on the same port gets a fresh connection.
loopback = httpx.Client(timeout=20, limits=httpx.Limits(max_keepalive_connections=0))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadedServer:
    """An ASGI app served by uvicorn on 127.0.0.1 in a daemon thread (`url`, `port`; `stop()`)."""

    def __init__(self, app, **config):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start within 10 s"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll `predicate` until it returns a truthy value (returned) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def register(root: Path, admin: str, folders: dict[str, Path], tokens: dict[str, tuple[list[str], bool]],
             reads: dict[str, list[str]] | None = None,
             settings: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """Register `folders` (name -> folder; `reads` and `settings` by name as `Registry.add` takes them) and create
    `tokens` (name -> (workspaces, read-only)) in `root/home`, the Dreamflow home of `RunningService.start(root,
    token=admin)`; returns {token name: secret}, the admin's as `admin`. Done in this process: the `workspace add`
    and `token create` commands have their own tests."""
    import pytest

    from engine.config import grants
    from engine.config.registry import Registry

    secrets = {"admin": admin}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DREAMFLOW_HOME", str(root / "home"))
        env.setenv("DREAMFLOW_API_TOKEN", admin)
        registry = Registry.load()
        for name, folder in folders.items():
            registry.add(name, folder, reads=(reads or {}).get(name), settings=(settings or {}).get(name))
        registry.save()
        for name, (granted, read_only) in tokens.items():
            secrets[name] = grants.create(name, sorted(granted), read_only)
    return secrets


def seed_prefect_database(database: Path) -> None:
    """Give a Prefect server that is about to start on SQLite file `database` for the first time a copy of an
    empty, migrated database, so it skips Prefect's migrations (~4.5 of a fresh server's ~8 CPU-s). The copy is
    made once per test session (all xdist workers; `DREAMFLOW_TEST_PREFECT_TEMPLATE`, tests/conftest.py) by
    `prefect server database upgrade`; without that variable, or once the database exists, nothing changes."""
    folder = os.environ.get("DREAMFLOW_TEST_PREFECT_TEMPLATE")
    if not folder or database.exists():
        return
    template = Path(folder) / "prefect.db"
    with open(Path(folder) / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker migrates, the other waits for it
        if not template.exists():
            build = Path(folder) / "build"
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            done = subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
                                  env={**env, "PREFECT_HOME": str(build)}, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, f"prefect server database upgrade:\n{done.stdout}\n{done.stderr}"
            os.replace(build / "prefect.db", template)
    database.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, database)


class RunningService:
    """One `dreamflow start` process; `stop()` sends SIGTERM and returns the exit code."""

    def __init__(self, root: Path, env: dict, args: list[str], token: str | None):
        self.root = root
        self.workspace = root / "ws"
        self.home = root / "home"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.args = args
        self.token = token
        self.log_path = root / f"service-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.prefect_api: str | None = None
        self.prefect_auth: tuple[str, str] | None = None  # basic auth of a token-protected Prefect server

    @classmethod
    def start(cls, root: Path, llm=None, turns: int = 10, prefect_api: str | None = None, runner: bool = True,
              token: str | None = None, env: dict | None = None, timeout: float = 300,
              serve: tuple[str, ...] = ()) -> RunningService:
        extra, env = env or {}, {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "PREFECT_HOME"))}
        env.update(DREAMFLOW_HOME=str(root / "home"), DREAMFLOW_EMBEDDER="none",
                   DREAMFLOW_TURNS_PER_SUMMARY=str(turns), PYTHONUNBUFFERED="1", **PREFECT_SETTINGS)
        env.pop("DREAMFLOW_API_TOKEN", None)
        if token:
            env["DREAMFLOW_API_TOKEN"] = token
        if llm is not None:
            env.update(DREAMFLOW_LLM_BASE_URL=llm.base_url, DREAMFLOW_LLM_MODEL=llm.model,
                       DREAMFLOW_LLM_API_KEY="test-key", DREAMFLOW_LLM_TIMEOUT="20", DREAMFLOW_LLM_MAX_RETRIES="0")
        env.update(extra)
        args = []
        if prefect_api:
            args += ["--prefect-api", prefect_api]
        else:
            args += ["--prefect-port", str(free_port())]
            seed_prefect_database(Path(env["DREAMFLOW_HOME"]) / "prefect/prefect.db")  # the service's Prefect home
        if not runner:
            args.append("--no-runner")
        for name in serve:
            args += ["--serve", name]
        service = cls(root, env, args, token)
        service.launch(timeout)
        return service

    def launch(self, timeout: float = 300) -> None:
        """Start the process (again, after a stop or kill) and wait until it is ready."""
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [DREAMFLOW, "--workspace", str(self.workspace), "start", "--port", str(self.port), *self.args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log.close()
        try:
            wait_for(self._ready, timeout, f"the service to be ready (log: {self.log_path})", interval=0.2)
        except BaseException:
            self.stop(timeout=30)  # a service that never got ready must not outlive its test (nor its Prefect server)
            raise
        info = json.loads((self.workspace / "metadata/service.json").read_text())
        self.prefect_api = info["prefect_api"]
        self.prefect_auth = ("dreamflow", self.token) if info.get("prefect_auth") else None

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"dreamflow start exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
        try:
            resp = loopback.get(f"{self.url}/health", headers=self.headers, timeout=2)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200 and resp.json().get("ready")

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def memory(self) -> RemoteMemory:
        return RemoteMemory(self.url, token=self.token)

    def log(self) -> str:
        """The whole log (checks look for the start banner as well as the latest lines)."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"dreamflow start did not stop within {timeout} s of SIGTERM:\n{self.log()[-4000:]}")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    # -- the Prefect API, read over REST

    def prefect(self, method: str, path: str, body: dict | None = None):
        """One Prefect API call; a 503 (its SQLite database was locked) is retried, as Prefect's own client does."""
        for attempt in range(6):
            resp = loopback.request(method, f"{self.prefect_api}{path}", json=body, auth=self.prefect_auth, timeout=20)
            if resp.status_code != 503:
                break
            time.sleep(1 + attempt)
        resp.raise_for_status()
        return resp.json() if resp.content else None

    def deployment(self, full_name: str) -> dict:
        return self.prefect("GET", f"/deployments/name/{full_name}")

    def flow_runs(self, full_name: str) -> list[dict]:
        """Runs of deployment `flow/deployment`, oldest first."""
        deployment = self.deployment(full_name)
        return self.prefect("POST", "/flow_runs/filter", {
            "deployments": {"id": {"any_": [deployment["id"]]}},
            "sort": "EXPECTED_START_TIME_ASC", "limit": 200,
        })


class PrefectServer:
    """`prefect server start` on a free loopback port, its database under `root/prefect` (`api`, `stop()`): one
    Prefect server that several services (`--prefect-api`) and workers share."""

    def __init__(self, root: Path):
        from engine.config.prefect_env import DEFAULTS

        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        self.env.update(DEFAULTS, PREFECT_HOME=str(root / "prefect"), PREFECT_SERVER_LOGGING_LEVEL="WARNING")
        self.log_path = root / f"prefect-{self.port}.log"
        seed_prefect_database(root / "prefect/prefect.db")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait(self, timeout: float = 150) -> PrefectServer:
        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"prefect server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                return loopback.get(f"{self.api}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, timeout, f"the Prefect server to answer (log: {self.log_path})", interval=0.3)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self, timeout: float = 30) -> None:
        stop_process(self.proc, timeout)


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds (a `prefect worker` may not exit on one SIGTERM)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
