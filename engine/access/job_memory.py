"""The memory jobs write through: every operation as usual, but a job (a flow task) may put at most
`DREAMFLOW_MAX_WRITE_CHARS` characters (default 100,000) into a card or node in one call, and its searches
read its own workspace only (never the ones it declares it reads: a job links and cites within one workspace).

LLM output is bounded twice: the LLM client caps reply tokens, and this caps what a job may write with it,
so a runaway answer cannot leave a 30 MB card. A write over the cap is refused (`TooLarge`, nothing written):
the task fails its unit, whose input is then not checkpointed and is retried on the next run. Only
LLM-written folders are capped (`daily/`, `digest/`); raw material (session logs, resources) is written as it
comes. What a job writes into a card or node has its secrets replaced by markers first (storage/text/redact.py).
A run asked to stop while it runs in this process gets `RunStopped` from its next operation
(engine/access/stopped_runs.py).
"""

from __future__ import annotations

import json
from collections import Counter

from engine import ops
from engine.access import stopped_runs
from engine.config.settings import Settings
from storage.errors import NotFound, TooLarge, WorkspaceGone
from storage.files import redaction_log
from storage.files.text_view import read_all
from storage.text import redact

CAPPED_FOLDERS = ("daily", "digest")
# Parameters whose text goes into the file, per operation (frontmatter included: a runaway value is as big).
TEXT_PARAMS = {
    "write": ("content", "name", "description", "metadata"),
    "create": ("content", "name", "description", "metadata"),
    "append": ("content",),
    "prepend": ("content",),
    "edit": ("new",),
    "frontmatter_update": ("metadata",),
}


class JobMemory:
    """`memory` (a `Memory` or `RemoteMemory`) with writes into cards and nodes capped at `limit` chars."""

    def __init__(self, memory, limit: int | None = None):
        self.memory = memory
        self.limit = Settings().max_write_chars if limit is None else limit

    def __repr__(self) -> str:
        return f"JobMemory({self.memory!r}, limit={self.limit})"

    def __getattr__(self, name: str):
        stopped_runs.check()  # a run stopped while it runs on the service's thread goes no further
        attr = self._present(name, getattr(self.memory, name))
        own = getattr(self.memory, "workspace", None)  # a RemoteMemory's workspace name
        if own and name in ops.BY_NAME and ops.BY_NAME[name].across:
            return lambda *args, **kwargs: attr(*args, **{"workspaces": [own], **kwargs})  # a job's own only
        if name not in TEXT_PARAMS:
            return attr
        names = [p.name for p in ops.parameters(ops.BY_NAME[name])]

        def capped(*args, **kwargs):
            given = {**dict(zip(names, args)), **kwargs}
            path = str(given.get("path") or "")
            if not _capped(path):
                return attr(*args, **kwargs)
            given = self._redacted(name, given)
            self.check(path, self._written(name, path, given))
            return attr(**given)

        capped.__doc__ = getattr(attr, "__doc__", None)
        return capped

    def _present(self, name: str, attr):
        """`attr` (operation `name`), stopping the job once its workspace is gone (removed from the registry, or
        its folder deleted): a write never re-creates the folder, and a read's NotFound is not taken for a file
        that does not exist yet (a dream unit would go on from an empty node)."""
        if name not in ops.BY_NAME or not callable(attr):
            return attr
        writes = ops.BY_NAME[name].writes

        def guarded(*args, **kwargs):
            if writes:
                self.check_present()
            try:
                return attr(*args, **kwargs)
            except NotFound:
                self.check_present()
                raise

        guarded.__doc__ = getattr(attr, "__doc__", None)
        return guarded

    def _redacted(self, name: str, given: dict) -> dict:
        """`given` with the secrets in its text replaced by markers (storage/text/redact.py), counted in the
        workspace's redaction log: a card or node never carries one, whatever the model wrote."""
        ws = redaction_log.workspace_of(self.memory)
        patterns = redact.workspace_patterns(ws.root) if ws is not None else ()
        counts: Counter = Counter()

        def clean(value):
            if isinstance(value, str):
                text, found = redact.redact(value, patterns)
                counts.update(found)
                return text
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, list):
                return [clean(v) for v in value]
            return value

        given = {k: clean(v) if k in TEXT_PARAMS[name] else v for k, v in given.items()}
        if ws is not None:
            redaction_log.add(ws, counts)
        return given

    def check_present(self) -> None:
        """WorkspaceGone when the job's workspace is no longer there: an in-process memory's folder deleted, or
        the service no longer serving it."""
        ws = getattr(self.memory, "ws", None)
        if ws is not None:  # an in-process Memory
            if not ws.root.is_dir():
                raise WorkspaceGone(f"the folder {ws.root} of this job's workspace was deleted or moved away: the "
                                    "job stops and writes nothing there")
            return
        own = getattr(self.memory, "workspace", None)
        if own and own not in {row.get("name") for row in self.memory.request("GET", "/workspaces")}:
            raise WorkspaceGone(f"workspace {own} is no longer served (removed from the registry, or its folder "
                                "deleted): the job stops and writes nothing there")

    def check(self, path: str, size: int) -> None:
        """Refuse writing `size` characters into `path` when it is a card or node and that is over the cap."""
        if size > self.limit and _capped(path):
            raise TooLarge(f"a job may write at most {self.limit:,} characters into a card or node at once "
                           f"(DREAMFLOW_MAX_WRITE_CHARS); {path} got {size:,}: write a shorter text")

    def _written(self, name: str, path: str, given: dict) -> int:
        """Characters the call puts into the file: its text parameters (frontmatter values as JSON); an edit
        with replace_all writes `new` once per match."""
        size = sum(_chars(given.get(param)) for param in TEXT_PARAMS[name])
        if name == "edit" and given.get("replace_all") and given.get("old"):
            size *= max(1, read_all(self.memory, path).count(given["old"]))
        return size


def _chars(value) -> int:
    if value is None:
        return 0
    return len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False, default=str))


def _capped(path: str) -> bool:
    """True for a path under daily/ or digest/, however it is spelt (`./digest`, ` digest\\x`, `digest//x`)."""
    parts = [p for p in path.strip().replace("\\", "/").split("/") if p not in ("", ".")]
    return bool(parts) and parts[0] in CAPPED_FOLDERS
