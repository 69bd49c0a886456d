"""What every task needs to reach a workspace: its resolved root, its memory and today's date.

Tasks take the workspace as a plain path string (so Prefect can record and hash it) and open memory through
`engine.client.open_memory` only; the `Workspace` object is used for `metadata/` checkpoints alone.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from engine.client import open_memory
from engine.job_memory import JobMemory
from engine.settings import Settings
from storage.errors import InvalidInput
from storage.workspace import Workspace


def workspace_root(workspace: str | None = None) -> str:
    """Absolute path of `workspace` (default `DREAMFLOW_WORKSPACE`), the form flows pass to their tasks."""
    return str(Path(workspace if workspace else Settings().workspace).expanduser().resolve())


def memory_of(workspace: str):
    """The workspace's memory (through the service when one runs), with what a job may write into one card
    or node capped (engine/job_memory.py)."""
    return JobMemory(open_memory(workspace))


def metadata_of(workspace: str) -> Workspace:
    """The workspace's folder object, for checkpoints in `metadata/`."""
    return Workspace(workspace)


def today() -> str:
    return date.today().isoformat()


def check_date(value: str) -> str:
    """`value` as YYYY-MM-DD (`today` allowed), else InvalidInput."""
    if value == "today":
        return today()
    try:
        return date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise InvalidInput(f"date must be YYYY-MM-DD, got {value!r}") from None
