"""The MCP server through the SDK's real client: `dreamflow mcp` spawned over stdio, and streamable HTTP at
`/mcp` of the shared real service (conftest `dreamflow_service`; the token case is in test_service.py)."""

import base64
import json
import os
import subprocess
import sys
import time

import anyio
import httpx2
import jsonschema
import pytest
from cli_probe import PROBE
from llm_server import json_reply, text_of
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from service_harness import DREAMFLOW

from dreamflow.mcp.server import DEFAULT_TOOLS
from engine import ops
from storage.text.instructions import FRAME

pytestmark = pytest.mark.timeout(240)

HEAVY = ("prefect", "openai", "torch", "sentence_transformers")
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def stdio(workspace, *args: str, errlog=None) -> Client:
    """A client for `dreamflow --workspace WORKSPACE mcp ARGS` (this test run's environment and PYTHONPATH)."""
    params = StdioServerParameters(command=DREAMFLOW, args=["--workspace", str(workspace), "mcp", *args],
                                   env=dict(os.environ))
    return Client(stdio_client(params, errlog=errlog) if errlog else params)


def http(service) -> Client:
    return Client(streamable_http_client(f"{service.url}/mcp", http_client=httpx2.AsyncClient(headers=service.headers)))


def cli_json(workspace, *args: str) -> dict:
    proc = subprocess.run([DREAMFLOW, "--workspace", str(workspace), *args, "--json"], capture_output=True,
                          text=True, timeout=60, input="")
    return json.loads(proc.stdout)


async def call(client: Client, tool: str, **arguments):
    return await client.call_tool(tool, arguments)


# ---- tools and their declarations ---------------------------------------------------------------------

@pytest.mark.e2e
def test_the_short_and_the_full_tool_sets_carry_the_shared_descriptions_and_annotations(tmp_path):
    async def listing(*args):
        async with stdio(tmp_path / "ws", *args) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    short, full = anyio.run(listing), anyio.run(listing, "--tools", "all")

    assert list(short) == list(DEFAULT_TOOLS)
    assert set(full) == {op.name for op in ops.OPS} - {"upload", "download"} | {"turn", "dream", "auto_memory",
                                                                                 "job_status", "workspaces"}
    for op in ops.OPS:
        if op.name not in full:
            continue
        tool = full[op.name]
        assert tool.description == op.help
        a = tool.annotations
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint) == (
            not op.writes, op.writes and op.destructive,
            not op.writes if op.idempotent is None else op.idempotent, False), op.name
        props = tool.input_schema["properties"]
        assert set(props) == {p.name for p in ops.surface_parameters(op)} | {"workspace"}  # every tool names one
        assert all(props[p.name].get("description") == (p.help or None) for p in ops.surface_parameters(op))
        assert props["workspace"]["description"] == ops.PARAM_HELP["workspace"]
        assert set(tool.input_schema.get("required", [])) == {p.name for p in ops.parameters(op) if p.required}
    assert full["delete"].annotations.destructive_hint and full["write"].annotations.destructive_hint
    assert not full["append"].annotations.destructive_hint and full["search"].annotations.read_only_hint
    # a check is read-only (hosts need not ask); its repair, which rewrites links as relink does, is destructive
    assert full["doctor"].annotations.read_only_hint and not full["doctor"].annotations.destructive_hint
    assert full["doctor_fix"].annotations.destructive_hint and not full["doctor_fix"].annotations.read_only_hint
    assert "fix" not in full["doctor"].input_schema["properties"]
    assert full["job_status"].annotations.read_only_hint and not full["dream"].annotations.read_only_hint
    dream = full["dream"].annotations
    assert dream.destructive_hint and not dream.idempotent_hint  # rewrites digest nodes
    assert full["auto_memory"].annotations.destructive_hint  # rewrites the session's card
    assert not full["turn"].annotations.destructive_hint  # appends only
    jargon = ("RRF", "ReMe", "BM25", "postings")  # words that mean nothing to a model calling the tool
    for tool in full.values():
        words = [tool.description] + [p.get("description", "") for p in tool.input_schema["properties"].values()]
        assert not [w for w in jargon if any(w in text for text in words)], tool.name
    assert short["turn"].input_schema["required"] == ["session_id"]  # as POST /turn: compact needs no messages
    for tool in full.values():  # every parameter carries the shared help text, job tools' too
        assert tool.description and all(p.get("description") for p in tool.input_schema["properties"].values())
        assert tool.input_schema.get("additionalProperties") is False
        # what strict hosts accept: a valid self-contained JSON Schema (no $ref to resolve), typed properties,
        # defaults that satisfy their own schema
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object" and "$ref" not in json.dumps(tool.input_schema)
        for prop in tool.input_schema["properties"].values():
            assert "type" in prop or "anyOf" in prop, (tool.name, prop)
            if "default" in prop:
                jsonschema.validate(prop["default"], prop)


def test_the_dream_tool_takes_the_parameters_of_the_auto_dream_flow():
    import inspect

    from dreamflow.mcp.server import tools
    from flows.auto_dream import auto_dream
    from flows.auto_memory import auto_memory

    def signature(fn, drop=()):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
                if p.name not in ("self", "workspace", *drop)]

    def tool(name):
        return [(p.name, None if p.required else p.default) for p in tools("all")[name].params
                if p.name != "workspace"]

    assert tool("dream") == signature(auto_dream.fn)
    assert tool("auto_memory") == [(n, None if d is inspect.Parameter.empty else d)
                                   for n, d in signature(auto_memory.fn, drop=("messages",))]


def test_search_text_shows_what_the_cli_prints_of_a_hit_address_flags_evidence_and_what_replaced_it():
    from dreamflow.mcp.text import text

    hit = {"path": "digest/wiki/n.md", "address": "team:digest/wiki/n.md", "start_line": 3, "end_line": 3,
           "score": 0.5, "text": "- Gym on Mondays. ^f1", "flags": ["instruction"],
           "evidence": [{"path": "daily/2024-05-08/c.md", "start_line": 7, "end_line": 7}],
           "replaced_by": "digest/wiki/n.md#^f2", "neighbors": [{"path": "notes/o.md", "direction": "out"}]}
    shown = text("search", [hit]).splitlines()
    assert shown[0].startswith("team:digest/wiki/n.md:3-3 score 0.500") and shown[0].endswith(" flags: instruction")
    assert "  from: team:daily/2024-05-08/c.md:7" in shown and "  replaced by: team:digest/wiki/n.md#^f2" in shown
    assert "  -> team:notes/o.md" in shown


# ---- stdio, no service: in-process with short index sessions ----------------------------------------------

@pytest.mark.e2e
def test_stdio_round_trip_errors_resources_and_jobs_without_the_service(tmp_path):
    ws = tmp_path / "ws"
    outside = tmp_path / "outside.md"

    async def session():
        async with stdio(ws) as client:
            wrote = await call(client, "write", path="notes/ferry.md", content="The ferry to Naxos leaves at 7:30.",
                               name="Ferry", description="Island ferry times")
            assert not wrote.is_error and wrote.structured_content["path"] == "notes/ferry.md"
            found = await call(client, "search", query="naxos ferry")
            assert found.structured_content[0]["path"] == "notes/ferry.md"
            assert found.content[0].text.startswith("notes/ferry.md:") and "7:30" in found.content[0].text
            read = await call(client, "read", path="notes/ferry.md", numbered=False)
            assert "leaves at 7:30" in read.content[0].text and "name: Ferry" in read.content[0].text
            assert "content" not in read.structured_content  # the text once, not twice
            assert read.structured_content["truncated"] is False and read.structured_content["total_lines"] == 5
            recalled = await call(client, "recall", query="naxos ferry", budget=100, session="host-1")
            again = await call(client, "recall", query="naxos ferry", budget=100, session="host-1")
            elsewhere = await call(client, "recall", query="naxos ferry", budget=100, session="host-2")
            assert recalled.content[0].text.startswith(
                f"{FRAME}\n\n[notes/ferry.md:5]\nThe ferry to Naxos leaves at 7:30.")  # quoted memory
            assert "text" not in recalled.structured_content and recalled.structured_content["tokens"] <= 100
            assert recalled.structured_content["items"][0]["start_line"] == 5
            assert again.structured_content["items"] == [] and "already given" in again.content[0].text
            assert elsewhere.structured_content["items"] == recalled.structured_content["items"]
            gate = {"min_score": 4, "min_relevance": 0.5, "min_words": 2}  # the hook's, on a one-note memory
            relevant = await call(client, "recall", query="When does the Naxos ferry leave?", budget=100, **gate)
            chatter = await call(client, "recall", query="thanks, the ferry is fine", budget=100, **gate)
            assert relevant.structured_content["items"] and not chatter.structured_content["items"]

            conflict = await call(client, "edit", path="notes/ferry.md", old="8:15", new="9:00")
            escape = await call(client, "write", path="../outside.md", content="x")
            metadata = await call(client, "read", path="metadata/index.lock")
            unknown = await call(client, "read", path="notes/ferry.md", colour="blue")
            dream = await call(client, "dream")
            bad_day = await call(client, "dream", date="2024-13-01")
            turn = await call(client, "turn", session_id="chat-1",
                              messages=[{"role": "user", "content": "Remember: my ferry is at 7:30"}])

            resources = {r.uri for r in (await client.list_resources()).resources}
            text = (await client.read_resource("dreamflow://notes/ferry.md")).contents[0].text
            with pytest.raises(MCPError, match="metadata/"):
                await client.read_resource("dreamflow://metadata/turns.json")
            return conflict, escape, metadata, unknown, dream, bad_day, turn, resources, text

    conflict, escape, metadata, unknown, dream, bad_day, turn, resources, text = anyio.run(session)

    cli_error = cli_json(ws, "edit", "notes/ferry.md", "--old", "8:15", "--new", "9:00")["error"]
    assert conflict.is_error and conflict.content[0].text == cli_error["message"]
    assert conflict.structured_content == {"error": cli_error}
    assert escape.is_error and escape.structured_content["error"]["type"] == "PathError" and not outside.exists()
    assert metadata.is_error and metadata.structured_content["error"]["type"] == "PathError"
    assert unknown.is_error and "colour" in unknown.content[0].text
    assert dream.is_error and dream.structured_content["error"]["type"] == "ServiceNeeded"
    assert "dreamflow --workspace" in dream.content[0].text and "start" in dream.content[0].text
    assert bad_day.is_error and bad_day.structured_content["error"]["type"] == "InvalidInput"  # refused up front
    assert not turn.is_error and turn.structured_content["appended"] == 1 and turn.structured_content["turns"] == 1
    assert "my ferry is at 7:30" in (ws / "session/dialog/chat-1.jsonl").read_text()
    assert "dreamflow://notes/ferry.md" in resources and not any("metadata/" in r for r in resources)
    assert text.startswith("---\nname: Ferry")
    for tb in (conflict, escape, metadata, unknown, dream):
        assert "Traceback" not in tb.content[0].text


@pytest.mark.e2e
def test_a_5_mb_note_is_bounded_and_pages_to_the_end_as_a_tool_and_a_resource_and_resources_page_too(tmp_path):
    from dreamflow.mcp.server import RESOURCE_CHARS, RESOURCE_LIMIT
    from storage.files.text_view import READ_CHARS

    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    note = "".join(f"{i:06d} the ferry log of a very long summer, one line of many\n" for i in range(85_000))
    assert len(note) > 5_000_000
    (ws / "notes/huge.md").write_text(note)
    for i in range(RESOURCE_LIMIT + 4):
        (ws / f"notes/n{i:04d}.md").write_text("small\n")

    async def session():
        async with stdio(ws) as client:
            first = await call(client, "read", path="notes/huge.md")
            pages, at = [], 1
            while at is not None:  # the most a page may hold is 1,000,000 characters
                page = await call(client, "read", path="notes/huge.md", start_line=at, numbered=False,
                                  max_chars=1_000_000)
                pages.append(page.content[0].text)
                at = page.structured_content["next_start_line"]
            texts, uri = [], "dreamflow://notes/huge.md"
            while uri:
                text = (await client.read_resource(uri)).contents[0].text
                body, _, marker = text.rstrip("\n").rpartition("\n")
                uri = marker.rsplit(" ", 1)[-1].rstrip("]") if marker.startswith("[truncated") else None
                texts.append(body + "\n" if uri else text)
            listed, cursor, pages_listed = [], None, 0
            while True:
                answer = await client.list_resources(cursor=cursor)
                listed += [r.name for r in answer.resources]
                pages_listed += 1
                cursor = answer.next_cursor
                if cursor is None:
                    break
            with pytest.raises(MCPError, match="cursor"):
                await client.list_resources(cursor="not-a-cursor")
            page_one = await call(client, "list", prefix="notes", limit=3)
            page_two = await call(client, "list", prefix="notes", limit=3, offset=3)
            return first, pages, texts, listed, pages_listed, page_one, page_two

    first, pages, texts, listed, pages_listed, page_one, page_two = anyio.run(session)
    assert page_one.structured_content["next_offset"] == 3 and "continue at offset=3" in page_one.content[0].text
    assert [e["path"] for e in page_one.structured_content["entries"] + page_two.structured_content["entries"]] == [
        "notes/huge.md", *(f"notes/n{i:04d}.md" for i in range(5))]

    text = first.content[0].text
    assert len(text) < READ_CHARS + 300 and first.structured_content["truncated"] is True
    assert "content" not in first.structured_content and len(json.dumps(first.structured_content)) < 1_000
    assert text.rstrip().endswith(f"continue at start_line={first.structured_content['next_start_line']}]")
    bodies = [p.split("\n", 1)[1] for p in pages]  # without the `path (lines a-b of n)` head
    assert "".join(b.split("\n[truncated")[0].rstrip("\n") + "\n" for b in bodies) == note
    assert all(len(p) < 1_000_300 for p in pages) and len(pages) == 6
    assert "".join(texts) == note and all(len(t) <= RESOURCE_CHARS for t in texts) and len(texts) > 100
    assert pages_listed == 2 and len(listed) == len(set(listed)) == RESOURCE_LIMIT + 5


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


@pytest.mark.e2e
def test_resources_have_percent_encoded_uris_binary_files_are_blobs_and_unknown_tools_are_tool_errors(tmp_path):
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    names = {"notes/with space.md": "spaced out\n", "notes/café 東京.md": "Köln 東京\n", "notes/100% sure.md": "sure\n"}
    for name, text in names.items():
        (ws / name).write_text(text)
    (ws / "photo.png").write_bytes(PNG)
    os.mkfifo(ws / "pipe")

    async def session():
        async with stdio(ws) as client:
            listed = {r.name: r for r in (await client.list_resources()).resources}
            texts = {name: (await client.read_resource(listed[name].uri)).contents[0].text for name in names}
            raw = (await client.read_resource("dreamflow://notes/with space.md")).contents[0].text  # unencoded too
            blob = (await client.read_resource(listed["photo.png"].uri)).contents[0]
            with anyio.fail_after(10), pytest.raises(MCPError, match="FIFO"):
                await client.read_resource("dreamflow://pipe")
            unknown = await call(client, "forget_everything", path="notes/with space.md")
            return listed, texts, raw, blob, unknown

    listed, texts, raw, blob, unknown = anyio.run(session)

    assert listed["notes/with space.md"].uri == "dreamflow://notes/with%20space.md"
    assert listed["notes/100% sure.md"].uri == "dreamflow://notes/100%25%20sure.md"
    assert all(" " not in r.uri and r.uri.isascii() for r in listed.values())  # valid URIs for strict hosts
    assert texts == names and raw == "spaced out\n"
    assert listed["photo.png"].mime_type == "image/png" and "pipe" not in listed
    assert blob.mime_type == "image/png" and base64.b64decode(blob.blob) == PNG
    assert unknown.is_error and unknown.structured_content["error"]["type"] == "InvalidInput"
    assert "unknown tool 'forget_everything'" in unknown.content[0].text and "search" in unknown.content[0].text


@pytest.mark.e2e
def test_stdio_server_survives_lines_that_are_not_json_rpc(tmp_path):
    proc = subprocess.Popen([DREAMFLOW, "--workspace", str(tmp_path / "ws"), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "garbage", "{", "[]", "null", "\x00\x01", {"jsonrpc": "2.0", "id": 2},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "read", "arguments": "not an object"}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list", "arguments": {}}},
    ]
    lines = "".join((m if isinstance(m, str) else json.dumps(m)) + "\n" for m in messages)
    answers = {}
    proc.stdin.write(lines)
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while 4 not in answers and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        answer = json.loads(line)
        answers[answer.get("id")] = answer
    proc.stdin.close()
    assert proc.wait(30) == 0
    assert answers[3]["error"]["code"] == -32602  # a malformed request: a protocol error, and no crash
    assert answers[4]["result"]["isError"] is False and answers[4]["result"]["content"][0]["text"] == "empty"
    assert "Traceback" not in proc.stderr.read()


@pytest.mark.e2e
def test_stdio_works_here_when_the_service_named_in_service_json_refuses_connections(tmp_path):
    """A service shutting down (its API gone, service.json not yet), or a stale file whose pid was reused."""
    from service_harness import free_port

    ws = tmp_path / "ws"
    (ws / "metadata").mkdir(parents=True)
    (ws / "metadata/service.json").write_text(json.dumps({"pid": os.getpid(), "url": f"http://127.0.0.1:{free_port()}"}))

    async def session():
        async with stdio(ws) as client:
            wrote = await call(client, "write", path="notes/here.md", content="Written while the port refused.")
            found = await call(client, "search", query="port refused")
            turn = await call(client, "turn", session_id="refused", messages=[{"role": "user", "content": "hi"}])
            dream = await call(client, "dream")
            text = (await client.read_resource("dreamflow://notes/here.md")).contents[0].text
            return wrote, found, turn, dream, text

    wrote, found, turn, dream, text = anyio.run(session)
    assert not wrote.is_error and not turn.is_error, (wrote.content, turn.content)
    assert found.structured_content[0]["path"] == "notes/here.md" and text == "Written while the port refused.\n"
    assert turn.structured_content["turns"] == 1 and "hi" in (ws / "session/dialog/refused.jsonl").read_text()
    assert dream.is_error and dream.structured_content["error"]["type"] == "ServiceNeeded"


@pytest.mark.e2e
def test_older_protocol_clients_get_lists_as_an_object(tmp_path):
    async def session():
        async with Client(StdioServerParameters(command=DREAMFLOW, args=["--workspace", str(tmp_path / "ws"), "mcp"],
                                                env=dict(os.environ)), mode="legacy") as client:
            await call(client, "write", path="a.md", content="alpha beta")
            return await call(client, "search", query="alpha"), client.session.protocol_version

    result, version = anyio.run(session)
    assert version.startswith("2025")
    assert result.structured_content["results"][0]["path"] == "a.md"


@pytest.mark.e2e
def test_stdio_start_to_first_answer_imports_no_prefect_openai_or_torch(tmp_path):
    errlog = open(tmp_path / "stderr.txt", "w+")
    params = StdioServerParameters(command=sys.executable, args=["-c", PROBE, "--workspace", str(tmp_path / "ws"), "mcp"],
                                   env=dict(os.environ))

    async def first_answer():
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await client.list_tools()
            return await call(client, "search", query="anything")

    result = anyio.run(first_answer)
    assert not result.is_error
    errlog.seek(0)
    modules = set(json.loads(errlog.read().strip().splitlines()[-1]))
    assert "mcp" in modules and "duckdb" in modules  # the probe saw a real answer
    assert not [m for m in modules if m.split(".")[0] in HEAVY]


@pytest.mark.e2e
def test_two_stdio_servers_and_the_cli_write_one_workspace_at_once_and_lose_nothing(tmp_path):
    ws, n, cli_n = tmp_path / "ws", 25, 8
    errors: list = []

    async def writer(tag: str):
        async with stdio(ws) as client:
            for i in range(n):
                for result in (await call(client, "append", path="shared/log.md", content=f"{tag} entry {i}"),
                               await call(client, "write", path=f"own/{tag}-{i}.md", content=f"{tag} note {i}")):
                    if result.is_error:
                        errors.append(result.content[0].text)

    def cli_writer():
        for i in range(cli_n):
            proc = subprocess.run([DREAMFLOW, "--workspace", str(ws), "append", "shared/log.md", "--content",
                                   f"cli entry {i}"], capture_output=True, text=True, timeout=60)
            if proc.returncode:
                errors.append(proc.stderr)

    async def everyone():
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, "alpha")
            tg.start_soon(writer, "beta")
            tg.start_soon(anyio.to_thread.run_sync, cli_writer)

    anyio.run(everyone)

    assert errors == []
    lines = (ws / "shared/log.md").read_text().splitlines()
    expected = {f"{tag} entry {i}" for tag in ("alpha", "beta") for i in range(n)} | {f"cli entry {i}" for i in range(cli_n)}
    assert sorted(lines) == sorted(expected)
    assert len(list((ws / "own").iterdir())) == 2 * n
    hits = cli_json(ws, "search", "beta note 24", "--limit", "3")
    assert hits[0]["path"] == "own/beta-24.md"
    assert cli_json(ws, "index-stats")["files"] == 2 * n + 1


# ---- streamable HTTP on the real service --------------------------------------------------------------

@pytest.mark.e2e
def test_http_mcp_round_trip_errors_and_turns_on_the_service(dreamflow_service):
    svc = dreamflow_service

    async def session():
        async with http(svc) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            await call(client, "write", path="mcp/http-note.md", content="Zanzibar spice tour on Friday.")
            found = await call(client, "search", query="zanzibar spice")
            read = await call(client, "read", path="mcp/http-note.md", numbered=False)
            conflict = await call(client, "edit", path="mcp/http-note.md", old="Monday", new="Sunday")
            escape = await call(client, "read", path="/etc/passwd")
            turn = await call(client, "turn", session_id="mcp-http", messages=[{"role": "user", "content": "hello"}])
            listed = {r.name: r.uri for r in (await client.list_resources()).resources}
            blob = (await client.read_resource(listed["mcp/http photo.png"])).contents[0]
            return names, found, read, conflict, escape, turn, blob

    (svc.workspace / "mcp").mkdir(exist_ok=True)
    (svc.workspace / "mcp/http photo.png").write_bytes(PNG)
    names, found, read, conflict, escape, turn, blob = anyio.run(session)
    assert blob.mime_type == "image/png" and base64.b64decode(blob.blob) == PNG

    assert names == list(DEFAULT_TOOLS)
    assert found.structured_content[0]["path"] == "mcp/http-note.md"
    api = svc.memory.read("mcp/http-note.md", numbered=False)  # the API's JSON, its text carried by the text block
    assert read.structured_content == {k: v for k, v in api.items() if k != "content"}
    assert api["content"] in read.content[0].text
    assert conflict.is_error and conflict.structured_content["error"]["type"] == "Conflict"
    assert escape.is_error and escape.structured_content["error"]["type"] == "PathError"
    assert turn.structured_content["turns"] == 1  # counted by the service's turn counter
    assert svc.memory.status()["turns"]["sessions"]["mcp-http"]["turns"] == 1


@pytest.mark.e2e
def test_stdio_forwards_to_the_running_service(dreamflow_service):
    svc = dreamflow_service

    async def session():
        async with stdio(svc.workspace) as client:
            started = time.monotonic()
            wrote = await call(client, "write", path="mcp/via-stdio.md", content="Forwarded through the service.")
            elapsed = time.monotonic() - started
            status = await call(client, "job_status", run_id="00000000-0000-0000-0000-000000000000")
            turn = await call(client, "turn", session_id="mcp-stdio", messages=[{"role": "user", "content": "hi"}])
            blob = (await client.read_resource("dreamflow://mcp/photo%20one.png")).contents[0]  # the service's bytes
            return wrote, elapsed, status, turn, blob

    (svc.workspace / "mcp").mkdir(exist_ok=True)
    (svc.workspace / "mcp/photo one.png").write_bytes(PNG)
    wrote, elapsed, status, turn, blob = anyio.run(session)
    assert base64.b64decode(blob.blob) == PNG
    assert not wrote.is_error and elapsed < 5  # in-process it would wait for the service's index lock
    assert svc.memory.search("forwarded through the service")[0]["path"] == "mcp/via-stdio.md"
    assert status.is_error and status.structured_content["error"]["type"] == "NotFound"  # the service answered
    assert not turn.is_error and svc.memory.status()["turns"]["sessions"]["mcp-stdio"]["turns"] == 1


@pytest.mark.e2e
def test_a_dream_started_through_mcp_is_a_prefect_run_whose_status_is_reported(dreamflow_service, llm_server):
    svc, day, card = dreamflow_service, "2023-02-14", "daily/2023-02-14/bakery.md"
    svc.memory.write("digest/personal/ana.md", content="# Ana\n\n## Facts\n\n- Ana runs a bakery in Lisbon. ^f1\n",
                     metadata={"about": "ana"})
    llm_server.on(lambda body: "You keep a memory of facts up to date" in text_of(body) and "Porto" in text_of(body),
                  json_reply({"relation": "replaces", "fact": 1}))

    async def session():
        async with http(svc) as client:
            await call(client, "write", path=card, name="Bakery", description="Ana's bakery", content=(
                "# Bakery\n\n## Facts\n\n- Ana runs a bakery in Porto now. (about:: Ana) ^f1\n"))
            started = time.monotonic()
            run = await call(client, "dream", date=day, scan_days=1)
            launched_in = time.monotonic() - started
            run_id = run.structured_content["id"]
            deadline = time.monotonic() + 120
            while True:
                status = await call(client, "job_status", run_id=run_id)
                if status.structured_content["state_type"] in TERMINAL or time.monotonic() > deadline:
                    return run, launched_in, status
                await anyio.sleep(0.25)

    run, launched_in, status = anyio.run(session)

    assert not run.is_error and launched_in < 10 and run.structured_content["deployment"] == "auto-dream/manual"
    report = status.structured_content
    assert report["state_type"] == "COMPLETED", report
    assert report["parameters"]["date"] == day and day in json.dumps(report["summary"])  # report or result
    assert report["ui_url"].endswith(f"/runs/flow-run/{report['id']}")
    assert day in status.content[0].text and report["ui_url"] in status.content[0].text
    prefect_run = next(r for r in svc.flow_runs("auto-dream/manual") if r["id"] == report["id"])
    assert prefect_run["state_type"] == "COMPLETED"
    node = svc.memory.read("digest/personal/ana.md", numbered=False)["content"]
    assert "Ana runs a bakery in Porto now." in node and "(until:: " in node  # Lisbon's fact kept as history


def test_the_service_mount_takes_its_tool_set_from_the_setting(tmp_path, monkeypatch):
    from dreamflow.mcp.server import HttpMount, build_server
    from dreamflow.mcp.targets import WorkspaceTarget
    from engine.config.settings import Settings
    from storage.errors import InvalidInput

    monkeypatch.setenv("DREAMFLOW_MCP_TOOLS", "all")
    mount = HttpMount(WorkspaceTarget(tmp_path / "ws"), Settings().mcp_tools)

    async def names():
        async with Client(build_server(mount.dispatcher)) as client:  # in-process: the server the mount serves
            return {t.name for t in (await client.list_tools()).tools}

    assert {"delete", "move", "reindex", "auto_memory"} <= anyio.run(names)
    with pytest.raises(InvalidInput, match="unknown tool set"):
        HttpMount(WorkspaceTarget(tmp_path / "ws"), "everything")


@pytest.mark.e2e
def test_the_documented_host_configs_parse_and_the_stdio_entry_starts_a_working_server(tmp_path):
    import re
    import tomllib
    from pathlib import Path

    from dreamflow.hooks.events import EVENTS

    section = (Path(__file__).parent.parent / "docs" / "agents.md").read_text()
    blocks = re.findall(r"```(json|toml)\n(.*?)```", section, re.S)
    configs = [json.loads(body) if lang == "json" else tomllib.loads(body) for lang, body in blocks]
    servers = [c.get("mcpServers") or c.get("mcp_servers") for c in configs if "hooks" not in c]
    assert len(servers) == 4  # Claude Code .mcp.json, Claude Desktop, Cursor, Codex
    for entries in servers:
        stdio_entry = entries["dreamflow"]
        assert stdio_entry["command"] == "dreamflow" and stdio_entry["args"][-1] == "mcp"
        assert all(e["url"].endswith("/mcp") for name, e in entries.items() if name != "dreamflow")
    hooks = next(c["hooks"] for c in configs if "hooks" in c)  # Claude Code settings.json: event -> matchers
    assert set(hooks) == set(EVENTS)
    for groups in hooks.values():
        for handler in (h for group in groups for h in group["hooks"]):
            assert handler["type"] == "command" and handler["command"].endswith("hook claude-code")
            assert isinstance(handler["timeout"], int)  # seconds

    args = [str(tmp_path / "ws") if a == "/home/me/memory" else a for a in servers[0]["dreamflow"]["args"]]

    async def first_answer():
        async with Client(StdioServerParameters(command=DREAMFLOW, args=args, env=dict(os.environ))) as client:
            return await call(client, "list")

    assert not anyio.run(first_answer).is_error
