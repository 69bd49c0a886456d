"""What a read without the service pays to catch the index up with the files first (storage/index/freshness.py).

    python benchmarks/freshness.py [--sizes 272 10000 100000] [--root DIR [--reuse]] [--data PATH
                                   [--conversations IDS]] [--queries 20]

For each size, a workspace of that many small notes (folders of 20 under daily/, a third under digest/wiki/),
indexed once, then in this process, on an open index session:

- nothing changed: the stat walk (`Workspace.iter_stats`), the `files` table read and compare
  (`index.changes`), and `freshness.catch_up` whole; best and median of 7;
- 1 in 100 files changed (rewritten in place with new text): `catch_up` without a budget (what catching up
  fully costs) and under the default budget (what it did, what it reported); 3 rounds each.

Each as wall and CPU time of this process (on a shared machine the wall time includes waiting for a core).

With `--data PATH` (LoCoMo, as `benchmarks/locomo.py` takes it: its public data/locomo10.json holds ten
conversations, 272 sessions), the one-shot CLI search over the workspace `benchmarks/locomo.py` builds: wall
p50 / p95 of `dreamflow search QUERY --json` (a fresh process per query) with the catch-up off
(`DREAMFLOW_CATCH_UP_SECONDS=0`: reads as before it) and on, taking turns, and right after one note was edited
outside.
`--root DIR --reuse` keeps the generated workspaces there between runs (100k notes take minutes to write and
index).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from cli_search import dreamflow_command, summary, wall  # noqa: E402
from locomo import add_data_options, build_workspace, load, questions  # noqa: E402

from storage.files.workspace import Workspace  # noqa: E402
from storage.index import freshness, indexer as index  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402

PER_FOLDER = 20
ROUNDS = 7


def note(i: int, edit: int = 0) -> tuple[str, str]:
    """(path, text) of generated note `i` (`edit`: a later version of its text)."""
    rel = (f"digest/wiki/w{i // 3000:02d}/note-{i:06d}.md" if i % 3 == 0 else
           f"daily/2024-{1 + (i // PER_FOLDER) % 12:02d}-{1 + (i // (12 * PER_FOLDER)) % 28:02d}/note-{i:06d}.md")
    body = f"# Note {i}\n\nword{i % 997} and word{(i * 7) % 991} on day {i % 28}; version {edit}\n"
    return rel, f"---\nname: note {i}\ndescription: generated note {i}\n---\n{body}"


def generated(root: Path, files: int, reuse: bool) -> Workspace:
    """A workspace of `files` notes, indexed (kept as it is with `reuse` when it holds that many)."""
    ws = Workspace(root)
    db = IndexDB(ws)
    if reuse and (root / "metadata" / "index.duckdb").exists():
        with db.session() as con:
            if index.stats(con)["files"] == files:
                freshness.catch_up(con, ws, float("inf"))  # what an earlier run left behind
                return ws
    shutil.rmtree(root, ignore_errors=True)
    ws = Workspace(root)
    with IndexDB(ws).session():  # the empty index first, so the rebuild below is the only one
        pass
    started = time.perf_counter()
    for i in range(files):  # plain writes, as an editor or a sync tool leaves them
        rel, text = note(i)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    with IndexDB(ws).session() as con:
        index.rebuild(con, ws)
    print(f"  written and indexed in {time.perf_counter() - started:.0f} s")
    return ws


def timed(fn) -> tuple[tuple[float, float], object]:
    """((wall seconds, CPU seconds of this process), result) of one call: on a shared machine the wall time
    includes waiting for a core, the CPU time does not."""
    wall_started, cpu_started = time.perf_counter(), time.process_time()
    result = fn()
    return (time.perf_counter() - wall_started, time.process_time() - cpu_started), result


def ms(samples: list[tuple[float, float]]) -> str:
    walls, cpus = [w for w, _ in samples], [c for _, c in samples]
    return (f"{statistics.median(walls) * 1000:.1f} ms wall (best {min(walls) * 1000:.1f}), "
            f"{statistics.median(cpus) * 1000:.1f} ms CPU")


def measure(root: Path, files: int, reuse: bool) -> None:
    print(f"\n== {files:,} files ({root})")
    ws = generated(root, files, reuse)
    index.load_writer()  # imported once per process: the CLI measurement below shows that cost
    budget = freshness.budget()
    with IndexDB(ws).session() as con:
        walks, compares, wholes = [], [], []
        for _ in range(ROUNDS):
            took, on_disk = timed(lambda: dict(ws.iter_stats()))
            walks.append(took)
            took, found = timed(lambda: index.changes(con, on_disk, racy=False))  # as reads compare
            compares.append(took)
            assert not found.todo and not found.deleted, "the workspace changed under the benchmark"
            took, behind = timed(lambda: freshness.catch_up(con, ws, budget))
            wholes.append(took)
        print(f"  nothing changed: stat walk {ms(walks)}; table read + compare {ms(compares)}")
        print(f"  nothing changed: catch_up {ms(wholes)}: {'index_behind' if behind else 'up to date'} "
              f"(budget {budget:g} s)")
        changed = max(1, files // 100)
        for label, seconds in (("no budget", float("inf")), (f"budget {budget:g} s", budget)):
            rounds, outcomes = [], []
            for edit in range(1, 4):
                for i in range(0, files, files // changed)[:changed]:
                    rel, text = note(i, edit=edit + (10 if seconds == budget else 0))
                    (ws.root / rel).write_text(text)
                took, behind = timed(lambda: freshness.catch_up(con, ws, seconds))
                rounds.append(took)
                outcomes.append("up to date" if behind is None else f"pending {behind['pending']}")
            print(f"  {changed:,} changed, {label}: catch_up {ms(rounds)}: {', '.join(outcomes)}")
        freshness.catch_up(con, ws, float("inf"))  # the last budgeted round's rest


def cli_search(convs: dict[str, dict], queries: int) -> None:
    """One-shot `dreamflow search` over the LoCoMo workspace: catch-up off, on, and after an outside edit."""
    root, ws, turn_lines = build_workspace(convs, None, "freshness-locomo-")
    try:
        with IndexDB(ws).session() as con:
            index.rebuild(con, ws)
        asked = [qa["question"] for _, qa, _ in questions(convs)]
        asked = asked[:: max(1, len(asked) // queries)][:queries]
        cmd = [*dreamflow_command(), "--workspace", str(root), "search"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(root.parent / f"{root.name}-pycache")
        off = {**env, "DREAMFLOW_CATCH_UP_SECONDS": "0"}
        wall([*cmd, asked[0], "--json"], env)  # warm the bytecode and file caches
        print(f"\n== one-shot CLI search, LoCoMo workspace ({len(turn_lines)} notes)")
        before, after = [], []
        for q in asked:  # taking turns, so that the machine's load weighs on both alike
            before.append(wall([*cmd, q, "--json"], off))
            after.append(wall([*cmd, q, "--json"], env))
        print(summary("catch-up off (before)", before))
        print(summary("catch-up on", after))
        edited = []
        for n, rel in enumerate(list(turn_lines)[:queries]):
            with open(ws.root / rel, "a", encoding="utf-8") as fh:  # an editor adds a line in place
                fh.write(f"\nEdited outside Dreamflow ({n}).\n")
            edited.append(wall([*cmd, asked[n % len(asked)], "--json"], env))
        print(summary("after one outside edit", edited))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root.parent / f"{root.name}-pycache", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[272, 10_000, 100_000])
    parser.add_argument("--root", type=Path, help="keep the generated workspaces here (default: a temp folder)")
    parser.add_argument("--reuse", action="store_true", help="with --root: reuse workspaces an earlier run left")
    add_data_options(parser)  # with data: also the one-shot CLI search over the LoCoMo workspace
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args()
    logging.getLogger(freshness.__name__).setLevel(logging.ERROR)  # what catch_up reports is printed below

    base = args.root or Path(tempfile.mkdtemp(prefix="freshness-"))
    try:
        for size in args.sizes:
            measure(base / f"ws-{size}", size, args.reuse)
        if args.data:
            cli_search(load(args.data, args.conversations), args.queries)
    finally:
        if not args.root:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
