"""Hostile input, measured: how long the 9-level YAML alias bomb takes to parse and index, and the HTTP API's
memory while 100 MB bodies are pushed at it (real uvicorn on 127.0.0.1, default DREAMFLOW_MAX_BODY_BYTES).

    python benchmarks/hostile_input.py [--bodies 12]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def rss_mb() -> int:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) // 1024


def bomb(memory_root: str) -> None:
    from test_hostile_files import BOMB_NOTE

    from storage.text.markdown import parse_file
    from storage.memory import Memory

    started = time.perf_counter()
    parsed = parse_file("digest/wiki/bomb.md", BOMB_NOTE.encode())
    print(f"alias bomb ({len(BOMB_NOTE)} bytes, 9^9 values expanded): parsed in "
          f"{(time.perf_counter() - started) * 1000:.2f} ms -> {parsed.errors[0][:60]}...")
    memory = Memory(memory_root)
    for i in range(200):
        memory.ws.write_text(f"digest/wiki/bomb{i}.md", BOMB_NOTE)
    started = time.perf_counter()
    memory.reindex()
    print(f"reindex of 200 bomb notes: {time.perf_counter() - started:.2f} s, "
          f"{memory.index_stats()['files_with_errors']} reported with errors")


def bodies(count: int, memory_root: str) -> None:
    from test_api import ApiServer
    from test_hostile_requests import http

    from engine.config.settings import Settings
    from storage.memory import Memory

    server = ApiServer(Memory(memory_root))
    try:
        http(server.port, "GET", "/health")
        print(f"limit {Settings().max_body_bytes >> 20} MiB; API process RSS before: {rss_mb()} MB")
        peak = 0
        for _ in range(count):
            started = time.perf_counter()
            status, _, sent = http(server.port, "POST", "/ops/write", chunks=(b"x" * 65536 for _ in range(1600)))
            peak = max(peak, rss_mb())
            print(f"  100 MB chunked body: {status} after {sent >> 20} MB taken, "
                  f"{time.perf_counter() - started:.2f} s; RSS {rss_mb()} MB")
        started = time.perf_counter()
        status, _, _ = http(server.port, "POST", "/ops/write", length=100 << 20)
        print(f"  100 MB declared body: {status} in {(time.perf_counter() - started) * 1000:.1f} ms; "
              f"RSS after all: {rss_mb()} MB (highest sampled {peak} MB)")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bodies", type=int, default=12, help="100 MB bodies to send")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        bomb(a)
        bodies(args.bodies, b)


if __name__ == "__main__":
    main()
