"""Hostile HTTP requests on a real uvicorn on 127.0.0.1: a foreign `Host` (DNS rebinding) gets 421, a body over
`DREAMFLOW_MAX_BODY_BYTES` gets 413 before it is read (declared or chunked), on every route and on a sub-app
mounted on the API (as `/mcp` is). The Prefect server a token-protected service starts refuses requests
without the credentials, while the service's own runs go through."""

import json
import socket
import subprocess
import threading

import pytest
from test_api import ApiServer

from storage.memory import Memory

LIMIT = 64 * 1024


def _serve(root) -> ApiServer:
    """The API over workspace `root`, built with a 64 KB body limit and two configured names, and a mounted
    ASGI sub-app at /sub that reads the whole body and answers its length."""
    with pytest.MonkeyPatch.context() as env:  # read when the app is built
        env.setenv("DREAMFLOW_MAX_BODY_BYTES", str(LIMIT))
        env.setenv("DREAMFLOW_ALLOWED_HOSTS", "memory.lan, Notes.Example.")
        server = ApiServer(Memory(root))
    app = server.server.config.app

    async def echo(scope, receive, send):  # a mounted ASGI sub-app that reads the whole body
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = str(len(body)).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]})
        await send({"type": "http.response.body", "body": answer})

    app.mount("/sub", echo)
    return server


@pytest.fixture
def server(ws):
    server = _serve(ws.root)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def hosts_server(tmp_path_factory):
    """One server for the `Host` tests, whose requests are refused or read /health (nothing is written):
    started once for them (~0.3 s a start and stop)."""
    server = _serve(tmp_path_factory.mktemp("hosts") / "ws")
    yield server
    server.stop()


def http(port: int, method: str, path: str, host: str = "127.0.0.1", body: bytes = b"",
         length: int | None = None, chunks=None) -> tuple[int, object, int]:
    """Raw HTTP/1.1 over a socket, so `Host` and framing are exactly as given: `length` declares a
    Content-Length other than the body's, `chunks` sends a chunked body. Returns (status, JSON answer, body
    bytes sent before the server stopped taking them); the answer is read while the body is still going."""
    declared = len(body) if length is None else length
    framing = "Transfer-Encoding: chunked" if chunks is not None else f"Content-Length: {declared}"
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Connection: close\r\n{framing}\r\n\r\n")
    answer = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        reader = threading.Thread(target=_read_all, args=(sock, answer))
        reader.start()
        sent = 0
        try:
            sock.sendall(head.encode() + body)
            sent = len(body)
            for chunk in chunks or ():
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
            if chunks is not None:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: stop sending
            pass
        reader.join(20)
    status_line, _, rest = bytes(answer).partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2]), sent


def _read_all(sock: socket.socket, into: bytearray) -> None:
    try:
        while data := sock.recv(65536):
            into += data
    except OSError:
        pass


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8420", "127.0.0.1.nip.io", "localhost.evil",
                                  "localhost:1@evil.example", "[::1]:80@evil.example", "127.0.0.1:x",
                                  "[::2]:80", "192.168.1.7"])
def test_a_foreign_host_header_is_refused_on_every_route(hosts_server, host):
    for path, body in (("/health", b""), ("/ops/list", b"{}"), ("/sub/x", b"{}")):
        status, answer, _ = http(hosts_server.port, "POST" if body else "GET", path, host, body)
        assert status == 421, (host, path, answer)
        assert answer["error"]["type"] == "MisdirectedRequest"
        assert "DREAMFLOW_ALLOWED_HOSTS" in answer["error"]["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8420", "localhost", "LOCALHOST:1", "[::1]:8420",
                                  "memory.lan:8420", "notes.example"])
def test_the_bound_and_configured_names_are_answered(hosts_server, host):
    status, answer, _ = http(hosts_server.port, "GET", "/health", host)
    assert status == 200 and answer["ok"] is True


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(server):
    ok_body = json.dumps({"path": "digest/wiki/small.md", "content": "x" * (LIMIT // 2)}).encode()
    status, answer, _ = http(server.port, "POST", "/ops/write", body=ok_body)
    assert status == 200 and answer["path"] == "digest/wiki/small.md"
    for path in ("/ops/write", "/sub/x", "/no/such/route"):
        # 10 GB declared, nothing sent: the answer comes at once, the server does not wait for the body
        status, answer, _ = http(server.port, "POST", path, length=10 << 30)
        assert status == 413 and answer["error"]["type"] == "PayloadTooLarge", path
        assert "DREAMFLOW_MAX_BODY_BYTES" in answer["error"]["message"]
    assert http(server.port, "GET", "/health")[0] == 200


@pytest.mark.parametrize("path", ["/ops/write", "/sub/x"])
def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(server, path):
    status, answer, sent = http(server.port, "POST", path, chunks=(b"x" * 16384 for _ in range(4096)))
    assert status == 413 and answer["error"]["type"] == "PayloadTooLarge"
    assert sent < 32 << 20  # of 64 MB offered, the server stopped taking it early
    small = [b'{"path": "digest/wiki/c.md", ', b'"content": "c"}']  # 44 bytes in two chunks
    status, answer, _ = http(server.port, "POST", path, chunks=small)
    assert status == 200 and (answer["path"] == "digest/wiki/c.md" if path == "/ops/write" else answer == 44)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_token_protects_the_prefect_server_the_service_starts(tmp_path, llm_server):
    from service_harness import DREAMFLOW, RunningService, loopback, wait_for
    from llm_server import answer_each_item
    from test_service import finished

    svc = RunningService.start(tmp_path, llm=llm_server, token="s3cret")
    try:
        assert svc.prefect_auth == ("dreamflow", "s3cret")
        for auth in (None, ("dreamflow", "wrong"), ("s3cret", "")):
            for method, path, body in (("GET", "/flows/", None), ("POST", "/deployments/filter", {}),
                                       ("POST", "/flow_runs/", {"flow_id": "00000000-0000-0000-0000-000000000000"})):
                resp = loopback.request(method, f"{svc.prefect_api}{path}", json=body, auth=auth, timeout=20)
                assert resp.status_code == 401, (method, path, auth, resp.text)

        # the service's own runs still work: launched over its API, or by a resource event, run by the runner
        run = loopback.post(f"{svc.url}/flows/reindex", json={}, headers=svc.headers, timeout=60).json()
        runs = wait_for(lambda: finished(svc, "reindex/manual", 1), 120, "the reindex run to finish")
        assert [(r["id"], r["state_type"]) for r in runs] == [(run["id"], "COMPLETED")], svc.log()
        llm_server.reset()
        answer_each_item(llm_server, "Koala facts")
        svc.memory.write("resource/2024-05-03/koala.md", "# koalafacts\n\nKoalas sleep 20 hours a day.\n")
        runs = wait_for(lambda: finished(svc, "auto-resource/on-change", 1), 120, "the auto_resource run")
        assert [r["state_type"] for r in runs] == ["COMPLETED"], svc.log()
        # the service reads Prefect too: the nightly dream planned when the service registered it shows
        status = wait_for(lambda: (s := loopback.get(f"{svc.url}/status", headers=svc.headers, timeout=60).json())
                          .get("next_dream") and s, 30, "the nightly dream in the status")
        assert "prefect_error" not in status, status

        # a CLI flow command is a run of the deployment on the service (with the token), and says what is
        # missing without it
        env = {k: v for k, v in svc.env.items() if not k.startswith("PREFECT_API")}
        dream = subprocess.run([DREAMFLOW, "--workspace", str(svc.workspace), "dream", "--json"], env=env,
                               capture_output=True, text=True, timeout=180)
        assert dream.returncode == 0, dream.stdout + dream.stderr
        runs = [r for r in svc.flow_runs("auto-dream/manual") if r["state_type"] != "SCHEDULED"]
        assert [r["state_type"] for r in runs] == ["COMPLETED"]  # the CLI's run, in the service's server
        env.pop("DREAMFLOW_API_TOKEN")
        refused = subprocess.run([DREAMFLOW, "--workspace", str(svc.workspace), "dream", "--json"], env=env,
                                 capture_output=True, text=True, timeout=180)
        assert refused.returncode != 0 and "DREAMFLOW_API_TOKEN" in refused.stdout + refused.stderr
    finally:
        assert svc.stop() == 0, svc.log()

