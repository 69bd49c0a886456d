"""Cross-site requests (issue 21): what a web page the user visits can send to a token-less local service
without its consent (a foreign `Origin`, `Sec-Fetch-Site: cross-site`, a `text/plain`, form or multipart body)
is refused with 403 before any route runs, on the API, flows, uploads and `/mcp`; the CLI, `RemoteMemory`,
MCP clients, scripts and the service's own /docs pages keep working. Raw HTTP over a socket, so the headers
are exactly what a browser would send."""

import json
import socket
import subprocess
import uuid

import anyio
import pytest
from test_api import ApiServer

from storage.memory import Memory

pytestmark = pytest.mark.timeout(240)

FOREIGN = "http://evil.example"


def http(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, dict]:
    """One raw HTTP/1.1 request on 127.0.0.1:`port` with exactly these headers; (status, JSON answer)."""
    head = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    request = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(request.encode() + body)
        while data := sock.recv(65536):
            answer += data
    status_line, _, rest = answer.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    try:
        parsed = json.loads(payload) if payload else {}
    except ValueError:
        parsed = {"raw": payload[:200]}
    return int(status_line.split()[1]), parsed


def multipart(name: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def refused(status: int, answer: dict) -> bool:
    return status == 403 and answer["error"]["type"] == "CrossSiteRequest"


# ---- the guard's rules, on a real uvicorn serving the API (no service) ------------------------------------

@pytest.fixture
def server(ws):
    server = ApiServer(Memory(ws.root))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    """One server for the tests whose requests must all be refused or only read (none writes when the guard
    holds, and each checks that): started once for them (~0.3 s a start and stop)."""
    root = tmp_path_factory.mktemp("refusing") / "ws"
    server = ApiServer(Memory(root))
    yield server, root
    server.stop()


WRITE = json.dumps({"path": "digest/wiki/x.md", "content": "planted"}).encode()


@pytest.mark.parametrize("headers", [
    {"Origin": FOREIGN, "Content-Type": "application/json"},  # a preflight-free fetch would not be JSON, but still
    {"Origin": "null", "Content-Type": "text/plain"},  # sandboxed iframe, file:// page
    {"Origin": "http://127.0.0.1:1", "Content-Type": "text/plain"},  # another local port is another origin
    {"Origin": "http://localhost.evil.example", "Content-Type": "application/json"},
    {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
    {"Sec-Fetch-Site": "same-site", "Content-Type": "text/plain"},  # e.g. a page on localhost:3000
    {"Content-Type": "text/plain"},  # an old browser that sends no Origin
    {"Content-Type": "text/plain;charset=UTF-8"},
    {"Content-Type": "application/x-www-form-urlencoded"},
    {"Content-Type": "Multipart/Form-Data; boundary=x"},
])
def test_what_a_foreign_page_can_send_is_refused_before_any_route_runs(refusing, headers):
    server, root = refusing
    for method, path in (("POST", "/ops/write"), ("POST", "/ops/upload"), ("PUT", "/ops/write"),
                         ("DELETE", "/anything"), ("PATCH", "/no/such/route")):
        status, answer = http(server.port, method, path, WRITE, headers)
        assert refused(status, answer), (method, path, headers, status, answer)
        assert answer["error"]["message"].startswith("refused: ")
    assert not (root / "digest/wiki/x.md").exists()


def test_the_refusal_says_why_and_how_a_script_gets_through(refusing):
    server, root = refusing
    status, answer = http(server.port, "POST", "/ops/write", WRITE, {"Origin": FOREIGN})
    assert status == 403 and FOREIGN in answer["error"]["message"]
    assert f"http://127.0.0.1:{server.port}" in answer["error"]["message"]
    status, answer = http(server.port, "POST", "/ops/write", WRITE, {"Content-Type": "text/plain"})
    message = answer["error"]["message"]
    assert status == 403 and "application/json" in message and "X-Dreamflow-Request" in message
    assert not (root / "digest/wiki/x.md").exists()


@pytest.mark.parametrize("headers", [
    {"Content-Type": "application/json"},  # the CLI, RemoteMemory, scripts
    {"Content-Type": "application/json", "Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
    {"Content-Type": "application/json", "Origin": "HTTP://127.0.0.1:{port}"},
    {"Content-Type": "application/json", "Sec-Fetch-Site": "none"},  # typed by the user, not sent by a page
])
def test_json_from_scripts_and_the_services_own_pages_goes_through(server, headers):
    headers = {k: v.format(port=server.port) for k, v in headers.items()}
    status, answer = http(server.port, "POST", "/ops/write", WRITE, headers)
    assert status == 200 and answer["path"] == "digest/wiki/x.md", answer


def test_a_multipart_upload_goes_through_from_a_script_that_says_so_or_from_the_docs_page(server):
    for n, headers in enumerate(({"X-Dreamflow-Request": "1"}, {"Authorization": "Bearer anything"},
                                 {"Origin": f"http://127.0.0.1:{server.port}"})):
        body, kind = multipart(f"n{n}.txt", b"bytes")
        status, answer = http(server.port, "POST", "/ops/upload", body, {"Content-Type": kind, **headers})
        assert status == 200 and answer["path"] == f"resource/n{n}.txt", (headers, answer)


def test_reads_and_preflights_are_not_refused(refusing):
    server, _ = refusing
    for method, path in (("GET", "/health"), ("GET", "/docs"), ("HEAD", "/health"), ("OPTIONS", "/ops/write")):
        status, _ = http(server.port, method, path, headers={"Origin": FOREIGN, "Sec-Fetch-Site": "cross-site"})
        assert status != 403, (method, path)


# ---- the real service: flows, uploads and /mcp --------------------------------------------------------------

def _reindex_runs(svc) -> int:
    return len(svc.flow_runs("reindex/manual"))


@pytest.mark.e2e
def test_a_foreign_page_cannot_write_upload_start_flows_or_call_mcp_on_the_service(dreamflow_service):
    svc = dreamflow_service
    port = svc.port
    runs_before = _reindex_runs(svc)
    text = {"Content-Type": "text/plain"}
    body, kind = multipart("planted.txt", b"planted by a web page")
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}}).encode()
    mcp_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    attempts = [
        ("/ops/write", WRITE, {"Origin": FOREIGN, "Content-Type": "application/json"}),  # foreign Origin, JSON
        ("/ops/write", WRITE, text),  # text/plain, no Origin
        ("/ops/upload", body, {"Origin": FOREIGN, "Content-Type": kind}),  # multipart from a foreign origin
        ("/ops/upload", body, {"Content-Type": kind}),  # multipart without an Origin
        ("/flows/reindex", b"", {"Origin": FOREIGN}),  # a no-cors fetch with no body
        ("/flows/reindex", b"{}", text),
        ("/flows/optimize", b"", {"Sec-Fetch-Site": "cross-site"}),
        ("/flows/archive", b"{}", {"Content-Type": "application/x-www-form-urlencoded"}),
        ("/turn", json.dumps({"session_id": "page", "messages": []}).encode(), {"Origin": "null", **text}),
        ("/mcp", initialize, {"Origin": FOREIGN, **mcp_headers}),
        ("/mcp", initialize, {"Origin": "http://localhost:1", **mcp_headers}),  # another local port
    ]
    for path, data, headers in attempts:
        status, answer = http(port, "POST", path, data, headers)
        assert refused(status, answer), (path, headers, status, answer)

    assert not (svc.workspace / "digest/wiki/x.md").exists()
    assert not list((svc.workspace / "resource").rglob("planted*"))
    assert "page" not in svc.memory.status()["turns"]["sessions"]
    assert _reindex_runs(svc) == runs_before  # no flow run was created

    # the project's own clients still work: RemoteMemory (JSON), an upload through the CLI, MCP over HTTP
    assert svc.memory.write("digest/wiki/cross-site-ok.md", "fine")["path"] == "digest/wiki/cross-site-ok.md"
    source = svc.root / "upload-me.txt"
    source.write_text("uploaded by the CLI")
    from service_harness import DREAMFLOW

    cli = subprocess.run([DREAMFLOW, "--workspace", str(svc.workspace), "upload", str(source), "--json"],
                         capture_output=True, text=True, timeout=60, env=svc.env)
    assert cli.returncode == 0 and json.loads(cli.stdout)["path"] == "resource/upload-me.txt", cli.stdout + cli.stderr

    from test_mcp import call
    from test_mcp import http as mcp_http

    async def session():
        async with mcp_http(svc) as client:
            return await call(client, "read", path="digest/wiki/cross-site-ok.md", numbered=False)

    read = anyio.run(session)
    assert not read.is_error and "fine" in read.content[0].text  # the page's text is in the text block only


@pytest.mark.e2e
def test_only_its_own_ui_may_script_the_prefect_server_the_service_starts(dreamflow_service):
    from service_harness import loopback

    svc = dreamflow_service
    ui = svc.prefect_api.removesuffix("/api")
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for origin in (FOREIGN, "http://localhost:1", "null"):  # Prefect's default (`*`) let any page script it
        resp = loopback.options(f"{svc.prefect_api}/deployments/filter", headers={"Origin": origin, **preflight})
        assert "access-control-allow-origin" not in resp.headers, (origin, resp.headers)
    for origin in (ui, ui.replace("127.0.0.1", "localhost")):  # the UI, opened either way
        resp = loopback.options(f"{svc.prefect_api}/deployments/filter", headers={"Origin": origin, **preflight})
        assert resp.headers.get("access-control-allow-origin") == origin, (origin, resp.headers)
    resp = loopback.post(f"{svc.prefect_api}/deployments/filter", json={}, headers={"Origin": ui}, timeout=20)
    assert resp.status_code == 200 and resp.headers["access-control-allow-origin"] == ui
