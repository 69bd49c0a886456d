"""The HTTP API on a real uvicorn server on 127.0.0.1, called through `RemoteMemory` and raw HTTP:
same results and errors as the in-process Memory, JSON errors with the right status, token enforcement."""

import http.client
import json
import re

import pytest

from service_harness import ThreadedServer

from dreamflow.http.api import create_app
from engine.access.client import RemoteMemory
from storage.errors import Conflict, InvalidInput, NotFound, PathError
from storage.memory import Memory


class ApiServer(ThreadedServer):
    """`create_app(memory, token)` served by uvicorn in a thread."""

    def __init__(self, memory, token=None):
        super().__init__(create_app(memory, token=token), lifespan="off")

    def raw(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        return resp.status, (json.loads(payload) if payload else None)


@pytest.fixture
def served(ws):
    memory = Memory(ws.root)
    server = ApiServer(memory)
    yield memory, RemoteMemory(server.url), server
    server.stop()


def test_remote_and_local_memory_give_the_same_results(served):
    local, remote, _ = served
    wrote = remote.write("daily/2024-05-01/trip.md", "# Trip\n\nWe hiked the Zugspitze in May.\n",
                         name="Trip", description="Hiking trip", metadata={"tags": ["travel"]})
    assert wrote["path"] == "daily/2024-05-01/trip.md" and wrote["created"] is True
    for name, kwargs in [
        ("read", {"path": "daily/2024-05-01/trip.md", "start_line": 1, "end_line": 4}),
        ("stat", {"path": "daily/2024-05-01/trip.md"}),
        ("list", {"prefix": "daily"}),
        ("frontmatter_get", {"path": "daily/2024-05-01/trip.md"}),
        ("search", {"query": "Zugspitze hiking"}),
        ("index_stats", {}),
    ]:
        answer = getattr(remote, name)(**kwargs)
        if name == "search":  # over the API every hit also names its workspace, and its address in it
            assert {hit.pop("workspace") for hit in answer} == {"default"}
            assert all(hit.pop("address") == hit["path"] for hit in answer)
        assert answer == json.loads(json.dumps(getattr(local, name)(**kwargs))), name
    assert remote.search("Zugspitze")[0]["path"] == "daily/2024-05-01/trip.md"  # read-your-writes
    assert remote.read("daily/2024-05-01/trip.md", 1, 2) == local.read("daily/2024-05-01/trip.md", 1, 2)  # positional


@pytest.mark.parametrize("call, error, status", [
    (lambda m: m.read("daily/missing.md"), NotFound, 404),
    (lambda m: m.read("../outside.md"), PathError, 400),
    (lambda m: m.edit("daily/a.md", "no such text", "x"), Conflict, 409),
    (lambda m: m.daily_list(date="May 5th"), InvalidInput, 400),
])
def test_errors_come_back_as_the_same_class_message_and_status(served, call, error, status):
    local, remote, server = served
    local.write("daily/a.md", "hello")
    with pytest.raises(error) as remote_exc:
        call(remote)
    with pytest.raises(error) as local_exc:
        call(local)
    assert str(remote_exc.value) == str(local_exc.value)
    assert remote_exc.value.exit_code == local_exc.value.exit_code


def test_json_error_bodies_and_validation(served):
    _, _, server = served
    status, body = server.raw("POST", "/ops/read", {"path": "nope.md"})
    assert status == 404 and body["error"]["type"] == "NotFound" and "nope.md" in body["error"]["message"]
    status, body = server.raw("POST", "/ops/read", {})
    assert status == 422 and body["error"]["type"] == "InvalidInput" and "path" in body["error"]["message"]
    status, body = server.raw("POST", "/ops/search", {"query": "x", "limit": "many"})
    assert status == 422 and "limit" in body["error"]["message"]
    status, body = server.raw("POST", "/ops/search", b"{not json")
    assert status == 422
    status, body = server.raw("POST", "/ops/no_such_op", {})
    assert status == 404 and body["error"]["type"] == "NotFound" and "/ops/no_such_op" in body["error"]["message"]
    # found by tests/test_api_schema.py: no body at all, absurd counts, and a wrong method
    status, body = server.raw("POST", "/ops/list")
    assert status == 200 and "entries" in body
    status, body = server.raw("POST", "/ops/node_search", {"query": "x", "limit": 10**19})
    assert status == 400 and body["error"]["type"] == "InvalidInput" and "limit" in body["error"]["message"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("DELETE", "/health")
    resp = conn.getresponse()
    assert resp.status == 405 and resp.getheader("Allow") == "GET"
    conn.close()


def test_openapi_documents_every_operation_with_its_parameters(served):
    _, _, server = served
    status, spec = server.raw("GET", "/openapi.json")
    assert status == 200
    from engine import ops

    for op in ops.OPS:
        assert f"/ops/{op.name}" in spec["paths"], op.name
    search = spec["paths"]["/ops/search"]["post"]
    ref = search["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    schema = spec["components"]["schemas"][ref]
    assert "query" in schema["required"] and "limit" in schema["properties"]
    assert search["summary"]


def test_upload_sends_an_absolute_source_path(served, tmp_path, monkeypatch):
    _, remote, _ = served
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "notes.txt").write_text("outside notes")
    monkeypatch.chdir(tmp_path / "outside")
    result = remote.upload("notes.txt", date="2024-05-01")
    assert remote.read(result["path"])["content"].strip().endswith("outside notes")


def test_token_is_required_on_every_route(ws):
    server = ApiServer(Memory(ws.root), token="s3cret")
    try:
        for path in ("/health", "/docs", "/openapi.json"):
            status, body = server.raw("GET", path)
            assert status == 401 and body["error"]["type"] == "Unauthorized", path
        status, _ = server.raw("POST", "/ops/index_stats", {}, headers={"Authorization": "Bearer wrong"})
        assert status == 401
        status, _ = server.raw("GET", "/ui/")  # the dashboard asks for the token on its sign-in form
        assert status == 303
        status, body = server.raw("GET", "/ui/", headers={"Authorization": "Bearer wrong"})
        assert status == 401 and body["error"]["type"] == "Unauthorized"
        status, body = server.raw("GET", "/health", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and body["ok"] is True
        assert RemoteMemory(server.url, token="s3cret").list()["entries"] is not None
        with pytest.raises(Exception) as exc:
            RemoteMemory(server.url).list()
        assert "bearer token" in str(exc.value) and exc.value.http_status == 401
    finally:
        server.stop()


def test_unknown_parameters_are_refused(served):
    _, _, server = served
    status, body = server.raw("POST", "/ops/search", {"query": "x", "limt": 3})
    assert status == 422 and "limt" in body["error"]["message"]


def test_proactive_returns_the_days_topics(served):
    local, _, server = served
    local.write("daily/2024-05-01/interests.yaml", (
        "date: 2024-05-01\ntopic_count: 1\ndiversity_days: 7\ntopics:\n"
        "  - {title: Alpine huts, reason: planned a hike, keywords: [hike], paths: [daily/2024-05-01/trip.md]}\n"))
    local.write("daily/2024-05-01/trip.md", "We hiked.")
    status, body = server.raw("POST", "/proactive", {"date": "2024-05-01", "include_content": True})
    assert status == 200 and body["topics"][0]["title"] == "Alpine huts"
    assert "We hiked." in body["topics"][0]["content"]["daily/2024-05-01/trip.md"]
    status, body = server.raw("POST", "/proactive", {"date": "2024-05-02"})
    assert status == 200 and body["topics"] == [] and "interests.yaml" in body["skipped"]
    status, body = server.raw("POST", "/proactive", {"date": "someday"})
    assert status == 400 and body["error"]["type"] == "InvalidInput"


def test_docs_and_redoc_load_their_assets_from_the_service_not_a_cdn(served):
    _, _, server = served
    for page in ("/docs", "/redoc"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", page)
        resp = conn.getresponse()
        html = resp.read().decode()
        assert resp.status == 200 and "/openapi.json" in html, page
        assert not re.search(r"https?://", html), (page, re.findall(r"https?://[^\"' ]+", html))
        assets = re.findall(r"(?:src|href)=['\"](/[^'\"]+)['\"]", html)
        assert assets, page
        for asset in assets:
            conn.request("GET", asset)
            served_asset = conn.getresponse()
            body = served_asset.read()
            assert served_asset.status == 200 and len(body) > 1000, asset
        conn.close()


def test_a_write_into_an_immutable_folder_is_a_clear_403_not_a_500(served, ws):
    import shutil
    import subprocess

    from storage.errors import NotWritable

    _, remote, server = served
    remote.write("digest/wiki/a.md", "# A\n\nfirst\n")
    folder = ws.root / "digest/wiki"
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        status, body = server.raw("POST", "/ops/write", {"path": "digest/wiki/b.md", "content": "x"})
        assert status == 403 and body["error"]["type"] == "NotWritable", (status, body)
        assert "read-only or immutable folder" in body["error"]["message"]
        with pytest.raises(NotWritable):  # the client gets the same class, as the CLI prints it
            remote.write("digest/wiki/b.md", "x")
    finally:
        subprocess.run(["chattr", "-i", str(folder)])
    assert not (folder / "b.md").exists()
