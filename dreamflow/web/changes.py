"""The dashboard's forms: signing in and out, and the changes a person makes (edit a file's body or frontmatter,
retract a node's wrong fact, forget a digest node, retry a failed job run). Each change is a POST carrying the
session's CSRF token (the service's request guard has already refused a cross-site one), and goes through the
operation every surface uses: `write` and `frontmatter_delete_keys`, `retract`, the `archive` job, the service's
`retry`."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse

from dreamflow.http.access import DASHBOARD
from dreamflow.web import conversation
from dreamflow.web.app import URLS, Visitor, check_form, clear_cookie, set_cookie, visitor
from dreamflow.web.markdown_html import block_id, line_range
from storage.errors import Changed, InvalidInput
from storage.text.markdown import render_frontmatter, split_frontmatter

router = APIRouter()


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


# ---- signing in ------------------------------------------------------------------------------------------------

@router.get("/login")
def login_form(request: Request, next: str = ""):
    """The sign-in form (straight to the overview when no token is configured)."""
    dashboard = request.app.state.dashboard
    if not dashboard.sessions.required:
        return _see_other(_next(next))
    return dashboard.render(None, "login.html", next=next, error=None)


@router.post("/login")
def login(request: Request, token: str = Form(""), next: str = Form("")):
    """Check the token and start a session: the browser keeps only its id, in an HttpOnly cookie."""
    dashboard = request.app.state.dashboard
    session = dashboard.sessions.start(token.strip()) if token.strip() else None
    if session is None:
        return dashboard.render(None, "login.html", status=401, next=next,
                                error="That token is not valid here: use DREAMFLOW_API_TOKEN or a token from "
                                      "dreamflow token create.")
    response = _see_other(_next(next))
    set_cookie(response, request, session)
    return response


@router.post("/logout")
def logout(csrf: str = Form(""), who: Visitor = Depends(visitor)):
    check_form(who, csrf)
    if who.session is not None:
        who.dashboard.sessions.end(who.session)
    response = _see_other(f"{DASHBOARD}/login")
    clear_cookie(response, who.request)
    return response


def _next(target: str) -> str:
    """Where to go after signing in: a dashboard page (never another site)."""
    return target if target.startswith(f"{DASHBOARD}/") and not target.startswith("//") else f"{DASHBOARD}/"


# ---- editing a file --------------------------------------------------------------------------------------------

@router.get("/w/{ws}/edit/{path:path}")
def edit_form(ws: str, path: str, who: Visitor = Depends(visitor)):
    """The file's frontmatter (YAML) and body in two boxes, with the hash they were read at."""
    name, memory = who.open(ws, writes=True)
    _editable(path)
    read = memory.read(path, numbered=False, max_chars=1_000_000)
    if read["truncated"]:
        raise InvalidInput(f"{read['path']} is too long to edit here (over 1,000,000 characters)")
    return _edit_page(who, name, read["path"], read["content"], read["hash"])


def _editable(path: str) -> None:
    """A conversation file is what was said: the dashboard does not edit it (traces cite its lines)."""
    if conversation.is_conversation(path.strip("/")):
        raise InvalidInput(f"{path} is a conversation (what was said, cited line by line by the cards): it is "
                           "not edited here")


def _edit_page(who: Visitor, ws: str, path: str, text: str, hash: str, error: str | None = None,
               frontmatter: str | None = None, body: str | None = None, status: int = 200):
    markdown = path.endswith((".md", ".markdown", ".mdx"))
    if frontmatter is None or body is None:
        frontmatter, body = _parts(text) if markdown else ("", text)
    return who.dashboard.render(who, "edit.html", status=status, ws=ws, path=path, hash=hash, markdown=markdown,
                                frontmatter=frontmatter, body=body, error=error)


def _parts(text: str) -> tuple[str, str]:
    """(the frontmatter's YAML as written, without its fences; the body) of a Markdown text; a frontmatter
    that does not parse stays in the body, to be mended there."""
    split = split_frontmatter(text)
    if split.error or split.body == text:
        return "", text
    lines = text[:len(text) - len(split.body)].rstrip("\n").split("\n")
    return "\n".join(lines[1:-1]) + "\n", split.body


@router.post("/w/{ws}/edit/{path:path}")
def edit(ws: str, path: str, body: str = Form(""), frontmatter: str = Form(""), hash: str = Form(...),
         csrf: str = Form(""), who: Visitor = Depends(visitor)):
    """Save: the body and frontmatter keys given are written (`write`, refused when the file changed since it
    was read), keys taken out of the frontmatter removed (`frontmatter_delete_keys`)."""
    check_form(who, csrf)
    name, memory = who.open(ws, writes=True)
    _editable(path)
    body = body.replace("\r\n", "\n")
    markdown = path.endswith((".md", ".markdown", ".mdx"))
    try:
        if markdown:
            given = split_frontmatter(f"---\n{frontmatter.replace(chr(13), '')}\n---\n") if frontmatter.strip() \
                else None
            if given is not None and given.error:
                raise InvalidInput(f"the frontmatter is not valid YAML: {given.error}")
            meta = given.meta if given is not None else {}
            before = memory.frontmatter_get(path)["frontmatter"] or {}
            wrote = memory.write(path, render_frontmatter(meta, body) if meta else body, expected_hash=hash)
            removed = [key for key in before if key not in meta]
            if removed:
                wrote = memory.frontmatter_delete_keys(path, removed, expected_hash=wrote["hash"])
        else:
            wrote = memory.write(path, body, expected_hash=hash)
    except (InvalidInput, Changed) as exc:
        current = memory.read(path, numbered=False, max_chars=1_000_000)
        return _edit_page(who, name, path, current["content"], hash if isinstance(exc, InvalidInput) else
                          current["hash"], error=str(exc) + (" Your text is below; the file as it is now is "
                                                             "shown on its page." if isinstance(exc, Changed) else ""),
                          frontmatter=frontmatter, body=body, status=409 if isinstance(exc, Changed) else 400)
    return _see_other(URLS.file(name, wrote["path"]) + "?" + urlencode({"saved": 1}))


# ---- retracting a wrong fact ------------------------------------------------------------------------------------

@router.post("/w/{ws}/retract/{path:path}")
def retract(ws: str, path: str, fact: str = Form(...), reason: str = Form(""), correct: str = Form(""),
            csrf: str = Form(""), who: Visitor = Depends(visitor)):
    """"This is wrong" on a node's fact: the `retract` operation (the fact to History as retracted today with the
    reason, its card facts marked, the correction written as the fact that holds from today); the answer page
    says what changed and which facts to review, each a link."""
    check_form(who, csrf)
    name, memory = who.open(ws, writes=True)
    done = memory.retract(path, fact, reason.strip() or None, correct.strip() or None)
    return who.dashboard.render(who, "retract.html", ws=name, done=done,
                                cards=[_anchored(card) for card in done["cards"]],
                                lines=[_anchored(line) for line in done["lines"]])


def _anchored(link: str) -> dict:
    """`path#^f2` or `path#L3` as {path, fact, lines, link}: what a link to it on the answer page needs."""
    target, _, anchor = link.partition("#")
    return {"path": target, "fact": block_id(anchor), "lines": line_range(anchor), "link": link}


# ---- a day's page ---------------------------------------------------------------------------------------------

@router.post("/w/{ws}/day/{date}/page")
def day_page(ws: str, date: str, csrf: str = Form(""), who: Visitor = Depends(visitor)):
    """Write the day page (`daily_reindex`: daily/DATE.md listing the day's cards) and open it."""
    check_form(who, csrf)
    name, memory = who.open(ws, writes=True)
    wrote = memory.daily_reindex(date)
    if not memory.ws.resolve(wrote["path"]).is_file():
        raise InvalidInput(f"{wrote['date']} has no cards: there is nothing for a day page to list")
    return _see_other(URLS.file(name, wrote["path"]))


# ---- forgetting a node, retrying a run --------------------------------------------------------------------------

@router.post("/w/{ws}/forget/{path:path}")
def forget(ws: str, path: str, csrf: str = Form(""), who: Visitor = Depends(visitor)):
    """Archive a digest node (the `archive` job: moved to digest/archive/, links retargeted, still readable)."""
    check_form(who, csrf)
    name, _ = who.open(ws, writes=True)
    jobs = _jobs(who)
    if not path.startswith("digest/") or path.startswith("digest/archive/"):
        raise InvalidInput(f"only a digest node can be forgotten, not {path}")
    started = jobs.launch("archive", {"paths": [path]}, workspace=name)
    return _see_other(URLS.run(started["id"]))


@router.post("/runs/{run_id}/retry")
def retry(run_id: str, csrf: str = Form(""), who: Visitor = Depends(visitor)):
    """Retry a failed job run as the Prefect UI does (a dream re-runs only its failed units)."""
    check_form(who, csrf)
    _jobs(who).retry(run_id, who.grant)
    return _see_other(URLS.run(run_id))


def _jobs(who: Visitor):
    """The service's jobs gateway (dreamflow/service/jobs.py)."""
    if who.dashboard.service is None:
        raise InvalidInput("jobs need the service (`dreamflow start`)")
    return who.dashboard.service.jobs

