"""Every memory operation, declared once.

An operation is a method of `storage.memory.Memory`; `OPS` names it and says how the surfaces expose it.
`dreamflow/cli/app.py` builds a click command per entry, the HTTP API a route, the MCP server a tool, all from
the method's signature (type hints, defaults) and docstring: the signature is the operation's one request model,
whose parameters also state their checks (`limit: Count`, storage/arguments.py), run once per call by the
method for every surface. Adding an operation = a `Memory` method + one line here. This module stays
import-light (no pydantic) so the CLI starts fast; schemas are generated on demand.
"""

from __future__ import annotations

import collections.abc
import inspect
import re
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from storage.errors import InvalidInput


@dataclass(frozen=True)
class Op:
    """How one `Memory` method is exposed."""

    name: str                  # tool / route name (snake_case); the CLI command uses dashes
    writes: bool               # changes files (POST) or only reads (GET-like)
    args: tuple[str, ...] = ()  # parameters taken positionally on the CLI, in order
    body: str | None = None    # parameter the CLI may also read from --file or stdin
    method: str | None = None  # Memory method, when it differs from `name`
    destructive: bool = False  # may remove or replace content the caller did not restate (delete, move, overwrite)
    idempotent: bool | None = None  # repeating the call with the same arguments changes nothing more and
                                    # answers the same (default: reads yes, writes no)
    bytes_form: str | None = None  # names files on the caller's machine: CLI only. HTTP calls this Memory
                                   # method instead (bytes in or out); MCP never offers it
    across: bool = False  # may read several workspaces at once (surfaces add `workspaces`, engine/access/scoped.py)

    @property
    def host_paths(self) -> bool:
        return self.bytes_form is not None

    @property
    def cli_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def method_name(self) -> str:
        return self.method or self.name

    @property
    def help(self) -> str:
        """The method docstring: the single description shared by CLI help, API docs and tool schemas."""
        return inspect.getdoc(_memory_method(self)) or ""

    @property
    def summary(self) -> str:
        return first_sentence(self.help)


    @property
    def hints(self) -> dict[str, bool]:
        """MCP tool annotations: what a host may assume about calling this operation."""
        return {"readOnlyHint": not self.writes, "destructiveHint": self.writes and self.destructive,
                "idempotentHint": not self.writes if self.idempotent is None else self.idempotent,
                "openWorldHint": False}


def first_sentence(text: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line (never cut mid-sentence)."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    end = re.search(r"[.!?](\s|$)", paragraph)
    return paragraph[:end.start() + 1] if end else paragraph


OPS: tuple[Op, ...] = (
    # files
    Op("read", writes=False, args=("path",)),
    Op("write", writes=True, args=("path",), body="content", destructive=True, idempotent=True),
    Op("create", writes=True, args=("path",), body="content", idempotent=True),
    Op("edit", writes=True, args=("path",), destructive=True),
    Op("append", writes=True, args=("path",), body="content"),
    Op("prepend", writes=True, args=("path",), body="content"),
    Op("delete", writes=True, args=("path",), destructive=True, idempotent=True),
    Op("move", writes=True, args=("src", "dst"), destructive=True, idempotent=True),
    Op("stat", writes=False, args=("path",)),
    Op("list", writes=False, args=("prefix",)),
    Op("upload", writes=True, args=("source",), destructive=True, idempotent=True, bytes_form="upload_content"),
    Op("download", writes=False, args=("path", "dest"), bytes_form="download_content"),
    # frontmatter, tags, days
    Op("frontmatter_get", writes=False, args=("path",)),
    Op("frontmatter_update", writes=True, args=("path",), destructive=True, idempotent=True),
    Op("frontmatter_delete_keys", writes=True, args=("path", "keys"), destructive=True, idempotent=True),
    Op("tags", writes=False, args=("tag",)),
    Op("daily_list", writes=False, args=("date",)),
    Op("daily_reindex", writes=True, args=("date",), idempotent=True),
    # search and graph
    Op("search", writes=False, args=("query",), across=True),
    Op("recall", writes=False, args=("query",), idempotent=False, across=True),  # records what a session was given under
    # metadata/ (derived state, never memory files), so a repeat answers with what is new
    Op("node_search", writes=False, args=("query",), across=True),
    Op("traverse", writes=False, args=("paths",)),
    Op("trace", writes=False, args=("path", "fact")),
    # graph governance (the `doctor` and `doctor-fix` CLI commands are replaced by dreamflow/cli/governance_commands.py)
    Op("doctor", writes=False),
    Op("doctor_fix", writes=True, destructive=True, idempotent=True),  # retargets links in files, as relink does
    Op("relink", writes=True, args=("target", "new_target"), destructive=True, idempotent=True),
    Op("retract", writes=True, args=("path", "fact"), destructive=True),
    # index maintenance (derived state only: never destructive to memory files)
    Op("reindex", writes=True, idempotent=True),
    Op("reconcile", writes=True, idempotent=True),
    Op("index_stats", writes=False),
    Op("optimize", writes=True, idempotent=True),
)

BY_NAME: dict[str, Op] = {op.name: op for op in OPS}

# One description per parameter name, shared by every operation that takes it.
PARAM_HELP: dict[str, str] = {
    "path": "Workspace-relative path of the file, e.g. daily/2024-05-08/trip.md",
    "content": "Text of the file or of the part to add (may start with a frontmatter block)",
    "name": "Frontmatter `name`: a short title",
    "description": "Frontmatter `description`: one sentence saying what the file holds",
    "metadata": "Frontmatter keys to set, as a JSON object or key=value pairs",
    "old": "Exact text to replace",
    "new": "Replacement text",
    "replace_all": "Replace every match instead of requiring exactly one",
    "start_line": "First line to return (1-based)",
    "end_line": "Last line to return (inclusive)",
    "numbered": "Prefix each line with its line number",
    "src": "Current workspace-relative path",
    "dst": "New workspace-relative path (a missing suffix is taken from the source)",
    "prefix": "Folder or path prefix to list; empty for the whole workspace",
    "recursive": "Include files in sub-folders",
    "limit": "Maximum number of results",
    "offset": "Skip this many entries: the `next_offset` of the previous page",
    "max_chars": "Most characters in the answer (whole lines; about 4 characters per token); the answer says "
                 "where to continue",
    "keys": "Frontmatter keys to remove",
    "tag": "Only this tag, with its files",
    "date": "Day as YYYY-MM-DD, or `today`",
    "source": "Path of a file outside the workspace to copy in",
    "dest": "Outside path to copy to: a file, an existing folder, or a folder ending with / (created)",
    "overwrite": "Replace the destination if it exists",
    "sort": "Order: by path, or newest first (mtime)",
    "extensions": "Only files with these extensions, e.g. md or .jsonl",
    "query": "Search text (any language)",
    "budget": "Most tokens the answer may take (estimated: about 4 characters of English per token)",
    "session": "Id of the conversation or agent context the answer goes into (letters, digits, '.', '_', '-'): "
               "what it was given before is not repeated",
    "min_score": "Least raw keyword score (typically 1-20; longer queries score higher): search drops matches "
                 "below it; recall answers nothing unless a match that reaches it has something new (recall "
                 "weighs each word as in a memory of at least 50 chunks, so a score means the same at any size)",
    "min_relevance": "Answer nothing unless something new comes from a keyword match scoring at least this share "
                     "of the query's total term weight (0-2; about 1 when a match carries the whole query; 0.5 "
                     "answers most questions about this memory and few about something else)",
    "min_words": "Answer nothing unless something new comes from a keyword match holding at least this many "
                 "distinct words of the query (2: one shared word, such as 'thanks', is not enough, unless vector "
                 "search finds its text as close to the query as DREAMFLOW_VECTOR_CLOSE)",
    "start_date": "Dated files from this day on (YYYY-MM-DD); undated files stay in unless strict_dates",
    "end_date": "Dated files up to this day (YYYY-MM-DD); undated files stay in unless strict_dates",
    "tags": "Only files with any of these tags (compared case-folded, spaces as _)",
    "strict_dates": "Apply start/end date to every file: drop undated ones (digest nodes) instead of keeping them",
    "path_prefix": "Only files under this path prefix, e.g. digest/",
    "bucket": "Only nodes in this folder of digest/: personal, procedure, wiki or one of your own (e.g. project)",
    "expand": "Linked neighbours to attach per hit (0 = none)",
    "per_file": "Hits per file at most (0 = no cap), fact lines aside (each is a hit of its own); a file's other "
                "matching line ranges are listed in `more`",
    "fact": "The fact: its block id (f2 or ^f2); to trace, also its line number (12 or L12) or path#^f2, or omit "
            "it when the path carries it (digest/people/ana.md#^f2)",
    "paths": "Workspace-relative paths to start from",
    "depth": "How many link hops to follow",
    "direction": "Follow links forward (out), backward (in) or both",
    "predicate": "Only typed links with this predicate (e.g. `uses`)",
    "include_archived": "Also search archived digest nodes (digest/archive/)",
    "as_of": "Only what was valid on this day (YYYY-MM-DD): digest nodes whose validity window holds it, dated "
             "files up to it",
    "history": "Also return superseded and expired digest nodes (left out by default; each hit's status says which)",
    "dup_threshold": "Similarity (0-1) from which two digest nodes count as near-duplicates",
    "stale_days": "Digest nodes nobody links to and not updated for this many days are stale",
    "overlong_lines": "Digest nodes longer than this many lines are split candidates",
    "reason": "Why the fact is wrong, in your words (kept with the retracted fact)",
    "correct": "What is true instead: written as the fact that holds from today, its source you and the day",
    "target": "Link target whose links to repoint",
    "new_target": "Path the links should point to instead",
    "expected_hash": "Refuse (conflict, exit 4) unless the file still has this content hash (the `hash` that read, "
                     "stat and writes return): optimistic concurrency",
    "before": "Text the target had, when it has already been rewritten (line anchors follow it)",
    # jobs (turns and flow runs)
    "session_id": "Conversation id (letters, digits, '.', '_', '-'); the turn goes to session/dialog/<session_id>.jsonl",
    "messages": "Messages of the turn ({role, content, created_at?}); tool results and base64 are dropped, secrets and <private> spans replaced by markers",
    "compact": "Summarise the session now instead of waiting for N turns",
    "turn_id": "Caller's id for the turn: sent again (a retried delivery), it is counted once and messages "
               "already appended (same message `id`) are not appended again",
    "scan_days": "Days of daily files to scan, ending at `date`",
    "max_units": "Most consolidation units per run",
    "topic_count": "New topics to pick for the day",
    "topic_diversity_days": "Avoid topics of this many previous days",
    "run_id": "Id of a flow run, as returned when it was started",
    # workspaces (engine/config/registry.py, engine/access/scoped.py)
    "workspace": "Workspace to use, by name (the `workspaces` tool lists them); default: the connection's",
    "workspaces": "Workspaces to search, by name (several allowed; hits merged by score, each naming its "
                  "workspace, another workspace's file as NAME:path, which read, stat and trace take); default: "
                  "this workspace and the ones it declares it reads",
}


@dataclass(frozen=True)
class Param:
    """One parameter of an operation, as every surface sees it."""

    name: str
    annotation: Any  # resolved type hint, e.g. int | None, list[str], Literal[...]
    default: Any     # inspect.Parameter.empty when required
    help: str

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty


@cache
def parameters(op: Op) -> tuple[Param, ...]:
    """The operation's parameters from the Memory signature; callables (progress callbacks) are left out."""
    return function_parameters(_memory_method(op))


@cache
def surface_parameters(op: Op) -> tuple[Param, ...]:
    """What the surfaces (CLI, HTTP, MCP, the remote client) take: the Memory parameters, plus `workspaces`
    for an operation that reads across workspaces."""
    if not op.across:
        return parameters(op)
    return (*parameters(op), Param("workspaces", list[str] | None, None, PARAM_HELP["workspaces"]))


def function_parameters(fn) -> tuple[Param, ...]:
    """Parameters of any function as the surfaces see them (help from `PARAM_HELP`); `self` and callables
    are left out."""
    hints = typing.get_type_hints(fn)
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self" or _is_callable(hints.get(p.name)):
            continue
        params.append(Param(p.name, hints.get(p.name, str), p.default, PARAM_HELP.get(p.name, "")))
    return tuple(params)


def request_model(op: Op):
    """A pydantic model of the operation's parameters (imported lazily: not on the CLI path)."""
    return params_model(op.name, op.help, surface_parameters(op))


def params_model(name: str, doc: str, params: tuple[Param, ...], config=None):
    """A pydantic model named after `name` (snake_case) with one field per parameter (`config`: a pydantic
    ConfigDict, e.g. to refuse unknown fields)."""
    from pydantic import Field, create_model, model_validator

    fields = {
        p.name: (p.annotation, Field(... if p.required else p.default, description=p.help or None))
        for p in params
    }
    title = "".join(part.title() for part in name.split("_"))
    validators = {"utf8_text": model_validator(mode="before")(refuse_unencodable)}
    return create_model(title, __doc__=doc, __config__=config, __validators__=validators, **fields)


def refuse_unencodable(cls, data: Any) -> Any:
    """JSON may carry lone surrogates (`"\\udcff"`), which no UTF-8 file, name or index can hold: refuse
    them as invalid input before an operation trips over them half-way."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"text is not valid Unicode (lone surrogate {value[exc.start]!r} at "
                                 f"position {exc.start})") from None
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return data


def json_schema(model) -> dict:
    """The model's JSON schema without pydantic's generated titles and the docstring (tools carry it)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def invalid_arguments(errors: list[dict]) -> InvalidInput:
    """The InvalidInput for pydantic validation errors: `invalid request: field: problem; ...` (API and MCP)."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in errors
    )
    return InvalidInput(f"invalid request: {problems}")


def _memory_method(op: Op):
    from storage.memory import Memory

    return getattr(Memory, op.method_name)


def _is_callable(hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_is_callable(arg) for arg in typing.get_args(hint))
    return hint is collections.abc.Callable or typing.get_origin(hint) is collections.abc.Callable
