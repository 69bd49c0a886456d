"""File-event triggers: watchdog on the workspace, coalesced into batches the service acts on.

Every saved memory file is handed to `on_change` after a short quiet window (the service re-indexes it at
once, no flow run per keystroke). Files under `resource/` are also handed to `on_resource`, debounced per
file over a longer window, so the created+modified events of one write become one auto_resource run.
`metadata/`, dot-folders, editor scratch files and names that are not UTF-8 are ignored
(`storage.index.indexer.is_indexed_path`).
A directory moved or deleted as a whole calls `on_change` with `None`: the service then reconciles.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from storage.errors import PathError
from storage.files.workspace import Workspace
from storage.index.indexer import is_indexed_path

log = logging.getLogger(__name__)

# Event kinds that can change a file's content or existence (opened/closed_no_write/attrib cannot).
_CHANGING = {"created", "modified", "deleted", "moved", "closed"}


def new_observer() -> Observer:
    """A watchdog observer, quiet about the one warning that is noise.

    watchdog 7 warns when a new directory's recursive walk and its own creation event both add its watch (every
    `mkdir -p`); the watch is reused, nothing is lost, but each warning prints kilobytes into the service log.
    """
    warnings.filterwarnings("ignore", r"Callback with id .* already exists for watch", RuntimeWarning)
    return Observer()


class Debouncer:
    """Collects keys and hands them to `flush` once each has been quiet for `quiet` seconds.

    A key that keeps changing is still flushed `max_wait` seconds after its first event, so a file that is
    written continuously is not starved. Keys due at the same moment are flushed together, in one call, from
    the debouncer's own thread; an exception in `flush` is logged and does not stop the thread.
    """

    def __init__(self, flush: Callable[[list], None], quiet: float, max_wait: float, name: str = "debouncer"):
        self.flush = flush
        self.quiet = quiet
        self.max_wait = max_wait
        self._pending: dict = {}  # key -> (first_seen, last_seen)
        self._cond = threading.Condition()
        self._stopped = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, key) -> None:
        now = time.monotonic()
        with self._cond:
            first, _ = self._pending.get(key, (now, now))
            self._pending[key] = (first, now)
            self._cond.notify()

    def idle(self) -> bool:
        """True when nothing is pending or being flushed."""
        with self._cond:
            return not self._pending and not self._busy

    def stop(self, flush: bool = True) -> None:
        """Stop the thread; with `flush`, hand over whatever is still pending first."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=30)
        if flush and self._pending:
            keys, self._pending = list(self._pending), {}
            self._call(keys)

    def _due(self, now: float) -> tuple[list, float | None]:
        due, wake = [], None
        for key, (first, last) in self._pending.items():
            at = min(last + self.quiet, first + self.max_wait)
            if at <= now:
                due.append(key)
            else:
                wake = at if wake is None else min(wake, at)
        return due, wake

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    due, wake = self._due(time.monotonic())
                    if due:
                        for key in due:
                            del self._pending[key]
                        self._busy = True
                        break
                    self._cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))
            try:
                self._call(due)
            finally:
                with self._cond:
                    self._busy = False

    def _call(self, keys: list) -> None:
        try:
            self.flush(keys)
        except Exception:  # the watcher must outlive one bad batch
            log.exception("handling %d changed path(s) failed", len(keys))


class WorkspaceWatcher(FileSystemEventHandler):
    """Watch `ws` recursively and feed changed workspace-relative paths to the callbacks (see module doc)."""

    def __init__(
        self,
        ws: Workspace,
        on_change: Callable[[list[str | None]], None],
        on_resource: Callable[[list[str]], None] | None = None,
        quiet: float = 0.05,
        max_wait: float = 0.5,
        resource_quiet: float = 1.0,
        resource_max_wait: float = 10.0,
        observer=None,
    ):
        self.ws = ws
        self._changes = Debouncer(on_change, quiet, max_wait, name="dreamflow-index-watch")
        self._resources = (
            Debouncer(on_resource, resource_quiet, resource_max_wait, name="dreamflow-resource-watch")
            if on_resource
            else None
        )
        self._own_observer = observer is None  # else one observer shared by many workspaces, started by its owner
        self._observer = new_observer() if observer is None else observer
        self._watch = self._observer.schedule(self, str(ws.root), recursive=True)

    def start(self) -> WorkspaceWatcher:
        if self._own_observer:
            self._observer.start()
        return self

    def stop(self) -> None:
        """Stop watching and flush what is pending."""
        if self._own_observer:
            self._observer.stop()
            self._observer.join(timeout=10)
        else:
            self._observer.unschedule(self._watch)
        self._changes.stop()
        if self._resources:
            self._resources.stop()

    def abandon(self) -> None:
        """Stop watching a folder that is gone, dropping what is pending (nothing to index, nothing to re-create)."""
        if self._own_observer:
            self._observer.stop()
        else:
            try:
                self._observer.unschedule(self._watch)
            except (KeyError, OSError):  # the observer already dropped the watch of the deleted folder
                pass
        self._changes.stop(flush=False)
        if self._resources:
            self._resources.stop(flush=False)

    def idle(self) -> bool:
        """True when every seen change has been handed over and handled."""
        return self._changes.idle() and (self._resources is None or self._resources.idle())

    def relevant(self, path: str | bytes) -> str | None:
        """Workspace-relative path of a memory file, or None for metadata/, dot-folders and scratch files."""
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        try:
            rel = self.ws.relative(path)
        except PathError:
            return None
        if rel in ("", ".") or not is_indexed_path(rel):
            return None
        return rel

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGING:
            return
        paths = [event.src_path]
        if event.event_type == "moved":
            paths.append(event.dest_path)
        if event.is_directory:
            # Files inside a moved or deleted folder get no events of their own: reconcile.
            if event.event_type in ("moved", "deleted") and any(self.relevant(p) for p in paths):
                self._changes.add(None)
            return
        for path in paths:
            rel = self.relevant(path)
            if rel is None:
                continue
            self._changes.add(rel)
            if self._resources and rel.startswith("resource/"):
                self._resources.add(rel)
