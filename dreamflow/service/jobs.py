"""The jobs gateway of the service: what the API, the MCP server and the dashboard ask of the served
workspaces' jobs: record a turn (and launch auto_memory when due), start a run of a job's deployment, a run's
state, logs and retry, a workspace's runs; and what the service itself starts: the due turns and the
resource events of files changed while it was down or seen by the watcher.

Every call names a served workspace (or means the default one); a run carries the workspace by name and the
tag `workspace:NAME`, and a caller sees and retries only runs of the workspaces its grant covers. Prefect is
reached through deployments/launch.py once the service's Prefect API is ready (`prefect_ready`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.config.grants import Grant
from engine.config.settings import Settings
from storage.errors import DreamflowError, LLMNotConfigured, ServiceError
from storage.files.text_view import read_all

PREFECT_START_TIMEOUT = float(os.environ.get("DREAMFLOW_PREFECT_START_TIMEOUT", "120"))


class Jobs:
    """The jobs of the workspaces `hosts` serves (dreamflow/service/hosting.py), run with `settings` by this
    service's `runner` (deployments/runner.py), or by workers when None; `say` prints a line of the service's
    log."""

    def __init__(self, hosts, settings: Settings, runner, prefect_ready: threading.Event,
                 say: Callable[[str], None]):
        self.hosts = hosts
        self.settings = settings
        self.runner = runner
        self.prefect_ready = prefect_ready
        self.say = say
        self._held: set[str] = set()  # the jobs said once to be held back for want of an LLM

    def held_back(self, flow: str) -> bool:
        """True when `flow` needs an LLM this service's runner lacks: it is not launched (a run would only fail
        red with LLMNotConfigured); said once in the log, and `status` warns why (deployments.serve.llm_warning)."""
        from deployments.serve import DEPLOYMENTS

        if not (self.runner is not None and DEPLOYMENTS[flow].needs_llm and not self.settings.llm_configured):
            return False
        if flow not in self._held:
            self._held.add(flow)
            self.say(f"Jobs        {DEPLOYMENTS[flow].flow_name} not started: no LLM configured (set "
                     "DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL where `dreamflow start` runs, then restart it)")
        return True

    def launch(self, flow: str, parameters: dict | None = None, workspace: str | None = None) -> dict:
        """Start a run of `flow`'s deployment for a served workspace (default: the default one; waits for
        Prefect during start-up). The workspace travels as its name (never a path), so the run works on it
        whichever runner or worker executes it; the run is tagged `workspace:NAME`."""
        from deployments.launch import launch
        from deployments.serve import DEPLOYMENTS

        if flow in DEPLOYMENTS and DEPLOYMENTS[flow].needs_llm and self.runner is not None:
            from engine.models.llm import require_llm

            try:  # our runner runs it with our settings: say so now, not in a Failed run
                require_llm(self.settings)
            except LLMNotConfigured as exc:
                raise LLMNotConfigured(f"the service has {exc} (they count where `dreamflow start` runs: "
                                       "restart it with them set)") from None
        name = self.hosts.get(workspace or self.hosts.default_name).name
        self._wait_prefect()
        run = launch(flow, {**(parameters or {}), "workspace": self.job_workspace(name)}, tags=[f"workspace:{name}"])
        self._wake_runner()
        return run

    def job_workspace(self, name: str) -> str:
        """How a run names a served workspace: a registered one by name; the unregistered default by its folder,
        which a run accepts only while a service serves it (engine.access.job_workspace.workspace_root), so a runner or worker
        shared by several services finds its owner."""
        return name if name in self.hosts.registry.entries else str(self.hosts.root(name))

    def run_status(self, run_id: str, visible: Callable[[str], bool] = lambda name: True) -> dict:
        """A flow run's state and, once finished, its summary (deployments.launch.run_status), and `settled`
        (deployments.runner.Runner.settled; None without a runner); a run of a workspace `visible` refuses is
        reported as not existing."""
        from deployments.launch import run_status

        self._wait_prefect()
        status = run_status(run_id)
        self._check_visible(run_id, status.get("parameters"), visible)
        status["settled"] = self.runner.settled(run_id) if self.runner is not None else None
        return status

    def run_logs(self, run_id: str, offset: int = 0, visible: Callable[[str], bool] = lambda name: True) -> list[dict]:
        """A flow run's log lines from `offset` on (same visibility as `run_status`)."""
        from deployments.launch import run_logs, run_parameters

        self._wait_prefect()
        self._check_visible(run_id, run_parameters(run_id), visible)
        return run_logs(run_id, offset)

    def retry(self, run_id: str, grant: Grant) -> dict:
        """Retry a failed run as the Prefect UI does (deployments.launch.retry) for a caller whose `grant` may
        change the run's workspace; a run of a workspace it does not see is reported as not existing."""
        from deployments.launch import retry, run_parameters

        self._wait_prefect()
        name = self._check_visible(run_id, run_parameters(run_id), grant.sees)
        grant.check(name, writes=True)
        status = retry(run_id)
        self._wake_runner()
        return status

    def job_runs(self, workspace: str | None = None, limit: int = 10) -> dict:
        """A served workspace's runs in Prefect: `{last_dream, next_dream, recent}` (`recent`: its newest
        started runs of any job, newest first)."""
        from deployments import launch

        name = self.hosts.get(workspace or self.hosts.default_name).name
        self._wait_prefect()
        last, upcoming = launch.dreams([name])[name]
        return {"last_dream": last, "next_dream": upcoming, "recent": launch.recent_runs(f"workspace:{name}", limit)}

    def _check_visible(self, run_id: str, parameters: dict | None, visible: Callable[[str], bool]) -> str:
        """The name of the workspace the run works on, when `visible`; else NotFound."""
        from storage.errors import NotFound

        given = str((parameters or {}).get("workspace") or self.hosts.default_name)
        name = next((h.name for h in self.hosts.hosted.values() if str(h.ws.root) == given), given)
        if not visible(name):
            raise NotFound(f"no flow run {run_id}")
        return name

    def _wake_runner(self) -> None:
        """This service's runner takes a run just made due now, not at its next look."""
        if self.runner is not None:
            self.runner.wake()

    def _wait_prefect(self) -> None:
        if not self.prefect_ready.wait(PREFECT_START_TIMEOUT):
            raise ServiceError("the Prefect API is not ready yet")

    def turn(self, *args: Any, workspace: str | None = None, **kwargs: Any) -> dict:
        """`engine.access.turns.record_turn` (its arguments: `engine.jobs.TURN`) in a served workspace, launching
        auto_memory when due (with the run's UI link, as the other job commands print)."""
        from deployments.launch import run_url
        from engine.jobs import TURN
        from engine.access.turns import record_turn

        hosted = self.hosts.get(workspace or self.hosts.default_name)
        result = record_turn(hosted.ws.root, **TURN.bind(*args, **kwargs),
                             memory=self.hosts.memory(hosted.name), counter=hosted.turns,
                             launch=lambda s: self._launch_auto_memory(hosted.name, s))
        if result.get("launched"):
            result["ui_url"] = run_url(result["launched"])
        return result

    def _launch_auto_memory(self, name: str, session_id: str) -> str:
        return self.launch("auto_memory", {"session_id": session_id}, workspace=name)["id"]

    def launch_due_turns(self, hosted) -> None:
        if self.held_back("auto_memory"):
            return
        for session_id in hosted.turns.due_sessions():
            try:
                run = self._launch_auto_memory(hosted.name, session_id)
            except Exception as exc:
                self.say(f"could not launch auto_memory for session {session_id} of {hosted.name}: {exc}")
            else:
                hosted.turns.launched(session_id, run)

    def catch_up_resources(self, hosted) -> None:
        """Emit events for text resources added, changed or deleted while no service watched them (compared
        with auto_resource's checkpoint of what each card was made from)."""
        from storage.files import checkpoints

        if self.held_back("auto_resource"):
            return
        seen = checkpoints.load(hosted.ws, "resources")
        on_disk = list(hosted.ws.iter_files("resource"))
        if not seen and not on_disk:
            return
        from engine.memory.cards import TEXT_RESOURCES  # imports the LLM client: only when there is something to compare

        changed = [rel for rel in seen if not (hosted.ws.root / rel).is_file()]
        for rel in on_disk:
            if Path(rel).suffix.lower() not in TEXT_RESOURCES:
                continue
            if rel in seen:
                try:
                    text = read_all(hosted.memory, rel)
                except DreamflowError:  # binary under a text suffix: auto_resource skips it anyway
                    continue
                if checkpoints.content_hash(text) == seen[rel].get("hash"):
                    continue
            changed.append(rel)
        if changed:
            self.say(f"Resources   {len(changed)} changed in {hosted.name} while the service was down: "
                     "auto_resource runs queued")
            self.resources_changed(hosted.name, changed)

    def resources_changed(self, name: str, paths: list[str]) -> None:
        """Watcher callback: one Prefect event per changed resource file (the trigger runs auto_resource)."""
        from deployments.launch import emit_resource_changed

        if self.held_back("auto_resource"):
            return
        if not self.prefect_ready.wait(PREFECT_START_TIMEOUT):
            raise ServiceError("resource changes seen but the Prefect API is not ready")
        root = self.hosts.get(name).ws.root
        for rel in paths:
            emit_resource_changed(self.job_workspace(name), rel, exists=(root / rel).is_file())
