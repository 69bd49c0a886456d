"""Wall time of `dreamflow search` as a user calls it: a fresh process per query, over a small workspace and a
LoCoMo-sized one, next to `dreamflow --version` (the CLI's start alone) and a bare `python -c pass`.

    python benchmarks/cli_search.py --data PATH [--workspace DIR] [--queries 20] [--copies 3]

`--data` is LoCoMo (the public locomo10.json or a folder of conv-<id>.json files: benchmarks/locomo.py `load`),
whose questions are the queries. Without --workspace it builds one in a temp folder from those conversations
(one daily note per session, repeated --copies times to reach LoCoMo's full size: ~270+ files, ~1+ MB from the
five docs/benchmarks.md measures) and indexes it; the small workspace is three notes. Prints p50 (median)/p95/max
wall time of each, for `--json` and for the output for people. Target: search p50 <= 0.2 s on the LoCoMo
workspace. What a search imports (not the MCP server, the job commands, rich) is held by tests/test_cli.py.

Python caches compiled bytecode as installed programs do (in a temp folder, via PYTHONPYCACHEPREFIX), even
where PYTHONDONTWRITEBYTECODE is set, which would recompile Dreamflow's modules on every call (~40 ms).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.locomo import add_data_options, load, session_date  # noqa: E402
from storage.memory import Memory  # noqa: E402


def sessions(convs: dict[str, dict]):
    """(conversation id, session number, YYYY-MM-DD, [(speaker, text)]) for every LoCoMo session."""
    for conv_id, conv in convs.items():
        n = 1
        while f"session_{n}" in conv:
            when = session_date(conv[f"session_{n}_date_time"])
            turns = [(t["speaker"], t["text"]) for t in conv[f"session_{n}"]]
            yield conv_id, n, when.date().isoformat(), turns
            n += 1


def questions(convs: dict[str, dict], limit: int) -> list[str]:
    """`limit` questions of categories 1-4, spread evenly over all of them."""
    qs = [q["question"] for conv in convs.values() for q in conv["qa"] if q.get("category") in (1, 2, 3, 4)]
    step = max(len(qs) // limit, 1)
    return qs[::step][:limit]


def build_workspace(root: Path, copies: int, convs: dict[str, dict]) -> dict:
    """Write one daily note per session (times `copies`) and rebuild the index; returns index stats."""
    mem = Memory(root)
    for copy in range(copies):
        for conv, n, day, turns in sessions(convs):
            body = "\n\n".join(f"**{speaker}**: {text}" for speaker, text in turns) + "\n"
            mem.ws.write_text(f"daily/{day}/{conv}-session-{n}-{copy}.md",
                              f"---\nname: {conv} session {n}\ndescription: Conversation of {day}\n---\n{body}")
    started = time.perf_counter()
    stats = mem.reindex()
    stats["reindex_s"] = round(time.perf_counter() - started, 3)
    return stats


def dreamflow_command() -> list[str]:
    script = Path(sys.executable).parent / "dreamflow"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dreamflow"]


def wall(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run; CPU time shows the cost when the shared machine is busy."""
    cpu_before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return elapsed, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summary(label: str, runs: list[tuple[float, float]]) -> str:
    times = sorted(w for w, _ in runs)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    cpu = statistics.median(c for _, c in runs)
    return f"{label:<26} wall p50 {statistics.median(times) * 1000:5.0f} ms  p95 {p95 * 1000:5.0f} ms  " \
           f"max {times[-1] * 1000:5.0f} ms   cpu p50 {cpu * 1000:5.0f} ms   (n={len(times)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, help="an existing, indexed workspace to query")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--copies", type=int, default=3)
    add_data_options(parser)
    args = parser.parse_args()
    convs = load(args.data, args.conversations)

    with tempfile.TemporaryDirectory() as tmp:
        ws = args.workspace or Path(tmp) / "ws"
        if not args.workspace:
            stats = build_workspace(ws, args.copies, convs)
            print(f"workspace: {stats.get('files')} files, {stats.get('chunks')} chunks, "
                  f"reindex {stats['reindex_s']} s")
        cmd = dreamflow_command()
        qs = questions(convs, args.queries)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        for output in ("--json", "--no-json"):  # warm the file and bytecode caches once per output path
            wall([*cmd, "--workspace", str(ws), "search", qs[0], *([output] if output == "--json" else [])], env)
        small = Path(tmp) / "small"
        for i, text in enumerate(("Mia likes ramen.", "We walked the Philosopher's Path.", "Nara's deer.")):
            Memory(small).ws.write_text(f"daily/2024-05-0{i + 1}/note.md", f"---\nname: note {i}\n---\n{text}\n")
        Memory(small).reindex()
        wall([*cmd, "--workspace", str(small), "search", "ramen"], env)
        baseline = [wall([sys.executable, "-c", "pass"], env) for _ in range(5)]
        version = [wall([*cmd, "--version"], env) for _ in range(len(qs))]
        on_small = [wall([*cmd, "--workspace", str(small), "search", q, "--limit", "10"], env) for q in qs]
        as_json = [wall([*cmd, "--workspace", str(ws), "search", q, "--limit", "10", "--json"], env) for q in qs]
        people = [wall([*cmd, "--workspace", str(ws), "search", q, "--limit", "10"], env) for q in qs]
        print(f"command: {' '.join(cmd)} --workspace WS search QUERY --limit 10")
        print(summary("python -c pass", baseline))
        print(summary("dreamflow --version", version))
        print(summary("search, small workspace", on_small))
        print(summary("search --json, LoCoMo", as_json))
        print(summary("search, LoCoMo", people))
        p50 = max(statistics.median(w for w, _ in runs) for runs in (as_json, people))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
              f"target search p50 <= 200 ms on LoCoMo: {'met' if p50 <= 0.2 else 'NOT met'}")

if __name__ == "__main__":
    main()
