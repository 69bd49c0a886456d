"""The MCP server as agent hosts meet it, over a LoCoMo-sized workspace, through the SDK's own client.

    python benchmarks/mcp.py --data PATH [--starts 5] [--queries 50] [--copies 1]

Builds the LoCoMo workspace (benchmarks/cli_search.py: one daily note per session) in a temp folder, then:
- `dreamflow mcp` start to first tool answer: spawn the stdio server, handshake, list the tools, answer one
  `search` (what a host does when a window opens), without a service (in-process index);
- `search` round trip over stdio, warm (after a few calls), in-process; p50/p95 of LoCoMo questions;
- the same through the running service: streamable HTTP at `/mcp`, and stdio forwarding to the service;
- `dreamflow hook claude-code`: one Stop delivery of the test fixture transcript (tests/fixtures/), and the
  first delivery of a long session (300 prompts, each with a 20 kB tool result): the hook installed mid-session
  must finish within the host's hook timeout (30 s in the README's settings.json block).
Targets: first answer <= 1 s, search round trip p50 <= 30 ms warm.
Bytecode is cached (PYTHONPYCACHEPREFIX) as installed programs do; the machine's load is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# This file is named like the SDK: drop its own folder from the path so `import mcp` finds the package.
sys.path[:] = [str(ROOT), str(ROOT / "tests")] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from benchmarks.cli_search import build_workspace, questions  # noqa: E402
from benchmarks.locomo import add_data_options, load  # noqa: E402
from benchmarks.service import line  # noqa: E402
from service_harness import DREAMFLOW, RunningService  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "claude_code_transcript.jsonl"


def stdio_params(workspace: Path, env: dict) -> StdioServerParameters:
    return StdioServerParameters(command=DREAMFLOW, args=["--workspace", str(workspace), "mcp"], env=env)


async def first_answer(workspace: Path, env: dict, query: str) -> float:
    started = time.perf_counter()
    async with Client(stdio_params(workspace, env)) as client:
        await client.list_tools()
        result = await client.call_tool("search", {"query": query, "limit": 10})
        elapsed = time.perf_counter() - started
    assert not result.is_error, result.content
    return elapsed


async def round_trips(client: Client, queries: list[str]) -> list[float]:
    for q in queries[:5]:  # warm: caches, the index connection path, the server's models
        await client.call_tool("search", {"query": q, "limit": 10})
    times = []
    for q in queries:
        started = time.perf_counter()
        result = await client.call_tool("search", {"query": q, "limit": 10})
        times.append(time.perf_counter() - started)
        assert not result.is_error, result.content
    return times


async def stdio_trips(workspace: Path, env: dict, queries: list[str]) -> list[float]:
    async with Client(stdio_params(workspace, env)) as client:
        return await round_trips(client, queries)


async def http_trips(url: str, queries: list[str]) -> list[float]:
    async with Client(streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient())) as client:
        return await round_trips(client, queries)


def hook_delivery(workspace: Path, env: dict, tmp: Path) -> float:
    transcript = tmp / "transcript.jsonl"
    transcript.write_text(FIXTURE.read_text())
    payload = json.dumps({"session_id": "bench-hook", "transcript_path": str(transcript), "hook_event_name": "Stop"})
    started = time.perf_counter()
    proc = subprocess.run([DREAMFLOW, "--workspace", str(workspace), "hook", "claude-code"], input=payload,
                          capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return elapsed


def long_session(path: Path, prompts: int = 300) -> None:
    """A transcript in Claude Code's format: per prompt a tool call, its (dropped) 20 kB result and an answer."""
    def record(kind: str, n: str, content) -> str:
        return json.dumps({"type": kind, "uuid": f"{kind}-{n}", "isSidechain": False, "timestamp": "2024-05-08T09:00:00Z",
                           "message": {"role": kind, "content": content, "id": f"msg-{n}"}}) + "\n"

    with path.open("w") as fh:
        for i in range(prompts):
            fh.write(record("user", f"{i}", f"Question {i} about the Lisbon trip")
                     + record("assistant", f"{i}a", [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {}}])
                     + record("user", f"{i}r", [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * 20000}])
                     + record("assistant", f"{i}b", [{"type": "text", "text": f"Answer {i}"}]))


def first_long_delivery(workspace: Path, env: dict, tmp: Path) -> float:
    transcript = tmp / "long-session.jsonl"
    long_session(transcript)
    payload = json.dumps({"session_id": "bench-long", "transcript_path": str(transcript), "hook_event_name": "Stop"})
    started = time.perf_counter()
    proc = subprocess.run([DREAMFLOW, "--workspace", str(workspace), "hook", "claude-code"], input=payload,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--copies", type=int, default=1)
    add_data_options(parser)
    args = parser.parse_args()
    convs = load(args.data, args.conversations)

    with tempfile.TemporaryDirectory(prefix="dreamflow-bench-mcp-") as tmp:
        root = Path(tmp)
        stats = build_workspace(root / "ws", args.copies, convs)
        print(f"workspace: {stats.get('files')} files, {stats.get('chunks')} chunks")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=str(root / "pycache"), DREAMFLOW_EMBEDDER="none")
        qs = questions(convs, args.queries)
        anyio.run(first_answer, root / "ws", env, qs[0])  # compile the bytecode once
        starts = [anyio.run(first_answer, root / "ws", env, q) for q in qs[:args.starts]]
        print(line("dreamflow mcp start -> first answer", starts))
        print(line("search over stdio (in-process), warm", anyio.run(stdio_trips, root / "ws", env, qs)))
        hook_delivery(root / "ws", env, root)  # compile the hook's modules once
        print(line("hook claude-code (one Stop, in-process)", [hook_delivery(root / "ws", env, root) for _ in range(5)]))
        print(f"hook claude-code, first delivery of a 300-prompt session (in-process): "
              f"{first_long_delivery(root / 'ws', env, root):.1f} s")

        svc = RunningService.start(root, env={"PYTHONPYCACHEPREFIX": env["PYTHONPYCACHEPREFIX"]})
        try:
            print(line("search over HTTP /mcp (service), warm", anyio.run(http_trips, svc.url, qs)))
            print(line("search over stdio -> service, warm", anyio.run(stdio_trips, svc.workspace, env, qs)))
        finally:
            svc.stop()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; targets: first answer <= 1 s, "
          f"search p50 <= 30 ms warm")


if __name__ == "__main__":
    main()
