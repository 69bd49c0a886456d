"""What durable writes cost: `Memory.write` latency with the fsyncs (file before the rename, folder after) and
with os.fsync made a no-op, on the same temp workspace.

    python benchmarks/write_durability.py [--writes 200] [--size 2000]

Prints p50 / p95 / mean milliseconds per write for both, and the difference, for the bare file write and for
the whole `Memory.write` (frontmatter, atomic replace, re-index before it returns: what a caller waits for).
DuckDB's own syncs are not affected by the switch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.memory import Memory  # noqa: E402


def measure(write, writes: int, size: int) -> tuple[list[float], list[float]]:
    """(durable, fsync-free) milliseconds per `write(i, text)` call, alternating in blocks of 10 so that
    load on the shared machine hits both alike."""
    body = ("durable line of text\n" * (size // 21 + 1))[:size]
    real_fsync = os.fsync
    durable, loose = [], []
    for i in range(writes * 2):
        fast = (i // 10) % 2 == 1
        os.fsync = (lambda fd: None) if fast else real_fsync
        try:
            started = time.perf_counter()
            write(i, f"{body}{i}\n")
            (loose if fast else durable).append((time.perf_counter() - started) * 1000)
        finally:
            os.fsync = real_fsync
    return durable, loose


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"p50 {statistics.median(ordered):6.2f} ms   p95 {p95:6.2f} ms   mean {statistics.fmean(ordered):6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--size", type=int, default=2000, help="bytes of body per write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dreamflow-durability-") as tmp:
        mem = Memory(Path(tmp) / "ws")
        cases = {
            "Workspace.write_text (the file only)": lambda i, text: mem.ws.write_text(f"digest/wiki/raw-{i % 20}.md", text),
            "Memory.write (+ re-index)": lambda i, text: mem.write(f"digest/wiki/note-{i % 20}.md", text,
                                                                   name=f"Note {i % 20}", description="bench"),
        }
        print(f"{args.writes} writes of {args.size} B per mode, file system of {tempfile.gettempdir()}")
        for label, write in cases.items():
            measure(write, 10, args.size)  # warm up: schema, first files
            durable, loose = measure(write, args.writes, args.size)
            print(f"{label}")
            print(f"  with fsync (file + folder)  {summary(durable)}")
            print(f"  fsync made a no-op          {summary(loose)}")
            print(f"  cost of durability          {statistics.median(durable) - statistics.median(loose):+6.2f} ms at p50")


if __name__ == "__main__":
    main()
