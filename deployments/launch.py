"""Talking to the Prefect API about Dreamflow's deployments: start runs, emit file events, read run history.

Used by the service, which imports prefect lazily, after `engine.prefect_env.configure()` and with
`PREFECT_API_URL` pointing at its server. Deployment and event names are declared in `deployments/serve.py`.
"""

from __future__ import annotations

from typing import Any

from deployments.serve import DEPLOYMENTS, RESOURCE_EVENT, resource_id


def launch(flow: str, parameters: dict[str, Any] | None = None, idempotency_key: str | None = None) -> dict:
    """Create a run of `flow`'s deployment and return at once: `{id, name, deployment, state}`.

    Raises KeyError for an unknown flow; Prefect errors (API down) propagate.
    """
    from prefect.deployments import run_deployment

    deployment = DEPLOYMENTS[flow]
    run = run_deployment(
        name=deployment.full_name,
        parameters=parameters or {},
        timeout=0,
        as_subflow=False,
        idempotency_key=idempotency_key,
    )
    return {"id": str(run.id), "name": run.name, "deployment": deployment.full_name,
            "state": run.state.name if run.state else None}


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
    """Send queued events now (before shutdown)."""
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout)


def runs(flow: str, started: bool | None = None, states: list[str] | None = None, limit: int = 10) -> list[dict]:
    """Runs of `flow`'s deployment, newest first: `{id, name, deployment, state, parameters, ..._time}`.

    `started=True` keeps runs that have begun, `False` only runs not started yet (soonest first); `states`
    filters by state type (e.g. ["COMPLETED", "FAILED"]).
    """
    from prefect import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    deployment = DEPLOYMENTS[flow]
    run_filter = FlowRunFilter()
    if started is not None:
        run_filter.start_time = FlowRunFilterStartTime(is_null_=not started)
    if states:
        run_filter.state = FlowRunFilterState(type=FlowRunFilterStateType(any_=states))
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[deployment.flow_name])),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment.name])),
            flow_run_filter=run_filter,
            sort=FlowRunSort.START_TIME_DESC if started else FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=limit,
        )
    return [_summary(r, deployment.full_name) for r in found]


def run_status(run_id: str) -> dict:
    """One flow run: `{id, name, deployment, state, state_type, message, parameters, summary, ui_url}`.

    `summary` is the text of the run's newest artifact (the dream's and doctor's markdown reports), else None.
    Raises InvalidInput for a malformed id, NotFound for an unknown run.
    """
    from uuid import UUID

    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.client.schemas.sorting import ArtifactSort
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import get_current_settings

    from storage.errors import InvalidInput, NotFound

    try:
        uuid = UUID(str(run_id))
    except ValueError:
        raise InvalidInput(f"run id {run_id!r} is not a flow run id (a UUID)") from None
    with get_client(sync_client=True) as client:
        try:
            run = client.read_flow_run(uuid)
        except ObjectNotFound:
            raise NotFound(f"no flow run {run_id}") from None
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[uuid])),
            sort=ArtifactSort.CREATED_DESC, limit=1,
        )
        deployment = _deployment_names(client).get(run.deployment_id)
    ui = get_current_settings().ui_url
    state = run.state
    return {
        "id": str(run.id),
        "name": run.name,
        "deployment": deployment,
        "state": state.name if state else None,
        "state_type": state.type.value if state else None,
        "message": state.message if state else None,
        "parameters": run.parameters,
        "summary": artifacts[0].data if artifacts and isinstance(artifacts[0].data, str) else None,
        "ui_url": f"{ui.rstrip('/')}/runs/flow-run/{run.id}" if ui else None,
    }


def _deployment_names(client) -> dict:
    """Deployment id -> `flow/deployment` for Dreamflow's registered deployments."""
    from prefect.exceptions import ObjectNotFound

    names = {}
    for d in DEPLOYMENTS.values():
        try:
            names[client.read_deployment_by_name(d.full_name).id] = d.full_name
        except ObjectNotFound:
            continue
    return names


def active_runs(limit: int = 20) -> list[dict]:
    """Runs of Dreamflow's deployments that run or wait to run now (future scheduled runs left out)."""
    from datetime import datetime, timezone

    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        names = _deployment_names(client)
        found = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                tags=FlowRunFilterTags(all_=["dreamflow"]),
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["SCHEDULED", "PENDING", "RUNNING"])),
                expected_start_time=FlowRunFilterExpectedStartTime(before_=datetime.now(timezone.utc)),
            ),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=limit,
        )
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
        "expected_start_time": iso(run.expected_start_time),
        "start_time": iso(run.start_time),
        "end_time": iso(run.end_time),
    }
