"""Named workspaces: `$DREAMFLOW_HOME/workspaces.yaml`, a small file people may edit by hand.

    default: personal                     # what unscoped calls mean (optional)
    workspaces:
      personal:
        path: /home/me/memory
      web-app:
        path: /home/me/src/web-app/.dreamflow
        reads: [personal]                 # its searches also read these (declared sharing, never implicit)
        folders: [/home/me/src/web-app]   # agent sessions whose cwd is under these go here (the hooks)
        timezone: Europe/Berlin           # settings where it differs from the service's
        dream_cron: "10 3 * * *"
        optimize_cron: "40 4 * * *"

One folder and one index per workspace: no workspace lies inside another or overlaps Dreamflow's own home
(Prefect's database, logs), so nothing of one is ever indexed as the other. `resolve` turns what a caller
names (`--workspace NAME|DIR`, `DREAMFLOW_WORKSPACE`) into a folder; a folder that is not registered keeps
working as before, under the name `default`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.settings import dreamflow_home
from storage.errors import InvalidInput, NotFound

FILE = "workspaces.yaml"
UNREGISTERED = "default"  # the name a served folder that is not in the registry goes by
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
SETTINGS = ("timezone", "dream_cron", "optimize_cron")  # per-workspace settings the registry may hold
HEADER = ("# Dreamflow workspaces: name -> folder, plus per-workspace settings (see docs/workspaces.md).\n"
          "# Edit by hand or with `dreamflow workspace add | remove`; removing an entry never deletes files.\n")


@dataclass
class Entry:
    """One registered workspace."""

    name: str
    path: Path
    reads: list[str] = field(default_factory=list)
    folders: list[Path] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)

    def as_yaml(self) -> dict:
        data: dict = {"path": str(self.path)}
        if self.reads:
            data["reads"] = list(self.reads)
        if self.folders:
            data["folders"] = [str(f) for f in self.folders]
        data.update(self.settings)
        return data


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidInput(f"workspace name {name!r} must be 1-63 lower-case letters, digits, '-' or '_', "
                           "starting with a letter or digit")
    return name


def _folder(value) -> Path:
    return Path(str(value)).expanduser().resolve()


def overlaps(a: Path, b: Path) -> bool:
    """True when one folder is the other or lies inside it."""
    return a == b or a in b.parents or b in a.parents


def check_apart_from_home(root: Path) -> Path:
    """`root` unless it shares a folder with Dreamflow's home (its Prefect database and logs would be indexed
    as memory, or memory kept among them)."""
    state = _folder(dreamflow_home())
    if overlaps(root, state):
        raise InvalidInput(
            f"the workspace {root} and Dreamflow's own folder {state} (Prefect's database, logs) overlap: "
            "choose another workspace with --workspace or DREAMFLOW_WORKSPACE, or move Dreamflow's folder "
            "with DREAMFLOW_HOME")
    return root


@dataclass
class Registry:
    """The parsed registry file (empty when there is none)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    default: str | None = None
    path: Path = field(default_factory=lambda: dreamflow_home() / FILE)

    # -- reading

    @classmethod
    def load(cls, path: Path | None = None) -> Registry:
        path = path or dreamflow_home() / FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path=path)
        except OSError as exc:
            raise InvalidInput(f"cannot read the workspace registry {path}: {exc}") from None
        from storage.yaml_load import load

        try:
            data = load(text)[0] if text.strip() else {}
        except Exception as exc:
            raise InvalidInput(f"the workspace registry {path} is not valid YAML: {exc}") from None
        return cls.parse(data or {}, path)

    @classmethod
    def parse(cls, data, path: Path) -> Registry:
        if not isinstance(data, dict):
            raise InvalidInput(f"the workspace registry {path} must be a mapping with `workspaces:`")
        registry = cls(path=path)
        for name, item in (data.get("workspaces") or {}).items():
            where = f"workspace {name!r} in {path}"
            check_name(str(name))
            if isinstance(item, str):
                item = {"path": item}
            if not isinstance(item, dict) or not item.get("path"):
                raise InvalidInput(f"{where} needs a `path`")
            reads = item.get("reads") or []
            folders = item.get("folders") or []
            if not isinstance(reads, list) or not isinstance(folders, list):
                raise InvalidInput(f"{where}: `reads` and `folders` must be lists")
            settings = {k: str(item[k]) for k in SETTINGS if item.get(k) not in (None, "")}
            unknown = set(item) - {"path", "reads", "folders", *SETTINGS}
            if unknown:
                raise InvalidInput(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}")
            registry.entries[str(name)] = Entry(str(name), _folder(item["path"]), [check_name(str(r)) for r in reads],
                                                [_folder(f) for f in folders], settings)
        default = data.get("default")
        if default is not None and str(default) not in registry.entries:
            raise InvalidInput(f"the default workspace {default!r} in {path} is not registered")
        registry.default = str(default) if default is not None else None
        return registry

    def get(self, name: str) -> Entry:
        try:
            return self.entries[name]
        except KeyError:
            raise NotFound(f"no workspace {name!r}") from None

    def name_of(self, root: Path) -> str | None:
        """The registered name of a folder, if any."""
        return next((e.name for e in self.entries.values() if e.path == root), None)

    def for_cwd(self, cwd: str | os.PathLike[str] | None) -> str | None:
        """The workspace whose `folders` (or own folder) hold `cwd`, the longest match winning."""
        if not cwd:
            return None
        here = _folder(cwd)
        best, depth = None, -1
        for entry in self.entries.values():
            for folder in [*entry.folders, entry.path]:
                if (here == folder or folder in here.parents) and len(folder.parts) > depth:
                    best, depth = entry.name, len(folder.parts)
        return best

    # -- changing (`dreamflow workspace add | remove`)

    def add(self, name: str, path: str | os.PathLike[str], reads: list[str] | None = None,
            folders: list[str] | None = None, settings: dict[str, str] | None = None) -> Entry:
        """Register (or update) `name` -> `path`; refuses folders that overlap another workspace or the home."""
        check_name(name)
        root = check_apart_from_home(_folder(path))
        for other in self.entries.values():
            if other.name != name and overlaps(other.path, root):
                raise InvalidInput(f"{root} overlaps workspace {other.name!r} ({other.path}): each workspace needs "
                                   "its own folder, neither inside the other")
        for r in reads or []:
            if r == name:
                raise InvalidInput("a workspace reads itself anyway: leave it out of --reads")
            self.get(check_name(r))
        entry = Entry(name, root, list(reads or []), [_folder(f) for f in folders or []], dict(settings or {}))
        self.entries[name] = entry
        return entry

    def remove(self, name: str) -> Entry:
        entry = self.get(name)
        del self.entries[name]
        for other in self.entries.values():
            other.reads = [r for r in other.reads if r != name]
        if self.default == name:
            self.default = None
        return entry

    def save(self) -> None:
        """Write the file atomically (a temp file renamed over it)."""
        import yaml

        data: dict = {}
        if self.default:
            data["default"] = self.default
        data["workspaces"] = {name: e.as_yaml() for name, e in sorted(self.entries.items())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
        os.replace(tmp, self.path)


def resolve(value: str | os.PathLike[str] | None = None, cwd: str | os.PathLike[str] | None = None,
            registry: Registry | None = None) -> tuple[str, Path]:
    """(name, folder) of the workspace a caller means.

    `value` is a registered name or a folder (created on first use); without it: `DREAMFLOW_WORKSPACE`, else the
    registered workspace whose `folders` hold `cwd`, else the registry's `default`, else `./.dreamflow`. A folder
    that is not registered is called `default`. Refuses a folder overlapping Dreamflow's home.
    """
    registry = registry if registry is not None else Registry.load()
    if value in (None, ""):
        value = os.environ.get("DREAMFLOW_WORKSPACE") or None
    if value in (None, ""):
        value = registry.for_cwd(cwd if cwd is not None else os.getcwd()) or registry.default or ".dreamflow"
    text = str(value)
    if text in registry.entries:
        entry = registry.entries[text]
        return entry.name, check_apart_from_home(entry.path)
    root = check_apart_from_home(_folder(text))
    return registry.name_of(root) or UNREGISTERED, root


def resolve_name(name: str, registry: Registry | None = None) -> Path:
    """The folder of a workspace *name* (what jobs are given; never a path): registered, or `default` for the
    folder `DREAMFLOW_WORKSPACE` (or `./.dreamflow`) names when it is not registered."""
    registry = registry if registry is not None else Registry.load()
    check_name(name)
    if name in registry.entries:
        return check_apart_from_home(registry.entries[name].path)
    if name == UNREGISTERED:
        found, root = resolve(os.environ.get("DREAMFLOW_WORKSPACE") or ".dreamflow", cwd="", registry=registry)
        if found == UNREGISTERED:
            return root
    raise NotFound(f"no workspace {name!r}")
