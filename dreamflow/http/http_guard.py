"""ASGI guard in front of the whole HTTP app (every route and any mounted sub-app, e.g. `/mcp`).

- `Host` check: only the names the service is reached by are answered (loopback names, the bound host, the
  machine's names when bound to all interfaces, `DREAMFLOW_ALLOWED_HOSTS`), so a web page whose DNS name
  re-binds to 127.0.0.1 cannot drive a token-less service from a browser: 421 Misdirected Request.
- Cross-site check: a state-changing request (any method but GET, HEAD, OPTIONS; a websocket handshake) that
  a browser sends on behalf of another site's page gets 403: an `Origin` that is not the service's own (the
  `Host` the request names), `Sec-Fetch-Site: cross-site` or `same-site`, or a body a page may send anywhere
  without a CORS preflight (`text/plain`, a form, multipart, no `Origin`) that lacks proof of a non-browser
  caller (`X-Dreamflow-Request` or `Authorization`, headers a page cannot add cross-site without a preflight,
  which this service never grants). JSON requests (the CLI, `RemoteMemory`, MCP clients, scripts) and the
  service's own pages (/docs) pass.
- Body limit: a request body over `DREAMFLOW_MAX_BODY_BYTES` gets 413 before it is read: a larger
  `Content-Length` at once, a chunked body as soon as the bytes received pass the limit.
"""

from __future__ import annotations

import gc
import json
import socket
from collections.abc import Iterable

from storage.errors import InvalidInput, envelope

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
ALL_INTERFACES = ("0.0.0.0", "::", "")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# bodies a web page may send to any site without a CORS preflight (the Fetch standard's safelisted types)
SIMPLE_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")
REQUEST_HEADER = "X-Dreamflow-Request"  # any value: says "not a browser form" for a simple body


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> set[str]:
    """Host names (lower case, no port or brackets) a service bound to `bound` answers to; `*` allows any."""
    names = {*LOOPBACK_NAMES, _host_name(bound), *(_host_name(name) for name in extra)}
    if bound in ALL_INTERFACES:
        names |= _machine_names()
    return names - {""}


def _machine_names() -> set[str]:
    """This machine's host name, FQDN and their addresses (how others reach a service on all interfaces)."""
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    for name in list(names):
        try:
            names |= {info[4][0].lower() for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    return names


def _host_name(host: str) -> str:
    """`Host` header value (or a bound host) without port, brackets, trailing dot; lower case. A port that is
    not digits (`localhost:1@evil.com`) makes the whole value the name, which no allowed name matches."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, port = host[1:].partition("]")
        host = name if port == "" or (port[:1] == ":" and port[1:].isdigit()) else host
    elif host.count(":") == 1:
        name, port = host.split(":", 1)
        host = name if port.isdigit() else host
    return host.rstrip(".")


def cross_site_reason(scope, headers: dict[bytes, bytes]) -> str | None:
    """Why this request may come from another site's page without the service's consent, or None."""
    if scope["type"] == "http" and scope["method"] in SAFE_METHODS:
        return None
    origin, host = headers.get(b"origin"), headers.get(b"host")
    if origin is not None and not _same_origin(origin.decode("latin-1"), host and host.decode("latin-1")):
        return (f"Origin {origin.decode('latin-1')!r} is not this service's own origin"
                + (f" (http://{host.decode('latin-1')})" if host else "")
                + ": a page of another site cannot change memory or start jobs")
    site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
    if site in ("cross-site", "same-site"):
        return f"the browser marked this request Sec-Fetch-Site: {site}: a page of another site cannot change memory"
    if scope["type"] != "http" or origin is not None:
        return None
    kind = headers.get(b"content-type", b"").decode("latin-1").partition(";")[0].strip().lower()
    if kind in SIMPLE_TYPES and b"authorization" not in headers and REQUEST_HEADER.lower().encode() not in headers:
        return (f"a {kind} body without an Origin header is what any web page can send here unasked: send JSON "
                f"(Content-Type: application/json), or add the header '{REQUEST_HEADER}: 1' (curl -H ...)")
    return None


def _same_origin(origin: str, host: str | None) -> bool:
    """`origin` (`scheme://host[:port]`, or `null`) names the `Host` the request was sent to (default ports
    dropped; the scheme may differ behind a TLS proxy)."""
    scheme, sep, authority = origin.strip().lower().partition("://")
    if not sep or host is None or scheme not in ("http", "https"):
        return False
    default = ":443" if scheme == "https" else ":80"
    return authority.removesuffix(default) == host.strip().lower().removesuffix(default)


class BodyTooLarge(Exception):
    """Raised from `receive` when a streamed request body passes the limit."""


class RequestGuard:
    """ASGI middleware: refuse unknown `Host` names (421), cross-site state changes (403) and bodies over
    `max_body_bytes` (413)."""

    def __init__(self, app, hosts: set[str], max_body_bytes: int):
        self.app, self.hosts, self.max_body_bytes = app, hosts, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        host = headers.get(b"host")
        if host is not None and "*" not in self.hosts and _host_name(host.decode("latin-1")) not in self.hosts:
            message = (f"Host {host.decode('latin-1')!r} is not a name this service answers to (allowed: "
                       f"{', '.join(sorted(self.hosts))}); add it to DREAMFLOW_ALLOWED_HOSTS")
            return await _refuse(scope, receive, send, 421, "MisdirectedRequest", message)
        reason = cross_site_reason(scope, headers)
        if reason is not None:
            return await _refuse(scope, receive, send, 403, "CrossSiteRequest", f"refused: {reason}")
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return await _refuse(scope, receive, send, 413, "PayloadTooLarge", self._too_large())
        return await self._counted(scope, receive, send)

    def _too_large(self) -> str:
        return (f"the request body is larger than {self.max_body_bytes:,} bytes (DREAMFLOW_MAX_BODY_BYTES); "
                "send less or raise the limit")

    async def _counted(self, scope, receive, send):
        """Run the app with a `receive` that stops a body once it passes the limit; then answer 413."""
        received, refused, started = 0, False, False

        async def limited_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    refused = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message):
            nonlocal started
            if refused:  # the app's own answer to the interrupted read (e.g. a 500) is not sent
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            pass
        except Exception:
            if not refused:
                raise
        if refused:
            gc.collect(1)  # the interrupted read's frames hold up to the limit in chunks, in young reference cycles
            if not started:
                await _refuse(scope, receive, send, 413, "PayloadTooLarge", self._too_large())


async def _refuse(scope, receive, send, status: int, kind: str, message: str) -> None:
    """Answer with the API's JSON error shape (a websocket is closed instead: policy violation)."""
    if scope["type"] == "websocket":
        await receive()  # the websocket.connect message
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    body = json.dumps(envelope(kind, message, InvalidInput.exit_code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
