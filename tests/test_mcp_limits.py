"""MCP under abuse (issue 21): abandoned `/mcp` sessions cannot lock new clients out (a real uvicorn serving the
service's mount, a real MCP client), and a stdio request the SDK cannot parse (a lone surrogate escape) still
gets a JSON-RPC error with its id from a real `dreamflow mcp` subprocess."""

import json
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from service_harness import DREAMFLOW, ThreadedServer, loopback

pytestmark = pytest.mark.timeout(120)

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class MountServer(ThreadedServer):
    """`HttpMount` at /mcp on uvicorn in a thread, its session manager run by the app's lifespan."""

    def __init__(self, workspace, max_sessions: int):
        from starlette.applications import Starlette
        from starlette.routing import Route

        from dreamflow.http.access import Access
        from dreamflow.mcp.server import HttpMount
        from dreamflow.mcp.targets import WorkspaceTarget
        from engine.config.grants import Tokens

        self.mount = HttpMount(WorkspaceTarget(workspace), max_sessions=max_sessions)
        app = Starlette(routes=[Route("/mcp", self.mount, methods=["GET", "POST", "DELETE"])],
                        lifespan=self.mount.lifespan)
        super().__init__(Access(app, Tokens(None)))  # the grant every request carries, as in the service
        self.url += "/mcp"


def open_and_abandon(url: str) -> str:
    """Initialize a session and walk away (no further request, no DELETE): its session id."""
    resp = loopback.post(url, json=INITIALIZE, headers=MCP_HEADERS, timeout=20)
    assert resp.status_code == 200, resp.text
    return resp.headers["mcp-session-id"]


def ping(url: str, session_id: str) -> int:
    headers = {**MCP_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    return loopback.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers, timeout=20).status_code


@pytest.mark.e2e
def test_abandoned_sessions_past_the_cap_do_not_lock_out_a_new_client(tmp_path):
    server = MountServer(tmp_path / "ws", max_sessions=4)
    try:
        abandoned = [open_and_abandon(server.url) for _ in range(12)]  # 3x the cap, never closed

        async def new_client():
            async with Client(streamable_http_client(server.url)) as client:
                await client.call_tool("write", {"path": "digest/wiki/after.md", "content": "still served"})
                return await client.call_tool("read", {"path": "digest/wiki/after.md", "numbered": False})

        read = anyio.run(new_client)
        assert not read.is_error and "still served" in read.content[0].text
        assert len(server.mount.sessions._server_instances) <= 4  # memory bounded by the cap
        # the least recently used went first; the newest abandoned ones are still served
        assert [ping(server.url, sid) for sid in abandoned[:8]] == [404] * 8
        assert ping(server.url, abandoned[-1]) == 200
    finally:
        server.stop()


@pytest.mark.e2e
def test_the_mount_loads_the_sdk_at_its_first_request_and_serves_first_requests_made_at_once(tmp_path):
    """A service starts without the mcp SDK (its start spent 0.9 of 2.2 CPU-s on it); the first requests to
    /mcp, four at once, start one session manager and each get a session of their own."""
    made = ("import sys\nfrom dreamflow.mcp.server import HttpMount\n"
            f"from dreamflow.mcp.targets import WorkspaceTarget\nHttpMount(WorkspaceTarget({str(tmp_path / 'ws')!r}))\n"
            "print([m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')])")
    loaded = subprocess.run([sys.executable, "-c", made], capture_output=True, text=True, timeout=60)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    server = MountServer(tmp_path / "ws", max_sessions=8)
    try:
        assert server.mount.sessions is None
        with ThreadPoolExecutor(4) as pool:
            sessions = list(pool.map(lambda _: open_and_abandon(server.url), range(4)))
        assert len(set(sessions)) == 4
        assert len(server.mount.sessions._server_instances) == 4  # one manager holds them all
    finally:
        server.stop()


def test_the_session_cap_comes_from_the_setting_and_must_be_positive(tmp_path, monkeypatch):
    from dreamflow.mcp.server import HttpMount
    from dreamflow.mcp.targets import WorkspaceTarget
    from storage.errors import InvalidInput

    monkeypatch.setenv("DREAMFLOW_MCP_MAX_SESSIONS", "7")
    sessions, _ = HttpMount(WorkspaceTarget(tmp_path / "ws")).build()
    assert sessions.max_sessions == 7
    with pytest.raises(InvalidInput, match="DREAMFLOW_MCP_MAX_SESSIONS"):
        HttpMount(WorkspaceTarget(tmp_path / "ws"), max_sessions=0)


# ---- stdio: every request gets an answer --------------------------------------------------------------------

@pytest.mark.e2e
def test_a_stdio_request_with_a_lone_surrogate_gets_an_error_with_its_id(tmp_path):
    proc = subprocess.Popen([DREAMFLOW, "--workspace", str(tmp_path / "ws"), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    call = '{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
    lines = [
        json.dumps(INITIALIZE), '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        call % (2, "search", '{"query": "\\ud800"}'),  # a lone high surrogate
        call % (3, "write", '{"path": "digest/wiki/s.md", "content": "a\\udfffb"}'),  # a lone low one
        call % ('"req-4"', "\\ud83d", "{}"),  # in the tool name, a string id
        call % ('"\\ud800"', "search", '{"query": "x"}'),  # in the id itself: answered as null
        '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"reason": "\\ud800"}}',  # no answer due
        call % (6, "search", '{"query": "\\ud83d\\ude00 whole pair"}'),  # a valid pair is fine
        call % (7, "list", "{}"),
    ]
    proc.stdin.write("".join(line + "\n" for line in lines).encode())
    proc.stdin.flush()
    received: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [received.put(json.loads(line)) for line in proc.stdout], daemon=True).start()
    answers = {}
    deadline = time.monotonic() + 60
    while not {2, 3, "req-4", None, 6, 7} <= set(answers) and time.monotonic() < deadline:  # in any order
        try:
            answer = received.get(timeout=max(deadline - time.monotonic(), 0.1))
        except queue.Empty:
            break
        answers[answer.get("id")] = answer
    proc.stdin.close()
    assert proc.wait(30) == 0
    for request_id in (2, 3, "req-4", None):
        error = answers[request_id]["error"]
        assert error["code"] == -32600 and "lone UTF-16 surrogate" in error["message"], answers[request_id]
    assert not (tmp_path / "ws/digest/wiki/s.md").exists()
    assert answers[6]["result"]["isError"] is False
    assert answers[7]["result"]["isError"] is False
    assert "Traceback" not in proc.stderr.read().decode()
