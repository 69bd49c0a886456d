"""The HTTP API: one route per memory operation (generated from `engine.ops`), plus turns, flow launches,
status and health.

- `POST /ops/<name>` with the operation's parameters as a JSON object (pydantic model from the `Memory`
  signature, so /docs documents every field); the answer is the operation's JSON result.
- `POST /ops/upload` takes the file's bytes (JSON with base64 `content` and `name`, or a multipart form with a
  `file` part) and `POST /ops/download` answers with the file's bytes: over HTTP no operation names a path on
  the server's machine (the CLI's `upload SOURCE` / `download PATH DEST` read and write on the caller's side).
- `POST /proactive`: the day's topics (read at once); `POST /inject`: what the Claude Code hook puts before
  the agent (dreamflow/hooks/context.py); `GET /health`.
- `POST /turn`, `POST /flows/<flow>`, `GET /flows/runs/<id>`, `POST /flows/runs/<id>/retry`, `GET /status` and
  the MCP endpoint `/mcp` (streamable HTTP, dreamflow/mcp/server.py) need the service (`dreamflow start`).
- The dashboard at `/ui/` (dreamflow/web/, docs/dashboard.md): memory in the browser, its job pages with the
  service.
- Errors: `{"error": {"type", "message", "exit_code"}}` (the CLI's `--json` error shape) with the error class's
  `http_status` (400 bad input/path, 404 missing, 409 conflict, 422 malformed request, 502/503 LLM or index
  trouble), documented on every route (`ERROR_RESPONSES`).
- Workspaces (dreamflow/http/access.py, engine/access/scoped.py): every route also lives under `/workspaces/<name>/`;
  unscoped routes mean the service's default workspace; `GET /workspaces` lists those the caller may use.
  Once a token is configured (`DREAMFLOW_API_TOKEN`, `dreamflow token create`), every route, docs included,
  requires `Authorization: Bearer`; a workspace the token does not grant answers as if it did not exist.
- In front of everything (`dreamflow.http.http_guard`): unknown `Host` names get 421, state-changing requests a
  page of another site could send (foreign `Origin`, a form or `text/plain` body without proof of a script)
  get 403, bodies over `DREAMFLOW_MAX_BODY_BYTES` get 413 before they are read.
"""

import base64
import os
import typing
from functools import cache
from typing import Any
from urllib.parse import quote

from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from dreamflow import __version__
from dreamflow import web
from dreamflow.http.access import Access, grant_of, workspace_of
from dreamflow.http.http_guard import RequestGuard, allowed_hosts
from engine import ops
from engine.access import scoped
from engine.config.grants import UNKNOWN_WORKSPACE, Tokens
from engine.config.settings import Settings
from engine.jobs import JOBS, TURN
from storage.errors import DreamflowError, InvalidInput, NotFound, NotWritable, envelope, from_os_error


def _strict(model: type[BaseModel]) -> type[BaseModel]:
    """The same model refusing unknown fields, so a misspelt parameter is an error, not silently ignored."""
    return type(model.__name__, (model,), {"__doc__": model.__doc__, "model_config": ConfigDict(extra="forbid")})


# The requests of jobs (engine/jobs.py): the turn's fields are record_turn's, proactive's its flow's.
TurnRequest = ops.params_model("turn_request", "One conversation turn of a session.", TURN.parameters("http"))
ProactiveRequest = _strict(ops.params_model("proactive_request", JOBS["proactive"].summary,
                                            JOBS["proactive"].parameters("http")))


class InjectRequest(BaseModel):
    """What `dreamflow hook claude-code` asks for a Claude Code event (dreamflow/hooks/context.py `question`)."""

    model_config = ConfigDict(extra="forbid")

    event: typing.Literal["SessionStart", "UserPromptSubmit"]
    session: str | None = Field(None, description="The agent session's id: what it was given is not given again")
    budget: int = Field(description="Most tokens to inject")
    prompt: str | None = Field(None, description="The user's prompt (UserPromptSubmit)")
    min_score: float | None = Field(None, description=ops.PARAM_HELP["min_score"])
    min_relevance: float | None = Field(None, description=ops.PARAM_HELP["min_relevance"])
    min_words: int | None = Field(None, description=ops.PARAM_HELP["min_words"])


class TurnResult(BaseModel):
    session_id: str
    appended: int = Field(description="Records written to the session jsonl")
    redacted: dict[str, int] = Field({}, description="Secrets replaced by a marker before writing, by kind")
    private: int = Field(0, description="`<private>` spans dropped before writing")
    turns: int = Field(description="Turns of this session counted so far")
    pending: int = Field(description="Turns not yet handed to an auto_memory run")
    every: int = Field(description="An auto_memory run starts every this many turns")
    launched: str | None = Field(None, description="Id of the auto_memory run started by this turn")
    ui_url: str | None = Field(None, description="That run's page in the Prefect UI")
    launch_error: str | None = None
    waiting: str | None = None


class FlowRun(BaseModel):
    id: str
    name: str
    deployment: str
    state: str | None = None
    ui_url: str | None = Field(None, description="The run's page in the Prefect UI")


class ErrorDetail(BaseModel):
    type: str = Field(description="Error class, e.g. NotFound, PathError, InvalidInput")
    message: str
    exit_code: int = Field(description="What the CLI exits with for this error")


class FlowRunStatus(BaseModel):
    """A flow run as `GET /flows/runs/{run_id}` reports it."""

    id: str
    name: str
    deployment: str | None = Field(description="`flow/deployment`, None for a run started outside a deployment")
    state: str | None = Field(description="State name, e.g. Running, Completed, Failed, AwaitingRetry")
    state_type: str | None = Field(description="SCHEDULED, PENDING, RUNNING, COMPLETED, FAILED, CRASHED, ...")
    message: str | None = Field(description="The state's message (why a run failed)")
    parameters: dict[str, Any]
    summary: dict[str, Any] | str | None = Field(
        description="Once the run has finished: the flow's result (also for a run that ended Failed because units "
                    "failed), else its report's text")
    error: ErrorDetail | None = Field(
        None, description="The error a run without a summary failed with (its exit code is the CLI's)")
    ui_url: str | None = Field(description="The run's page in the Prefect UI")
    settled: bool | None = Field(
        None, description="True once this service's runner ran it to its end and sent its log lines, False while "
                          "it runs there, None for another's run (a Prefect worker's)")


class FlowRunLog(BaseModel):
    time: str
    level: str
    message: str


class ErrorResponse(BaseModel):
    """Every error answer: the CLI's `--json` error shape."""

    error: ErrorDetail


# Documented on every route, so /docs and the OpenAPI schema show the error answers the handlers give.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description} for status, description in (
        (400, "Bad input or path"), (401, "Missing or wrong bearer token"),
        (403, "Cross-site request (a foreign Origin, or a form/text body without X-Dreamflow-Request), or a "
              "change with a read-only token"),
        (404, "No such file, route or workspace"),
        (409, "Conflict, e.g. the destination exists"), (413, "Request body over DREAMFLOW_MAX_BODY_BYTES"),
        (421, "Host header not a name this service answers to"), (422, "Malformed request"),
        (502, "LLM answer unusable"),
        (503, "Index busy, LLM or service unavailable"),
    )
}


class SingleWorkspace:
    """A catalog (engine/access/scoped.py) of one memory, for an API without the service."""

    default_name = "default"

    def __init__(self, memory):
        self._memory = memory

    def names(self) -> list[str]:
        return [self.default_name]

    def serves(self, name: str) -> bool:
        return name == self.default_name

    def memory(self, name: str):
        if name != self.default_name:
            raise NotFound(UNKNOWN_WORKSPACE)
        return self._memory

    def reads(self, name: str) -> list[str]:
        return []

    def root(self, name: str):
        return self.memory(name).ws.root


def create_app(memory=None, token: str | None = None, service=None, host: str = "127.0.0.1",
               settings: Settings | None = None) -> FastAPI:
    """The API over the workspaces of `service` (a running `dreamflow.service.supervisor.Service`: also turns, flow
    launches, status and `/mcp`), or over `memory` alone (a `Memory`). `token` is the admin token; tokens from
    `dreamflow token create` are checked too. `host`: the interface it is served on (its name is accepted in
    `Host`, with `settings.allowed_hosts`)."""
    from fastapi_offline import FastAPIOffline

    settings = settings or Settings()
    catalog = service.hosts if service is not None else SingleWorkspace(memory)
    mcp = _mcp_mount(service) if service is not None else None
    app = FastAPIOffline(  # /docs and /redoc with Swagger UI and ReDoc served from the package, no CDN
        title="Dreamflow",
        version=__version__,
        description="File-native long-term memory for AI agents. Paths are workspace-relative. Every route also "
                    "exists under `/workspaces/{name}/` for a named workspace; unscoped routes use the default one.",
        responses=ERROR_RESPONSES,
        lifespan=mcp.lifespan if mcp is not None else None,
    )
    _add_error_handlers(app)

    @app.get("/health", tags=["service"])
    def health(request: Request) -> dict[str, Any]:
        """Liveness: the pid, whether start-up (Prefect, runner) has finished, the workspaces the caller may use
        (and, for the admin, the default workspace's folder)."""
        grant = grant_of(request)
        answer = {"ok": True, "pid": os.getpid(), "ready": service.ready.is_set() if service is not None else True,
                  "workspaces": scoped.visible(catalog, grant)}
        if grant.admin:
            answer["workspace"] = str(catalog.root(catalog.default_name))
        return answer

    @app.get("/workspaces", tags=["service"])
    def workspaces(request: Request) -> list[dict[str, Any]]:
        """The workspaces the caller may use: name, whether it is the default, what its searches also read,
        whether the caller may change it (and, for the admin, its folder)."""
        return scoped.list_workspaces(catalog, grant_of(request))

    @app.post("/proactive", tags=["memory: reads"])
    def proactive(request: Request,
                  body: ProactiveRequest = Body(default_factory=ProactiveRequest)) -> dict[str, Any]:
        """The topics to bring up proactively on a day, from the dream's `daily/<date>/interests.yaml`
        (`skipped` when the day has none). `POST /flows/proactive` runs the same as a Prefect flow."""
        from engine.config.days import check_date, today
        from engine.memory.interests import proactive_topics

        _, memory = _open(catalog, request, writes=False)
        day = check_date(body.date) if body.date else today()
        return proactive_topics(memory, day, body.include_content)

    @app.post("/inject", tags=["memory: reads"])
    def inject(request: Request, body: InjectRequest) -> dict[str, Any]:
        """What the Claude Code hook puts before the agent (`text`, None: nothing): recall for a prompt, or the
        session-start digest, in one request (dreamflow/hooks/context.py)."""
        from dreamflow.hooks import context as hook_context

        grant = grant_of(request)
        name, _ = _open(catalog, request, writes=False)
        return {"text": hook_context.inject(catalog, grant, name, **body.model_dump())}

    on_write = service.changed if service is not None else None
    for op in ops.OPS:
        if not op.host_paths:
            _add_op_route(app, catalog, op, on_write=on_write if op.writes else None)
    _add_transfer_routes(app, catalog, on_write=on_write)
    if service is not None:
        _add_service_routes(app, service)
    if mcp is not None:
        app.add_route("/mcp", mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    tokens = Tokens(token)
    web.mount(app, catalog, service, tokens)  # the dashboard at /ui
    app.add_middleware(Access, tokens=tokens)
    app.add_middleware(RequestGuard, hosts=allowed_hosts(host, settings.allowed_hosts),
                       max_body_bytes=settings.max_body_bytes)  # added last: outermost, before the token check
    return app


def _open(catalog, request: Request, writes: bool):
    """(name, memory) of the workspace the request is for, after the grant check."""
    return scoped.open_scoped(catalog, grant_of(request), workspace_of(request), writes)


def _mcp_mount(service):
    """The MCP tools over the service (tool set: `DREAMFLOW_MCP_TOOLS`, default the short one)."""
    from dreamflow.mcp.server import HttpMount
    from dreamflow.mcp.targets import ServiceTarget

    return HttpMount(ServiceTarget(service), service.settings.mcp_tools, host=service.options.host,
                     max_sessions=service.settings.mcp_max_sessions)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DreamflowError)
    async def dreamflow_error(request: Request, exc: DreamflowError):
        return JSONResponse(exc.to_json(), status_code=exc.http_status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return JSONResponse(ops.invalid_arguments(exc.errors()).to_json(), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        message = f"no route {request.method} {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
        body = envelope(kind, message, NotFound.exit_code if exc.status_code == 404 else DreamflowError.exit_code)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)  # e.g. 405's `Allow`

    @app.exception_handler(OSError)
    async def file_system_error(request: Request, exc: OSError):
        """A write the file system refuses (an immutable or read-only folder) is a 403 saying so, not a 500."""
        error = from_os_error(exc)
        return JSONResponse(error.to_json(), status_code=error.http_status if isinstance(error, NotWritable) else 500)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        body = envelope(type(exc).__name__, f"internal error: {exc}", DreamflowError.exit_code)
        return JSONResponse(body, status_code=500)


@cache
def _op_request(op: ops.Op) -> type[BaseModel]:
    """The strict request model of `op`'s route, made once per process: every app shares it (pydantic builds
    a model's schema once; with a new class per app, each `create_app` paid for all of them again)."""
    return _strict(ops.request_model(op))


@cache
def _response_type(op: ops.Op) -> Any:
    """The route's response model from the method's return annotation (`dict` -> `dict[str, Any]`)."""
    from storage.memory import Memory

    hint = typing.get_type_hints(getattr(Memory, op.method_name)).get("return", Any)
    if hint is dict:
        return dict[str, Any]
    if typing.get_origin(hint) is list and typing.get_args(hint) in ((dict,), ()):
        return list[dict[str, Any]]
    return hint


def _add_op_route(app: FastAPI, catalog, op: ops.Op, on_write=None) -> None:
    model = _op_request(op)
    body = Body(...) if _required(op) else Body(default_factory=model)

    def endpoint(http_request: Request, request: model = body):  # type: ignore[valid-type]
        grant = grant_of(http_request)
        name = workspace_of(http_request) or scoped.default_for(catalog, grant)
        result = scoped.call(catalog, grant, name, op, request.model_dump(exclude_unset=True))
        if on_write is not None:
            on_write(name)
        return result

    app.add_api_route(
        f"/ops/{op.name}", endpoint, methods=["POST"], response_model=_response_type(op), name=op.name,
        summary=op.summary, description=op.help, tags=["memory: writes" if op.writes else "memory: reads"],
    )


class UploadRequest(BaseModel):
    """A file's bytes to store under resource/[DATE/]."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="The file's bytes, base64-encoded")
    name: str = Field(description="File name under resource/[DATE/] (may include sub-folders)")
    date: str | None = Field(None, description="Day folder as YYYY-MM-DD, or `today`")
    overwrite: bool = Field(False, description="Replace the file if it exists")

    _utf8 = model_validator(mode="before")(ops.refuse_unencodable)


class DownloadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Workspace-relative path of the file")

    _utf8 = model_validator(mode="before")(ops.refuse_unencodable)


class UploadResult(BaseModel):
    path: str
    bytes: int


def _add_transfer_routes(app: FastAPI, catalog, on_write=None) -> None:
    """`/ops/upload` and `/ops/download` with the bytes in the request and the answer (never a server path)."""
    upload_schema = UploadRequest.model_json_schema()
    form_schema = {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "The file (its name is the default name)"},
        "name": {"type": "string"}, "date": {"type": "string"}, "overwrite": {"type": "boolean"}}}

    @app.post("/ops/upload", tags=["memory: writes"], response_model=UploadResult,
              summary="Store a file's bytes under resource/[DATE/]",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": upload_schema}, "multipart/form-data": {"schema": form_schema}}}})
    async def upload(request: Request):
        """Store uploaded bytes as resource/[DATE/]NAME: a JSON body `{content (base64), name, date?,
        overwrite?}` or a multipart form (`file`, optional `name`, `date`, `overwrite`)."""
        workspace, memory = _open(catalog, request, writes=True)
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            form = await request.form()
            part = form.get("file")
            if part is None or isinstance(part, str):
                raise InvalidInput("a multipart upload needs a `file` part")
            data = await part.read()
            name = str(form.get("name") or part.filename or "")
            date = str(form["date"]) if form.get("date") else None
            overwrite = str(form.get("overwrite", "")).lower() in ("1", "true", "yes", "on")
        else:
            try:
                fields = UploadRequest.model_validate_json(await request.body())
            except ValueError as exc:
                raise RequestValidationError(getattr(exc, "errors", lambda: [])()) from exc
            try:
                data = base64.b64decode(fields.content, validate=True)
            except ValueError as exc:
                raise InvalidInput(f"content is not valid base64: {exc}") from exc
            name, date, overwrite = fields.name, fields.date, fields.overwrite
        result = await run_in_threadpool(memory.upload_content, data, name, date=date, overwrite=overwrite)
        if on_write is not None:
            on_write(workspace)
        return result

    @app.post("/ops/download", tags=["memory: reads"], response_class=Response,
              summary="The bytes of a workspace file",
              responses={200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"}})
    def download(http_request: Request, request: DownloadRequest) -> Response:
        """Answer with the bytes of a workspace file (`Content-Disposition` carries its name, `X-Dreamflow-Path`
        its workspace path, URL-quoted)."""
        _, memory = _open(catalog, http_request, writes=False)
        rel, data = memory.download_content(request.path)
        return Response(data, media_type="application/octet-stream", headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(rel.rsplit('/', 1)[-1])}",
            "X-Dreamflow-Path": quote(rel)})


def _required(op: ops.Op) -> bool:
    return any(p.required for p in ops.surface_parameters(op))


def _add_service_routes(app: FastAPI, service) -> None:
    from deployments.serve import DEPLOYMENTS

    catalog = service.hosts

    @app.post("/turn", tags=["service"], response_model=TurnResult)
    def turn(http_request: Request, request: TurnRequest):
        """Record a conversation turn: appended to the session jsonl at once; every N turns (or on `compact`)
        auto_memory summarises the session's new messages."""
        name, _ = _open(catalog, http_request, writes=True)
        return service.jobs.turn(**request.model_dump(), workspace=name)

    @app.get("/status", tags=["service"])
    def status(request: Request) -> dict[str, Any]:
        """What runs, the workspace's index size, turn counters, last and next dream, runs in progress, and each
        served workspace the caller may use (`workspaces`: name, index counts, last and next dream)."""
        name, _ = _open(catalog, request, writes=False)
        return service.status(name, grant_of(request))

    @app.get("/flows/runs/{run_id}", tags=["flows"], response_model=FlowRunStatus)
    def run_status(request: Request, run_id: str):
        """A flow run's state, parameters and UI link; `summary` is the flow's result once it has finished
        (also for a run that ended Failed because units failed)."""
        return service.jobs.run_status(run_id, visible=grant_of(request).sees)

    @app.get("/flows/runs/{run_id}/logs", tags=["flows"], response_model=list[FlowRunLog])
    def run_logs(request: Request, run_id: str,
                 offset: int = Query(0, ge=0, description="Skip this many log lines")):
        """The run's log lines (what the Prefect UI shows), oldest first, from `offset` on."""
        return service.jobs.run_logs(run_id, offset, visible=grant_of(request).sees)

    @app.post("/flows/runs/{run_id}/retry", tags=["flows"], response_model=FlowRunStatus)
    def retry_run(request: Request, run_id: str):
        """Retry a failed run as the Prefect UI's Retry does: the same run again, in which a dream re-runs only
        its failed units (finished tasks come from their results); refused with a read-only token."""
        return service.jobs.retry(run_id, grant_of(request))

    for flow, deployment in DEPLOYMENTS.items():
        _add_flow_route(app, service, flow, deployment)


def _add_flow_route(app: FastAPI, service, flow: str, deployment) -> None:
    """`POST /flows/<flow>`: its request model is the job's (engine/jobs.py), without `workspace` (a run started
    over the API works on the caller's workspace, never on a folder the caller names)."""
    model = _strict(ops.params_model(f"{flow}_parameters", deployment.description, JOBS[flow].parameters("http")))

    def launch(request: Request, parameters: model = Body(default_factory=model)):  # type: ignore[valid-type]
        name, _ = _open(service.hosts, request, writes=True)
        return service.jobs.launch(flow, parameters.model_dump(exclude_unset=True, mode="json"), workspace=name)

    app.add_api_route(
        f"/flows/{flow}", launch, methods=["POST"], response_model=FlowRun, tags=["flows"], name=f"launch_{flow}",
        summary=f"Run {deployment.launch_name}", description=deployment.description,
    )
