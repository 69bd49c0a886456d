"""Talking to the Prefect API about Dreamflow's deployments: start runs, emit file events, read run history.

Used by the service, which imports prefect lazily, after `engine.config.prefect_env.configure()` and with
`PREFECT_API_URL` pointing at its server. Deployment and event names are declared in `deployments/serve.py`.
"""

from __future__ import annotations

import sys
from typing import Any

from deployments.serve import DEPLOYMENTS, RESOURCE_EVENT, resource_id
from engine.config import prefect_env
from storage.errors import Conflict, InvalidInput, NotFound, envelope

FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def launch(flow: str, parameters: dict[str, Any] | None = None, idempotency_key: str | None = None,
           tags: list[str] | None = None) -> dict:
    """Create a run of `flow`'s deployment (with `tags` besides the deployment's) and return at once:
    `{id, name, deployment, state, ui_url}`.

    Raises KeyError for an unknown flow; Prefect errors (API down) propagate.
    """
    from prefect.deployments import run_deployment

    deployment = DEPLOYMENTS[flow]
    run = run_deployment(
        name=deployment.launch_name,
        parameters=parameters or {},
        timeout=0,
        as_subflow=False,
        idempotency_key=idempotency_key,
        tags=tags,
    )
    return {"id": str(run.id), "name": run.name, "deployment": deployment.launch_name,
            "state": run.state.name if run.state else None, "ui_url": run_url(str(run.id))}


def run_status(run_id: str) -> dict:
    """One flow run: `{id, name, deployment, state, state_type, message, parameters, summary, error, ui_url}`.

    `summary` is the flow's result once the run has finished (for a run that ended Failed because units or
    items failed, the summary it carries), else the text of its newest artifact (its report), else None.
    `error` is `{type, message, exit_code}` of the exception a run without a summary failed with (the CLI
    exits with that code, as it does for the same failure in-process), else None.
    Raises InvalidInput for a malformed id, NotFound for an unknown run.
    """
    with prefect_env.client() as client:
        run = _read_run(client, run_id)
        deployment = _deployment_name(client, run.deployment_id) if run.deployment_id else None
        state = run.state
        state_type = state.type.value if state else None
        summary = error = None
        if state_type in FINAL_STATES:
            result = _result(state)
            summary = _summary_of(result) or _report_text(client, run.id)
            error = _error_of(result) if summary is None else None
    return {
        "id": str(run.id),
        "name": run.name,
        "deployment": deployment,
        "state": state.name if state else None,
        "state_type": state_type,
        "message": state.message if state else None,
        "parameters": run.parameters,
        "summary": summary,
        "error": error,
        "ui_url": run_url(str(run.id)),
    }


def retry(run_id: str, message: str = "Retry from the Dreamflow dashboard") -> dict:
    """Retry a failed run the way the Prefect UI's Retry does (AwaitingRetry forced on the same run, which its
    runner or worker picks up: finished tasks come from their persisted results, so a dream re-runs only its
    failed units); returns its `run_status`. Conflict for a run that did not fail or has no deployment."""
    from prefect.states import AwaitingRetry

    with prefect_env.client() as client:
        run = _read_run(client, run_id)
        state = run.state.type.value if run.state else None
        if state not in ("FAILED", "CRASHED"):
            raise Conflict(f"run {run.name} is {run.state.name if run.state else 'not started'}: only a failed "
                           "run can be retried")
        if run.deployment_id is None:
            raise Conflict(f"run {run.name} ran in a process, not as a deployment run: nothing can run its retry")
        client.set_flow_run_state(run.id, AwaitingRetry(message=message), force=True)
    return run_status(run_id)


def run_parameters(run_id: str) -> dict:
    """The parameters a flow run was started with."""
    with prefect_env.client() as client:
        return dict(_read_run(client, run_id).parameters or {})


def run_logs(run_id: str, offset: int = 0, limit: int = 200) -> list[dict]:
    """The run's log lines from `offset` on, oldest first: `{time, level, message}` (what the UI shows)."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    with prefect_env.client() as client:
        run = _read_run(client, run_id)
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])),
                                sort=LogSort.TIMESTAMP_ASC, offset=offset, limit=limit)
    return [{"time": log.timestamp.isoformat(), "level": logging_level(log.level), "message": log.message}
            for log in logs]


def cancel_runs(workspace: str, names: tuple[str, ...], reason: str) -> list[str]:
    """Cancel the runs of `workspace` (tagged `workspace:NAME`, or whose `workspace` parameter is one of `names`:
    a triggered run is tagged only once it starts) that run or wait to run now, each with `reason` in its log
    and state message (the runner stops a cancelled run's process); returns their ids."""
    from datetime import datetime, timezone

    from prefect.client.schemas.actions import LogCreate
    from prefect.states import Cancelling

    cancelled = []
    with prefect_env.client() as client:
        tagged = {r["id"] for r in active_runs(limit=200, tag=f"workspace:{workspace}")}
        for run in active_runs(limit=200):
            if run["id"] not in tagged and str((run["parameters"] or {}).get("workspace")) not in names:
                continue
            client.create_logs([LogCreate(name="dreamflow.service", level=30, message=f"Cancelled: {reason}",
                                          timestamp=datetime.now(timezone.utc), flow_run_id=run["id"])])
            client.set_flow_run_state(run["id"], Cancelling(message=reason), force=True)
            cancelled.append(run["id"])
    return cancelled


def delete_deployments(full_names: set[str]) -> list[str]:
    """Delete the deployments `flow/deployment` that exist (with their scheduled runs, which Prefect deletes
    along): the nightly ones of workspaces the runner no longer serves. Returns the names deleted."""
    from prefect.exceptions import ObjectNotFound

    deleted = []
    with prefect_env.client() as client:
        for name in sorted(full_names):
            try:
                client.delete_deployment(client.read_deployment_by_name(name).id)
            except ObjectNotFound:
                continue
            deleted.append(name)
    return deleted


def run_url(run_id: str) -> str | None:
    """The run's page in the Prefect UI."""
    from prefect.settings import get_current_settings

    ui = get_current_settings().ui_url
    return f"{ui.rstrip('/')}/runs/flow-run/{run_id}" if ui else None


def logging_level(level: int) -> str:
    import logging

    return logging.getLevelName(level)


def _read_run(client, run_id: str):
    from uuid import UUID

    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_flow_run(UUID(str(run_id)))
    except ValueError:
        raise InvalidInput(f"not a flow run id: {run_id!r}") from None
    except ObjectNotFound:
        raise NotFound(f"no flow run {run_id}") from None


def _deployment_name(client, deployment_id) -> str | None:
    from prefect.exceptions import ObjectNotFound

    try:
        deployment = client.read_deployment(deployment_id)
        return f"{client.read_flow(deployment.flow_id).name}/{deployment.name}"
    except ObjectNotFound:
        return None


def _result(state) -> Any:
    """The finished run's result (the exception of a failed one), None when it cannot be read."""
    try:
        return state.result(raise_on_failure=False)
    except Exception:  # not persisted (an older run) or storage gone: the state message still says what happened
        return None


def _summary_of(result: Any) -> dict | None:
    """The run's summary: its result, or the summary a planned failure (UnitsFailed) carries."""
    summary = getattr(result, "summary", result)
    return summary if isinstance(summary, dict) else None


def _error_of(result: Any) -> dict | None:
    """`{type, message, exit_code}` of the exception a run failed with (exit code 1 unless a DreamflowError's)."""
    if not isinstance(result, BaseException):
        return None
    code = getattr(result, "exit_code", 1)
    return envelope(type(result).__name__, str(result), code if isinstance(code, int) else 1)["error"]


def _report_text(client, run_id) -> str | None:
    """The text of the run's newest artifact (its markdown report): the summary of a run whose result was not
    persisted."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.client.schemas.sorting import ArtifactSort

    artifacts = client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])),
        sort=ArtifactSort.CREATED_DESC, limit=1,
    )
    return artifacts[0].data if artifacts and isinstance(artifacts[0].data, str) else None


def emit_resource_changed(workspace: str, path: str, exists: bool) -> None:
    """Tell Prefect a resource file of `workspace` changed (or was deleted); the auto-resource trigger starts
    a run for it."""
    from prefect.events import emit_event

    emit_event(
        event=RESOURCE_EVENT,
        resource={"prefect.resource.id": resource_id(workspace, path), "prefect.resource.name": path},
        payload={"workspace": workspace, "path": path, "exists": exists},
    )


def flush_events(timeout: float = 5.0) -> None:
    """Send queued events now (before shutdown). A process that never loaded Prefect's events worker has none
    queued, and is spared importing Prefect on its way out (~0.8 s of CPU)."""
    worker = sys.modules.get("prefect.events.worker")
    if worker is not None:
        worker.EventsWorker.drain_all(timeout=timeout)


def dreams(names: list[str]) -> dict[str, tuple[dict | None, dict | None]]:
    """Each named workspace's last started and next scheduled auto_dream run (None where there is none): one
    client, two `runs` a workspace."""
    with prefect_env.client() as client:

        def first(**query) -> dict | None:
            return next(iter(runs(client, "auto_dream", limit=1, **query)), None)

        return {name: (first(started=True, tag=f"workspace:{name}"),
                       first(started=False, states=["SCHEDULED"], tag=f"workspace:{name}")) for name in names}


def runs(client, flow: str, started: bool | None = None, states: list[str] | None = None, limit: int = 10,
         tag: str | None = None) -> list[dict]:
    """Runs of `flow`'s deployments (scheduled and manual, a workspace's own included), newest first: `{id, name,
    deployment, state, parameters, ..._time}`; `client` a sync Prefect client.

    `started=True` keeps runs that have begun, `False` only runs not started yet (soonest first); `states`
    filters by state type (e.g. ["COMPLETED", "FAILED"]); `tag` keeps runs with that tag (`workspace:NAME`).
    """
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    deployment = DEPLOYMENTS[flow]
    run_filter = FlowRunFilter()
    if started is not None:
        run_filter.start_time = FlowRunFilterStartTime(is_null_=not started)
    if states:
        run_filter.state = FlowRunFilterState(type=FlowRunFilterStateType(any_=states))
    if tag:
        run_filter.tags = FlowRunFilterTags(all_=[tag])
    found = client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=[deployment.flow_name])),
        deployment_filter=None if tag else DeploymentFilter(name=DeploymentFilterName(  # tagged: any of ours
            any_=[name.split("/", 1)[1] for name in deployment.full_names])),
        flow_run_filter=run_filter,
        sort=FlowRunSort.START_TIME_DESC if started else FlowRunSort.EXPECTED_START_TIME_ASC,
        limit=limit,
    )
    names = _deployment_names(client, found)
    return [_summary(r, names.get(r.deployment_id, deployment.full_name)) for r in found]


def _deployment_names(client, runs) -> dict:
    """Deployment id -> `flow/deployment` of the deployments `runs` (flow runs) belong to: two API calls, however
    many deployments there are."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowFilter, FlowFilterId

    ids = list({run.deployment_id for run in runs if run.deployment_id is not None})
    if not ids:
        return {}
    deployments = client.read_deployments(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=ids)))
    flows = {flow.id: flow.name for flow in client.read_flows(
        flow_filter=FlowFilter(id=FlowFilterId(any_=list({d.flow_id for d in deployments}))))}
    return {d.id: f"{flows.get(d.flow_id)}/{d.name}" for d in deployments}


def active_runs(limit: int = 20, tag: str | None = None) -> list[dict]:
    """Runs of Dreamflow's deployments that run or wait to run now (future scheduled runs left out); `tag`:
    only runs with that tag too (`workspace:NAME`)."""
    from datetime import datetime, timezone

    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    with prefect_env.client() as client:
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                tags=FlowRunFilterTags(all_=["dreamflow", *([tag] if tag else [])]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["SCHEDULED", "PENDING", "RUNNING"])),
                expected_start_time=FlowRunFilterExpectedStartTime(before_=datetime.now(timezone.utc)),
            ),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=limit,
        )
        names = _deployment_names(client, found)
    return [_summary(r, names.get(r.deployment_id)) for r in found]


def recent_runs(tag: str, limit: int = 10) -> list[dict]:
    """The newest runs of Dreamflow's deployments tagged `tag` (`workspace:NAME`) that have started, newest
    first (as `runs` answers)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterStartTime, FlowRunFilterTags
    from prefect.client.schemas.sorting import FlowRunSort

    with prefect_env.client() as client:
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=["dreamflow", tag]),
                                          start_time=FlowRunFilterStartTime(is_null_=False)),
            sort=FlowRunSort.START_TIME_DESC, limit=limit)
        names = _deployment_names(client, found)
    return [_summary(r, names.get(r.deployment_id)) for r in found]


def _summary(run, deployment: str | None) -> dict:
    def iso(moment):
        return moment.isoformat() if moment else None

    return {
        "id": str(run.id),
        "name": run.name,
        "deployment": deployment,
        "state": run.state.name if run.state else None,
        "parameters": run.parameters,
        "state_type": run.state.type.value if run.state else None,
        "expected_start_time": iso(run.expected_start_time),
        "start_time": iso(run.start_time),
        "end_time": iso(run.end_time),
        "ui_url": run_url(str(run.id)),
    }
