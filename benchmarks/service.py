"""The running service (`dreamflow start`), measured as users meet it.

    python benchmarks/service.py --data PATH [--saves 30] [--events 4] [--queries 10] [--chunks 100000]

Starts a real service (own Prefect server; runner, watcher and API in the service) over a LoCoMo-sized workspace in a temp
folder, flows answered by the scripted LLM server (instant replies), and prints:
- save -> searchable: a file written to daily/ as an editor would, until `search` through the API finds it
  (p50/p95/max);
- event -> flow start: a resource file written, until its auto_resource run is Running in Prefect, and until
  it is Completed;
- `dreamflow search` wall time, a fresh process per query, through the running service and in-process after
  the service stops;
- resident memory (RSS) of the service process and its children, idle (with `--embedder local`, once every
  chunk has its vector); with --chunks N also after the workspace grows to about N chunks (indexed offline,
  then the service restarted over it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.cli_search import build_workspace, questions  # noqa: E402
from benchmarks.locomo import add_data_options, load  # noqa: E402
from llm_server import LLMServer, Reply  # noqa: E402
from service_harness import DREAMFLOW, RunningService, wait_for  # noqa: E402
from storage.memory import Memory  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def line(label: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return f"{label:<38} p50 {pct(ms, .5):8.1f} ms   p95 {pct(ms, .95):8.1f} ms   max {max(ms):8.1f} ms   (n={len(ms)})"


def rss_mb(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) / 1024
    return float("nan")


def memory_report(svc: RunningService, label: str) -> None:
    status = svc.memory.status()
    parts = [f"service {rss_mb(svc.proc.pid):.0f} MB"]
    parts += [f"{c['name']} {rss_mb(c['pid']):.0f} MB" for c in status["children"] if c["running"]]
    index = status["index"]
    print(f"RSS {label:<34} " + ", ".join(parts) + f"   (index: {index['files']} files, {index['chunks']} chunks)")


def save_to_searchable(svc: RunningService, samples: int, tag: str = "a") -> list[float]:
    memory, times = svc.memory, []
    folder = svc.workspace / "daily/2030-01-01"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(samples):
        token = f"benchsave{tag}{i}q"
        started = time.perf_counter()
        (folder / f"bench-{tag}{i}.md").write_text(f"# Bench {i}\n\nThe word {token} appears here.\n")
        while not memory.search(token, limit=1, expand=0):
            if time.perf_counter() - started > 10:
                raise AssertionError(f"{token} not searchable after 10 s")
            time.sleep(0.005)
        times.append(time.perf_counter() - started)
        time.sleep(0.1)
    return times


def event_to_flow(svc: RunningService, samples: int) -> tuple[list[float], list[float]]:
    from datetime import datetime

    to_start, to_done = [], []
    folder = svc.workspace / "resource/2030-01-02"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(samples):
        rel = f"resource/2030-01-02/note-{i}.md"
        written = time.time()
        (svc.workspace / rel).write_text(f"# Resource {i}\n\nbenchresource{i} text.\n")

        def run():
            runs = [r for r in svc.flow_runs("auto-resource/on-change") if r["parameters"].get("path") == rel]
            return runs[0] if runs and runs[0]["state_type"] in ("COMPLETED", "FAILED", "CRASHED") else None

        done = wait_for(run, 120, f"the auto_resource run of {rel}", interval=0.2)
        assert done["state_type"] == "COMPLETED", done
        start = datetime.fromisoformat(done["start_time"]).timestamp()
        end = datetime.fromisoformat(done["end_time"]).timestamp()
        to_start.append(start - written)
        to_done.append(end - written)
    return to_start, to_done


def cli_search(workspace: Path, queries: list[str]) -> list[float]:
    times = []
    for q in queries:
        started = time.perf_counter()
        out = subprocess.run([DREAMFLOW, "--workspace", str(workspace), "search", q, "--json"],
                             capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        assert out.returncode == 0, out.stderr
    return times


def grow(workspace: Path, chunks: int) -> None:
    """Add generated daily notes until about `chunks` chunks (chunks per note measured on a first batch)."""
    memory = Memory(workspace)
    words = "river garden recipe budget meeting travel museum guitar sprint hiking".split()

    def write(first: int, count: int) -> None:
        for f in range(first, first + count):
            sections = "\n\n".join(
                f"## Part {s}\n\n" + " ".join(words[(f + s + k) % 10] + str((f * 7 + s * 3 + k) % 997)
                                              for k in range(60))
                for s in range(10)
            )
            memory.ws.write_text(f"daily/2029-{1 + f % 12:02d}-{1 + f % 28:02d}/gen-{f}.md", f"# Note {f}\n\n{sections}\n")

    before = memory.index_stats()["chunks"]
    write(0, 100)
    per_file = max(1.0, (memory.reconcile() and memory.index_stats()["chunks"] - before) / 100)
    files = max(0, int((chunks - before) / per_file) - 100)
    write(100, files)
    started = time.perf_counter()
    stats = memory.reconcile()
    print(f"grew the workspace by {files + 100} files ({per_file:.1f} chunks each); "
          f"offline reconcile {time.perf_counter() - started:.1f} s: {stats}")
    memory.db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--events", type=int, default=4)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=0, help="also measure RSS at about this many chunks")
    parser.add_argument("--embedder", default="none", help="DREAMFLOW_EMBEDDER of the service (none | local)")
    add_data_options(parser)
    args = parser.parse_args()
    convs = load(args.data, args.conversations)

    llm = LLMServer().start()
    llm.responder = lambda body: Reply(content=json.dumps(
        {"name": "Bench card", "description": "benchmark", "content": "# Bench card\n\nSummary.\n"}))
    with tempfile.TemporaryDirectory(prefix="dreamflow-bench-service-") as tmp:
        root = Path(tmp)
        print(f"workspace: {build_workspace(root / 'ws', 1, convs)}")
        started = time.perf_counter()
        svc = RunningService.start(root, llm=llm, env={"DREAMFLOW_EMBEDDER": args.embedder})
        print(f"dreamflow start -> ready: {time.perf_counter() - started:.1f} s")
        try:
            time.sleep(5)
            if args.embedder != "none":  # wait for the background backfill to embed every chunk
                wait_for(lambda: svc.memory.status()["vectors"]["pending"] == 0, 600, "vectors", interval=2)
            memory_report(svc, "idle")
            print(line("save -> searchable", save_to_searchable(svc, args.saves)))
            to_start, to_done = event_to_flow(svc, args.events)
            print(line("resource write -> flow running", to_start))
            print(line("resource write -> flow completed", to_done))
            qs = questions(convs, args.queries)
            print(line("dreamflow search (through service)", cli_search(svc.workspace, qs)))
            memory_report(svc, "after the runs")
        finally:
            code = svc.stop()
        print(f"SIGTERM -> exit code {code}")
        print(line("dreamflow search (in-process)", cli_search(svc.workspace, qs)))
        if args.chunks:
            grow(svc.workspace, args.chunks)
            started = time.perf_counter()
            svc.launch()
            print(f"restart over {args.chunks} chunks -> ready: {time.perf_counter() - started:.1f} s")
            try:
                time.sleep(5)
                memory_report(svc, f"idle at ~{args.chunks} chunks")
                print(line(f"dreamflow search at ~{args.chunks} chunks", cli_search(svc.workspace, qs)))
                print(line("save -> searchable at that size", save_to_searchable(svc, 10, tag="b")))
            finally:
                svc.stop()
    llm.stop()


if __name__ == "__main__":
    main()
