"""`dreamflow start`: the one process that owns a workspace's index while it runs, and keeps memory alive.

    this process   index owner (IndexDB keep_open), HTTP API (uvicorn thread), watcher, turn counter
    child          `prefect server start` on 127.0.0.1, PREFECT_HOME under the Dreamflow home
                   (skipped when --prefect-api / PREFECT_API_URL names a running server); with
                   DREAMFLOW_API_TOKEN its API requires basic auth `dreamflow:<token>` (engine.prefect_env);
                   CORS only for its own UI's origins, so no other site's page can script its API
    child          `python -m deployments.serve`: the runner; each flow run is a subprocess of it that reaches
                   memory through this service's API (`engine.client.open_memory` reads service.json)

Children die with the service (Linux PR_SET_PDEATHSIG), a crashed child is restarted (up to 3 times in 10
minutes) and otherwise the service stops with exit code 8 and the child's last log lines. Ctrl-C/SIGTERM stop
everything in order: watcher (pending changes indexed), runner, API, Prefect server. Prefect is imported only
inside the running service, never by the CLI commands that merely talk to it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.client import SERVICE_FILE, read_all, service_info
from engine.settings import Settings, dreamflow_home
from storage.errors import DreamflowError
from storage.workspace import Workspace

DEFAULT_PORT = 8420
DEFAULT_PREFECT_PORT = 4200
RESTARTS_ALLOWED = 3  # per child within RESTART_WINDOW
RESTART_WINDOW = 600.0
LOG_ROTATE_BYTES = 10_000_000  # a child's log moves to <name>.1 at start when bigger than this
BULK_CHANGES = 200  # more changed files than this in one batch (a git checkout, an unzip): reconcile instead
PREFECT_START_TIMEOUT = float(os.environ.get("DREAMFLOW_PREFECT_START_TIMEOUT", "120"))

# Exec'd in front of every child: die when the service dies, even by kill -9 (Linux; elsewhere a no-op).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class ServiceError(DreamflowError):
    """The service cannot start or keep running (port taken, a child keeps crashing, already running)."""

    exit_code = 8
    http_status = 503


# ---- supervised children ---------------------------------------------------------------------------------

class Child:
    """A supervised subprocess with its own session (Ctrl-C reaches only the service) and a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path):
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_path
        self.proc: subprocess.Popen | None = None
        self.restarts: list[float] = []

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.log_path.exists() and self.log_path.stat().st_size > LOG_ROTATE_BYTES:
            self.log_path.replace(self.log_path.with_name(self.log_path.name + ".1"))
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *self.argv],
                env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exit_code(self) -> int | None:
        """None while running, else the exit code."""
        return None if self.proc is None else self.proc.poll()

    def may_restart(self) -> bool:
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW]
        if len(self.restarts) >= RESTARTS_ALLOWED:
            return False
        self.restarts.append(now)
        return True

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when GET `url` answers 200."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


# ---- the service -----------------------------------------------------------------------------------------

@dataclass
class Options:
    """What `dreamflow start` was asked for."""

    workspace: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    prefect_api: str | None = None  # an existing Prefect API; None starts our own server
    prefect_port: int = DEFAULT_PREFECT_PORT
    runner: bool = True  # serve the deployments here (False when workers run them, see docs/service.md)
    settings: Settings = field(default_factory=Settings)


class Service:
    """Start, supervise and stop everything `dreamflow start` runs (see the module docstring)."""

    def __init__(self, options: Options, say: Callable[[str], None] = lambda text: print(text, flush=True)):
        self.options = options
        self.settings = options.settings
        self.say = say
        self.ws = Workspace(options.workspace)
        self.home = dreamflow_home()
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.ready = threading.Event()  # everything started (the API answers before: see start())
        self.prefect_ready = threading.Event()
        self.started_at = time.time()
        self.url = f"http://{options.host}:{options.port}"
        self.prefect_api: str | None = None
        self.prefect_auth: str | None = None  # basic-auth string of the Prefect server started here, if any
        self.ui_url: str | None = None
        self.memory = None
        self.backfiller = None  # embeds new chunks in the background (engine.semantic)
        self.turns = None
        self.watcher = None
        self._api_server = None
        self._api_thread: threading.Thread | None = None
        self._lock = None
        self.warnings: list[str] = []  # shown at start and in `status`

    # -- lifecycle

    def run(self) -> int:
        """Start everything, supervise until Ctrl-C/SIGTERM or a fatal crash; returns the exit code."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        code, failure = 0, None
        try:
            self.start()
            self.supervise()
        except DreamflowError as exc:
            code, failure = exc.exit_code, str(exc)
        except KeyboardInterrupt:
            code = 130
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if failure:
            self.say(f"dreamflow: {failure}")
        return code

    def _on_signal(self, signum, frame) -> None:
        if self.stopping.is_set():  # second Ctrl-C: stop waiting politely
            raise KeyboardInterrupt
        self.say("\nStopping Dreamflow...")
        self.stopping.set()

    def start(self) -> None:
        from filelock import FileLock, Timeout

        from engine import prefect_env

        prefect_env.configure()  # before anything imports prefect; children inherit the environment
        opts = self.options
        self._lock = FileLock(str(self.ws.metadata / "service.lock"))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            info = service_info(self.ws.root) or {}
            raise ServiceError(
                f"a Dreamflow service already runs for {self.ws.root}"
                + (f" (pid {info['pid']}, {info['url']})" if info else "")
            ) from None
        if not port_free(opts.host, opts.port):
            raise ServiceError(f"port {opts.port} on {opts.host} is in use: pick another with --port")
        self._start_prefect()
        self._open_index()
        self._start_watcher()
        self._start_api()
        self._write_service_file()
        self.say(f"Workspace   {self.ws.root}")
        self.say(f"API         {self.url}   (docs: {self.url}/docs)")
        self.say(f"Logs        {self.home / 'logs'}   (a job run's log: in the Prefect UI)")
        self._check_install()
        self._reconcile()
        self._wait_for_prefect()
        if opts.runner:
            self._start_runner()
        self._launch_due_turns()
        self._catch_up_resources()
        self.say(f"Prefect UI  {self.ui_url}")
        self.say("Dreamflow is running. Ctrl-C to stop.")
        self.ready.set()

    def _check_install(self) -> None:
        """Warn about a set-up that starts but fails later (no LLM for the jobs that need one) or wastes the
        machine (a CUDA torch without a GPU)."""
        from engine.torch_check import torch_warning

        for warning in (llm_warning(self.settings, "where `dreamflow start` runs, then restart it"),
                        torch_warning()):
            if warning:
                self.warnings.append(warning)
                self.say(f"WARNING: {warning}")

    def supervise(self) -> None:
        """Watch the children until asked to stop; restart a crashed one or give up with a clear message."""
        while not self.stopping.wait(0.5):
            if self._api_thread is not None and not self._api_thread.is_alive():
                raise ServiceError("the HTTP API stopped unexpectedly")
            for child in self.children:
                code = child.exit_code()
                if code is None:
                    continue
                if not child.may_restart():
                    raise ServiceError(
                        f"{child.name} exited with code {code} and crashed {RESTARTS_ALLOWED} times in "
                        f"{RESTART_WINDOW / 60:.0f} minutes; giving up. Last lines of {child.log_path}:\n"
                        f"{child.tail()}"
                    )
                self.say(f"{child.name} exited with code {code}; restarting it (log: {child.log_path})")
                child.start()

    def stop(self) -> None:
        """Stop in dependency order; safe to call after a partial start."""
        self.stopping.set()
        if self.watcher is not None:
            self.watcher.stop()  # index what is pending, emit pending resource events
        runner = self._child("runner")
        if runner is not None:  # first: it pauses its schedules through the Prefect server
            runner.stop()
        if self.prefect_ready.is_set():
            try:
                from deployments.launch import flush_events

                flush_events()
            except Exception:
                pass
        if self._api_server is not None:
            self._api_server.should_exit = True
            if self._api_thread is not None:
                self._api_thread.join(timeout=10)
        for child in self.children:  # the Prefect server
            child.stop()
        info = service_info(self.ws.root)
        if info and info.get("pid") == os.getpid():
            (self.ws.root / SERVICE_FILE).unlink(missing_ok=True)
        if self.backfiller is not None:
            self.backfiller.stop()
        if self.memory is not None:
            self.memory.db.close()
        if self._lock is not None and self._lock.is_locked:
            self._lock.release()

    def _child(self, name: str) -> Child | None:
        return next((c for c in self.children if c.name == name), None)

    # -- Prefect server and runner

    def _prefect_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PREFECT_API_URL"] = self.prefect_api or ""
        env["DREAMFLOW_WORKSPACE"] = str(self.ws.root)
        return env

    def _start_prefect(self) -> None:
        opts = self.options
        given = opts.prefect_api or os.environ.get("PREFECT_API_URL")
        if given:
            self.prefect_api = given.rstrip("/")
            self.ui_url = self.prefect_api.removesuffix("/api")
            os.environ["PREFECT_API_URL"] = self.prefect_api
            return
        if not port_free("127.0.0.1", opts.prefect_port):
            raise ServiceError(
                f"port {opts.prefect_port} for the Prefect server is in use: pick another with --prefect-port, "
                "or use that server with --prefect-api http://127.0.0.1:PORT/api"
            )
        self.prefect_api = f"http://127.0.0.1:{opts.prefect_port}/api"
        self.ui_url = f"http://127.0.0.1:{opts.prefect_port}"
        os.environ["PREFECT_API_URL"] = self.prefect_api
        if self.settings.api_token:  # the token protects Prefect's API too; this process and children send it
            from engine.prefect_env import auth_string

            self.prefect_auth = auth_string(self.settings.api_token)
            os.environ["PREFECT_API_AUTH_STRING"] = self.prefect_auth
        env = self._prefect_env()
        env.pop("PREFECT_API_URL")
        if self.prefect_auth:
            env["PREFECT_SERVER_API_AUTH_STRING"] = self.prefect_auth
        env["PREFECT_SERVER_LOGGING_LEVEL"] = "WARNING"  # its log file should explain a failed start
        # Prefect's default lets any site's page script its API (CORS `*`): only its own UI may
        env.setdefault("PREFECT_SERVER_CORS_ALLOWED_ORIGINS", ",".join(
            f"http://{name}:{opts.prefect_port}" for name in ("127.0.0.1", "localhost", "[::1]")))
        Path(env["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
        prefect = Child(
            "prefect server",
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
             "--port", str(opts.prefect_port)],
            env,
            self.home / "logs" / "prefect-server.log",
        )
        prefect.start()
        self.children.append(prefect)

    def _wait_for_prefect(self) -> None:
        deadline = time.monotonic() + PREFECT_START_TIMEOUT
        server = self._child("prefect server")
        while not http_ok(f"{self.prefect_api}/health"):
            if server is not None and server.exit_code() is not None:
                raise ServiceError(
                    f"the Prefect server exited with code {server.exit_code()} while starting. "
                    f"Last lines of {server.log_path}:\n{server.tail()}"
                )
            if time.monotonic() > deadline:
                raise ServiceError(f"the Prefect API at {self.prefect_api} did not answer within "
                                   f"{PREFECT_START_TIMEOUT:.0f} s")
            if self.stopping.wait(0.2):
                raise KeyboardInterrupt
        self.prefect_ready.set()

    def _start_runner(self) -> None:
        env = self._prefect_env()
        env.setdefault("PREFECT_RUNNER_POLL_FREQUENCY", "2")  # a launched run starts within ~2 s, not 10
        runner = Child("runner", [sys.executable, "-m", "deployments.serve"], env,
                       self.home / "logs" / "runner.log")
        runner.start()
        self.children.append(runner)
        self._wait_for_deployments(runner)

    def _wait_for_deployments(self, runner: Child) -> None:
        """Block until the runner has registered the deployments, so launches right after start work."""
        deadline = time.monotonic() + 90
        while not self._deployments_registered():
            if runner.exit_code() is not None:
                raise ServiceError(f"the runner exited with code {runner.exit_code()} while starting. "
                                   f"Last lines of {runner.log_path}:\n{runner.tail()}")
            if time.monotonic() > deadline:
                raise ServiceError(f"the runner did not register its deployments within 90 s (log: {runner.log_path})")
            if self.stopping.wait(0.5):
                raise KeyboardInterrupt

    @staticmethod
    def _deployments_registered() -> bool:
        from prefect import get_client
        from prefect.exceptions import ObjectNotFound

        from deployments.serve import DEPLOYMENTS

        with get_client(sync_client=True) as client:
            for name in (name for deployment in DEPLOYMENTS.values() for name in deployment.full_names):
                try:
                    client.read_deployment_by_name(name)
                except ObjectNotFound:
                    return False
        return True

    # -- index, watcher, API

    def _open_index(self) -> None:
        from engine import semantic
        from engine.client import local_memory
        from engine.turns import TurnCounter

        self.memory = local_memory(self.ws.root, keep_open=True)
        self.backfiller = semantic.attach(self.memory, long_running=True, settings=self.settings)
        self.turns = TurnCounter(self.ws, self.settings.turns_per_summary)

    def changed(self) -> None:
        """Files changed through the API or the watcher: embed new chunks soon."""
        if self.backfiller is not None:
            self.backfiller.notify()

    def _reconcile(self) -> None:
        started = time.monotonic()
        result = self.memory.reconcile()
        summary = ", ".join(f"{k} {v}" for k, v in result.items() if isinstance(v, int))
        self.say(f"Index       up to date ({summary}; {time.monotonic() - started:.1f} s)")

    def _start_watcher(self) -> None:
        from deployments.watch import WorkspaceWatcher

        self.watcher = WorkspaceWatcher(self.ws, self.index_changes, self.resources_changed).start()

    def index_changes(self, paths: list[str | None]) -> None:
        """Watcher callback: re-index changed files; a `None` (folder moved or deleted) or a bulk change
        reconciles the whole index in one batched transaction instead."""
        from storage import index

        with self.memory.db.session() as con:
            if None in paths or len(paths) > BULK_CHANGES:
                index.reconcile(con, self.ws)
            else:
                for rel in paths:
                    index.index_file(con, self.ws, rel)
        self.changed()

    def resources_changed(self, paths: list[str]) -> None:
        """Watcher callback: one Prefect event per changed resource file (the trigger runs auto_resource)."""
        from deployments.launch import emit_resource_changed

        if not self.prefect_ready.wait(PREFECT_START_TIMEOUT):
            raise ServiceError("resource changes seen but the Prefect API is not ready")
        for rel in paths:
            emit_resource_changed(str(self.ws.root), rel, exists=(self.ws.root / rel).is_file())

    def _start_api(self) -> None:
        import uvicorn

        from dreamflow.api import create_app

        app = create_app(self.memory, token=self.settings.api_token, service=self, host=self.options.host,
                         settings=self.settings)
        config = uvicorn.Config(app, host=self.options.host, port=self.options.port, log_level="warning",
                                access_log=False, lifespan="on", timeout_graceful_shutdown=5)
        self._api_server = uvicorn.Server(config)
        self._api_thread = threading.Thread(target=self._api_server.run, name="dreamflow-api", daemon=True)
        self._api_thread.start()
        deadline = time.monotonic() + 30
        while not self._api_server.started:
            if not self._api_thread.is_alive() or time.monotonic() > deadline:
                raise ServiceError(f"the HTTP API could not listen on {self.url}")
            time.sleep(0.02)
        from dreamflow.http_guard import LOOPBACK_NAMES

        if self.options.host.strip("[]") not in LOOPBACK_NAMES and not self.settings.api_token:
            self.say(f"WARNING: the API listens on {self.options.host} without DREAMFLOW_API_TOKEN: "
                     "anyone who can reach it can read and change your memory")

    def _write_service_file(self) -> None:
        info = {
            "url": self.url,
            "pid": os.getpid(),
            "token_required": bool(self.settings.api_token),
            "workspace": str(self.ws.root),
            "prefect_api": self.prefect_api,
            "prefect_auth": bool(self.prefect_auth),
            "ui": self.ui_url,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started_at)),
        }
        self.ws.write_text(SERVICE_FILE, json.dumps(info, indent=2))

    # -- turns and flow launches (called by the API)

    def launch(self, flow: str, parameters: dict | None = None) -> dict:
        """Start a run of `flow`'s deployment for this workspace (waits for Prefect during start-up).

        The workspace travels as a parameter, so the run works on it whichever runner or worker executes it.
        """
        from deployments.launch import launch
        from deployments.serve import DEPLOYMENTS

        if flow in DEPLOYMENTS and DEPLOYMENTS[flow].needs_llm and self.options.runner:
            from engine.llm import LLMNotConfigured, require_llm

            try:  # our runner runs it with our settings: say so now, not in a Failed run
                require_llm(self.settings)
            except LLMNotConfigured as exc:
                raise LLMNotConfigured(f"the service has {exc} (they count where `dreamflow start` runs: "
                                       "restart it with them set)") from None
        self._wait_prefect()
        return launch(flow, {**(parameters or {}), "workspace": str(self.ws.root)})  # never another folder

    def run_status(self, run_id: str) -> dict:
        """A flow run's state and, once finished, its summary (deployments.launch.run_status)."""
        from deployments.launch import run_status

        self._wait_prefect()
        return run_status(run_id)

    def run_logs(self, run_id: str, offset: int = 0) -> list[dict]:
        """A flow run's log lines from `offset` on."""
        from deployments.launch import run_logs

        self._wait_prefect()
        return run_logs(run_id, offset)

    def _wait_prefect(self) -> None:
        if not self.prefect_ready.wait(PREFECT_START_TIMEOUT):
            raise ServiceError("the Prefect API is not ready yet")

    def record_turn(self, session_id: str, messages: list[dict], compact: bool = False,
                    turn_id: str | None = None) -> dict:
        """Append a turn to the session's jsonl, count it, and launch auto_memory when due (with the run's UI
        link, as the other job commands print)."""
        from deployments.launch import run_url
        from engine.turns import record_turn

        result = record_turn(self.turns, self._append_turn, self._launch_auto_memory, session_id, messages, compact,
                             turn_id)
        if result.get("launched"):
            result["ui_url"] = run_url(result["launched"])
        return result

    def _append_turn(self, session_id: str, messages: list[dict]) -> dict:
        from tasks.dialog import append_messages

        return append_messages(self.memory, session_id, messages)

    def _launch_auto_memory(self, session_id: str) -> str:
        return self.launch("auto_memory", {"session_id": session_id})["id"]

    def _launch_due_turns(self) -> None:
        for session_id in self.turns.due_sessions():
            try:
                run = self._launch_auto_memory(session_id)
            except Exception as exc:
                self.say(f"could not launch auto_memory for session {session_id}: {exc}")
            else:
                self.turns.launched(session_id, run)

    def _catch_up_resources(self) -> None:
        """Emit events for text resources added, changed or deleted while no service watched them (compared
        with auto_resource's checkpoint of what each card was made from)."""
        from tasks import checkpoints

        seen = checkpoints.load(self.ws, "resources")
        on_disk = list(self.ws.iter_files("resource"))
        if not seen and not on_disk:
            return
        from tasks.cards import TEXT_RESOURCES  # imports prefect: only when there is something to compare

        changed = [rel for rel in seen if not (self.ws.root / rel).is_file()]
        for rel in on_disk:
            if Path(rel).suffix.lower() not in TEXT_RESOURCES:
                continue
            if rel in seen:
                try:
                    text = read_all(self.memory, rel)
                except DreamflowError:  # binary under a text suffix: auto_resource skips it anyway
                    continue
                if checkpoints.content_hash(text) == seen[rel].get("hash"):
                    continue
            changed.append(rel)
        if changed:
            self.say(f"Resources   {len(changed)} changed while the service was down: auto_resource runs queued")
            self.resources_changed(changed)

    def status(self) -> dict:
        """What runs, index size, turn counters, last and next dream, runs in progress."""
        from deployments import launch
        from tasks import usage

        status = {
            "service": {"pid": os.getpid(), "url": self.url, "uptime_s": round(time.time() - self.started_at),
                        "workspace": str(self.ws.root), "prefect_api": self.prefect_api, "ui": self.ui_url},
            "children": [
                {"name": c.name, "pid": c.pid, "running": c.exit_code() is None, "restarts": len(c.restarts),
                 "log": str(c.log_path)}
                for c in self.children
            ],
            "index": self.memory.index_stats(),
            "watcher": {"idle": self.watcher.idle() if self.watcher else None},
            "turns": {"every": self.turns.every, "sessions": self.turns.sessions()},
            "usage": usage.summary(str(self.ws.root)),
            "warnings": self.warnings,
            "logs": str(self.home / "logs"),
        }
        if self.backfiller is not None:
            from engine import semantic

            status["vectors"] = {**semantic.status(self.memory, self.settings), "error": self.backfiller.last_error}
        if self.prefect_ready.is_set():
            try:
                status["last_dream"] = next(iter(launch.runs("auto_dream", started=True, limit=1)), None)
                status["next_dream"] = next(iter(launch.runs("auto_dream", started=False, states=["SCHEDULED"],
                                                             limit=1)), None)
                status["active_runs"] = launch.active_runs()
            except Exception as exc:  # status must answer even when Prefect does not
                status["prefect_error"] = f"{type(exc).__name__}: {exc}"
        return status


def llm_warning(settings: Settings, where: str) -> str | None:
    """What `start` and `status` say when no LLM is configured: which jobs need one and what to set `where`."""
    if settings.llm_configured:
        return None
    from deployments.serve import DEPLOYMENTS

    jobs = ", ".join(d.flow_name for d in DEPLOYMENTS.values() if d.needs_llm)
    return (f"no LLM configured: {jobs} need one and fail until DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL "
            f"(and DREAMFLOW_LLM_API_KEY if the endpoint wants a key) are set {where}; files, search and the "
            "index work without it")


def start(options: Options) -> int:
    """Run the service in the foreground until stopped; returns the process exit code."""
    return Service(options).run()


# ---- CLI: start, status, turn (registered in dreamflow/cli.py) -------------------------------------------

def register(cli) -> None:
    """Add `start`, `status` and `turn` to the `dreamflow` command group."""
    import click

    from engine.ops import PARAM_HELP

    @cli.command("start")
    @click.option("--host", default="127.0.0.1", show_default=True, help="Interface the HTTP API listens on.")
    @click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="Port of the HTTP API.")
    @click.option("--prefect-api", default=None, metavar="URL",
                  help="Use this running Prefect API (or $PREFECT_API_URL) instead of starting a Prefect server.")
    @click.option("--prefect-port", default=DEFAULT_PREFECT_PORT, show_default=True, type=int,
                  help="Port of the Prefect server (and UI) the service starts.")
    @click.option("--runner/--no-runner", default=True, show_default=True,
                  help="Serve the deployments here; --no-runner when `prefect worker`s run them (see docs/service.md).")
    @click.pass_obj
    def start_command(obj, host: str, port: int, prefect_api: str | None, prefect_port: int, runner: bool) -> None:
        """Run Dreamflow: index on save, nightly dreams, turn summaries, HTTP API and the Prefect UI.

        Runs in the foreground until Ctrl-C or SIGTERM. Starts a Prefect server (database under
        $DREAMFLOW_HOME, default ~/.dreamflow) unless --prefect-api or PREFECT_API_URL names one.
        """
        options = Options(Path(obj.workspace), host=host, port=port, prefect_api=prefect_api,
                          prefect_port=prefect_port, runner=runner)
        sys.exit(start(options))

    @cli.command("status")
    @click.option("--verbose", "-v", is_flag=True, help="Also pids, log files and the index's internal counters.")
    @click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
    @click.pass_obj
    def status_command(obj, verbose: bool, as_json: bool) -> None:
        """Show whether the service runs, what it runs, index size, last dream, recent LLM usage and pending work."""
        from dreamflow.cli import fail

        try:
            status = current_status(Path(obj.workspace))
        except DreamflowError as exc:
            fail(exc, as_json)
        if as_json:
            click.echo(json.dumps(status, indent=2, ensure_ascii=False, default=str))
        else:
            click.echo(format_status(status, verbose))

    @cli.command("turn")
    @click.option("--session-id", required=True, help="Conversation id (letters, digits, '.', '_', '-').")
    @click.option("--messages", default=None, metavar="JSON",
                  help="The turn's messages as a JSON list (or a single message object); else read from stdin.")
    @click.option("--compact", is_flag=True, help="Summarise the session now instead of waiting for N turns.")
    @click.option("--turn-id", default=None, help=PARAM_HELP["turn_id"])
    @click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
    @click.pass_obj
    def turn_command(obj, session_id: str, messages: str | None, compact: bool, turn_id: str | None,
                     as_json: bool) -> None:
        """Record a conversation turn; every N turns (or with --compact) auto_memory summarises the session.

        The messages are appended to session/dialog/<session-id>.jsonl at once. With the service running it
        counts the turn and starts the auto_memory run; without it the turn is counted and the run starts
        when the service does.
        """
        from dreamflow.cli import fail
        from storage.errors import InvalidInput

        try:
            text = messages if messages is not None else ("" if sys.stdin.isatty() else sys.stdin.read())
            parsed = _parse_messages(text, compact)
            result = record_turn(Path(obj.workspace), session_id, parsed, compact, turn_id)
        except json.JSONDecodeError as exc:
            fail(InvalidInput(f"--messages is not valid JSON: {exc}"), as_json)
        except DreamflowError as exc:
            fail(exc, as_json)
        if as_json:
            click.echo(json.dumps(result, indent=2, ensure_ascii=False))
        else:
            click.echo(format_turn(result))


def _parse_messages(text: str, compact: bool) -> list[dict]:
    if not text.strip():
        return []
    value = json.loads(text)
    return [value] if isinstance(value, dict) else value


def record_turn(workspace: Path, session_id: str, messages: list[dict], compact: bool = False,
                turn_id: str | None = None) -> dict:
    """Record a turn through the running service, or in this process (counted; the run waits for the service);
    `turn_id` as in `engine.turns.record_turn`."""
    from engine.client import connect, local_memory
    from engine.turns import TurnCounter
    from engine.turns import record_turn as record
    from tasks.dialog import append_messages

    remote = connect(workspace)
    if remote is not None:
        return remote.turn(session_id, messages, compact, turn_id)
    memory = local_memory(workspace)
    counter = TurnCounter(memory.ws, Settings().turns_per_summary)
    return record(counter, lambda s, m: append_messages(memory, s, m), None, session_id, messages, compact, turn_id)


def current_status(workspace: Path) -> dict:
    """The running service's status, or what can be known without it (index, turn counters)."""
    from engine.client import connect, local_memory
    from engine.turns import TurnCounter
    from tasks import checkpoints, usage

    remote = connect(workspace)
    if remote is not None:
        return {"running": True, **remote.status()}
    memory = local_memory(workspace)
    dream = checkpoints.load(memory.ws, "dream").get("last_run")  # what the last dream recorded (any process)
    warning = llm_warning(Settings(), "in this shell (jobs run here without the service)")
    return {
        "running": False,
        "service": {"workspace": str(memory.ws.root)},
        "last_dream": dream and {"start_time": dream.get("at"), "state": (
            f"of {dream.get('date')}: {dream.get('units', 0)} units, {dream.get('failed', 0)} failed")},
        "index": memory.index_stats(),
        "turns": {"every": Settings().turns_per_summary, "sessions": TurnCounter(memory.ws, 1).sessions()},
        "usage": usage.summary(str(memory.ws.root)),
        "warnings": [warning] if warning else [],
        "logs": str(dreamflow_home() / "logs"),
    }


def format_status(status: dict, verbose: bool = False) -> str:
    """People's view of `current_status`: what a user needs; `verbose` adds pids, logs and internal counters."""
    svc, index = status.get("service", {}), status.get("index", {})
    lines = [f"Workspace   {svc.get('workspace')}"]
    if not status.get("running"):
        lines.append("Service     not running (start it with `dreamflow start`)")
    else:
        lines.append(f"Service     running for {_duration(svc.get('uptime_s') or 0)}"
                     + (f", pid {svc.get('pid')}" if verbose else ""))
        lines.append(f"API         {svc.get('url')}   (docs: {svc.get('url')}/docs)")
        lines.append(f"Prefect UI  {svc.get('ui')}")
        children = status.get("children", [])
        trouble = [c for c in children if not c["running"] or c["restarts"]]
        if verbose or trouble:
            for child in children if verbose else trouble:
                state = "running" if child["running"] else "STOPPED"
                lines.append(f"  {child['name']:<14} {state}, {child['restarts']} restart(s)"
                             + (f", pid {child['pid']}, log {child['log']}" if verbose or trouble else ""))
    for warning in status.get("warnings", []):
        lines.append(f"Warning     {warning}")
    if status.get("logs"):
        lines.append(f"Logs        {status['logs']}" + ("   (a job run's log: in the Prefect UI)"
                                                          if status.get("running") else ""))
    if verbose:
        lines.append("Index       " + ", ".join(f"{k} {v}" for k, v in index.items() if isinstance(v, (int, float))))
    else:
        text = f"{index.get('files', 0)} files, {index.get('chunks', 0)} chunks, {index.get('links', 0)} links"
        if index.get("files_with_errors"):
            text += f", {index['files_with_errors']} files could not be parsed (indexed as text)"
        lines.append(f"Index       {text}")
    vectors = status.get("vectors")
    if vectors and vectors.get("configured"):
        lines.append(f"Vectors     {vectors.get('embedded', 0)} of {vectors.get('texts', 0)} chunk texts embedded "
                     f"({vectors['configured']})" + (f"; error: {vectors['error']}" if vectors.get("error") else ""))
    if "last_dream" in status:
        dream = status["last_dream"]
        lines.append(f"Last dream  {dream['start_time']} ({dream['state']})" if dream else "Last dream  none yet")
    if status.get("next_dream"):
        lines.append(f"Next dream  {status['next_dream']['expected_start_time']}")
    sessions = status.get("turns", {}).get("sessions", {})
    waiting = {s: e["pending"] for s, e in sessions.items() if e.get("pending")}
    lines.append(f"Turns       {sum(waiting.values())} turn(s) waiting for a summary"
                 + (f" in {len(waiting)} session(s)" if waiting else "")
                 + (f"; {len(sessions)} session(s) counted" if verbose else ""))
    spent = status.get("usage")
    if spent and spent["runs"]:
        total = spent["total"]
        lines.append(f"LLM usage   last {len(spent['runs'])} run(s): {total['calls']} calls, "
                     f"{total['total_tokens']} tokens, {total['seconds']} s in calls")
        for run in spent["runs"][:5]:
            lines.append(f"  {run['at']}  {run['job']:<14} {run['calls']} calls, {run['total_tokens']} tokens, "
                         f"{run['seconds']} s")
    for run in status.get("active_runs", []):
        lines.append(f"Running     {run['deployment']} run {run['name']}: {run['state']}")
    if status.get("prefect_error"):
        lines.append(f"Prefect     unavailable: {status['prefect_error']}")
    if verbose and status.get("running"):
        lines.append(f"Prefect API {svc.get('prefect_api')}")
        if "watcher" in status:
            lines.append(f"Watcher     {'idle' if status['watcher'].get('idle') else 'busy'}")
    return "\n".join(lines)


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def format_turn(result: dict) -> str:
    """People's view of a recorded turn."""
    text = (f"Recorded {result['appended']} message(s) for session {result['session_id']} "
            f"(turn {result['turns']}; {result['pending']} waiting, auto_memory every {result['every']})")
    if result.get("launched"):
        text += f"\nauto_memory run started: {result['launched']}"
        if result.get("ui_url"):
            text += f"\nfollow it in the Prefect UI: {result['ui_url']}"
    if result.get("launch_error"):
        text += f"\nauto_memory could not start ({result['launch_error']}); the next turn retries"
    if result.get("waiting"):
        text += f"\n{result['waiting']}"
    return text
