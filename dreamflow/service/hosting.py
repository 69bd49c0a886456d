"""The workspaces one `dreamflow start` serves: each with its own index, watcher, turn counter and vectors.

`Hosts` is the service's catalog (engine/access/scoped.py): the default workspace (`--workspace NAME|DIR`) plus every
registered one (engine/config/registry.py), re-read when the registry file changes, so `dreamflow workspace add`
takes effect without a restart. A workspace another running service owns (its `metadata/service.lock` is
taken) is skipped with a warning: one owner per workspace. At most `DREAMFLOW_MAX_OPEN_INDEXES` indexes stay
open between calls (least recently used closed; the next call reopens it), so 100 workspaces do not mean
100 open DuckDB files. One watchdog observer watches every folder.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from engine.access.client import SERVICE_FILE, release, service_info
from engine.config.grants import UNKNOWN_WORKSPACE
from engine.config.registry import Entry, Registry
from engine.config.settings import Settings
from storage.errors import NotFound, WorkspaceGone, WorkspaceOwned
from storage.files.workspace import Workspace

BULK_CHANGES = 200  # more changed files than this in one batch (a git checkout, an unzip): reconcile instead


class Hosted:
    """One served workspace (`name`, folder `ws`): its index, watcher, turn counter and vector backfill."""

    def __init__(self, name: str, ws: Workspace, entry: Entry | None, settings: Settings):
        self.name, self.ws, self.entry, self.settings = name, ws, entry, settings
        self.memory = None
        self.turns = None
        self.watcher = None
        self.backfiller = None
        self._lock = None
        self.vanished = False  # its folder was deleted or moved away under the service (see Hosts.check_folders)

    @property
    def reads(self) -> list[str]:
        return list(self.entry.reads) if self.entry else []

    def claim(self) -> bool:
        """Take the workspace's service lock; False when another service owns it."""
        from storage.files.locks import FileLock, LockTimeout

        self._lock = FileLock(self.ws.metadata / "service.lock", per_thread=False)
        try:
            self._lock.acquire(timeout=0)
        except LockTimeout:
            self._lock = None
            return False
        return True

    def open(self, observer, on_resources: Callable[[str, list[str]], None]) -> None:
        from deployments.watch import WorkspaceWatcher
        from engine.models import semantic
        from engine.access.client import local_memory
        from engine.access.turns import TurnCounter

        self.memory = local_memory(self.ws.root, keep_open=True)
        self.backfiller = semantic.attach(self.memory, long_running=True, settings=self.settings)
        self.turns = TurnCounter(self.ws, self.settings.turns_per_summary)
        self.watcher = WorkspaceWatcher(self.ws, self.index_changes, lambda paths: on_resources(self.name, paths),
                                        observer=observer).start()

    def changed(self) -> None:
        """Files changed through the API or the watcher: embed new chunks soon."""
        if self.backfiller is not None:
            self.backfiller.notify()

    def index_changes(self, paths: list[str | None]) -> None:
        """Watcher callback: re-index changed files; a `None` (folder moved or deleted) or a bulk change
        reconciles the whole index in one batched transaction instead."""
        from storage.index import indexer as index

        with self.memory.db.session() as con:
            if None in paths or len(paths) > BULK_CHANGES:
                index.reconcile(con, self.ws)
            else:
                for rel in paths:
                    index.index_file(con, self.ws, rel)
        self.changed()

    def write_service_file(self, info: dict) -> None:
        self.ws.write_text(SERVICE_FILE, json.dumps({**info, "workspace": str(self.ws.root), "name": self.name},
                                                    indent=2))

    def close(self) -> None:
        if self.watcher is not None and not self.vanished:
            self.watcher.stop()  # index what is pending, emit pending resource events
        info = service_info(self.ws.root)
        if info and info.get("pid") == os.getpid():
            (self.ws.root / SERVICE_FILE).unlink(missing_ok=True)
        if self.backfiller is not None:
            self.backfiller.stop()
        if self.memory is not None:
            self.memory.db.close()
            release(self.memory)  # this process no longer owns the workspace (engine/access/client.py)
        if self._lock is not None and self._lock.is_locked:
            self._lock.release()

    def vanish(self) -> None:
        """Its folder is gone: stop watching, embedding and holding the index, writing nothing (no folder of it is
        re-created); calls to it are refused until the folder is back."""
        self.vanished = True
        if self.watcher is not None:
            self.watcher.abandon()
            self.watcher = None
        if self.backfiller is not None:
            self.backfiller.stop()
            self.backfiller = None
        if self.memory is not None:
            self.memory.db.close()
            release(self.memory)  # this process no longer owns the workspace (engine/access/client.py)
        if self._lock is not None and self._lock.is_locked:
            self._lock.release()


class Hosts:
    """Every workspace the service serves, by name (the catalog `engine.access.scoped` and the API use)."""

    def __init__(self, default: str | Path, settings: Settings, say: Callable[[str], None],
                 only: list[str] | None = None, follow_default: bool = False):
        from engine.config.registry import resolve

        self.settings, self.say, self.only = settings, say, list(only or [])
        self.registry = Registry.load()
        self.default_name, self._default_root = resolve(str(default), cwd="", registry=self.registry)
        self.started_with = self.default_name  # served while the service runs, whatever the registry says
        # `start` named no workspace and got the registry's default (or there was none): follow it while running
        self.follow_default = follow_default and self.registry.default in (None, self.default_name)
        self.hosted: dict[str, Hosted] = {}
        self.skipped: dict[str, str] = {}  # name -> why it is not served here
        self._stamp = self._registry_stamp()
        self._recent: OrderedDict[str, None] = OrderedDict()  # indexes held open, least recently used first
        self._guard = threading.RLock()
        self._observer = None
        self._on_resources: Callable[[str, list[str]], None] = lambda name, paths: None
        self._service_info: dict = {}
        self.gone: list[tuple[str, Path, str]] = []  # (name, folder, why) no longer served: the service cancels their runs

    # -- the catalog

    def names(self) -> list[str]:
        return list(self.hosted)

    def serves(self, name: str) -> bool:
        return name in self.hosted

    def _named(self, name: str) -> Hosted:
        try:
            return self.hosted[name]
        except KeyError:
            raise NotFound(UNKNOWN_WORKSPACE) from None

    def get(self, name: str) -> Hosted:
        """The served workspace `name`; WorkspaceGone once its folder was deleted under the service."""
        hosted = self._named(name)
        if hosted.vanished:
            raise WorkspaceGone(f"the folder of workspace {name!r} was deleted or moved away while the service ran: "
                           "nothing is read from or written to it until it is back (`dreamflow workspace remove "
                           f"{name}` forgets it)")
        return hosted

    def memory(self, name: str):
        hosted = self.get(name)
        self._touch(hosted)
        return hosted.memory

    def reads(self, name: str) -> list[str]:
        return self._named(name).reads

    def root(self, name: str) -> Path:
        return self._named(name).ws.root

    @property
    def default(self) -> Hosted:
        return self.hosted[self.default_name]

    # -- lifecycle

    def open(self, on_resources: Callable[[str, list[str]], None]) -> None:
        """Claim and open the default workspace (an error when another service owns it) and the registered ones."""
        from deployments.watch import new_observer

        self._on_resources = on_resources
        self._observer = new_observer()
        self._observer.start()
        default = Hosted(self.default_name, Workspace(self._default_root),
                         self.registry.entries.get(self.default_name), self.settings)
        if not default.claim():
            info = service_info(default.ws.root) or {}
            raise WorkspaceOwned(f"a Dreamflow service already runs for {default.ws.root}"
                               + (f" (pid {info['pid']}, {info['url']})" if info else ""))
        self._add(default)
        self.refresh(force=True)

    def _add(self, hosted: Hosted) -> None:
        hosted.open(self._observer, self._on_resources)
        with self._guard:
            self.hosted[hosted.name] = hosted
        self._touch(hosted)
        if self._service_info:
            hosted.write_service_file(self._service_info)

    def refresh(self, force: bool = False) -> list[Hosted]:
        """Serve workspaces added to the registry since the last look and stop serving removed ones; returns the
        newly served ones."""
        stamp = self._registry_stamp()
        if not force and stamp == self._stamp:
            return []
        previous, self._stamp = self._stamp, stamp
        if stamp is None and self.registry.entries:  # deleted or moved away: not "no workspaces"
            if previous is not None:
                self.say(f"WARNING: the workspace registry {self.registry.path} is gone; until it is back the "
                         f"service keeps the registry it read before, serving {', '.join(self.hosted)}")
            return []
        try:
            self.registry = Registry.load()
        except Exception as exc:  # a half-edited file: keep serving the last good one, say why once per change
            self.say(f"WARNING: {exc}; until it is fixed the service keeps the registry it read before, serving "
                     f"{', '.join(self.hosted)}")
            return []
        added = []
        for entry in self.registry.entries.values():
            if entry.name in self.hosted or (self.only and entry.name not in self.only):
                if entry.name in self.hosted:
                    self.hosted[entry.name].entry = entry  # `reads` and settings may have changed
                continue
            if entry.path == self.hosted[self.started_with].ws.root:
                continue
            if not entry.path.is_dir():  # deleted, or a hand edit naming a folder never made: never created here
                if self.skipped.get(entry.name) != "missing":
                    self.say(f"WARNING: workspace {entry.name}: its folder {entry.path} does not exist; not served "
                             f"(make it, or `dreamflow workspace add {entry.name} FOLDER`)")
                self.skipped[entry.name] = "missing"
                continue
            hosted = Hosted(entry.name, Workspace(entry.path), entry, self.settings)
            if not hosted.claim():
                if self.skipped.get(entry.name) != "owned":
                    self.say(f"Workspace   {entry.name}: another Dreamflow service owns {entry.path}; not served here")
                self.skipped[entry.name] = "owned"
                continue
            self.skipped.pop(entry.name, None)
            self._add(hosted)
            added.append(hosted)
        self.skipped = {name: why for name, why in self.skipped.items() if name in self.registry.entries}
        self._follow_default()
        for name in [n for n in self.hosted if n not in (self.default_name, self.started_with)
                     and n not in self.registry.entries]:
            with self._guard:
                gone = self.hosted.pop(name)
                self._recent.pop(name, None)
            gone.close()
            self.gone.append((name, gone.ws.root, "removed from the registry"))
            self.say(f"Workspace   {name}: removed from the registry; no longer served (its files stay)")
        return added

    def _follow_default(self) -> None:
        """A service started without naming a workspace follows the registry's `default` (`workspace default`,
        `workspace add --default`) once it serves it."""
        wanted = self.registry.default
        if self.follow_default and wanted and wanted != self.default_name and wanted in self.hosted \
                and not self.hosted[wanted].vanished:
            self.default_name = wanted
            self.say(f"Default     now {wanted} (the registry's default): unscoped calls use it")

    def problems(self, grant) -> list[str]:
        """What `status` warns about the workspaces `grant` sees: folders deleted under the service, or missing."""
        said = [f"workspace {h.name}: its folder was deleted or moved away while the service ran; not served, "
                f"nothing of it re-created (restore it, or `dreamflow workspace remove {h.name}`)"
                for h in list(self.hosted.values()) if h.vanished and grant.sees(h.name)]
        return said + [f"workspace {name}: its folder does not exist; not served (make it, or `dreamflow workspace "
                       f"add {name} FOLDER`)" for name, why in self.skipped.items() if why == "missing"
                       and grant.sees(name)]

    def check_folders(self) -> list[Hosted]:
        """Notice served folders deleted or moved away (`rm -rf`) and folders back again: a vanished one is
        reported once, no longer read or written (nothing of it is re-created), and served again when it is back.
        Returns the newly vanished."""
        vanished = []
        for hosted in list(self.hosted.values()):
            present = (hosted.ws.root / "metadata").is_dir()
            if not hosted.vanished and not present:
                with self._guard:
                    self._recent.pop(hosted.name, None)
                hosted.vanish()
                vanished.append(hosted)
                self.gone.append((hosted.name, hosted.ws.root, f"its folder {hosted.ws.root} was deleted or moved away"))
                self.say(f"WARNING: workspace {hosted.name}: its folder {hosted.ws.root} was deleted or moved away "
                         "under the service; no longer served, nothing of it re-created (restore the folder to serve "
                         f"it again, or `dreamflow workspace remove {hosted.name}`)")
            elif hosted.vanished and present and hosted.claim():
                hosted.vanished = False
                self._add(hosted)
                self.say(f"Workspace   {hosted.name}: its folder {hosted.ws.root} is back; served again")
        return vanished

    def clean_temps(self) -> None:
        """Remove the temp files of writers that died since (a killed job's half-written `metadata/usage.jsonl`,
        checkpoint or card): `recover` does it when a workspace is opened, this while the service runs."""
        for hosted in list(self.hosted.values()):
            if not hosted.vanished:
                removed = hosted.ws.clean_stale_temps()
                if removed:
                    self.say(f"Cleaned     {len(removed)} temp file(s) a killed job left in {hosted.name}: "
                             f"{', '.join(removed[:5])}")

    def folder_made(self) -> bool:
        """Whether the missing folder of a registered workspace exists now (`refresh(force=True)` serves it)."""
        return any(why == "missing" and name in self.registry.entries and self.registry.entries[name].path.is_dir()
                   for name, why in self.skipped.items())

    def publish(self, info: dict) -> None:
        """Write `metadata/service.json` into every served workspace (and those served later)."""
        self._service_info = info
        for hosted in list(self.hosted.values()):
            hosted.write_service_file(info)

    def close(self) -> None:
        for hosted in list(self.hosted.values()):
            hosted.close()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=10)

    # -- bounded open indexes

    def _touch(self, hosted: Hosted) -> None:
        limit = max(1, self.settings.max_open_indexes)
        with self._guard:
            self._recent.pop(hosted.name, None)
            self._recent[hosted.name] = None
            hosted.memory.db.hold()
            while len(self._recent) > limit:
                name, _ = self._recent.popitem(last=False)
                if name in self.hosted:
                    self.hosted[name].memory.db.release()  # reopened by its next call

    def _registry_stamp(self):
        try:
            st = self.registry.path.stat()
            return st.st_mtime_ns, st.st_size
        except OSError:
            return None

