"""The intent journal: multi-file rewrites that a crash cannot leave half done.

A move or a relink rewrites many files. Before it changes anything it records its plan in
`metadata/journal/<pid>-<n>.json` (written atomically and fsynced): the paths involved and, for every file it
is about to rewrite, that file's content hash. It then does the work, re-indexes, and removes the entry. A
process killed in between leaves the entry behind; the next process that opens the workspace
(`storage.memory.Memory`) finds it and finishes the work under the index lock (`graph_edit.recover`):
the hash guard makes replaying idempotent (a file already rewritten, or changed since, is left alone).

Entries of a live process are left to it; under the index lock every entry present is an interrupted one,
since operations hold the lock from `begin` to `finish`.
"""

from __future__ import annotations

import itertools
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from storage.workspace import Workspace, fsync_folder, pid_alive

JOURNAL = "metadata/journal"
_counter = itertools.count(1)


def begin(ws: Workspace, kind: str, plan: dict) -> Path:
    """Durably record that operation `kind` is about to carry out `plan`; returns the entry's path."""
    name = f"{os.getpid()}-{next(_counter)}.json"
    entry = {"kind": kind, "pid": os.getpid(), **plan}
    # ASCII JSON: a path whose name is not UTF-8 (lone surrogates) is escaped, and read back the same.
    return ws.write_text(f"{JOURNAL}/{name}", json.dumps(entry))


def finish(entry: Path) -> None:
    """The operation is complete (files and index): forget its entry."""
    try:
        entry.unlink()
    except FileNotFoundError:
        pass
    fsync_folder(entry.parent)


@contextmanager
def intent(ws: Workspace, kind: str, plan: dict) -> Iterator[Path]:
    """`begin` before the block, `finish` after it; an exception leaves the entry for recovery."""
    entry = begin(ws, kind, plan)
    yield entry
    finish(entry)


def entries(ws: Workspace) -> list[Path]:
    """Every journal entry, oldest first."""
    folder = ws.root / JOURNAL
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return []
    return sorted((folder / n for n in names), key=_order)


def interrupted(ws: Workspace) -> list[Path]:
    """Entries whose process is gone (or is this one, between operations): work to finish. One folder
    listing when there are none, so opening a workspace stays cheap."""
    out = []
    for entry in entries(ws):
        pid = entry.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or not pid_alive(int(pid)):
            out.append(entry)
    return out


def load(entry: Path) -> dict | None:
    """The plan of an entry; None when it is unreadable (a torn entry was never acted on: its temp file
    was renamed only once complete, so this means it was corrupted later)."""
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _order(entry: Path) -> tuple[float, str]:
    try:
        return entry.stat().st_mtime, entry.name
    except OSError:
        return 0.0, entry.name
