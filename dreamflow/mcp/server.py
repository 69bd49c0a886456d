"""MCP: the memory operations as Model Context Protocol tools and the workspace files as resources.

One server definition (`build_server`), two transports:

- `dreamflow mcp`: stdio, what desktop hosts spawn (calls go to the running service when there is one, else
  run in this process with short index sessions: see dreamflow/mcp/targets.py);
- the service's `/mcp`: streamable HTTP on the API port, behind the API token like every route (`HttpMount`,
  mounted by dreamflow/http/api.py).

Tools are generated from `engine.ops.OPS` (names, descriptions, parameters and their help text as on the CLI
and API; annotations from each Op's read-only / destructive / idempotent facts, `openWorldHint` false) plus
the job tools (`targets.JOB_TOOLS`: runs of the jobs that declare a tool, engine/jobs.py, with their
parameters; `turn`; `job_status` and `workspaces` of `targets.Target`); so a new operation is a tool with no
code here. Every tool but
`workspaces` takes an optional `workspace` (a name the `workspaces` tool lists; default: the connection's,
`dreamflow mcp --workspace NAME` or the `/workspaces/NAME/mcp` URL), checked against the caller's grant (the
bearer token on `/mcp`; the local user on stdio may use every registered workspace). `DEFAULT_TOOLS` is
the short set agents get; `--tools all` (or `DREAMFLOW_MCP_TOOLS=all` for the service) adds every other
operation. `upload`/`download` take paths of the server's own file system and are never tools.

Resources are the connection's default workspace; `?workspace=NAME` in a URI reads another one.
A result is concise text for the model (dreamflow/mcp/text.py) plus the API's JSON as structured content,
without the field the text already carries in full (`text.AS_TEXT`: a page of text travels once; a list
is wrapped as `{"results": [...]}` for clients of protocol versions before 2026-07-28, which allow only
objects there). A Dreamflow error (an unknown tool too) is a tool error (`isError`) whose text is the
CLI's message and whose structured content is the CLI's `--json` error object; never a protocol error or a
traceback. Resources are served as text, or as base64 blobs for binary files; `resources/list` pages
RESOURCE_LIMIT files per answer (`nextCursor`), and a text over RESOURCE_CHARS comes in pages of whole lines
(`dreamflow://<path>?start_line=N`, named by the line that ends each page).

Start-up stays light: the mcp SDK, pydantic and the storage layer, never prefect, openai or torch.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from dreamflow import __version__
from dreamflow.mcp import text as mcp_text
from dreamflow.mcp.targets import JOB_HINTS, JOB_TOOLS, Target, call_retrying
from engine import ops
from engine.config.grants import ADMIN, Grant
from engine.jobs import JOBS, TURN
from storage.errors import DreamflowError, InvalidInput, NotFound, from_os_error

DEFAULT_TOOLS: tuple[str, ...] = (
    "search", "recall", "read", "write", "edit", "append", "list", "stat", "traverse", "trace", "frontmatter_get",
    "daily_list", "node_search", "retract", "turn", "dream", "job_status", "workspaces",
)
TOOL_SETS = ("default", "all")
RESOURCE_LIMIT = 1000  # files per resources/list page (nextCursor gives the next one)
RESOURCE_CHARS = 40_000  # characters per resources/read page of a long text (about 10,000 tokens)
URI_PREFIX = "dreamflow://"
INSTRUCTIONS = (
    "Dreamflow is your long-term memory: Markdown files in a workspace (daily/ cards, digest/ nodes, session/ "
    "dialogs). Search before answering from memory; read a hit's file for detail; write or edit files to "
    "remember; call turn after each exchange so conversations are summarised. Paths are workspace-relative."
)

log = logging.getLogger("dreamflow.mcp")


@dataclass(frozen=True)
class Tool:
    """One MCP tool: a memory operation or a job of the target."""

    name: str
    description: str
    params: tuple[ops.Param, ...]
    hints: dict[str, bool]
    call: Callable[[Target, dict], Any]
    writes: bool


def tools(tool_set: str = "default") -> dict[str, Tool]:
    """The tools of `tool_set` ("default" or "all"), in declaration order."""
    if tool_set not in TOOL_SETS:
        raise InvalidInput(f"unknown tool set {tool_set!r}: use one of {', '.join(TOOL_SETS)}")
    found: dict[str, Tool] = {}
    scope = (WORKSPACE_PARAM,)
    for op in ops.OPS:
        if not op.host_paths:  # upload/download name the server's own files: never a tool
            found[op.name] = Tool(op.name, op.help, ops.surface_parameters(op) + scope, op.hints, _op_call(op),
                                  op.writes)
    launched = {job.tool: job for job in JOBS.values() if job.tool}
    for name in JOB_TOOLS:
        hints = {**JOB_HINTS[name], "openWorldHint": False}
        if name in launched:  # a run of a job: its parameters from the job's declaration
            job = launched[name]
            description = (f"Start a run of {job.name}: {job.summary[0].lower()}{job.summary[1:]} Returns at once "
                           "with the run id; job_status reports its state and summary.")
            params, call = job.parameters("mcp"), _launch_call(job.name)
        elif name == TURN.tool:
            description, params, call = _doc(Target.turn), TURN.parameters("mcp"), _job_call(name)
        else:
            method = getattr(Target, name)
            description, params, call = _doc(method), ops.function_parameters(method), _job_call(name)
        params += scope if name != "workspaces" else ()
        found[name] = Tool(name, description, params, hints, call, not hints["readOnlyHint"])
    if tool_set == "all":
        return found
    return {name: found[name] for name in DEFAULT_TOOLS}


WORKSPACE_PARAM = ops.Param("workspace", str | None, None, ops.PARAM_HELP["workspace"])


def _op_call(op: ops.Op) -> Callable[[Target, dict], Any]:
    return lambda target, args: target.call_op(op, args)


def _job_call(name: str) -> Callable[[Target, dict], Any]:
    return lambda target, args: getattr(target, name)(**args)


def _launch_call(job: str) -> Callable[[Target, dict], Any]:
    return lambda target, args: target.launch(job, args)


def _doc(fn) -> str:
    return inspect.getdoc(fn) or ""


# ---- one call ----------------------------------------------------------------------------------------------

class Dispatcher:
    """Validates and runs tool calls against a target; builds the tool list and argument models once."""

    def __init__(self, target: Target, tool_set: str = "default", over_http: bool = False):
        self.target = target
        self.tools = tools(tool_set)
        self.over_http = over_http
        self._models: dict[str, Any] = {}

    def caller(self, ctx) -> tuple[Grant | None, str | None]:
        """(grant, default workspace) of a request: over HTTP from the request scope (dreamflow/http/access.py;
        None when missing), on stdio the local user's."""
        if not self.over_http:
            return ADMIN, None
        from dreamflow.http.access import GRANT, WORKSPACE

        scope = getattr(getattr(ctx, "request", None), "scope", None) or {}
        return scope.get(GRANT), scope.get(WORKSPACE)

    def bound(self, grant: Grant | None, workspace: str | None) -> Target:
        if grant is None:
            raise NotFound("no workspace: the request carried no valid token")
        return self.target.scoped(grant, workspace)

    def model(self, tool: Tool):
        """The strict pydantic model of a tool's arguments (unknown arguments are refused, as on the API)."""
        if tool.name not in self._models:
            from pydantic import ConfigDict

            self._models[tool.name] = ops.params_model(tool.name, tool.description, tool.params,
                                                       config=ConfigDict(extra="forbid"))
        return self._models[tool.name]

    def input_schema(self, tool: Tool) -> dict:
        return ops.json_schema(self.model(tool))

    def call(self, name: str, arguments: dict | None, grant: Grant | None = ADMIN,
             workspace: str | None = None) -> tuple[Any, DreamflowError | None, list[dict]]:
        """(result, None, behind) or (None, the Dreamflow error to report as a tool error, behind) of a call by
        `grant` (None: an unauthenticated caller, refused) in the connection's default `workspace`; `behind`: what
        its reads found of the index lagging the files (storage/index/freshness.py). Runs in a worker thread."""
        from storage.index import freshness

        with freshness.noticed() as behind:
            result, error = self._call(name, arguments, grant, workspace)
        return result, error, behind

    def _call(self, name: str, arguments: dict | None, grant: Grant | None,
              workspace: str | None) -> tuple[Any, DreamflowError | None]:
        from pydantic import ValidationError

        tool = self.tools.get(name)
        if tool is None:  # a tool error the model can read and correct, as the SDK's own server answers
            return None, InvalidInput(f"unknown tool {name!r}; available: {', '.join(self.tools)}")
        try:
            try:
                args = self.model(tool).model_validate(arguments or {}).model_dump(exclude_unset=True)
            except ValidationError as exc:
                raise ops.invalid_arguments(exc.errors()) from None
            if grant is None:
                raise NotFound("no workspace: the request carried no valid token")
            target = self.target.scoped(grant, args.pop("workspace", None) or workspace)
            result = call_retrying(target, lambda: tool.call(target, args))
        except DreamflowError as exc:
            return None, exc
        except OSError as exc:  # permissions, a full disk: the CLI's message, no traceback
            return None, from_os_error(exc)
        except Exception as exc:  # a bug: say so briefly, keep the traceback on stderr for the operator
            log.exception("tool %s failed", name)
            return None, DreamflowError(f"internal error: {type(exc).__name__}: {exc}")
        if tool.writes:
            target.changed()
        return result, None


def json_ready(value: Any) -> Any:
    """The value as JSON would carry it (dates and paths as strings), like the API's answers."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


# ---- the server --------------------------------------------------------------------------------------------

def build_server(dispatcher: Dispatcher):
    """The low-level MCP server answering tools/list, tools/call and the resource requests."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    listed = [
        types.Tool(name=t.name, description=t.description, input_schema=dispatcher.input_schema(t),
                   annotations=types.ToolAnnotations(
                       title=t.name.replace("_", " "), read_only_hint=t.hints["readOnlyHint"],
                       destructive_hint=t.hints["destructiveHint"], idempotent_hint=t.hints["idempotentHint"],
                       open_world_hint=t.hints["openWorldHint"]))
        for t in dispatcher.tools.values()
    ]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        grant, workspace = dispatcher.caller(ctx)
        result, error, behind = await anyio.to_thread.run_sync(dispatcher.call, params.name, params.arguments,
                                                               grant, workspace)
        if error is not None:
            return types.CallToolResult(content=[types.TextContent(text=str(error))],
                                        structured_content=error.to_json(), is_error=True)
        data = json_ready(mcp_text.structured(params.name, result))
        if not isinstance(data, dict) and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            data = {"results": data}
        text = mcp_text.text(params.name, result) + "".join(f"\n{mcp_text.behind_note(b)}" for b in behind)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=data)

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        try:
            offset = _cursor_offset(params.cursor if params is not None else None)
        except InvalidInput as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        grant, workspace = dispatcher.caller(ctx)
        try:
            target = dispatcher.bound(grant, workspace)
            listing = await anyio.to_thread.run_sync(lambda: target.open(writes=False)[1].list(
                "", recursive=True, limit=RESOURCE_LIMIT, offset=offset))
        except DreamflowError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        following = listing.get("next_offset")
        return types.ListResourcesResult(resources=[
            types.Resource(name=e["path"], uri=resource_uri(e["path"]), mime_type=_mime(e["path"]), size=e.get("size"))
            for e in listing["entries"] if e.get("type") == "file"
        ], next_cursor=str(following) if following is not None else None)

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[types.ResourceTemplate(
            name="workspace file", uri_template=URI_PREFIX + "{+path}{?workspace,start_line}",
            description=f"A workspace file by its workspace-relative path (read-only; metadata/ is not readable), "
                        f"of the connection's workspace or the one `workspace` names. "
                        f"Text over {RESOURCE_CHARS:,} characters comes in pages of whole lines, each ending with "
                        f"a line saying which URI (`?start_line=N`) continues it",
        )])

    async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if not uri.startswith(URI_PREFIX):
            raise MCPError(types.INVALID_PARAMS, f"not a Dreamflow resource: {uri} (expected {URI_PREFIX}<path>)")
        grant, workspace = dispatcher.caller(ctx)
        try:
            path, start_line, named = _resource_address(uri[len(URI_PREFIX):])
            target = dispatcher.bound(grant, named or workspace)
        except DreamflowError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        page, data, error = await anyio.to_thread.run_sync(_read_any, target, path, start_line)
        if error is not None:
            raise MCPError(types.INVALID_PARAMS, str(error))
        if page is not None:  # a page of a long text
            return types.ReadResourceResult(contents=[
                types.TextResourceContents(uri=uri, mime_type=_mime(path), text=page)])
        text = _text_or_none(data)
        if text is None:  # an image, a PDF: the bytes, base64 as the protocol carries them
            return types.ReadResourceResult(contents=[types.BlobResourceContents(
                uri=uri, mime_type=_mime(path, binary=True), blob=base64.b64encode(data).decode("ascii"))])
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type=_mime(path), text=text)])

    return Server(
        "dreamflow", version=__version__, title="Dreamflow memory", instructions=INSTRUCTIONS,
        on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
        on_list_resource_templates=list_templates, on_read_resource=read_resource,
    )


def resource_uri(path: str) -> str:
    """`dreamflow://<path>` with the path percent-encoded (spaces, non-ASCII, `%`, `#`, `?`), so hosts that
    parse URIs strictly accept it; reads decode it again (as the `{+path}` template expands)."""
    return URI_PREFIX + quote(path, safe="/")


def _read_any(target: Target, path: str, start_line: int | None):
    """A resource read: (page of text, None, None) for a text longer than RESOURCE_CHARS or a page asked for by
    `start_line`, else (None, the file's bytes, None); (None, None, the Dreamflow error) for a bad path,
    metadata/, a missing or special file."""
    from storage.errors import Conflict

    try:
        try:
            page = call_retrying(target, lambda: target.open(writes=False)[1].read(
                path, start_line=start_line, numbered=False, max_chars=RESOURCE_CHARS))
        except Conflict:  # binary: its bytes, as a blob
            page = None
        if page is not None and (page["truncated"] or page["cut_line"] or start_line is not None):
            notes = mcp_text.read_notes(page)
            if page["truncated"]:  # the marker names the URI that continues, not the tool's parameter
                scope = f"workspace={quote(target.workspace)}&" if target.workspace else ""
                notes[-1] = (f"[truncated: lines {page['start_line']}-{page['end_line']} of {page['total_lines']} "
                             f"shown; continue at {resource_uri(page['path'])}?{scope}"
                             f"start_line={page['next_start_line']}]")
            return page["content"] + "".join(f"{note}\n" for note in notes), None, None
        return None, call_retrying(target, lambda: target.file_bytes(path)), None
    except DreamflowError as exc:
        return None, None, exc


def _resource_address(address: str) -> tuple[str, int | None, str | None]:
    """(workspace path, start_line or None, workspace or None) of a resource URI's part after `dreamflow://`
    (`?start_line=N` asks for a page, `?workspace=NAME` another workspace; a `?` inside a path is
    percent-encoded, see `resource_uri`)."""
    path, _, query = address.partition("?")
    start_line = workspace = None
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        if key == "workspace" and value:
            workspace = unquote(value)
        elif key == "start_line" and value.isdigit() and int(value) >= 1:
            start_line = int(value)
        else:
            raise InvalidInput(f"unknown resource query {pair!r}: start_line=N (N >= 1) pages a long file, "
                               "workspace=NAME names a workspace")
    return unquote(path), start_line, workspace


def _cursor_offset(cursor: str | None) -> int:
    """The list offset a resources/list cursor stands for (this server's cursors are offsets)."""
    if cursor is None:
        return 0
    if not cursor.isdigit():
        raise InvalidInput(f"invalid cursor {cursor!r}: pass the nextCursor of the previous resources/list answer")
    return int(cursor)


def _text_or_none(data: bytes) -> str | None:
    """The bytes as text when they are UTF-8 without NUL bytes (how storage tells text from binary), else None."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _mime(path: str, binary: bool = False) -> str:
    import mimetypes

    suffix = Path(path).suffix.lower()
    known = {".md": "text/markdown", ".jsonl": "application/jsonl", ".json": "application/json",
             ".yaml": "application/yaml", ".yml": "application/yaml"}.get(suffix)
    guessed = known or mimetypes.guess_type(path)[0]
    return guessed or ("application/octet-stream" if binary else "text/plain")


# ---- transports --------------------------------------------------------------------------------------------

def serve_stdio(workspace: str | Path | None, tool_set: str = "default") -> None:
    """Serve memory over stdin/stdout until the host closes stdin; `workspace` (a name or folder, None: the
    default) is the connection's default workspace."""
    import anyio
    from mcp.server.stdio import stdio_server

    from dreamflow.mcp.targets import WorkspaceTarget

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="dreamflow mcp: %(message)s")
    server = build_server(Dispatcher(WorkspaceTarget(workspace), tool_set))

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(AnsweringReader(read, write), write, server.create_initialization_options())

    anyio.run(main)


class AnsweringReader:
    """The stdio transport's read stream, answering the requests the SDK could not read instead of dropping
    them (the host would wait forever for their id): a line that is JSON the SDK's parser refuses, such as a
    lone UTF-16 surrogate escape (`"\\ud800"`), gets a JSON-RPC Invalid Request error with its id."""

    def __init__(self, inner, write):
        self._inner, self._write = inner, write

    @property
    def last_context(self):  # the sender's contextvars, read by the SDK's dispatcher
        return getattr(self._inner, "last_context", None)

    async def receive(self):
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            answer = unreadable_request_error(item)
            if answer is None:
                return item  # the SDK logs it; nothing waits for an answer
            from mcp.shared.message import SessionMessage

            await self._write.send(SessionMessage(answer))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self):
        return self

    async def __anext__(self):
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()


def unreadable_request_error(exc: Exception):
    """The JSON-RPC error answering a line the SDK's JSON parser refused when that line is still a JSON
    request (with its id, or null when UTF-8 cannot carry the id); else None."""
    import mcp_types as types
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return None
    problem = next((e for e in exc.errors(include_url=False) if e["type"] == "json_invalid"), None)
    if problem is None or not isinstance(problem.get("input"), str):
        return None
    try:
        request = json.loads(problem["input"])
    except ValueError:
        return None
    if not (isinstance(request, dict) and isinstance(request.get("method"), str) and "id" in request):
        return None  # a notification, a response: nothing waits for an answer
    request_id = request["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)) or not _sendable(request_id):
        request_id = None  # JSON-RPC: an id that cannot be read back is answered as null
    reason = problem["msg"]
    if not _sendable(request):
        reason = ("it contains a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair), which is not "
                  "Unicode text")
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(
        code=types.INVALID_REQUEST, message=f"the request could not be read: {reason}"))


def _sendable(value) -> bool:
    """Whether UTF-8 can carry this JSON value (no lone surrogate in it)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class HttpMount:
    """Streamable HTTP at `/mcp` inside the API: the mount is the ASGI endpoint, `lifespan` the app's lifespan (the
    app must run it). DNS-rebinding protection is on when the API listens on loopback. At `max_sessions` (default
    `DREAMFLOW_MCP_MAX_SESSIONS`) open sessions a new one ends the least recently used idle one
    (dreamflow/mcp/sessions.py).

    The mcp SDK is loaded, and its session manager started, at the first request to `/mcp`: a service whose
    agents use its API or the hook starts without it (a start without the runner: 2.2 -> 1.3 CPU-s). The
    manager runs in a task of the lifespan's task group, so one task enters and leaves it; the tool set and the
    cap are checked here."""

    def __init__(self, target: Target, tool_set: str = "default", host: str = "127.0.0.1",
                 max_sessions: int | None = None):
        import anyio

        from engine.config.settings import Settings

        self.max_sessions = Settings().mcp_max_sessions if max_sessions is None else max_sessions
        if self.max_sessions < 1:
            raise InvalidInput(f"DREAMFLOW_MCP_MAX_SESSIONS must be at least 1, got {self.max_sessions}")
        self.dispatcher = Dispatcher(target, tool_set, over_http=True)
        self.loopback = host in ("127.0.0.1", "localhost", "::1")
        self.sessions = None  # the SDK's session manager, once started
        self._tasks = None  # the lifespan's task group, while the app runs
        self._endpoint = None  # the SDK's ASGI app, once started
        self._starting = anyio.Lock()  # first requests made at once start it once

    def build(self):
        """The session manager and its ASGI endpoint (run in a worker thread: the imports are the slow part)."""
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
        from mcp.server.transport_security import TransportSecuritySettings

        from dreamflow.mcp.sessions import EvictingSessionManager

        security = None
        if self.loopback:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        # JSON answers rather than an SSE stream per request: the tools never stream or ask the client back,
        # and a plain JSON body is a shorter round trip (benchmarks/mcp.py)
        sessions = EvictingSessionManager(app=build_server(self.dispatcher), security_settings=security,
                                          json_response=True, max_sessions=self.max_sessions)
        return sessions, StreamableHTTPASGIApp(sessions)

    async def _serve(self, *, task_status):
        import anyio

        self.sessions, endpoint = await anyio.to_thread.run_sync(self.build)
        async with self.sessions.run():
            task_status.started(endpoint)
            await anyio.sleep_forever()

    async def __call__(self, scope, receive, send):
        if self._endpoint is None:
            if self._tasks is None:
                raise RuntimeError("/mcp is served only inside the app's lifespan")
            async with self._starting:
                if self._endpoint is None:
                    self._endpoint = await self._tasks.start(self._serve)
        await self._endpoint(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        import anyio

        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = self._endpoint = self.sessions = None
                tasks.cancel_scope.cancel()
