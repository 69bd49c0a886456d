"""Many workspaces in one service: N registered workspaces of M notes each, served by one `dreamflow start`.

    python benchmarks/workspaces.py [--workspaces 50] [--notes 2000] [--queries 200] [--quick]
                                    [--max-open K] [--embedder none|local] [--root DIR [--reuse]] [--jobs J]

Writes N workspaces of M generated Markdown cards (half daily notes under daily/<date>/, half digest cards under
digest/{people,projects,topics}/ with facts, notes and wikilinks; words drawn Zipf-like from a vocabulary of
English stopwords, words every workspace shares and words only that workspace uses), indexes each offline
(`Memory.reindex`), registers them in a temp `DREAMFLOW_HOME`, then starts real services on free ports, each
with its own Prefect server and runner:

- the multi-workspace service over all N (w00 is its default, the others registered): launch -> `/health`
  ready and its phases (when its log lines appear: workspaces open and API up, start-up reconciles done,
  Prefect up and the runner's deployments registered), RSS of the service and, separately, of its children
  after start and after the searches, open file descriptors;
- a single-workspace service over a copy of w01 (same files, same index) in another home, started next.

Then, over HTTP with the product's client (`RemoteMemory`, one keep-alive connection each), warm searches
(`limit` 10, default link expansion; queries of 2-4 words from w01's vocabulary), interleaved query by query so
that the shared machine's load hits all three alike: w01 in the single service (`/ops/search`), w01 in the
multi service (`/workspaces/w01/ops/search`), and w01+w02+w03 in the multi service (`workspaces: [...]`,
merged by score). Ratios: multi / single (target <= 1.2) and three / one (target <= 2). Last, round-robin
searches over all N workspaces (more than the `DREAMFLOW_MAX_OPEN_INDEXES` cap, default 16: every call
reopens a closed index) next to round-robin over as many workspaces as the cap (every index stays open).

`--quick` is a smoke run: 4 workspaces of 100 notes, 40 queries, a cap of 3. Every service is stopped with
SIGTERM at the end, also after an error. The load average (`uptime`) is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.scale import make_vocabulary, zipf_words  # noqa: E402
from benchmarks.service import line, pct, rss_mb  # noqa: E402
from engine.access.client import RemoteMemory  # noqa: E402
from service_harness import RunningService  # noqa: E402
from storage.index.tokenize import STOPWORDS  # noqa: E402

SHARED_EVERY = 3  # one vocabulary rank in 3 is a word every workspace shares; the others are the workspace's own
KINDS = ("people", "projects", "topics")
TARGET = "w01"  # the workspace measured alone and first of the three searched together


def name_of(i: int) -> str:
    return f"w{i:02d}"


def vocabulary(i: int) -> list[str]:
    """Workspace i's words by frequency rank: scale.py's stopwords + pseudo-words, where every pseudo-word
    not shared gets the suffix `q<i in letters j w x y>` (letters no pseudo-word has), so it is i's alone."""
    base = make_vocabulary(np.random.default_rng(7))
    code = "q" + "".join("jwxy"[int(d)] for d in np.base_repr(i, 4).rjust(3, "0"))
    return [w if w in STOPWORDS or k % SHARED_EVERY == 0 else w + code for k, w in enumerate(base)]


def sentence(rng: np.random.Generator, vocab: list[str], lo: int, hi: int) -> str:
    words = zipf_words(rng, vocab, int(rng.integers(lo, hi)))
    return " ".join(words).capitalize() + "."


def content_words(rng: np.random.Generator, vocab: list[str], n: int) -> list[str]:
    words: list[str] = []
    while len(words) < n:
        words += [w for w in zipf_words(rng, vocab, 4 * n) if w not in STOPWORDS]
    return words[:n]


def card(rng: np.random.Generator, vocab: list[str], i: int, notes: int) -> tuple[str, str]:
    """(relative path, text) of note i: a daily note (even i) or a digest card (odd i)."""
    title = " ".join(content_words(rng, vocab, 3))
    description = " ".join(content_words(rng, vocab, 8))
    digest = [f"digest/{KINDS[j % 3]}/c{j:05d}.md" for j in range(1, notes, 2)]
    links = [digest[int(rng.integers(len(digest)))] for _ in range(3)] if digest else []
    bullets = [f"- {sentence(rng, vocab, 8, 16)}" for _ in range(int(rng.integers(3, 7)))]
    if i % 2 == 0:
        day = f"2025-{1 + i % 12:02d}-{1 + (i // 12) % 28:02d}"
        rel = f"daily/{day}/n{i:05d}.md"
        head = f"---\nname: {title}\ndescription: {description}\ndate: {day}\ntags: [daily]\n---\n"
        body = [f"# {title.title()}", sentence(rng, vocab, 40, 110), "\n".join(bullets),
                sentence(rng, vocab, 30, 90) + "".join(f" See [[{t}]]." for t in links[:2])]
    else:
        rel = f"digest/{KINDS[i % 3]}/c{i:05d}.md"
        head = f"---\nname: {title}\ndescription: {description}\ntags: [{KINDS[i % 3]}]\n---\n"
        body = [f"# {title.title()}", sentence(rng, vocab, 30, 80), "## Facts", "\n".join(bullets),
                "## Notes", sentence(rng, vocab, 50, 140), sentence(rng, vocab, 20, 60),
                "## Related", "\n".join(f"- [[{t}]]" for t in links)]
    return rel, head + "\n" + "\n\n".join(body) + "\n"


def build(folder: str, i: int, notes: int) -> dict:
    """Write workspace i's notes into `folder` and index them offline; returns the index stats."""
    from storage.memory import Memory

    root, rng, vocab = Path(folder), np.random.default_rng(1000 + i), vocabulary(i)
    for n in range(notes):
        rel, text = card(rng, vocab, n, notes)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    started = time.perf_counter()
    stats = Memory(root).reindex()
    return {**stats, "reindex_s": time.perf_counter() - started}


def queries(i: int, count: int, seed: int) -> list[str]:
    rng, vocab = np.random.default_rng(seed), vocabulary(i)
    return [" ".join(content_words(rng, vocab, int(rng.integers(2, 5)))) for _ in range(count)]


def prepare(base: Path, n: int, notes: int, jobs: int, reuse: bool) -> dict[str, Path]:
    """Write, index and register the N workspaces (w00 at multi/ws, the service's default) and copy w01 to
    single/ws; returns name -> folder."""
    from engine.config.registry import FILE, Registry

    folders = {name_of(i): base / "multi" / ("ws" if i == 0 else f"spaces/{name_of(i)}") for i in range(n)}
    manifest = base / "manifest.json"
    wanted = {"workspaces": n, "notes": notes}
    if reuse and manifest.exists() and json.loads(manifest.read_text()) == wanted:
        print(f"reusing the workspaces under {base} (Prefect databases and logs of earlier runs removed)")
        for state in (base / "multi/home/prefect", base / "multi/home/logs", base / "single/home"):
            shutil.rmtree(state, ignore_errors=True)
        for log in (*base.glob("multi/service-*.log"), *base.glob("single/service-*.log")):
            log.unlink()
        return folders
    shutil.rmtree(base / "multi", ignore_errors=True)
    shutil.rmtree(base / "single", ignore_errors=True)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        stats = list(pool.map(build, [str(f) for f in folders.values()], range(n), [notes] * n))
    files, chunks = sum(s["files"] for s in stats), sum(s["chunks"] for s in stats)
    print(f"wrote and indexed {n} workspaces x {notes} notes in {time.perf_counter() - started:.0f} s "
          f"({jobs} processes): {files} files, {chunks} chunks ({chunks / n:.0f} per workspace), "
          f"reindex p50 {pct([s['reindex_s'] for s in stats], .5):.1f} s per workspace")
    home = base / "multi" / "home"
    previous = os.environ.get("DREAMFLOW_HOME")
    os.environ["DREAMFLOW_HOME"] = str(home)  # the registry refuses folders overlapping this home
    try:
        registry = Registry.load(home / FILE)
        for name, folder in folders.items():
            registry.add(name, folder)
        registry.default = name_of(0)
        registry.save()
    finally:
        if previous is None:
            os.environ.pop("DREAMFLOW_HOME")
        else:
            os.environ["DREAMFLOW_HOME"] = previous
    shutil.copytree(folders[TARGET], base / "single" / "ws")
    manifest.write_text(json.dumps(wanted))
    return folders


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def resident(svc: RunningService, label: str) -> None:
    """RSS of the service process, separately of its children, and its open file descriptors."""
    children = [c for c in svc.memory.status()["children"] if c["running"]]
    fds = len(os.listdir(f"/proc/{svc.proc.pid}/fd"))
    print(f"RSS {label:<40} service {rss_mb(svc.proc.pid):6.0f} MB ({fds} open fds);  children: "
          + ", ".join(f"{c['name']} {rss_mb(c['pid']):.0f} MB" for c in children))


class LogClock(threading.Thread):
    """When each line of a starting service's log (the newest `service-*.log` under `root`) appeared, in
    seconds after `started`."""

    def __init__(self, root: Path, started: float):
        super().__init__(daemon=True)
        self.root, self.started, self.before = root, started, set(root.glob("service-*.log"))
        self.lines: list[tuple[float, str]] = []
        self.done = threading.Event()

    def run(self) -> None:
        path, offset, partial = None, 0, ""
        while not self.done.wait(0.1):
            path = path or next(iter(set(self.root.glob("service-*.log")) - self.before), None)
            if path is None:
                continue
            with open(path, errors="replace") as log:
                log.seek(offset)
                text = partial + log.read()
                offset = log.tell()
            *complete, partial = text.split("\n")
            now = time.perf_counter() - self.started
            self.lines += [(now, row) for row in complete]

    def at(self, prefix: str, last: bool = False) -> float:
        times = [t for t, row in self.lines if row.startswith(prefix)]
        return (times[-1] if last else times[0]) if times else float("nan")


def start(root: Path, label: str, env: dict, services: list[RunningService]) -> RunningService:
    """Start a service (added to `services`, which the caller stops); print launch -> ready and its phases
    (from the times its log lines appeared)."""
    started = time.perf_counter()
    clock = LogClock(root, started)
    clock.start()
    try:
        svc = RunningService.start(root, env=env, timeout=900)
        services.append(svc)
    finally:
        clock.done.set()
        clock.join()
    took = time.perf_counter() - started
    found = re.findall(r"^Index.*up to date \(.*; ([0-9.]+) s\)$", svc.log_path.read_text(errors="replace"), re.M)
    deployments = svc.prefect("POST", "/deployments/count")
    print(f"{label:<40} launch -> /health ready {took:6.1f} s: workspaces open + API up {clock.at('API '):.1f} s, "
          f"{len(found)} start-up reconciles done {clock.at('Index', last=True):.1f} s "
          f"(their sum {sum(map(float, found)):.1f} s), Prefect up + runner's {deployments} deployments "
          f"registered {clock.at('Prefect UI'):.1f} s")
    return svc


def timed(memory: RemoteMemory, query: str, **kwargs) -> tuple[float, int]:
    started = time.perf_counter()
    hits = memory.search(query, limit=10, **kwargs)
    return time.perf_counter() - started, len(hits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspaces", type=int, default=50)
    parser.add_argument("--notes", type=int, default=2000, help="notes per workspace")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per measurement")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--max-open", type=int, help="DREAMFLOW_MAX_OPEN_INDEXES of the service (default 16)")
    parser.add_argument("--embedder", default="none", help="DREAMFLOW_EMBEDDER of the services (none | local)")
    parser.add_argument("--jobs", type=int, default=1, help="processes writing and indexing the workspaces")
    parser.add_argument("--root", type=Path, help="folder for the workspaces (default: a temp folder)")
    parser.add_argument("--reuse", action="store_true", help="keep workspaces already built under --root")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 x 100 notes, 40 queries, cap 3")
    args = parser.parse_args()
    if args.quick:
        args.workspaces, args.notes, args.queries, args.warmup = 4, 100, 40, 5
        args.max_open = args.max_open or 3
    if args.workspaces < 4:
        parser.error("--workspaces must be at least 4 (w00 is the default; w01-w03 are searched together)")
    from engine.config.settings import Settings

    cap = args.max_open or Settings().max_open_indexes
    env = {"DREAMFLOW_EMBEDDER": args.embedder, "DREAMFLOW_MAX_OPEN_INDEXES": str(cap)}
    print(f"{args.workspaces} workspaces x {args.notes} notes, open-index cap {cap}, embedder {args.embedder}; "
          f"{load()}")

    tmp = None if args.root else tempfile.TemporaryDirectory(prefix="dreamflow-bench-workspaces-")
    base = args.root or Path(tmp.name)
    base.mkdir(parents=True, exist_ok=True)
    services: list[RunningService] = []
    try:
        names = list(prepare(base, args.workspaces, args.notes, args.jobs, args.reuse))
        multi = start(base / "multi", f"multi service ({args.workspaces} workspaces)", env, services)
        time.sleep(3)
        resident(multi, "multi, after start")
        single = start(base / "single", "single-workspace service", env, services)
        time.sleep(3)
        resident(single, "single, after start")
        if args.embedder != "none":  # wait for the background backfill of the measured workspaces
            for memory in (RemoteMemory(single.url), *(RemoteMemory(multi.url, workspace=name_of(i))
                                                       for i in (1, 2, 3))):
                while memory.status()["vectors"]["pending"]:
                    time.sleep(2)

        one_single, one_multi = RemoteMemory(single.url), RemoteMemory(multi.url, workspace=TARGET)
        three = [name_of(i) for i in (1, 2, 3)]
        qs = queries(1, args.warmup + args.queries, seed=1)
        for q in qs[:args.warmup]:
            timed(one_single, q), timed(one_multi, q), timed(one_multi, q, workspaces=three)
        t_single, t_multi, t_three, hits = [], [], [], [0, 0, 0]
        for q in qs[args.warmup:]:
            for times, k, (seconds, found) in ((t_single, 0, timed(one_single, q)), (t_multi, 1, timed(one_multi, q)),
                                               (t_three, 2, timed(one_multi, q, workspaces=three))):
                times.append(seconds)
                hits[k] += found
        n = len(qs) - args.warmup
        print(f"warm search, {n} queries of 2-4 words, limit 10 (mean hits: "
              f"{hits[0] / n:.1f} single, {hits[1] / n:.1f} multi, {hits[2] / n:.1f} three); {load()}")
        print(line("single-workspace service, /ops/search", t_single))
        print(line(f"multi service, {TARGET} only", t_multi))
        print(line(f"multi service, {'+'.join(three)}", t_three))
        ratio, across = pct(t_multi, .5) / pct(t_single, .5), pct(t_three, .5) / pct(t_multi, .5)
        print(f"p50 ratio multi / single   {ratio:.2f}   (target <= 1.2: {'met' if ratio <= 1.2 else 'NOT met'})")
        print(f"p50 ratio three / one      {across:.2f}   (target <= 2: {'met' if across <= 2 else 'NOT met'})")

        clients = {name: RemoteMemory(multi.url, workspace=name) for name in names}
        per_ws = {name: queries(i, args.queries, seed=2) for i, name in enumerate(names)}
        for label, cycle in ((f"round-robin over all {len(names)} ({'>' if len(names) > cap else '<='} cap {cap})", names),
                             (f"round-robin over {min(cap, len(names))} (= cap)", names[:cap])):
            for name in cycle:  # untimed: the first call of this cycle
                timed(clients[name], per_ws[name][0])
            samples = []
            for k in range(args.queries):
                name = cycle[k % len(cycle)]
                samples.append(timed(clients[name], per_ws[name][(k // len(cycle) + 1) % args.queries])[0])
            print(line(label, samples))
        resident(multi, "multi, after the searches")
        resident(single, "single, after the searches")
    finally:
        for svc in reversed(services):
            try:
                code = svc.stop()
                print(f"SIGTERM -> {svc.root.name} service exit code {code}")
            except Exception as exc:  # stop the others anyway
                print(f"stopping the {svc.root.name} service failed: {exc}")
        print(load())
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
