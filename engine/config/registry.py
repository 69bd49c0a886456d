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

Whatever a hand edit gets wrong is an error naming `workspaces.yaml:LINE` and what is wrong (`_Reader`); so is
an empty file (0 bytes, blanks or comments only: a write cut short, since `save` always writes `workspaces:`);
no file means no workspaces. One folder and one index per workspace: no workspace lies inside another or
overlaps Dreamflow's own home (Prefect's database, logs), so nothing of one is ever indexed as the other.
`resolve` turns what a caller names (`--workspace NAME|DIR`, `DREAMFLOW_WORKSPACE`) into a folder; a folder
that is not registered keeps working as before, under the name `default`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.config.settings import dreamflow_home
from storage.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from yaml.nodes import Node  # imported only when a registry file is read (the CLI starts without yaml)

FILE = "workspaces.yaml"
UNREGISTERED = "default"  # the name a served folder that is not in the registry goes by
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
SETTINGS = ("timezone", "dream_cron", "optimize_cron")  # per-workspace settings the registry may hold
MAX_BYTES = 1 << 20  # a registry larger than this is refused unread (a thousand workspaces take ~100 KiB)
CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?#-]+$")
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
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


def check_setting(key: str, value: str) -> str:
    """`value` when it fits setting `key`: an IANA timezone, or a cron of five fields (or @daily and its kin);
    checked here because the nightly schedules are built from it when the service starts."""
    if key == "timezone":
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput(f"timezone {value!r} is not an IANA timezone such as Europe/Berlin or UTC") from None
    elif value not in CRON_MACROS and not (len(value.split()) == 5 and all(map(CRON_FIELD.match, value.split()))):
        raise InvalidInput(f"{key} {value!r} is not a cron schedule of five fields, such as \"0 3 * * *\"")
    return value


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
        """The registry in `path` (default: the home's); none there means no workspaces, an empty file is an
        error (a write cut short). Anything wrong is an InvalidInput naming `file:line` and what to fix (see `_Reader`)."""
        path = path or dreamflow_home() / FILE
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_BYTES + 1)
        except FileNotFoundError:
            return cls(path=path)
        except OSError as exc:
            raise InvalidInput(f"cannot read the workspace registry {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_BYTES:
            raise InvalidInput(f"the workspace registry {path} is larger than {MAX_BYTES // 1024} KiB: is it the "
                               "right file? (a registry of a thousand workspaces is about 100 KiB)")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[:exc.start].count(b"\n") + 1
            raise InvalidInput(f"workspace registry {path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); "
                               "save it as UTF-8") from None
        return _Reader(path).registry(text)

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
        for key, value in (settings or {}).items():
            check_setting(key, value)
        entry = Entry(name, root, list(reads or []), [_folder(f) for f in folders or []], dict(settings or {}))
        try:  # made now: a registered folder that is missing later was deleted, and nothing re-creates it
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"cannot make the folder {root} of workspace {name!r}: {exc.strerror or exc}") from None
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


class _Reader:
    """Reads the registry's YAML nodes (storage.text.yaml_load.compose: bounded, with lines), so that whatever a hand
    edit left (a list, a number, a null, a duplicate name, a file cut in half) is an InvalidInput naming
    `file:line` and what is wrong, never a traceback. Unknown keys are errors too: a typo (`folder:`, `read:`)
    would otherwise silently route or share nothing."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, node: Node, what: str) -> InvalidInput:
        return InvalidInput(f"workspace registry {self.path}:{node.start_mark.line + 1}: {what}")

    def registry(self, text: str) -> Registry:
        import yaml

        from storage.text.yaml_load import compose

        try:
            root = compose(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{self.path}:{mark.line + 1}" if mark else str(self.path)
            context = f"{exc.context} (line {exc.context_mark.line + 1}), " if exc.context and exc.context_mark else ""
            raise InvalidInput(f"workspace registry {where}: not valid YAML: {context}{exc.problem}") from None
        except yaml.YAMLError as exc:  # an alias bomb, values nested too deeply
            raise InvalidInput(f"the workspace registry {self.path} is refused: {exc}") from None
        registry = Registry(path=self.path)
        if root is None or _is_null(root):
            raise InvalidInput(
                f"the workspace registry {self.path} is empty (no `workspaces:`, at most comments): Dreamflow never "
                "writes it so, a write was cut short. Restore it from a backup, or delete it and register the "
                "workspaces again with `dreamflow workspace add NAME FOLDER` (their files stay); "
                "`workspaces: {}` means no workspaces")
        top = self.mapping(root, "the registry", "with `workspaces:` and optionally `default:`")
        self.known(top, ("default", "workspaces"))
        fields: dict[str, dict[str, Node]] = {}  # each workspace's keys -> value nodes
        if "workspaces" in top and not _is_null(top["workspaces"][1]):
            for name, (key, item) in self.mapping(top["workspaces"][1], "`workspaces`", "of names").items():
                self.check(key, check_name, name)
                fields[name] = self.fields(name, key, item)
                registry.entries[name] = self.entry(name, fields[name])
        self.check_folders(registry, fields)
        for name, entry in registry.entries.items():
            for node, read in self.list_of(fields[name].get("reads"), f"`reads` of workspace {name!r}"):
                if read == name:
                    raise self.error(node, f"workspace {name!r} reads itself anyway: leave it out of `reads`")
                if read not in registry.entries:
                    raise self.error(node, f"workspace {name!r} reads {read!r}, which is not in `workspaces`")
                if read not in entry.reads:
                    entry.reads.append(read)
        if "default" in top and not _is_null(top["default"][1]):
            node = top["default"][1]
            registry.default = self.text(node, "`default`")
            if registry.default not in registry.entries:
                raise self.error(node, f"the default workspace {registry.default!r} is not in `workspaces`")
        return registry

    def fields(self, name: str, key: Node, item: Node) -> dict[str, Node]:
        """The keys of one workspace: `NAME: FOLDER`, or a mapping of `path`, `reads`, `folders` and settings."""
        where = f"workspace {name!r}"
        if item.id == "scalar" and not _is_null(item):
            return {"path": item}
        if item.id != "mapping":
            raise self.error(key, f"{where} needs a `path` (its folder), not {_kind(item)}")
        found = self.mapping(item, where, "")
        self.known(found, ("path", "reads", "folders", *SETTINGS))
        if "path" not in found or _is_null(found["path"][1]):
            raise self.error(key, f"{where} needs a `path` (its folder)")
        return {field_name: value for field_name, (_, value) in found.items()}

    def entry(self, name: str, fields: dict[str, Node]) -> Entry:
        """The workspace's folder, `folders` and settings (its `reads` are checked once every name is known)."""
        where = f"workspace {name!r}"
        settings = {}
        for key in SETTINGS:
            value = self.text(fields[key], f"`{key}` of {where}") if key in fields and not _is_null(fields[key]) else ""
            if value:
                settings[key] = self.check(fields[key], check_setting, key, value)
        folders = [self.folder(node, f"a folder in `folders` of {where}")
                   for node, _ in self.list_of(fields.get("folders"), f"`folders` of {where}")]
        return Entry(name, self.folder(fields["path"], f"the folder of {where}"), [], folders, settings)

    def check_folders(self, registry: Registry, fields: dict[str, dict[str, Node]]) -> None:
        """No workspace overlaps Dreamflow's home or another workspace (what `add` refuses, for hand edits)."""
        home, seen = _folder(dreamflow_home()), []
        for entry in registry.entries.values():
            node = fields[entry.name]["path"]
            if overlaps(entry.path, home):
                raise self.error(node, f"the folder {entry.path} of workspace {entry.name!r} overlaps Dreamflow's own "
                                       f"folder {home} (Prefect's database, logs, this file): give it a folder apart")
            other = next((e for e in seen if overlaps(e.path, entry.path)), None)
            if other is not None:
                raise self.error(node, f"the folder {entry.path} of workspace {entry.name!r} overlaps workspace "
                                       f"{other.name!r} ({other.path}): each workspace needs its own folder")
            seen.append(entry)

    # -- nodes

    def mapping(self, node: Node, what: str, hint: str) -> dict[str, tuple[Node, Node]]:
        """key -> (key node, value node) of a mapping whose keys are distinct text."""
        if node.id != "mapping":
            raise self.error(node, f"{what} must be a mapping{' ' + hint if hint else ''}, not {_kind(node)}")
        found: dict[str, tuple[Node, Node]] = {}
        for key, value in node.value:
            name = self.text(key, f"a key in {what}")
            if name in found:
                raise self.error(key, f"{name!r} appears twice in {what} (first at line "
                                      f"{found[name][0].start_mark.line + 1}): keep one")
            found[name] = (key, value)
        return found

    def known(self, found: dict[str, tuple[Node, Node]], keys: tuple[str, ...]) -> None:
        for name, (key, _) in found.items():
            if name not in keys:
                raise self.error(key, f"unknown key {name!r} (known here: {', '.join(keys)})")

    def text(self, node: Node, what: str) -> str:
        if node.id == "scalar" and node.tag == TEXT:
            return node.value
        shown = f" ({node.value!r}: put it in quotes if it is meant as text)" if node.id == "scalar" else ""
        raise self.error(node, f"{what} must be text, not {_kind(node)}{shown}")

    def list_of(self, node: Node | None, what: str) -> list[tuple[Node, str]]:
        """(node, text) of each item of a list of text (none for a missing or empty value)."""
        if node is None or _is_null(node):
            return []
        if node.id != "sequence":
            raise self.error(node, f"{what} must be a list ([x, y], or one `- x` per line), not {_kind(node)}")
        return [(item, self.text(item, f"an item of {what}")) for item in node.value]

    def folder(self, node: Node, what: str) -> Path:
        text = self.text(node, what)
        if not os.path.isabs(os.path.expanduser(text)):
            raise self.error(node, f"{what} must be an absolute folder (or start with ~), not {text!r}")
        return _folder(text)

    def check(self, node: Node, check, *args):
        """`check(*args)`, its InvalidInput naming the node's line."""
        try:
            return check(*args)
        except InvalidInput as exc:
            raise self.error(node, str(exc)) from None


TEXT = "tag:yaml.org,2002:str"
KINDS = {"int": "a number", "float": "a number", "bool": "true/false", "null": "empty", "timestamp": "a date",
         "binary": "binary data", "merge": "a merge key (<<)", "seq": "a list", "map": "a mapping", "set": "a set",
         "omap": "an ordered mapping", "pairs": "a list of pairs", "str": "text"}


def _kind(node: Node) -> str:
    if node.tag.startswith("tag:yaml.org,2002:"):
        return KINDS.get(node.tag.rsplit(":", 1)[1], node.tag)
    return f"a value tagged {node.tag}"


def _is_null(node: Node) -> bool:
    return node.tag == "tag:yaml.org,2002:null"


def resolve(value: str | os.PathLike[str] | None = None, cwd: str | os.PathLike[str] | None = None,
            registry: Registry | None = None) -> tuple[str, Path]:
    """(name, folder) of the workspace a caller means.

    `value` is a registered name (its folder must exist: `present`) or a folder (created on first use); without
    it: `DREAMFLOW_WORKSPACE`, else the registered workspace whose `folders` hold `cwd`, else the registry's
    `default`, else `./.dreamflow`. A folder that is not registered is called `default`. Refuses a folder
    overlapping Dreamflow's home.
    """
    registry = registry if registry is not None else Registry.load()
    if value in (None, ""):
        value = os.environ.get("DREAMFLOW_WORKSPACE") or None
    if value in (None, ""):
        value = registry.for_cwd(cwd if cwd is not None else os.getcwd()) or registry.default or ".dreamflow"
    text = str(value)
    if text in registry.entries:
        entry = registry.entries[text]
        return entry.name, present(entry)
    root = check_apart_from_home(_folder(text))
    name = registry.name_of(root)
    return (name, present(registry.entries[name])) if name else (UNREGISTERED, root)


def present(entry: Entry) -> Path:
    """The folder of a registered workspace, refused when it is missing (`workspace add` makes it, so it was deleted
    or moved away): a CLI command or a job run must not make a new, empty workspace there."""
    root = check_apart_from_home(entry.path)
    if not root.is_dir():
        raise NotFound(f"the folder {root} of workspace {entry.name!r} does not exist (deleted or moved away, or "
                       f"never made by a hand edit): restore it, or make it with `dreamflow workspace add {entry.name} "
                       f"{root}`, or forget the workspace with `dreamflow workspace remove {entry.name}`")
    return root


def resolve_name(name: str, registry: Registry | None = None) -> Path:
    """The folder of a workspace *name* (what jobs are given; never a path): registered, or `default` for the
    folder `DREAMFLOW_WORKSPACE` (or `./.dreamflow`) names when it is not registered."""
    registry = registry if registry is not None else Registry.load()
    check_name(name)
    if name in registry.entries:
        return present(registry.entries[name])
    if name == UNREGISTERED:
        found, root = resolve(os.environ.get("DREAMFLOW_WORKSPACE") or ".dreamflow", cwd="", registry=registry)
        if found == UNREGISTERED:
            return root
    raise NotFound(f"no workspace {name!r}")
