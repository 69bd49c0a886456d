"""The built-in runner: Dreamflow's deployments served and their runs run inside the service's own process.

`Runner.register()` gives Prefect the deployments `deployments.serve.build` declares (schedules, the resource
trigger) and has it plan a scheduled one's next runs at once (so `status` names the next dream from the start,
not after Prefect's scheduler loop); a deployment a `prefect deploy` had moved to a work pool is taken back, as
Prefect's own `serve` does.
A thread then asks Prefect every `poll` seconds (at once after `wake()`) for their runs that are due (from a
schedule, a trigger, a launch, the UI's Run or Retry), claims each (Pending: a run another runner claimed first is
left to it) and runs its flow on a thread of its own with Prefect's engine (`prefect.flow_engine.run_flow`), at
most `limit` at once. So a run's tasks work in the memory this service holds (`engine.access.client.open_memory`
gives the service its own), never over HTTP back to it; a run for a workspace another service serves reaches that
one. A run that names no workspace works on the service's default one (`default_workspace`).

A run cancelled while it runs (the UI, a removed workspace) is marked Cancelled, and its next memory operation or
model request raises (engine/access/stopped_runs.py: a thread cannot be ended from outside, as Prefect ends a run's
process); one nothing runs any more (left Running by a service that died) simply ends Cancelled. On `stop`, runs
still going get `grace` seconds, then are stopped the same way and marked Crashed (a Retry runs them again, their
finished tasks read back from persisted results), and the deployments are paused, as Prefect's runner leaves them,
so a Prefect server shared with others does not pile up runs nobody takes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from engine.access import stopped_runs
from engine.config import prefect_env
from engine.config.settings import Settings

SETTLED_KEPT = 256  # finished runs remembered as settled
CRASHED = "the service stopped while this run ran: retry it (its finished tasks are not run again)"


def _plan_runs(client, deployment_id) -> None:
    """Have Prefect schedule a deployment's next runs now, not at its scheduler's next loop (up to a minute); a
    server that refuses (another Prefect version, a hosted API) leaves them to that loop."""
    from prefect.exceptions import PrefectHTTPStatusError

    try:
        client.request("POST", "/deployments/{id}/schedule", path_params={"id": deployment_id}, json={})
    except PrefectHTTPStatusError:
        pass


class Runner:
    """Serves the deployments `deployments.serve.build` makes for `settings` and the served workspaces (`build`)
    with Prefect at the process's `PREFECT_API_URL`, at most `limit` runs at once, looking for due
    runs every `poll` seconds and for runs of its deployments nothing runs that were cancelled every `sweep`
    seconds; `say` prints a line of the service's log."""

    def __init__(self, settings: Settings, default_workspace: Callable[[], str], say: Callable[[str], None],
                 limit: int = 4, poll: float = 2.0, sweep: float = 10.0):
        self.settings = settings
        self.default_workspace = default_workspace
        self.say = say
        self.limit = limit
        self.poll = poll
        self.sweep = sweep
        self.served: dict[str, str] = {}  # name -> run parameter of the workspaces whose nightly deployments are built
        self.deployments: list = []
        self._flows: dict[Any, Any] = {}  # deployment id -> flow object
        self._ids: dict[str, Any] = {}  # deployment full name (`flow/name`) -> id
        self._running: dict[Any, threading.Thread] = {}  # flow run id -> the thread running it
        self._ended: dict[Any, Any] = {}  # flow run id -> the final state it was given while its thread still ran
        self._settled: deque[str] = deque(maxlen=SETTLED_KEPT)  # runs whose thread ended, their logs sent
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._swept = 0.0  # when runs nothing runs were last looked at for Cancelling
        self.last_error: str | None = None

    # -- what the service calls

    def build(self, served: dict[str, str]) -> None:
        """Import the flows and build the deployments for the `served` workspaces (name -> run parameter, the
        default first; no API call: done while Prefect starts)."""
        from deployments.serve import build

        self.served = dict(served)
        self.deployments = build(self.settings, self.served)

    def register(self, scheduled_only: bool = False) -> None:
        """Create or update the deployments in Prefect (unpausing them, a scheduled one's next runs planned;
        `scheduled_only`: the nightly ones) and remember which flow each one runs."""
        from prefect.context import SyncClientContext

        from deployments.serve import DEPLOYMENTS, load_flow

        by_name = {d.flow_name: d.flow for d in DEPLOYMENTS.values()}
        # One client for every `apply` (each otherwise makes two, and each client its own TLS context: ~20 ms of CPU)
        with SyncClientContext.get_or_create() as context:
            for deployment in self.deployments:
                if scheduled_only and not deployment.schedules:
                    continue
                deployment.work_pool_name = None  # set after construction: the update clears a pool (as `serve` does)
                deployment.work_queue_name = None
                deployment_id = deployment.apply()
                if deployment.schedules:
                    _plan_runs(context.client, deployment_id)
                with self._lock:
                    self._ids[deployment.full_name] = deployment_id
                    self._flows[deployment_id] = load_flow(by_name[deployment.flow_name])

    def follow(self, served: dict[str, str]) -> list[str]:
        """Serve the nightly deployments of `served` (name -> run parameter) instead of the ones built before:
        register them, delete those of workspaces no longer served; returns the deleted full names."""
        from deployments.launch import delete_deployments
        from deployments.serve import scheduled_deployments

        gone = (scheduled_deployments(self.settings, list(self.served))
                - scheduled_deployments(self.settings, list(served)))
        self.build(served)
        self.register(scheduled_only=True)
        deleted = delete_deployments(gone)
        with self._lock:
            for name in gone:
                self._flows.pop(self._ids.pop(name, None), None)
        return deleted

    def start(self) -> None:
        """Poll for due runs on a thread until `stop`."""
        self._thread = threading.Thread(target=self._poll_loop, name="dreamflow-runner", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look for due runs now (a run was just launched)."""
        self._wake.set()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def failed(self) -> bool:
        """Started, not stopped, and its poll thread gone."""
        return self._thread is not None and not self._thread.is_alive() and not self._stopping.is_set()

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def settled(self, run_id: str) -> bool | None:
        """True once run `run_id` ran here to its end (its final state set, its log lines sent to Prefect), False
        while it runs here, None for a run this runner did not run (lately)."""
        with self._lock:
            if str(run_id) in self._settled:
                return True
            return False if any(str(r) == str(run_id) for r in self._running) else None

    def stop(self, grace: float = 10.0) -> None:
        """Take no more runs; give the runs going `grace` seconds, mark those still going Crashed; pause the
        deployments. Once: a second call does nothing."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        deadline = time.monotonic() + grace
        with self._lock:
            going = list(self._running.values())
        for thread in going:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        from prefect.states import Crashed

        with prefect_env.client() as client:
            with self._lock:
                left = list(self._running)
            for run_id in left:
                self._end(client, run_id, Crashed(message=CRASHED))
            for deployment_id in list(self._flows):
                client.pause_deployment(deployment_id)

    # -- the poll thread

    def _poll_loop(self) -> None:
        with prefect_env.client() as client:
            while not self._stopping.is_set():
                try:
                    self._cancel_stopped(client)
                    self._take_due(client)
                    self.last_error = None
                except Exception as exc:  # Prefect restarting or unreachable: try again next poll
                    if self.last_error is None:
                        self.say(f"Runner      could not reach Prefect ({type(exc).__name__}: {exc}); trying again")
                    self.last_error = f"{type(exc).__name__}: {exc}"
                self._wake.wait(self.poll)
                self._wake.clear()

    def _take_due(self, client) -> None:
        """Claim and start the due runs of our deployments, oldest first, while fewer than `limit` run."""
        from prefect.exceptions import Abort
        from prefect.states import Pending
        from prefect.utilities.engine import propose_state_sync

        with self._lock:
            free, flows, taken = self.limit - len(self._running), dict(self._flows), set(self._running)
        if free <= 0 or not flows:
            return
        due = client.get_scheduled_flow_runs_for_deployments(
            deployment_ids=list(flows), scheduled_before=datetime.now(timezone.utc) + timedelta(seconds=0.5))
        for run in sorted(due, key=lambda r: r.next_scheduled_start_time or r.expected_start_time)[:free]:
            if run.work_pool_name or run.id in taken:  # a worker's run (its deployment is in a pool), or ours already
                continue
            try:
                state = propose_state_sync(client, Pending(), flow_run_id=run.id)
            except Abort:  # another runner took it
                continue
            if not state.is_pending():
                continue
            thread = threading.Thread(target=self._run, args=(flows[run.deployment_id], run.id),
                                      name=f"dreamflow-run-{run.name}", daemon=True)
            with self._lock:
                self._running[run.id] = thread
            thread.start()

    def _run(self, flow, run_id) -> None:
        """Run one claimed flow run to its end with Prefect's engine (naming no workspace: the default one). A run
        given its end meanwhile (Cancelled, Crashed) keeps it, whatever the engine proposed after; one that ends
        without a final state (an exception the engine did not catch) is marked Crashed."""
        from prefect.flow_engine import run_flow
        from prefect.logging.handlers import APILogWorker
        from prefect.states import Crashed

        crash = None
        try:
            with prefect_env.client() as client:
                flow_run = client.read_flow_run(run_id)
            if not (flow_run.parameters or {}).get("workspace"):
                flow_run = flow_run.model_copy(
                    update={"parameters": {**(flow_run.parameters or {}), "workspace": self.default_workspace()}})
            run_flow(flow, flow_run=flow_run, return_type="state")
        except BaseException as exc:  # noqa: BLE001 - the engine records what it can; the rest is ours to say
            crash = Crashed(message=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                ended = self._ended.pop(run_id, None)
            try:
                if ended is not None or crash is not None:
                    with prefect_env.client() as client:
                        if ended is not None:
                            if client.read_flow_run(run_id).state.id != ended.id:  # the engine proposed after it
                                client.set_flow_run_state(run_id, ended, force=True)
                        elif not client.read_flow_run(run_id).state.is_final():
                            client.set_flow_run_state(run_id, crash, force=True)
            except Exception:  # Prefect gone (the service stops): the state it has stays
                pass
            APILogWorker.drain_all(timeout=5, at_exit=False)  # its log lines in the API before it counts as settled
            stopped_runs.forget(run_id)
            with self._lock:
                self._running.pop(run_id, None)
                self._settled.append(str(run_id))
            self._wake.set()  # a slot is free

    def _end(self, client, run_id, state, given: bool = False) -> None:
        """Give a run going here its final `state` now (`given`: it has it already), and stop it at its next memory
        operation or model request; the state is given again if the engine proposes another after it."""
        stopped_runs.stop(run_id, state.message or state.name)
        with self._lock:
            self._ended[run_id] = state
        if not given:
            client.set_flow_run_state(run_id, state, force=True)

    def _cancel_stopped(self, client) -> None:
        """End as Cancelled the runs of our deployments asked to stop: one going here that was asked (Cancelling)
        or already ended Cancelled elsewhere (another runner's sweep, the API) stops at its next memory operation
        or model request (looked for at every poll while runs go here); one nothing runs that was asked (left
        Running by a service that died; Prefect's own runner ends those too) simply ends (looked for every `sweep`
        seconds). A run of a deployment in a work pool is its worker's to end."""
        from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterId, FlowRunFilter,
                                                    FlowRunFilterId, FlowRunFilterState, FlowRunFilterStateType)
        from prefect.states import Cancelled

        def in_state(*types: str) -> FlowRunFilterState:
            return FlowRunFilterState(type=FlowRunFilterStateType(any_=list(types)))

        with self._lock:
            deployment_ids, ended, running = list(self._flows), set(self._ended), set(self._running)
        sweep = time.monotonic() - self._swept >= self.sweep
        asked = {}
        if running:
            going = FlowRunFilter(state=in_state("CANCELLING", "CANCELLED"), id=FlowRunFilterId(any_=list(running)))
            asked.update((run.id, run) for run in client.read_flow_runs(flow_run_filter=going))
        if sweep and deployment_ids:
            self._swept = time.monotonic()
            ours = DeploymentFilter(id=DeploymentFilterId(any_=deployment_ids))
            asked.update((run.id, run) for run in client.read_flow_runs(
                flow_run_filter=FlowRunFilter(state=in_state("CANCELLING")), deployment_filter=ours, limit=50))
        for run in asked.values():
            if run.id in ended:
                continue
            cancelled = Cancelled(message=run.state.message or "cancelled")
            if run.id in running and run.state.type.value == "CANCELLED":  # ended elsewhere, or its own Skipped
                self._end(client, run.id, run.state, given=True)
            elif run.id in running:
                self._end(client, run.id, cancelled)
            elif not run.work_pool_name:
                client.set_flow_run_state(run.id, cancelled, force=True)
