"""Dreamflow's Prefect deployments, declared once; the service's runner serves them (deployments/runner.py).

| deployment               | starts when                                                                  |
|--------------------------|------------------------------------------------------------------------------|
| auto-dream/nightly       | cron `DREAMFLOW_DREAM_CRON` (default 03:00) in `DREAMFLOW_TIMEZONE` / local   |
| auto-dream/manual        | by hand (CLI `dreamflow dream`, UI, API `/flows/auto_dream`, MCP `dream`)     |
| optimize/nightly         | cron `DREAMFLOW_OPTIMIZE_CRON` (default 04:30), same timezone                 |
| optimize/manual          | by hand (CLI `dreamflow optimize` with the service running, UI, API)          |
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
job commands start runs of these deployments too (dreamflow/cli/job_runs.py): of the `manual` deployment of a
scheduled flow, so the UI never labels a run started by hand "nightly". Entrypoints are module paths
(`flows.auto_dream.auto_dream`), so they do not depend on the folder the service was started from.
`prefect.yaml` declares the same deployments for `prefect deploy --all` against a process work pool (docs/service.md,
"Workers instead of the built-in runner").
This module imports prefect and the flows only inside functions: the API and CLI read the declarations.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from engine.config.settings import Settings
from engine.jobs import JOBS, Job

RESOURCE_EVENT = "dreamflow.resource.changed"
RESOURCE_PREFIX = "dreamflow.resource."


@dataclass(frozen=True)
class Deployment:
    """One deployment of job `flow` (engine/jobs.py: its function, module and whether it needs the LLM), whose
    Prefect name is `flow_name`; `when` says what starts it."""

    flow: str
    flow_name: str
    name: str
    when: str = ""
    manual: bool = False  # also served as `<flow_name>/manual`, unscheduled: what runs started by hand use

    @property
    def job(self) -> Job:
        return JOBS[self.flow]

    @property
    def module(self) -> str:
        return self.job.module

    @property
    def needs_llm(self) -> bool:
        return self.job.needs_llm

    @property
    def description(self) -> str:
        """The job's summary, and when it runs."""
        return self.described(self.when)

    def described(self, when: str) -> str:
        return f"{self.job.summary.rstrip('.')} ({when})." if when else self.job.summary

    @property
    def full_name(self) -> str:
        return f"{self.flow_name}/{self.name}"

    @property
    def launch_name(self) -> str:
        """The deployment a run started by hand (CLI, API, MCP) is a run of."""
        return f"{self.flow_name}/manual" if self.manual else self.full_name

    @property
    def full_names(self) -> tuple[str, ...]:
        """Every deployment served for this flow."""
        return (self.full_name, self.launch_name) if self.manual else (self.full_name,)

    @property
    def entrypoint(self) -> str:
        """The module-path entrypoint Prefect loads the flow from (independent of any working directory)."""
        return f"{self.module}.{self.flow}"


DEPLOYMENTS: dict[str, Deployment] = {
    d.flow: d
    for d in (
        Deployment("auto_dream", "auto-dream", "nightly", "nightly", manual=True),
        Deployment("optimize", "optimize", "nightly", "nightly", manual=True),
        Deployment("auto_memory", "auto-memory", "turns", "every N turns"),
        Deployment("auto_resource", "auto-resource", "on-change", "on file events"),
        Deployment("proactive", "proactive", "manual"),
        Deployment("reindex", "reindex", "manual"),
        Deployment("doctor", "doctor", "manual"),
        Deployment("link_mine", "link-mine", "manual"),
        Deployment("merge", "merge", "manual"),
        Deployment("split", "split", "manual"),
        Deployment("archive", "archive", "manual"),
    )
}


def llm_warning(settings: Settings, where: str) -> str | None:
    """What `start` and `status` say when no LLM is configured: which jobs need one and what to set `where`."""
    if settings.llm_configured:
        return None
    jobs = ", ".join(d.flow_name for d in DEPLOYMENTS.values() if d.needs_llm)
    return (f"no LLM configured: no conversation or resource cards, dreams or graph edits are made. {jobs} need "
            "one and are not started until DREAMFLOW_LLM_BASE_URL and "
            f"DREAMFLOW_LLM_MODEL (and DREAMFLOW_LLM_API_KEY if the endpoint wants a key) are set {where}; files, "
            "search and the index work without it")


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
    from flows import auto_dream, auto_memory, auto_resource, governance, maintenance, proactive

    modules = {m.__name__: m for m in (auto_dream, auto_memory, auto_resource, governance, maintenance, proactive)}
    d = DEPLOYMENTS[flow]
    obj = getattr(modules[d.module], d.flow)
    if obj.name != d.flow_name:
        raise RuntimeError(f"{d.entrypoint} is named {obj.name!r}, but its deployment expects {d.flow_name!r}")
    return obj


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


def build(settings: Settings, served: dict[str, str]) -> list:
    """The RunnerDeployments to serve. Scheduled flows get one deployment per served workspace (`served`: name ->
    what a run names it by, the service's current default workspace first; none: one without a workspace):
    `nightly` for the first, `nightly-<name>` for the others (`scheduled_name`), each with that as its
    `workspace` parameter (a registered name; the folder of the unregistered one a service serves) and the name
    as tag (`workspace:NAME`), its own cron and timezone from the registry, else the service's cron moved 7
    minutes per workspace."""
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    from engine.config.registry import Registry

    entries = Registry.load().entries if served else {}
    schedules = crons(settings)
    deployments = []
    for flow, d in DEPLOYMENTS.items():
        # Versioned by the flow's own source (Prefect's default for a flow), not by whatever git repository the
        # service was started in: Prefect's inference runs 4 `git` commands per deployment in the current folder.
        kwargs: dict = {"name": d.name, "description": d.description, "tags": ["dreamflow"],
                        "entrypoint_type": EntrypointType.MODULE_PATH, "version_type": "prefect:simple"}
        if flow == "auto_resource":
            kwargs["triggers"] = [resource_trigger()]
        if flow in schedules:
            for i, name in enumerate(served or [None]):
                cron, tz = schedule_of(flow, i, entries[name].settings if name in entries else {}, settings)
                each = {**kwargs, "schedules": [Cron(cron, timezone=tz)]}
                if name is not None:
                    each.update(name=scheduled_name(d, i, name), parameters={"workspace": served[name]},
                                tags=["dreamflow", f"workspace:{name}"])
                deployments.append(load_flow(flow).to_deployment(**each))
        else:
            deployments.append(load_flow(flow).to_deployment(**kwargs))
        if d.manual:  # the same flow without its schedule, for runs started by hand
            kwargs.update(name="manual", description=d.described("started by hand"))
            deployments.append(load_flow(flow).to_deployment(**kwargs))
    return deployments


def scheduled_name(d: Deployment, index: int, workspace: str) -> str:
    """The deployment name of scheduled `d` for the `index`-th served workspace: `nightly`, `nightly-<name>`."""
    return d.name if index == 0 else f"{d.name}-{workspace}"


def scheduled_deployments(settings: Settings, served: list[str]) -> set[str]:
    """The full names (`flow/deployment`) of the scheduled deployments `build` makes for `served`."""
    return {f"{DEPLOYMENTS[flow].flow_name}/{scheduled_name(DEPLOYMENTS[flow], i, name)}"
            for flow in crons(settings) for i, name in enumerate(served)}


def schedule_of(flow: str, index: int, own: dict[str, str], settings: Settings) -> tuple[str, str]:
    """(cron, timezone) of scheduled `flow` for the `index`-th served workspace, whose registry settings are
    `own`: its own, else the service's cron moved 7 minutes per workspace and the service's timezone."""
    cron = own.get(f"{'dream' if flow == 'auto_dream' else flow}_cron") or staggered(crons(settings)[flow], index)
    return cron, own.get("timezone") or settings.timezone or local_timezone()


def staggered(cron: str, index: int, step: int = 7) -> str:
    """`cron` moved `index * step` minutes later when it is a plain daily `M H * * *`, so the nightly jobs of
    many workspaces do not all start at once; any other form is kept."""
    parts = cron.split()
    if index == 0 or len(parts) != 5 or not (parts[0].isdigit() and parts[1].isdigit()) or parts[2:] != ["*"] * 3:
        return cron
    total = int(parts[1]) * 60 + int(parts[0]) + index * step
    return f"{total % 60} {total // 60 % 24} * * *"
