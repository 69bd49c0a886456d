"""Dreamflow's Prefect deployments, declared once, and the runner that serves them (`python -m deployments.serve`).

| deployment               | starts when                                                                  |
|--------------------------|------------------------------------------------------------------------------|
| auto-dream/nightly       | cron `DREAMFLOW_DREAM_CRON` (default 03:00) in `DREAMFLOW_TIMEZONE` / local   |
| optimize/nightly         | cron `DREAMFLOW_OPTIMIZE_CRON` (default 04:30), same timezone                 |
| auto-memory/turns        | launched by the service's turn counter every N turns of a session, or compact |
| auto-resource/on-change  | event `dreamflow.resource.changed` (one per file write, debounced by watcher) |
| proactive/manual         | by hand (UI, API `/flows/proactive`)                                          |
| reindex/manual           | by hand                                                                       |
| doctor/manual            | by hand, or cron `DREAMFLOW_DOCTOR_CRON` (unset: none; schedulable in the UI)  |
| link-mine/manual         | by hand (CLI `dreamflow link-mine`, UI, API `/flows/link_mine`)               |
| merge/manual             | by hand                                                                      |
| split/manual             | by hand                                                                      |
| archive/manual           | by hand                                                                      |

Every deployment can also be run by hand from the UI with parameters; with the service running, the CLI's
job commands start runs of these deployments too (dreamflow/job_runs.py). Entrypoints are module paths
(`flows.auto_dream.auto_dream`), so they do not depend on the folder the service was started from.
`prefect.yaml` declares the same deployments for `prefect deploy --all` against a process work pool (docs/service.md,
"Workers instead of the built-in runner").
This module imports prefect and the flows only inside functions: the service and API read the declarations.
"""

from __future__ import annotations

import importlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path

from engine.settings import Settings
from storage.memory import MAX_COUNT

RESOURCE_EVENT = "dreamflow.resource.changed"
RESOURCE_PREFIX = "dreamflow.resource."


@dataclass(frozen=True)
class Deployment:
    """One deployment: the flow function `flow` in `module`, whose Prefect name is `flow_name`."""

    flow: str
    module: str
    flow_name: str
    name: str
    description: str
    needs_llm: bool = False  # the flow calls the LLM (it stops at once without DREAMFLOW_LLM_*)

    @property
    def full_name(self) -> str:
        return f"{self.flow_name}/{self.name}"

    @property
    def entrypoint(self) -> str:
        """The module-path entrypoint Prefect loads the flow from (independent of any working directory)."""
        return f"{self.module}.{self.flow}"


DEPLOYMENTS: dict[str, Deployment] = {
    d.flow: d
    for d in (
        Deployment("auto_dream", "flows.auto_dream", "auto-dream", "nightly",
                   "Consolidate recent daily cards into digest nodes and pick tomorrow's topics (nightly).",
                   needs_llm=True),
        Deployment("optimize", "flows.maintenance", "optimize", "nightly",
                   "Index maintenance: compact the DuckDB index (nightly)."),
        Deployment("auto_memory", "flows.auto_memory", "auto-memory", "turns",
                   "Summarise a session's not-yet-summarised turns into its daily card (every N turns).",
                   needs_llm=True),
        Deployment("auto_resource", "flows.auto_resource", "auto-resource", "on-change",
                   "Write or update the daily card of a changed resource file (on file events).",
                   needs_llm=True),
        Deployment("proactive", "flows.proactive", "proactive", "manual",
                   "Read a day's interests: the topics to bring up proactively."),
        Deployment("reindex", "flows.maintenance", "reindex", "manual",
                   "Rebuild the whole index from the files."),
        Deployment("doctor", "flows.governance", "doctor", "manual",
                   "Memory graph health report (broken links, orphans, duplicates, drift) as a markdown artifact."),
        Deployment("link_mine", "flows.governance", "link-mine", "manual",
                   "Weave links to related nodes into digest nodes changed since the last run (or given paths).",
                   needs_llm=True),
        Deployment("merge", "flows.governance", "merge", "manual",
                   "Fold near-duplicate digest nodes (or given [survivor, victim] pairs) into their survivors.",
                   needs_llm=True),
        Deployment("split", "flows.governance", "split", "manual",
                   "Break overlong digest nodes (or given paths) into focused nodes linked to each other.",
                   needs_llm=True),
        Deployment("archive", "flows.governance", "archive", "manual",
                   "Move stale digest nodes (or given paths) to digest/archive/, links retargeted."),
    )
}


def resource_id(workspace: str, path: str) -> str:
    """The Prefect resource id of a workspace file: one trigger bucket per file."""
    return f"{RESOURCE_PREFIX}{workspace.rstrip('/')}/{path}"


def local_timezone() -> str:
    """The IANA name of this machine's timezone (`TZ`, /etc/localtime, /etc/timezone), else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if "/" in tz or tz == "UTC":
        return tz
    try:
        target = os.readlink("/etc/localtime")
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    try:
        name = Path("/etc/timezone").read_text().strip()
        if name:
            return name
    except OSError:
        pass
    return "UTC"


def crons(settings: Settings) -> dict[str, str]:
    """Cron schedules per flow (doctor only when `DREAMFLOW_DOCTOR_CRON` is set)."""
    schedules = {"auto_dream": settings.dream_cron, "optimize": settings.optimize_cron}
    if settings.doctor_cron:
        schedules["doctor"] = settings.doctor_cron
    return schedules


def load_flow(flow: str):
    """The Prefect flow object of `DEPLOYMENTS[flow]` (imports the flow module)."""
    d = DEPLOYMENTS[flow]
    obj = getattr(importlib.import_module(d.module), d.flow)
    if obj.name != d.flow_name:
        raise RuntimeError(f"{d.entrypoint} is named {obj.name!r}, but its deployment expects {d.flow_name!r}")
    return obj


def flow_parameters_model(flow: str):
    """A pydantic model of the flow's parameters (for the API's /flows routes and docs), without `workspace`:
    a run started over the API works on the service's workspace, never on a folder the caller names."""
    from pydantic import Field, create_model

    fn = load_flow(flow).fn
    hints = _hints(fn)
    fields = {}
    for p in inspect.signature(fn).parameters.values():
        if p.name == "workspace":
            continue
        default = ... if p.default is inspect.Parameter.empty else p.default
        hint = hints.get(p.name, object)
        bounds = {"ge": 0, "le": MAX_COUNT} if hint is int else {}  # counts: as the CLI's and the operations'
        fields[p.name] = (hint, Field(default, **bounds))
    title = "".join(part.title() for part in flow.split("_")) + "Parameters"
    return create_model(title, __doc__=DEPLOYMENTS[flow].description, **fields)


def _hints(fn) -> dict:
    import typing

    try:
        return typing.get_type_hints(fn)
    except Exception:  # an unresolvable annotation: accept any JSON for it
        return {}


def resource_trigger():
    """auto_resource: one run per `dreamflow.resource.changed` event, i.e. per debounced file write.

    `within=0` with threshold 1 fires on every event (measured: prefect.md §4); debouncing happens in the
    watcher, which waits for a file to be quiet, so a later edit of the same file is never swallowed.
    """
    from datetime import timedelta

    from prefect.events import DeploymentEventTrigger

    return DeploymentEventTrigger(
        name="resource file changed",
        expect={RESOURCE_EVENT},
        match={"prefect.resource.id": RESOURCE_PREFIX + "*"},
        for_each={"prefect.resource.id"},
        threshold=1,
        within=timedelta(0),
        parameters={"path": "{{ event.payload.path }}", "workspace": "{{ event.payload.workspace }}"},
    )


def build(settings: Settings | None = None) -> list:
    """The RunnerDeployments to serve."""
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    settings = settings or Settings()
    tz = settings.timezone or local_timezone()
    schedules = crons(settings)
    deployments = []
    for flow, d in DEPLOYMENTS.items():
        kwargs: dict = {"name": d.name, "description": d.description, "tags": ["dreamflow"],
                        "entrypoint_type": EntrypointType.MODULE_PATH}
        if flow in schedules:
            kwargs["schedules"] = [Cron(schedules[flow], timezone=tz)]
        if flow == "auto_resource":
            kwargs["triggers"] = [resource_trigger()]
        deployments.append(load_flow(flow).to_deployment(**kwargs))
    return deployments


def main() -> None:
    """Serve every deployment until SIGTERM/Ctrl-C (the service runs this as its `runner` child)."""
    from engine import prefect_env

    prefect_env.configure()
    from prefect import serve

    serve(*build(), limit=int(os.environ.get("DREAMFLOW_RUNNER_LIMIT", "4")), print_starting_message=False)


if __name__ == "__main__":
    main()
