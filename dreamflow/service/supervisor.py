"""`dreamflow start`: the one process that owns its workspaces' indexes while it runs, and keeps memory alive.

    this process   per served workspace (dreamflow/service/hosting.py): index owner (IndexDB keep_open), watcher,
                   turn counter, vector backfill; one HTTP API for all of them (uvicorn thread); the runner
                   (deployments/runner.py): the deployments served, each run on a thread of this process,
                   working in the memory it holds; runs take the workspace's name and are tagged
                   `workspace:NAME` (`--no-runner` when Prefect workers run them)
    child          `prefect server start` on 127.0.0.1, PREFECT_HOME under the Dreamflow home
                   (skipped when --prefect-api / PREFECT_API_URL names a running server); with
                   DREAMFLOW_API_TOKEN its API requires basic auth `dreamflow:<token>` (engine.config.prefect_env);
                   CORS only for its own UI's origins, so no other site's page can script its API

The child dies with the service (Linux PR_SET_PDEATHSIG), a crashed child is restarted (up to 3 times in 10
minutes) and otherwise the service stops with exit code 8 and the child's last log lines. Ctrl-C/SIGTERM stop
everything in order: watcher (pending changes indexed), runner (its runs finished or marked Crashed), API,
Prefect server. Prefect is imported only inside the running service, never by the CLI commands that merely talk
to it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dreamflow.service.children import RESTART_WINDOW, RESTARTS_ALLOWED, Child, http_ok, port_free
from dreamflow.service.jobs import PREFECT_START_TIMEOUT, Jobs
from engine.config.grants import ADMIN, Grant
from engine.config.settings import DEFAULT_PORT, DEFAULT_PREFECT_PORT, Settings, dreamflow_home
from storage.errors import DreamflowError, ServiceError


def advertised_host(bound: str) -> str:
    """The host name `service.json` gives clients: the bound address, or this machine's name when bound to all
    interfaces (a worker on another machine sharing the workspace folder connects to it)."""
    from dreamflow.http.http_guard import ALL_INTERFACES

    return socket.gethostname() if bound in ALL_INTERFACES else bound


# ---- the service -----------------------------------------------------------------------------------------

@dataclass
class Options:
    """What `dreamflow start` was asked for: `workspace` the default one (a name or a folder), `only` the
    registered workspaces to serve besides it (empty: all not owned by another service)."""

    workspace: str | Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    prefect_api: str | None = None  # an existing Prefect API; None starts our own server
    prefect_port: int = DEFAULT_PREFECT_PORT
    runner: bool = True  # serve the deployments here (False when workers run them, see docs/service.md)
    only: list[str] = field(default_factory=list)
    settings: Settings = field(default_factory=Settings)
    follow_default: bool = False  # no workspace named: follow the registry's `default` while running


class Service:
    """Start, supervise and stop everything `dreamflow start` runs (see the module docstring); `jobs` is the
    jobs gateway the API, MCP and dashboard call (dreamflow/service/jobs.py)."""

    def __init__(self, options: Options, say: Callable[[str], None] = lambda text: print(text, flush=True)):
        from dreamflow.service.hosting import Hosts

        self.options = options
        self.settings = options.settings
        self.say = say
        self.hosts = Hosts(options.workspace, self.settings, say, only=options.only,
                           follow_default=options.follow_default)
        self.home = dreamflow_home()
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.ready = threading.Event()  # everything started (the API answers before: see start())
        self.prefect_ready = threading.Event()
        self.started_at = time.time()
        self.url = f"http://{advertised_host(options.host)}:{options.port}"
        self.prefect_api: str | None = None
        self.prefect_auth: str | None = None  # basic-auth string of the Prefect server started here, if any
        self.ui_url: str | None = None
        self._api_server = None
        self._api_thread: threading.Thread | None = None
        self.warnings: list[str] = []  # shown at start and in `status`
        self.dream_schedules: dict[str, dict] = {}  # name -> {cron, timezone} of the nightly dreams our runner runs
        self._runner_serves: list[tuple[str, str]] = []  # (name, run parameter) the runner's schedules were built for
        self._cleaned = 0.0  # when the temp files of killed jobs were last looked for
        self._runner_checked = 0.0  # when the runner last followed a changed set of workspaces
        self.runner = self._runner() if options.runner else None  # it runs the deployments' runs here
        self.jobs = Jobs(self.hosts, self.settings, self.runner, self.prefect_ready, say)  # what callers ask

    @property
    def ws(self):
        """The default workspace's folder object."""
        return self.hosts.default.ws

    @property
    def memory(self):
        """The default workspace's memory."""
        return self.hosts.memory(self.hosts.default_name)

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
        from engine.config import prefect_env

        prefect_env.configure()  # before anything imports prefect; children inherit the environment
        opts = self.options
        if not port_free(opts.host, opts.port):
            raise ServiceError(f"port {opts.port} on {opts.host} is in use: pick another with --port")
        self.hosts.open(self.jobs.resources_changed)  # claims the default workspace first: an error if it is owned
        self._start_prefect()
        self._start_api()
        self.hosts.publish(self._service_info())
        for hosted in self.hosts.hosted.values():
            self.say(f"Workspace   {hosted.name}: {hosted.ws.root}" if len(self.hosts.hosted) > 1
                     else f"Workspace   {hosted.ws.root}")
        self.say(f"API         {self.url}   (docs: {self.url}/docs)")
        self.say(f"Dashboard   {self.url}/ui/   (what your agents remember, in the browser)")
        self.say(f"Logs        {self.home / 'logs'}   (a job run's log: in the Prefect UI)")
        self._check_install()
        for hosted in list(self.hosts.hosted.values()):
            if self.stopping.is_set():  # Ctrl-C while many workspaces catch up: stop now
                raise KeyboardInterrupt
            self._reconcile(hosted)
        if self.runner is not None:  # the flows' imports and the deployments' build overlap the Prefect server's start
            self._plan_runner()
            self.runner.build(dict(self._runner_serves))
        self._wait_for_prefect()
        if self.runner is not None:
            self._start_runner()
        for hosted in list(self.hosts.hosted.values()):
            self.jobs.launch_due_turns(hosted)
            self.jobs.catch_up_resources(hosted)
        self.say(f"Prefect UI  {self.ui_url}")
        self.say("Dreamflow is running. Ctrl-C to stop.")
        self.ready.set()

    def _check_install(self) -> None:
        """Warn about a set-up that starts but fails later (no LLM for the jobs that need one) or wastes the
        machine (a CUDA torch without a GPU)."""
        from deployments.serve import llm_warning
        from engine.models.semantic import words_only
        from engine.models.torch_check import torch_warning

        for warning in (llm_warning(self.settings, "where `dreamflow start` runs, then restart it"),
                        torch_warning(), words_only(self.settings)):
            if warning:
                self.warnings.append(warning)
                self.say(f"WARNING: {warning}")

    def supervise(self) -> None:
        """Watch the children until asked to stop; restart a crashed one or give up with a clear message; serve
        workspaces added to the registry meanwhile."""
        while not self.stopping.wait(0.5):
            if self._api_thread is not None and not self._api_thread.is_alive():
                raise ServiceError("the HTTP API stopped unexpectedly")
            if self.runner is not None and self.runner.failed:
                raise ServiceError("the runner stopped unexpectedly")
            for hosted in self.hosts.refresh(force=self.hosts.folder_made()):
                # a workspace just added has nothing "changed while the service was down": no catch-up runs
                self.say(f"Workspace   {hosted.name}: {hosted.ws.root} (added; its nightly schedules follow as "
                         "soon as no job runs)")
                self._reconcile(hosted)
                self.jobs.launch_due_turns(hosted)
            self.hosts.check_folders()
            self._stop_runs_of_gone()
            self._follow_served()
            if time.monotonic() - self._cleaned > 10:
                self._cleaned = time.monotonic()
                self.hosts.clean_temps()
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

    def _stop_runs_of_gone(self) -> None:
        """Cancel the runs of workspaces no longer served (removed from the registry, or their folder deleted), so
        no run keeps calling the model or writes into them; the reason goes into each run's log."""
        while self.hosts.gone:
            name, root, why = self.hosts.gone.pop(0)
            if not self.prefect_ready.is_set():
                continue

            def cancel(name=name, root=root, why=why):
                from deployments.launch import cancel_runs

                try:
                    ids = cancel_runs(name, (name, str(root)), f"workspace {name} was {why}" if why.startswith("removed")
                                      else f"workspace {name}: {why}")
                except Exception as exc:  # Prefect unreachable: the runs fail on their next call instead
                    self.say(f"WARNING: could not cancel the runs of workspace {name}: {type(exc).__name__}: {exc}")
                    return
                if ids:
                    self.say(f"Workspace   {name}: cancelled {len(ids)} run(s) ({why})")

            threading.Thread(target=cancel, name=f"dreamflow-cancel-{name}", daemon=True).start()

    def _follow_served(self) -> None:
        """Once the served workspaces or the default changed, let the runner serve the nightly deployments of the
        new set: a workspace added while the service runs gets its nightly schedules, the new default takes
        `nightly`, and the nightly deployments of a workspace no longer served are deleted (none keeps a
        `workspace` parameter that no longer resolves), without a restart of the service. Runs going on are not
        disturbed; Prefect unreachable: tried again 5 s later."""
        if (self.runner is None or not self.runner.alive or self._served() == self._runner_serves
                or time.monotonic() - self._runner_checked < 5):
            return
        self._runner_checked = time.monotonic()
        before = self._runner_serves
        self._plan_runner()
        try:
            stale = self.runner.follow(dict(self._runner_serves))
        except Exception as exc:
            self.say(f"WARNING: the nightly schedules could not follow the served workspaces yet: {exc}")
            self._runner_serves = before
            return
        self.say(f"Schedules   the served workspaces changed ({', '.join(self.hosts.names())}; default "
                 f"{self.hosts.default_name}): nightly schedules follow")
        if stale:
            self.say(f"Schedules   deleted {', '.join(stale)} (workspaces no longer served)")

    def _served(self) -> list[tuple[str, str]]:
        """(name, what a run names it by) of every served workspace, the current default first: the runner's
        nightly deployments, one per workspace (deployments.serve.build)."""
        names = [self.hosts.default_name] + [n for n in self.hosts.names() if n != self.hosts.default_name]
        return [(name, self.jobs.job_workspace(name)) for name in names]

    def _plan_runner(self) -> None:
        """The nightly dream schedules the runner builds (deployments.serve.build) for the served workspaces."""
        from deployments.serve import schedule_of

        entries = self.hosts.registry.entries
        self._runner_serves = self._served()
        self.dream_schedules = {}
        for i, (name, _) in enumerate(self._runner_serves):
            cron, tz = schedule_of("auto_dream", i, entries[name].settings if name in entries else {}, self.settings)
            self.dream_schedules[name] = {"cron": cron, "timezone": tz}

    def stop(self) -> None:
        """Stop in dependency order; safe to call after a partial start."""
        self.stopping.set()
        for hosted in self.hosts.hosted.values():
            if hosted.watcher is not None:
                hosted.watcher.stop()  # index what is pending, emit pending resource events
                hosted.watcher = None
        if self.runner is not None and self.prefect_ready.is_set():  # first: it reaches the Prefect server
            try:
                self.runner.stop()
            except Exception as exc:  # Prefect already gone: runs left as they were
                self.say(f"WARNING: the runner could not mark its runs or pause its schedules: {exc}")
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
        self.hosts.close()

    def _child(self, name: str) -> Child | None:
        return next((c for c in self.children if c.name == name), None)

    # -- Prefect server and runner

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
            from engine.config.prefect_env import auth_string

            self.prefect_auth = auth_string(self.settings.api_token)
            os.environ["PREFECT_API_AUTH_STRING"] = self.prefect_auth
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
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

    def _runner(self):
        """The runner (deployments/runner.py); its deployments are built for the served workspaces at start."""
        from deployments.runner import Runner

        return Runner(self.settings, self._default_job_workspace, self.say,
                      limit=int(os.environ.get("DREAMFLOW_RUNNER_LIMIT", "4")),
                      poll=float(os.environ.get("PREFECT_RUNNER_POLL_FREQUENCY", "2")))

    def _start_runner(self) -> None:
        """Register the deployments with Prefect, then take their runs."""
        try:
            self.runner.register()
        except Exception as exc:
            raise ServiceError(f"the deployments could not be registered with Prefect at {self.prefect_api}: "
                               f"{type(exc).__name__}: {exc}") from None
        self.runner.start()

    def _default_job_workspace(self) -> str:
        """What a run naming no workspace works on: the current default one."""
        return self.jobs.job_workspace(self.hosts.default_name)

    # -- API

    def _start_api(self) -> None:
        import uvicorn

        from dreamflow.http.api import create_app

        from engine.config.settings import admin_token

        # the machine's admin token is followed live (engine.config.grants.Tokens): the first `token create` makes one
        own = self.settings.api_token if self.settings.api_token != admin_token() else None
        app = create_app(None, token=own, service=self, host=self.options.host,
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
        from dreamflow.http.http_guard import LOOPBACK_NAMES

        if self.options.host.strip("[]") not in LOOPBACK_NAMES and not self.settings.api_token:
            self.say(f"WARNING: the API listens on {self.options.host} without DREAMFLOW_API_TOKEN: "
                     "anyone who can reach it can read and change your memory")

    # -- workspaces: index, resources

    def changed(self, name: str | None = None) -> None:
        """Files of workspace `name` (default: the default one) changed through the API: embed new chunks soon."""
        self.hosts.get(name or self.hosts.default_name).changed()

    def _reconcile(self, hosted) -> None:
        started = time.monotonic()
        result = hosted.memory.reconcile()
        summary = ", ".join(f"{k} {v}" for k, v in result.items() if isinstance(v, int))
        label = f"Index {hosted.name}" if len(self.hosts.hosted) > 1 else "Index"
        self.say(f"{label:<11} up to date ({summary}; {time.monotonic() - started:.1f} s)")

    def _service_info(self) -> dict:
        """What `metadata/service.json` of every served workspace says (plus its own folder and name)."""
        return {
            "url": self.url,
            "pid": os.getpid(),
            "host": socket.gethostname(),  # the pid is checked only on this machine (engine.access.client.service_info)
            "token_required": bool(self.settings.api_token),  # at start; `token create` may add one later
            "prefect_api": self.prefect_api,
            "prefect_auth": bool(self.prefect_auth),
            "ui": self.ui_url,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started_at)),
        }

    def status(self, workspace: str | None = None, grant: Grant = ADMIN) -> dict:
        """What runs, one workspace's index, turn counters, last and next dream, runs in progress, and a row per
        served workspace the grant sees (dreamflow/service/workspace_status.py); the admin also sees the children, logs
        and folders."""
        from deployments import launch
        from dreamflow.service import workspace_status
        from engine.models import usage_log
        from storage.files import redaction_log

        hosted = self.hosts.get(workspace or self.hosts.default_name)
        memory = self.hosts.memory(hosted.name)
        status = {
            "service": {"pid": os.getpid(), "url": self.url, "uptime_s": round(time.time() - self.started_at),
                        "workspace": str(hosted.ws.root), "name": hosted.name, "ui": self.ui_url},
            "index": memory.index_stats(),
            "watcher": {"idle": hosted.watcher.idle() if hosted.watcher else None},
            "turns": {"every": hosted.turns.every, "sessions": hosted.turns.sessions()},
            "usage": usage_log.summary(str(hosted.ws.root)),
            "redacted": redaction_log.summary(hosted.ws),
            "warnings": self.warnings + self.hosts.problems(grant),
        }
        if grant.admin:
            status["service"]["prefect_api"] = self.prefect_api
            status["children"] = [
                {"name": c.name, "pid": c.pid, "running": c.exit_code() is None, "restarts": len(c.restarts),
                 "log": str(c.log_path)}
                for c in self.children
            ]
            if self.runner is not None:
                status["runner"] = {"running": self.runner.alive, "runs": self.runner.running(),
                                    "limit": self.runner.limit, "error": self.runner.last_error}
            status["logs"] = str(self.home / "logs")
        if hosted.backfiller is not None:
            from engine.models import semantic

            status["vectors"] = {**semantic.status(memory, self.settings), "error": hosted.backfiller.last_error}
        shown = [h for h in list(self.hosts.hosted.values()) if grant.sees(h.name)]
        dreams: dict[str, tuple[dict | None, dict | None]] = {}
        if self.prefect_ready.is_set():
            try:
                dreams = launch.dreams([h.name for h in shown])
                status["last_dream"], status["next_dream"] = dreams[hosted.name]
                status["active_runs"] = launch.active_runs(tag=f"workspace:{hosted.name}")
            except Exception as exc:  # status must answer even when Prefect does not
                status["prefect_error"] = f"{type(exc).__name__}: {exc}"
        status["workspaces"] = [workspace_status.row(
            h.name, h.ws.root if grant.admin else None,
            status["index"] if h is hosted else {"error": "its folder was deleted or moved away: not served"}
            if h.vanished else self.hosts.memory(h.name).index_stats(),
            h.name == self.hosts.default_name, *dreams.get(h.name, (None, None)), self.dream_schedules.get(h.name))
            for h in shown]
        return status


def start(options: Options) -> int:
    """Run the service in the foreground until stopped; returns the process exit code."""
    return Service(options).run()
