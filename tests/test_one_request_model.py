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
    ("list", ["list", "notes", "--offset", "-2"], {"prefix": "notes", "offset": -2},
     "InvalidInput", "offset must be between 0 and 1,000,000,000, got -2"),
    ("traverse", ["traverse", "notes/otter.md", "--depth", "-1"], {"paths": ["notes/otter.md"], "depth": -1},
     "InvalidInput", "depth must be between 0 and 1,000,000,000, got -1"),
    ("recall", ["recall", "otter", "--budget", "200000"], {"query": "otter", "budget": 200000},
     "InvalidInput", "budget must be between 0 and 100,000, got 200000"),
    ("read", ["read", "notes/otter.md", "--max-chars", "-5"], {"path": "notes/otter.md", "max_chars": -5},
     "InvalidInput", "max_chars must be between 0 and"),
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


SURFACE_MODULES = ["engine/ops.py", "engine/jobs.py", "dreamflow/http/api.py", "dreamflow/mcp/server.py",
                   "dreamflow/docs_gen.py", "storage/arguments.py", *(f"dreamflow/cli/{name}" for name in (
                       "app.py", "job_command.py", "flow_commands.py", "governance_commands.py"))]


@pytest.mark.parametrize("module", SURFACE_MODULES)
def test_no_surface_is_generated_by_reading_source_or_rewriting_a_signature(module):
    """The requests come from typed declarations (a Memory method's signature, a job's request model), never
    from a function's source (`ast`), an `eval`ed annotation or a rewritten `__signature__`."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / module).read_text(encoding="utf-8")
    for banned in ("import ast", "from ast", "eval(", "__signature__", "literal_eval"):
        assert banned not in text, (module, banned)


def test_an_operations_checks_are_stated_on_its_parameters_and_hold_for_python_callers_too(ws):
    """`limit: Count`, `query: Query`, `bucket: Bucket`: the rule is part of the signature every surface is
    generated from, and runs before the operation for an in-process caller as for the CLI, HTTP and MCP."""
    import typing

    from storage.arguments import Check
    from storage.errors import InvalidInput

    hints = typing.get_type_hints(Memory.search, include_extras=True)
    assert {name for name, hint in hints.items() if any(isinstance(m, Check) for m in
                                                        getattr(hint, "__metadata__", ()))} >= {"query", "limit"}
    memory = Memory(ws.root)
    with pytest.raises(InvalidInput, match="limit must be between 0 and 1,000,000,000, got -1"):
        memory.search("otter", limit=-1)
    with pytest.raises(InvalidInput, match="content must be text, not int"):
        memory.write("notes/new/x.md", 12)
    assert not (ws.root / "notes").exists()
