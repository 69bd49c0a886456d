"""The workspace a job runs for: its resolved root (the flow's first step), its memory and its `metadata/`.

Tasks take the workspace as a plain path string (so Prefect can record and hash it) and open memory through
`engine.access.client.open_memory` only; the `Workspace` object is used for `metadata/` checkpoints alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.access.client import open_memory
from engine.access.job_memory import JobMemory
from engine.config import prefect_env
from storage.errors import InvalidInput, NotFound
from storage.files.workspace import Workspace

RESULTS = "metadata/prefect-results"  # a flow run's persisted results, in the workspace it is for


def workspace_root(workspace: str | None = None) -> str:
    """Absolute folder of the workspace a job is for, the form flows pass to their tasks; tags the running flow
    run `workspace:NAME` (the Prefect UI filters by it) and keeps its persisted results in the workspace
    (`keep_results_in`): flows call it first, so that even an early failure's record is the workspace's.

    `workspace` is a registered name, `default` (the unregistered default folder of the runner's service), or
    None (the default, engine.config.registry.resolve). A run of a deployment takes a name, or the folder of a workspace
    a running service serves (an unregistered one, launched by its service): never any other folder, so no
    caller can make a runner open an arbitrary folder. A deployment run naming no workspace, with neither
    `DREAMFLOW_WORKSPACE` nor a registry default, is refused rather than given `./.dreamflow` of the worker's
    folder (what `prefect deploy` of prefect.yaml without DREAMFLOW_WORKSPACE would do). Any folder is accepted
    for flows called in-process (the CLI, tests).
    """
    from engine.access.client import service_info
    from engine.config.registry import NAME_RE, Registry, resolve, resolve_name

    prefect_env.configure()  # in the process a Prefect worker starts, nothing configured Prefect at import
    registry = Registry.load()
    if workspace and NAME_RE.match(workspace):
        try:
            root = resolve_name(workspace, registry)
        except NotFound:
            if _deployment_run():
                raise
        else:
            return _bound(workspace, root)
    if not workspace and not os.environ.get("DREAMFLOW_WORKSPACE") and not registry.default and _deployment_run():
        raise InvalidInput("this run names no workspace: give it a `workspace` parameter (a deployment schedule's "
                           "`parameters: {workspace: NAME}`), set DREAMFLOW_WORKSPACE for the runner or worker "
                           "(`prefect deploy` puts it into the job), or make a default with `dreamflow workspace "
                           "default NAME`")
    name, root = resolve(workspace, cwd="", registry=registry)
    if workspace and _deployment_run() and service_info(root) is None:
        raise InvalidInput(f"a deployment run takes a workspace name, not {workspace!r} (`dreamflow workspace "
                           "list` shows the names)")
    return _bound(name, root)


def _bound(name: str, root: Path) -> str:
    """The running flow, for workspace `name` in folder `root`: tagged, its results kept there."""
    _tag_run(name)
    keep_results_in(str(root))
    return str(root)


def keep_results_in(root: str) -> None:
    """Persist the running flow's results from now on under `<root>/metadata/prefect-results/`: its tasks'
    (the cache a Retry reuses) and its own return value (the summary the service reads back), so no memory
    text lands in Prefect's home.

    Prefect picks a flow's result store before its body runs, from settings that cannot name a workspace; so
    the run context's store gets an unsaved `LocalFileSystem` instead. Tasks take their store from that context
    when they start, the engine persists the flow's return value with it, and a result written to an unsaved
    local block records its absolute path, which any process on this machine reads back.
    """
    from prefect.context import FlowRunContext
    from prefect.filesystems import LocalFileSystem

    context = FlowRunContext.get()
    if context is not None:
        storage = LocalFileSystem(basepath=str(Path(root) / RESULTS))
        context.result_store = context.result_store.model_copy(update={"result_storage": storage})


def llm_or_skipped():
    """None when an LLM is configured (engine.models.llm.require_llm). Without one, a run of a deployment (a nightly
    dream, a trigger, a run from the Prefect UI) ends at once as `Skipped`, a Cancelled state and not a Failed
    one, the reason in its log and state message: the flow returns this state. Called in-process (the CLI without
    the service, tests) it raises LLMNotConfigured as before."""
    from engine.models.llm import require_llm
    from storage.errors import LLMNotConfigured

    try:
        require_llm()
        return None
    except LLMNotConfigured as exc:
        if not _deployment_run():
            raise
        reason = (f"Skipped: {exc} (they count where this run's runner or worker runs; `dreamflow start` "
                  "serves the runner)")
    from prefect.logging import get_run_logger
    from prefect.states import Cancelled

    get_run_logger().warning(reason)
    return Cancelled(name="Skipped", message=reason)


def _deployment_run() -> bool:
    """Whether this flow run comes from a deployment. A top-level run called in-process (the CLI, tests) says
    so in its context; Prefect's `runtime.deployment.id` would read the run back over the API to learn it."""
    from prefect.context import FlowRunContext
    from prefect.runtime import deployment

    context = FlowRunContext.get()
    run = context.flow_run if context else None
    if run is not None and run.deployment_id is None and run.parent_task_run_id is None:
        return False
    return deployment.id is not None


def _tag_run(name: str) -> None:
    """Add `workspace:NAME` to the current flow run's tags (runs from schedules and triggers lack it)."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    run = context.flow_run if context else None
    tag = f"workspace:{name}"
    if run is None or tag in (run.tags or []) or not os.environ.get("PREFECT_API_URL"):
        return

    try:
        with prefect_env.client() as client:
            client.update_flow_run(run.id, tags=[*(run.tags or []), tag])
    except Exception:  # a label only: never fail the job over it
        pass


def memory_of(workspace: str):
    """The workspace's memory (through the service when one runs), with what a job may write into one card
    or node capped (engine/access/job_memory.py)."""
    return JobMemory(open_memory(workspace))


def metadata_of(workspace: str) -> Workspace:
    """The workspace's folder object, for checkpoints in `metadata/`."""
    return Workspace(workspace)
