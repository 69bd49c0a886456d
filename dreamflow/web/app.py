"""What the dashboard's pages share: who is visiting (`Visitor`), how a page is answered (templates, security
headers, the session cookie), how errors show, and the pages' URLs.

Every page reads and changes memory through the operations every surface uses: `engine.access.scoped.open_scoped`
(the grant check: a workspace outside the token's grant answers as one that does not exist, a change with a
read-only token is refused) then the `Memory` method; jobs go through the service (`Service.launch`,
`run_status`, `retry`, `job_runs`) as the API's flow routes do.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException

from dreamflow.http.access import DASHBOARD, grant_of
from dreamflow.web.graph_layout import kind_of
from dreamflow.web.markdown_html import compact, line_range
from dreamflow.web.sessions import Session, Sessions, cookie_name, csrf_ok
from engine.access import scoped
from engine.config.grants import Grant
from storage.errors import DreamflowError, InvalidInput
from storage.index.indexer import EXPLAINED
from storage.text import facts

# The page may load only its own scripts, styles and images; it can be framed by nobody.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",  # pages hold memory text
}
# A dream's decision per fact, as people say it (storage/files/dream_log.py actions)
DECIDED = {"created": "new node", "added": "added", "same": "known already", "refined": "refined",
           "replaced": "replaced", "FAILED": "failed"}
HEALTH_SECONDS = 300  # a workspace's doctor report is reused this long (it reads every file)
AUTO_HEALTH_FILES = 500  # up to this many files the overview checks health unasked (about 1 ms of CPU a file)


class SignIn(Exception):
    """The visitor has no valid session: the sign-in page."""


class CrossSite(Exception):
    """A form without its session's CSRF token (a page of its own, 403; no error class of the operations)."""


class Dashboard:
    """What the pages share: the workspaces, the service, the sessions, the templates, cached health reports."""

    def __init__(self, catalog, service, sessions: Sessions):
        self.catalog, self.service, self.sessions = catalog, service, sessions
        self.templates = Environment(loader=PackageLoader("dreamflow.web", "templates"),
                                     autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
        self.templates.globals.update(url=URLS, kind_of=kind_of, decided=DECIDED, anchor_lines=line_range,
                                     index_words=EXPLAINED)
        self.templates.filters.update(compact=compact, local_time=local_time, said=facts.said)
        self.health: dict[str, tuple[float, dict]] = {}
        self._checking = threading.Lock()  # one doctor run at a time: it holds the index meanwhile

    def render(self, visitor: Visitor | None, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """The page `template` with `context`, the visitor's navigation and CSRF token, the security headers,
        and the session cookie when the session is new."""
        base = {"visitor": visitor, "sign_in_needed": self.sessions.required, "jobs": self.service is not None}
        html = self.templates.get_template(template).render(**base, **context)
        response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
        if visitor is not None and visitor.new_session:
            set_cookie(response, visitor.request, visitor.session)
        return response

    def doctor(self, name: str, memory, fresh: bool = False) -> tuple[dict | None, float]:
        """The workspace's health report (the `doctor` operation; None: not run yet) and its age in seconds.
        It reads every file and holds the index meanwhile (seconds at 10k files), so it is reused for
        HEALTH_SECONDS and run unasked only for a workspace of at most AUTO_HEALTH_FILES files; `fresh` runs it
        now."""
        with self._checking:
            kept = self.health.get(name)
            stale = kept is None or time.monotonic() - kept[0] > HEALTH_SECONDS
            if fresh or (stale and memory.index_stats()["files"] <= AUTO_HEALTH_FILES):
                kept = self.health[name] = (time.monotonic(), memory.doctor())
        return (kept[1], time.monotonic() - kept[0]) if kept else (None, 0.0)


@dataclass
class Visitor:
    """A signed-in visitor: the grant of their token, their session (None for a request with a bearer token),
    the workspace the page is about."""

    request: Request
    dashboard: Dashboard
    grant: Grant
    session: Session | None
    new_session: bool = False
    workspace: str | None = None

    @property
    def catalog(self):
        return self.dashboard.catalog

    @property
    def csrf(self) -> str:
        return self.session.csrf if self.session else ""

    def visible(self) -> list[str]:
        """The served workspaces the token grants."""
        return scoped.visible(self.catalog, self.grant)

    def open(self, name: str | None, writes: bool = False):
        """(name, memory) of a workspace the token grants (NotFound as if it did not exist; Forbidden for a
        change with a read-only token); `name` None: the token's default one."""
        name, memory = scoped.open_scoped(self.catalog, self.grant, name, writes)
        self.workspace = name
        return name, memory

    def home(self) -> str | None:
        """The workspace the navigation links go to: the page's, else the token's default."""
        if self.workspace:
            return self.workspace
        try:
            return scoped.default_for(self.catalog, self.grant)
        except DreamflowError:
            return None


def visitor(request: Request) -> Visitor:
    """The request's visitor (a FastAPI dependency): a bearer token's grant, else the session cookie's; no grant
    means the sign-in page. Without a token configured a first visit gets a session (for its CSRF token)."""
    dashboard: Dashboard = request.app.state.dashboard
    session = dashboard.sessions.get(request.cookies.get(cookie_name(_port(request))))
    grant = grant_of(request)
    if "authorization" in request.headers:
        return _seen(request, Visitor(request, dashboard, grant, None))
    if session is not None:
        grant = dashboard.sessions.grant(session)
        if grant is None:
            raise SignIn
        return _seen(request, Visitor(request, dashboard, grant, session))
    session = dashboard.sessions.start(None)
    if session is None:  # a token is configured: sign in first
        raise SignIn
    return _seen(request, Visitor(request, dashboard, dashboard.sessions.grant(session), session, new_session=True))


def _seen(request: Request, visiting: Visitor) -> Visitor:
    request.state.visitor = visiting
    return visiting


def check_form(visiting: Visitor, sent: str | None) -> None:
    """A state-changing form must carry its session's CSRF token (requests with a bearer token need none: a page
    of another site cannot send that header)."""
    if visiting.session is None and "authorization" in visiting.request.headers:
        return
    if not csrf_ok(visiting.session, sent):
        raise CrossSite("this form is out of date or was not sent by this dashboard: reload the page and try again")


def set_cookie(response, request: Request, session: Session) -> None:
    response.set_cookie(cookie_name(_port(request)), session.id, path=DASHBOARD, httponly=True, samesite="strict")


def clear_cookie(response, request: Request) -> None:
    response.delete_cookie(cookie_name(_port(request)), path=DASHBOARD, httponly=True, samesite="strict")


def _port(request: Request) -> int | None:
    server = request.scope.get("server")
    return server[1] if server else None


def local_time(moment: str | None) -> str:
    """An ISO time (Prefect's and the records' are UTC) as this machine's local time, to the minute."""
    if not moment:
        return ""
    try:
        return datetime.fromisoformat(moment).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return moment


# ---- URLs of the pages (templates call them as url.file(...)) ------------------------------------------------

class URLS:
    @staticmethod
    def home() -> str:
        return f"{DASHBOARD}/"

    @staticmethod
    def file(ws: str, path: str, lines: tuple[int, int] | list[int] | None = None, q: str | None = None,
             view: str | None = None, fact: str | None = None) -> str:
        """A file's page, at `lines` (highlighted) or at the fact whose block id is `fact`."""
        query = {k: v for k, v in (("lines", f"{lines[0]}-{lines[1]}" if lines else None), ("q", q),
                                   ("view", view)) if v}
        return (f"{DASHBOARD}/w/{quote(ws)}/file/{quote(path)}" + (f"?{urlencode(query)}" if query else "")
                + (f"#L{lines[0]}" if lines else f"#{quote(fact)}" if fact else ""))

    @staticmethod
    def trace(ws: str, path: str, fact: str) -> str:
        """Where a fact (`^f2`) or a line (`12`) of a file comes from."""
        return f"{DASHBOARD}/w/{quote(ws)}/trace/{quote(path)}?{urlencode({'fact': fact})}"

    @staticmethod
    def page(ws: str, kind: str, path: str = "") -> str:
        """edit, graph, forget, day, days, sessions, session, health, jobs pages of a workspace."""
        return f"{DASHBOARD}/w/{quote(ws)}/{kind}" + (f"/{quote(path)}" if path else "")

    @staticmethod
    def run(run_id: str, action: str = "") -> str:
        return f"{DASHBOARD}/runs/{quote(run_id)}" + (f"/{action}" if action else "")

    @staticmethod
    def search(**query) -> str:
        return f"{DASHBOARD}/search" + (f"?{urlencode({k: v for k, v in query.items() if v})}" if query else "")

    @staticmethod
    def static(name: str) -> str:
        return f"{DASHBOARD}/static/{name}"

    @staticmethod
    def stem(path: str) -> str:
        return PurePosixPath(path).stem


# ---- errors as pages -----------------------------------------------------------------------------------------

def add_error_pages(ui: FastAPI) -> None:
    """Errors as pages: a missing session goes to sign-in, an error's page says what went wrong (a workspace the
    token does not grant answers as one that does not exist, naming nothing)."""
    def page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
        dashboard: Dashboard = request.app.state.dashboard
        return dashboard.render(getattr(request.state, "visitor", None), "error.html", status=status,
                                title=title, message=message)

    @ui.exception_handler(SignIn)
    async def sign_in(request: Request, exc: SignIn):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{DASHBOARD}/login?{urlencode({'next': target})}", status_code=303)

    @ui.exception_handler(CrossSite)
    async def cross_site(request: Request, exc: CrossSite):
        return page(request, 403, "Not allowed", str(exc))

    @ui.exception_handler(DreamflowError)
    async def dreamflow_error(request: Request, exc: DreamflowError):
        titles = {400: "Not possible", 403: "Not allowed", 404: "Not found", 409: "Conflict", 503: "Busy"}
        return page(request, exc.http_status, titles.get(exc.http_status, "Error"), str(exc))

    @ui.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        from engine import ops

        return page(request, 400, "Not possible", str(ops.invalid_arguments(exc.errors())))

    @ui.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message = f"no page {request.url.path}" if exc.status_code in (404, 405) else str(exc.detail)
        return page(request, exc.status_code, "Not found" if exc.status_code == 404 else "Error", message)


def number(value: str | None, name: str, low: int, high: int, default: int) -> int:
    """A whole number from a query parameter, within low..high (InvalidInput otherwise)."""
    if value in (None, ""):
        return default
    try:
        got = int(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number, got {value!r}") from None
    if not low <= got <= high:
        raise InvalidInput(f"{name} must be from {low} to {high}, got {got}")
    return got
