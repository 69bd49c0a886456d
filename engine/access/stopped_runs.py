"""Runs asked to stop while they run on a thread of this process (the service's runner, deployments/runner.py).

Prefect stops a run that has a process of its own by ending the process; a thread cannot be ended from outside,
so the runner names the run here and the run stops itself: its next memory operation (engine/access/job_memory.py)
or model request (engine/models/llm.py) raises `RunStopped`. What it wrote before stays (each write is whole);
its input is not marked done, so a Retry or the next run does it again.
"""

from __future__ import annotations

import sys
import threading

from storage.errors import RunStopped

_stopped: dict[str, str] = {}  # flow run id -> why
_lock = threading.Lock()


def stop(run_id, why: str) -> None:
    """Make run `run_id`'s next memory operation or model request raise `RunStopped(why)`."""
    with _lock:
        _stopped[str(run_id)] = why


def forget(run_id) -> None:
    """The run's thread ended."""
    with _lock:
        _stopped.pop(str(run_id), None)


def check() -> None:
    """Raise `RunStopped` in a flow run that was asked to stop; anywhere else, nothing."""
    if not _stopped:
        return
    context = sys.modules.get("prefect.context")  # no flow runs in a process that never imported Prefect
    run = context.FlowRunContext.get() if context else None
    why = _stopped.get(str(run.flow_run.id)) if run is not None and run.flow_run is not None else None
    if why is not None:
        raise RunStopped(why)
