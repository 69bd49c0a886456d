"""One request model per operation: the same invalid input gets the same error on the CLI (`--json`), over
HTTP (`POST /ops/<name>`, a real uvicorn server) and from the MCP tool (`dreamflow mcp` over stdio), since
every surface hands the arguments to the one operation that checks them; nothing is written."""

import json
import subprocess

import anyio
import pytest
from service_harness import DREAMFLOW
from test_api import ApiServer
from test_mcp import stdio

from storage.memory import Memory

pytestmark = pytest.mark.timeout(240)

# (operation, its CLI arguments, its JSON arguments, the error's type, a part of its message)
CASES = [
    ("search", ["search", "otter", "--limit", "-1"], {"query": "otter", "limit": -1},
     "InvalidInput", "limit must be between 0 and 1,000,000,000, got -1"),
    ("node_search", ["node-search", "otter", "--bucket", "archive"], {"query": "otter", "bucket": "archive"},
     "InvalidInput", "digest/archive/ holds archived nodes, no bucket"),
    ("node_search", ["node-search", "otter", "--bucket", "a/b"], {"query": "otter", "bucket": "a/b"},
     "InvalidInput", "bucket must be one folder of digest/"),
    ("write", ["write", "metadata/x.md", "--content", "hi"], {"path": "metadata/x.md", "content": "hi"},
     "PathError", "metadata/"),
    ("search", ["search", "otter", "--start-date", "June"], {"query": "otter", "start_date": "June"},
     "InvalidInput", "date must be YYYY-MM-DD"),
    ("search", ["search", "   "], {"query": "   "}, "InvalidInput", "the search query is empty"),
]


def test_the_same_invalid_input_gets_the_same_error_on_every_surface(ws):
    memory = Memory(ws.root)
    memory.write("notes/otter.md", "otters hold hands\n")
    before = sorted(p.relative_to(ws.root).as_posix() for p in ws.root.rglob("*") if p.is_file()
                    and "metadata" not in p.parts)

    cli = []
    for _, args, _, _, _ in CASES:
        proc = subprocess.run([DREAMFLOW, "--workspace", str(ws.root), *args, "--json"], capture_output=True,
                              text=True, timeout=60, input="")
        cli.append((proc.returncode, json.loads(proc.stdout)))

    server = ApiServer(memory)
    try:
        over_http = [server.raw("POST", f"/ops/{op}", body) for op, _, body, _, _ in CASES]
    finally:
        server.stop()

    async def tool_errors():
        async with stdio(ws.root) as client:
            return [await client.call_tool(op, body) for op, _, body, _, _ in CASES]

    from_mcp = anyio.run(tool_errors)

    for (op, _, _, kind, message), (code, printed), (status, answered), tool in zip(CASES, cli, over_http, from_mcp):
        error = printed["error"]
        assert error["type"] == kind and message in error["message"], (op, error)
        assert code == error["exit_code"]
        assert answered == printed and status == 400, (op, answered)
        assert tool.is_error and tool.structured_content == printed, (op, tool)
        assert tool.content[0].text == error["message"]
    after = sorted(p.relative_to(ws.root).as_posix() for p in ws.root.rglob("*") if p.is_file()
                   and "metadata" not in p.parts)
    assert after == before  # refused before anything was written
