"""The dashboard's pages at scale: overview and search page load times over a 100k-chunk workspace.

    python benchmarks/dashboard.py [--chunks 100000] [--samples 60] [--root DIR [--reuse]]

Writes the workspace as benchmarks/scale.py does (Zipf text, one wikilink per section) and indexes it before
the service starts, then runs a real `dreamflow start` over it (its own Prefect server, no runner: no job runs
here) and times, from an HTTP client on the same machine with a kept-alive connection, each page's HTML as a
browser asks for it (its style sheet and script are static files, cached):
- the overview (`GET /ui/`): each workspace's counts and last dream. Its health and jobs parts load after it,
  each a request of its own, timed apart: the health report (the `doctor` operation) reads every file, so it
  is computed once and reused for 5 minutes; the jobs part asks Prefect;
- search (`GET /ui/search?q=...`): 2-7 word queries drawn from the workspace's vocabulary, 20 hits with their
  words marked and their links;
- a file page opened from a hit (rendered Markdown, links out and in).
Prints p50 / p95 / max wall time per page and the service process's CPU time per page (all its threads: on a
machine busy with other work the wall time includes waiting for a core, the CPU time does not). Target:
overview and search <= 100 ms at 100k chunks.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from benchmarks.service import line as report  # noqa: E402
from scale import make_vocabulary, write_workspace, zipf_words  # noqa: E402
from service_harness import RunningService  # noqa: E402
from storage.memory import Memory  # noqa: E402


def timed_get(client: httpx.Client, path: str) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    answer = client.get(path)
    took = time.perf_counter() - started
    assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    return took, answer


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int, window: float = 2.0, share: float = 0.05, timeout: float = 600) -> float:
    """Wait until the service uses less than `share` of a core over `window` seconds (its search cache loaded
    in the background); returns the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        before = cpu_seconds(pid)
        time.sleep(window)
        if cpu_seconds(pid) - before < share * window:
            break
    return time.perf_counter() - started


def measured(svc: RunningService, label: str, fetch) -> tuple[list[float], Any]:
    """(wall seconds of each of `fetch()`'s requests, what it returned), with the service's CPU time per
    request printed (the machine's other work does not count in it: compare it with the wall time)."""
    before = cpu_seconds(svc.proc.pid)
    walls, kept = fetch()
    cpu = (cpu_seconds(svc.proc.pid) - before) / len(walls)
    print(report(label, walls) + f"   service CPU {cpu * 1000:5.1f} ms/page")
    return walls, kept


def prepare(root: Path, chunks: int, reuse: bool) -> None:
    """The workspace at `root/ws`, written and indexed (kept with --reuse when it is there)."""
    ws = root / "ws"
    if reuse and (ws / "metadata/index.duckdb").exists():
        print(f"reusing {ws}")
        return
    shutil.rmtree(ws, ignore_errors=True)
    started = time.perf_counter()
    write_workspace(ws, chunks)
    print(f"workspace written in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    built = Memory(ws).reindex()
    print(f"indexed in {time.perf_counter() - started:.0f} s: {built['files']:,} files, {built['chunks']:,} chunks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--root", type=Path, default=None, help="keep the workspace here (default: a temp folder)")
    parser.add_argument("--reuse", action="store_true", help="reuse the workspace an earlier run left in --root")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="dreamflow-dashboard-"))
    root.mkdir(parents=True, exist_ok=True)
    prepare(root, args.chunks, args.reuse)

    started = time.perf_counter()
    svc = RunningService.start(root, runner=False, timeout=900)
    print(f"service ready in {time.perf_counter() - started:.0f} s")
    rng = np.random.default_rng(1)
    vocab = make_vocabulary(np.random.default_rng(7))
    queries = [" ".join(zipf_words(rng, vocab, int(rng.integers(2, 8)))) for _ in range(args.samples)]
    try:
        with httpx.Client(base_url=svc.url, timeout=120) as client:
            stats = client.post("/ops/index_stats", json={}).json()
            print(f"index: {stats['files']:,} files, {stats['chunks']:,} chunks, {stats['links']:,} links")
            for query in queries[:5]:  # warm: templates compiled, the search cache asked for
                timed_get(client, "/ui/")
                timed_get(client, f"/ui/search?q={quote(query)}")
            print(f"service idle after {settle(svc.proc.pid):.0f} s (the search cache loads in the background)")
            def pages(paths: list[str]):
                answers = [timed_get(client, path) for path in paths]
                return [took for took, _ in answers], [answer for _, answer in answers]

            measured(svc, "overview (GET /ui/)", lambda: pages(["/ui/"] * args.samples))
            _, found = measured(svc, "search (GET /ui/search?q=...)",
                                lambda: pages([f"/ui/search?q={quote(query)}" for query in queries]))
            opened = [html.unescape(part.split('"')[0]) for answer in found
                      for part in answer.text.split('href="/ui/w/default/file/')[1:2]]
            measured(svc, "a hit's file page", lambda: pages([f"/ui/w/default/file/{path}" for path in opened]))
            measured(svc, "overview: health part, computed", lambda: pages(["/ui/w/default/health?fresh=1"]))
            measured(svc, "overview: health part, reused", lambda: pages(["/ui/w/default/health"] * 10))
            measured(svc, "overview: jobs part (Prefect)", lambda: pages(["/ui/w/default/jobs"] * 10))
    finally:
        svc.stop()
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
