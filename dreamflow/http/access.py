"""Who calls and for which workspace: the ASGI layer between the request guard and the routes.

- Every route also lives under `/workspaces/<name>/` (`/workspaces/web-app/ops/search`, `.../turn`, `.../mcp`):
  the prefix is taken off and the name kept in the request scope; unscoped routes mean the default workspace.
- The bearer token becomes the request's `Grant` (engine/config/grants.py): the admin token, a token from
  `dreamflow token create`, or, while no token is configured at all, everyone (a loopback service as before).
  A missing or unknown token gets 401 once any token is configured, except on the dashboard (`/ui`), which
  signs browsers in with its own session cookie (dreamflow/web/sessions.py): there a request without an
  `Authorization` header goes on with no grant.
"""

from __future__ import annotations

import json
from urllib.parse import unquote

from engine.config.grants import Grant, Tokens
from storage.errors import envelope

GRANT = "dreamflow.grant"          # request scope keys
WORKSPACE = "dreamflow.workspace"
PREFIX = "/workspaces/"
DASHBOARD = "/ui"


def grant_of(request) -> Grant:
    return request.scope[GRANT]


def workspace_of(request) -> str | None:
    """The workspace named by the URL (`/workspaces/<name>/...`), None for an unscoped route."""
    return request.scope.get(WORKSPACE)


class Access:
    """ASGI middleware: authenticate (`tokens`) and take the `/workspaces/<name>` prefix off the path."""

    def __init__(self, app, tokens: Tokens):
        self.app, self.tokens = app, tokens

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # lifespan (there are no websocket routes)
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        kind, _, secret = headers.get("authorization", "").strip().partition(" ")
        # the scheme is case-insensitive (RFC 7235): some clients send `bearer`
        grant = self.tokens.grant(secret.strip() if kind.lower() == "bearer" else None)
        path = scope.get("path", "")
        if grant is None and not (_dashboard(path) and "authorization" not in headers):
            return await _unauthorized(send)
        scope = {**scope, GRANT: grant}
        if path.startswith(PREFIX):
            name, slash, rest = path[len(PREFIX):].partition("/")
            if name and slash and rest:
                scope[WORKSPACE] = unquote(name)
                scope["path"] = "/" + rest
                raw = scope.get("raw_path")
                if raw:
                    scope["raw_path"] = raw[raw.index(b"/", len(PREFIX)):]
        return await self.app(scope, receive, send)


def _dashboard(path: str) -> bool:
    return path == DASHBOARD or path.startswith(DASHBOARD + "/")


async def _unauthorized(send) -> None:
    message = "missing or wrong bearer token: send 'Authorization: Bearer <token>' (DREAMFLOW_API_TOKEN or a " \
              "token from `dreamflow token create`)"
    body = json.dumps(envelope("Unauthorized", message, 8)).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": body})
