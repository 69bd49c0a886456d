"""An operation call that names a workspace: the grant check, the caller's default, and searches across
workspaces (declared sharing).

Every surface (HTTP routes, MCP tools and resources, the CLI) calls `call(catalog, grant, name, op, args)`.
A catalog is what serves workspaces: the service's hosts (dreamflow/service/hosting.py), or `LocalCatalog` for the
CLI without a service. A workspace outside the grant answers exactly as one that does not exist.

`search` and `node_search` take `workspaces`: the workspaces to search, merged by score; without it, the
workspace and those its registry entry `reads` (only those the grant covers). Every hit names its workspace.
Writes always go to exactly one workspace; links never leave one.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from engine.grants import UNKNOWN_WORKSPACE, Grant
from storage.errors import NotFound

SEARCH_THREADS = 4  # workspaces searched at once by one call (DuckDB releases the GIL while it works)


class SurfaceMemory(Protocol):
    """What a surface (HTTP, MCP, the hook, the dashboard) calls on a workspace's memory, a catalog's
    `memory(name)`: `storage.memory.Memory` in this process, or `engine.client.RemoteMemory` through the
    workspace's service. Besides these, one method per `engine.ops.OPS` operation (`Op.method_name`), whose
    parameters are the `Memory` method's: declared there once (RemoteMemory builds its methods from them), so
    not written again here. tests/test_architecture.py checks both classes against this."""

    def download_content(self, path: str) -> tuple[str, bytes]:
        """(workspace path, bytes) of a file: what MCP resources and `POST /ops/download` answer with."""


@runtime_checkable
class Catalog(Protocol):
    """What serves workspaces by name: `LocalCatalog` (the CLI, the stdio MCP server's `WorkspaceTarget`), the
    service's `Hosts` and its MCP `ServiceTarget`, the API's `SingleWorkspace` (an app over one memory)."""

    default_name: str  # the workspace a caller means when it names none (if its grant covers it)

    def names(self) -> list[str]:
        """The workspaces served."""

    def serves(self, name: str) -> bool:
        """Whether `name` is served here."""

    def reads(self, name: str) -> list[str]:
        """The workspaces `name`'s searches also read (its registry entry's `reads`)."""

    def root(self, name: str) -> Path:
        """The folder of workspace `name`."""

    def memory(self, name: str) -> SurfaceMemory:
        """The memory of workspace `name`: a `storage.memory.Memory`, or an `engine.client.RemoteMemory` when
        its service runs elsewhere (`SurfaceMemory`)."""


def default_for(catalog: Catalog, grant: Grant) -> str:
    """The workspace a caller means when it names none: the catalog's default when granted, else the first
    workspace the grant covers."""
    if grant.sees(catalog.default_name) and catalog.serves(catalog.default_name):
        return catalog.default_name
    for name in sorted(grant.workspaces or ()):
        if catalog.serves(name):
            return name
    raise NotFound("no workspace: this token grants none that this service serves")


def open_scoped(catalog: Catalog, grant: Grant, name: str | None, writes: bool):
    """(name, memory) of the workspace a call is for, after the grant check."""
    name = name or default_for(catalog, grant)
    grant.check(name, writes)
    if not catalog.serves(name):
        raise NotFound(UNKNOWN_WORKSPACE)
    return name, catalog.memory(name)


def visible(catalog: Catalog, grant: Grant) -> list[str]:
    """The served workspaces the grant covers."""
    return [n for n in catalog.names() if grant.sees(n)]


def list_workspaces(catalog: Catalog, grant: Grant) -> list[dict[str, Any]]:
    """The workspaces a caller may use (`GET /workspaces`, the MCP `workspaces` tool): name, whether it is the
    default, what its searches also read, whether the caller may change it, and for the admin its folder."""
    rows = []
    for name in visible(catalog, grant):
        row = {"name": name, "default": name == catalog.default_name,
               "reads": [r for r in catalog.reads(name) if grant.sees(r) and catalog.serves(r)],
               "writable": not grant.read_only}
        if grant.admin:
            row["path"] = str(catalog.root(name))
        rows.append(row)
    return rows


def call(catalog: Catalog, grant: Grant, name: str | None, op, args: dict[str, Any]):
    """Run operation `op` (an `engine.ops.Op`) with `args` in the named (or default) workspace."""
    if op.across:
        return search_across(catalog, grant, name, op.name, dict(args))
    name, memory = open_scoped(catalog, grant, name, op.writes)
    return getattr(memory, op.method_name)(**args)


def search_across(catalog: Catalog, grant: Grant, name: str | None, op_name: str, args: dict[str, Any]) -> list[dict]:
    """`search` / `node_search` over one or several workspaces, hits merged by score, each naming its workspace."""
    wanted = args.pop("workspaces", None)
    name = name or default_for(catalog, grant)
    if wanted:
        names = list(dict.fromkeys(wanted))
        for other in names:
            grant.check(other, False)
            if not catalog.serves(other):
                raise NotFound(UNKNOWN_WORKSPACE)
    else:
        grant.check(name, False)
        if not catalog.serves(name):
            raise NotFound(UNKNOWN_WORKSPACE)
        names = [name] + [r for r in catalog.reads(name) if r != name and grant.sees(r) and catalog.serves(r)]
    limit = args.get("limit", 10 if op_name == "search" else 20)

    def hits_of(other: str) -> list[dict]:
        memory = catalog.memory(other)
        own = {"workspaces": [other]} if getattr(memory, "workspace", None) else {}  # a service's: only its own
        return [{**hit, "workspace": other} for hit in getattr(memory, op_name)(**args, **own)]

    if len(names) == 1:
        return hits_of(names[0])
    with ThreadPoolExecutor(max_workers=min(len(names), SEARCH_THREADS)) as pool:  # one index each: in parallel
        hits = [hit for found in pool.map(hits_of, names) for hit in found]
    hits.sort(key=lambda h: (h.get("score") or 0, h.get("bm25") or 0), reverse=True)
    return hits[:limit]


class LocalCatalog:
    """The registered workspaces as the CLI sees them without a service (each opened on first use, through its
    own running service when there is one)."""

    def __init__(self, default_name: str, default_root: Path, registry=None):
        from engine.registry import Registry

        self.registry = registry if registry is not None else Registry.load()
        self.default_name, self.default_root = default_name, default_root
        self._open: dict[str, Any] = {}

    def names(self) -> list[str]:
        return list(dict.fromkeys([self.default_name, *self.registry.entries]))

    def serves(self, name: str) -> bool:
        return name == self.default_name or name in self.registry.entries

    def reads(self, name: str) -> list[str]:
        entry = self.registry.entries.get(name)
        return list(entry.reads) if entry else []

    def root(self, name: str) -> Path:
        return self.default_root if name == self.default_name else self.registry.get(name).path

    def memory(self, name: str):
        if name not in self._open:
            from engine.client import open_memory

            self._open[name] = open_memory(self.root(name))
        return self._open[name]
