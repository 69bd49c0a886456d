"""An operation call that names a workspace: the grant check, the caller's default, and searches across
workspaces (declared sharing).

Every surface (HTTP routes, MCP tools and resources, the CLI) calls `call(catalog, grant, name, op, args)`.
A catalog is what serves workspaces: the service's hosts (dreamflow/service/hosting.py), or `LocalCatalog` for the
CLI without a service. A workspace outside the grant answers exactly as one that does not exist.

`search`, `node_search` and `recall` take `workspaces`: the workspaces to read, merged by score (recall: its
pieces ranked together in one token budget); without it, the workspace and those its registry entry `reads`
(only those the grant covers). Every hit names its `workspace`; its `address` is how this workspace's calls
name its file: `path` for its own, `NAME:path` for another workspace's (`personal:digest/x.md`).

A path `NAME:rest` (NAME a workspace name, `rest` a path) names file `rest` of workspace NAME: a reading call
(read, stat, trace, list, ...) follows it there, when the grant covers NAME (else: no such workspace, as for one
that does not exist); a writing call takes it only for its own workspace (writes always go to exactly one
workspace, named by the call). `./NAME:rest` is a file of this workspace whose name holds a colon. Links never
leave a workspace.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from engine.config.grants import UNKNOWN_WORKSPACE, Grant
from storage.errors import InvalidInput, NotFound

ADDRESS = re.compile(r"^([a-z0-9][a-z0-9_-]{0,62}):(?![/\\])(.+)$", re.S)  # NAME:path (names as engine/config/registry.py)
PATH_ARGS = ("path", "paths", "src", "dst", "prefix", "target", "new_target")  # arguments that name files
SEARCH_THREADS = 4  # workspaces searched at once by one call (DuckDB releases the GIL while it works)


class SurfaceMemory(Protocol):
    """What a surface (HTTP, MCP, the hook, the dashboard) calls on a workspace's memory, a catalog's
    `memory(name)`: `storage.memory.Memory` in this process, or `engine.access.client.RemoteMemory` through the
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
        """The memory of workspace `name`: a `storage.memory.Memory`, or an `engine.access.client.RemoteMemory` when
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
    """Run operation `op` (an `engine.ops.Op`) with `args` in the named (or default) workspace, or in the one
    its paths name (`NAME:path`)."""
    if op.name == "recall":
        return recall_across(catalog, grant, name, dict(args))
    if op.across:
        return search_across(catalog, grant, name, op.name, dict(args))
    own = name or default_for(catalog, grant)
    name, args = routed(catalog, grant, own, op.writes, args)
    name, memory = open_scoped(catalog, grant, name, op.writes)
    result = getattr(memory, op.method_name)(**args)
    return {**result, "workspace": name} if name != own and isinstance(result, dict) else result


def split_address(text: str) -> tuple[str | None, str]:
    """(workspace, path) of `NAME:path`; (None, text) for a plain path."""
    found = ADDRESS.match(text) if isinstance(text, str) else None
    return (found.group(1), found.group(2)) if found else (None, text)


def address(own: str, workspace: str, path: str) -> str:
    """How calls of workspace `own` name file `path` of `workspace`: the path, or `workspace:path`."""
    return path if workspace == own else f"{workspace}:{path}"


def routed(catalog: Catalog, grant: Grant, name: str, writes: bool, args: dict[str, Any]) -> tuple[str, dict]:
    """(workspace, args without the `NAME:` of their paths) of a call in `name` whose paths may name another
    workspace: a read goes there; a write only names its own; one call, one workspace."""
    named: set[str] = set()
    plain = dict(args)
    for key in PATH_ARGS:
        value = args.get(key)
        if isinstance(value, str):
            other, plain[key] = split_address(value)
            named |= {other} - {None}
        elif isinstance(value, list):
            pairs = [split_address(v) for v in value]
            plain[key] = [p for _, p in pairs]
            named |= {w for w, _ in pairs} - {None}
    if not named:
        return name, args
    for other in named:
        if not (grant.sees(other) and catalog.serves(other)):
            raise NotFound(f"{UNKNOWN_WORKSPACE}: {other!r} in `{other}:...` (`NAME:path` names a file of workspace "
                           f"NAME; write ./{other}:... for a file of this workspace with a colon in its name)")
    if len(named) > 1 or (named != {name} and writes):
        where = ", ".join(sorted(named))
        raise InvalidInput(f"this call names files of workspace {where}: "
                           + ("one call reads one workspace" if not writes else
                              f"a write goes to the workspace of the call ({name}); name the workspace with "
                              f"--workspace (`workspace` over HTTP and MCP) and the path without its `NAME:`"))
    return named.pop(), plain


def reading(catalog: Catalog, grant: Grant, name: str | None, wanted: list[str] | None) -> tuple[str, list[str]]:
    """(the call's workspace, the workspaces it reads): `wanted` when given (each checked against the grant),
    else the workspace and those it declares it reads that the grant covers."""
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
    return name, names


def search_across(catalog: Catalog, grant: Grant, name: str | None, op_name: str, args: dict[str, Any]) -> list[dict]:
    """`search` / `node_search` over one or several workspaces, hits merged by score, each naming its workspace
    and its `address` (engine/access/scoped.py's docstring)."""
    name, names = reading(catalog, grant, name, args.pop("workspaces", None))
    limit = args.get("limit", 10 if op_name == "search" else 20)

    def hits_of(other: str) -> list[dict]:
        memory = catalog.memory(other)
        own = {"workspaces": [other]} if getattr(memory, "workspace", None) else {}  # a service's: only its own
        return [{**hit, "workspace": other, "address": address(name, other, hit["path"])}
                for hit in getattr(memory, op_name)(**args, **own)]

    if len(names) == 1:
        return hits_of(names[0])
    with ThreadPoolExecutor(max_workers=min(len(names), SEARCH_THREADS)) as pool:  # one index each: in parallel
        hits = [hit for found in pool.map(hits_of, names) for hit in found]
    hits.sort(key=lambda h: (h.get("score") or 0, h.get("bm25") or 0), reverse=True)
    return hits[:limit]


def recall_across(catalog: Catalog, grant: Grant, name: str | None, args: dict[str, Any]) -> dict:
    """`recall` over the workspaces search reads: each gives its evidence (without what the session was given),
    the pieces are ranked together into the one budget (storage.search.recall.merge), each naming its workspace, and
    the session's record (in the call's workspace) keeps what was given."""
    from storage.search import recall as recall_store

    name, names = reading(catalog, grant, name, args.pop("workspaces", None))
    own = catalog.memory(name)
    if not _in_process(own):  # a service's: it fans out
        return own.recall(**args, workspaces=names)
    if names == [name]:
        answer = own.recall(**args)
        return {**answer, "items": [{**item, "workspace": name} for item in answer["items"]]}
    session = args.pop("session", None)
    given = recall_store.given(own.ws, session) if session else set()

    def evidence(other: str) -> dict:
        memory = catalog.memory(other)
        if _in_process(memory):
            return memory.evidence(**args, given=given)[0]
        return memory.recall(**args, workspaces=[other])  # through its own service: no record of the session

    with ThreadPoolExecutor(max_workers=min(len(names), SEARCH_THREADS)) as pool:
        parts = list(zip(names, pool.map(evidence, names)))
    answer, keys = recall_store.merge(name, parts, args.get("budget", 2000), given)
    if session and not own.db.read_only:
        recall_store.remember(own.ws, session, keys, query=args["query"], items=answer["items"])
    return {**answer, "session": session}


def _in_process(memory) -> bool:
    """Whether `memory` is a `storage.memory.Memory` of this process (it gives `evidence`), not a RemoteMemory
    (the `SurfaceMemory` operations only)."""
    return hasattr(memory, "evidence")


class LocalCatalog:
    """The registered workspaces as the CLI sees them without a service (each reached as engine/access/client.py
    decides: through its own running service when there is one, else in this process)."""

    def __init__(self, default_name: str, default_root: Path, registry=None):
        from engine.config.registry import Registry

        self.registry = registry if registry is not None else Registry.load()
        self.default_name, self.default_root = default_name, default_root

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
        from engine.access.client import open_memory

        return open_memory(self.root(name))
