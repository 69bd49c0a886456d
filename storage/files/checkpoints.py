"""Checkpoints: what the memory jobs have already processed, as small JSON files in `metadata/checkpoints/`.

Checkpoints are derived state: losing one only means work is done again. They are written atomically
(`Workspace.write_text`), and read-modify-write cycles hold a per-checkpoint file lock so concurrent runs
(two resources, two sessions) never lose each other's entries. A damaged file reads as empty.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ContextManager

from storage.errors import NotFound
from storage.files.locks import FileLock
from storage.files.workspace import Workspace

FOLDER = "metadata/checkpoints"
LOCK_TIMEOUT = 600  # seconds; a run holding a lock may be waiting on a slow LLM
_locks: weakref.WeakValueDictionary[str, FileLock] = weakref.WeakValueDictionary()  # a held lock stays in it
_locks_guard = threading.Lock()


def _rel(ws: Workspace, name: str) -> str:
    return ws.normalize(f"{FOLDER}/{name}.json")


def load(ws: Workspace, name: str) -> dict:
    """The checkpoint `name` (e.g. `dream`, `sessions/<id>`), or `{}` when missing or unreadable."""
    try:
        data = json.loads(ws.read_text(_rel(ws, name)))
    except (OSError, ValueError, NotFound):
        return {}
    return data if isinstance(data, dict) else {}


def save(ws: Workspace, name: str, data: dict) -> None:
    """Write the checkpoint atomically."""
    ws.write_text(_rel(ws, name), json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False))


def lock(ws: Workspace, name: str, timeout: float = LOCK_TIMEOUT) -> ContextManager[FileLock]:
    """`with lock(ws, name):` checkpoint `name`'s cross-process lock, waiting up to `timeout` seconds. One lock
    object per path in a process, so re-entrant in a thread."""
    path = str(ws.resolve(ws.normalize(f"{FOLDER}/{name}.lock")))
    with _locks_guard:
        held = _locks.get(path)
        if held is None:
            held = _locks[path] = FileLock(path)
        return held.held(timeout)


@contextmanager
def update(ws: Workspace, name: str) -> Iterator[dict]:
    """Lock, load and yield the checkpoint; the yielded dict is saved when the block ends without error."""
    with lock(ws, name):
        data = load(ws, name)
        yield data
        save(ws, name, data)


def content_hash(data: bytes | str) -> str:
    """Short stable hash of file content, used to tell changed files from processed ones."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:20]
