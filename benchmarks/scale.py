"""Index and search at scale: a generated workspace of N chunks (default 10k and 100k).

For each size: write the workspace (Markdown notes of 10 sections of ~150 words drawn from a Zipf(1.2)
vocabulary of 30k words whose most frequent ranks are English stopwords, as in real text, and the rest
pseudo-words; one wikilink per section), time a full reindex (chunks/s), the warm search latency
(p50/p95 over random 2-4 word queries, link expansion on) in SQL, as a one-shot process searches, then as
the service searches (the index held open: storage/search/cache.py, with its load time, size and the
process's RSS), and a single-file update (edit one note and re-index it; then also until a search finds
the edit; p50/p95). `--root DIR --reuse --keep-index` opens the index an earlier run left there instead of
rebuilding it: a fresh process, as a service starting on an existing index (its RSS without a reindex's).

    python benchmarks/scale.py [--sizes 10000 100000] [--queries 200] [--updates 30] [--root DIR --reuse]
                               [--threads N] [--replicate K] [--locomo PATH [--conversations IDS]] [--keep-index]

Times are wall clock and CPU time of the process (all its threads): on a machine shared with other work the
wall time includes waiting for a core, the CPU time does not.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from storage.files.workspace import Workspace  # noqa: E402
from storage.index import indexer as index
from storage.index.db import IndexDB  # noqa: E402
from storage.index.tokenize import STOPWORDS  # noqa: E402
from storage.search import cache as search_cache  # noqa: E402
from storage.search.search import search  # noqa: E402

SECTIONS_PER_FILE = 10
WORDS_PER_SECTION = 150
VOCABULARY = 30_000


def make_vocabulary(rng: np.random.Generator) -> list[str]:
    """Stopwords first (the most frequent ranks, dropped by the tokenizer), then random pseudo-words."""
    stop = sorted(w for w in STOPWORDS if "'" not in w and len(w) > 1)
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    words: set[str] = set()
    while len(words) < VOCABULARY - len(stop):
        words.add("".join(rng.choice(syllables, size=rng.integers(2, 5))))
    pseudo = sorted(words)
    rng.shuffle(pseudo)
    return stop + pseudo


def zipf_words(rng: np.random.Generator, vocab: list[str], n: int) -> list[str]:
    """`n` words with Zipf(1.2) ranks; ranks past the vocabulary are redrawn (not piled on the last word)."""
    ranks = np.empty(0, dtype=np.int64)
    while len(ranks) < n:
        draw = rng.zipf(1.2, size=2 * n)
        ranks = np.concatenate([ranks, draw[draw <= len(vocab)]])
    return [vocab[r - 1] for r in ranks[:n]]


def write_workspace(root: Path, chunks: int, seed: int = 7) -> Workspace:
    rng = np.random.default_rng(seed)
    vocab = make_vocabulary(rng)
    ws = Workspace(root)
    n_files = chunks // SECTIONS_PER_FILE
    for i in range(n_files):
        rel = f"digest/wiki/note-{i:06d}.md" if i % 2 else f"daily/2024-{1 + i % 12:02d}-{1 + i % 28:02d}/note-{i:06d}.md"
        lines = ["---", f"name: note {i}", f"description: {' '.join(zipf_words(rng, vocab, 8))}", "---", ""]
        for s in range(SECTIONS_PER_FILE):
            words = zipf_words(rng, vocab, WORDS_PER_SECTION)
            target = f"digest/wiki/note-{rng.integers(n_files):06d}.md"
            lines += [f"## Section {s}", "", " ".join(words[:75]), " ".join(words[75:]) + f" see [[{target}]]", ""]
        ws.write_text(rel, "\n".join(lines))
    return ws


def timed(fn, *args, **kwargs) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args, **kwargs)
    return time.perf_counter() - wall, time.process_time() - cpu


def percentiles(samples: list[tuple[float, float]]) -> str:
    def p(values: list[float], q: float) -> float:
        values = sorted(values)
        return 1000 * values[min(len(values) - 1, int(q * len(values)))]

    wall, cpu = [w for w, _ in samples], [c for _, c in samples]
    return (f"p50 {p(wall, 0.5):.1f} ms, p95 {p(wall, 0.95):.1f} ms wall "
            f"(CPU p50 {p(cpu, 0.5):.1f} ms, p95 {p(cpu, 0.95):.1f} ms)")


def run(root: Path, chunks: int, queries: int, updates: int, reuse: bool, threads: int | None,
        replicate: int = 1, keep_index: bool = False) -> None:
    db = IndexDB(Workspace(root))
    if not (reuse and (root / "digest").exists() and len(list((root / "digest/wiki").iterdir())) > 0):
        shutil.rmtree(root, ignore_errors=True)
        with IndexDB(Workspace(root)).session():  # the (empty) index first: the timed rebuild is the only one
            pass
        t0 = time.perf_counter()
        write_workspace(root, chunks)
        print(f"\n== {chunks} chunks: workspace written in {time.perf_counter() - t0:.1f} s ({root})")
    else:
        print(f"\n== {chunks} chunks: reusing {root}")
    ws = Workspace(root)
    with db.session() as con:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        kept = index.stats(con)["chunks"] if keep_index and reuse else 0
        if kept:
            print(f"index kept: {kept} chunks, no reindex; process RSS {rss_mb():.0f} MB")
        else:
            t0 = time.perf_counter()
            built = index.rebuild(con, ws)
            took = time.perf_counter() - t0
            print(f"reindex: {took:.2f} s, {built['chunks'] / took:,.0f} chunks/s "
                  f"({built['files']} files, {built['chunks']} chunks, {built['postings']} postings)")
    rng = np.random.default_rng(1)
    vocab = make_vocabulary(np.random.default_rng(7))
    texts = [" ".join(zipf_words(rng, vocab, int(rng.integers(3, 8)))) for _ in range(queries)]
    measure(db, ws, texts, updates, threads, rng, vocab)
    if replicate > 1:
        with db.session() as con:
            t0 = time.perf_counter()
            copy_index(con, replicate)
            print(f"\n== {replicate} x {chunks} chunks: the index copied {replicate - 1} times under r<k>/ paths in SQL "
                  f"and compacted in {time.perf_counter() - t0:.0f} s ({index.stats(con)['chunks']} chunks)")
        measure(db, ws, texts, updates, threads, rng, vocab)


def measure(db: IndexDB, ws: Workspace, texts: list[str], updates: int, threads: int | None,
            rng: np.random.Generator, vocab: list[str]) -> None:
    """Warm search in SQL, then as the service searches (cache load, RSS, search, updates), then cold."""
    with db.session() as con:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        for q in texts[:5]:
            search(con, q)  # warm up
        samples = [timed(search, con, q, limit=10) for q in texts]
        print(f"warm search in SQL, as a one-shot process (limit 10, link expansion 3): {percentiles(samples)}")

    db.hold()  # as the service does: the index stays open, and searches read the in-memory search cache
    with db.session() as con:
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        t0 = time.perf_counter()
        cache = search_cache.wait(con)
        print(f"service: search cache loaded in {time.perf_counter() - t0:.2f} s (in the background), "
              f"{cache.nbytes() / 1e6:.0f} MB of arrays; process RSS {rss_mb():.0f} MB")
        for q in texts[:5]:
            search(con, q)
        samples = [timed(search, con, q, limit=10) for q in texts]
        print(f"service: warm search (limit 10, link expansion 3): {percentiles(samples)}")

        files = sorted(p for p in ws.iter_files() if p.startswith("digest/"))
        samples, searchable = [], []
        run_tag = int(rng.integers(10**9))  # marker words no earlier run (or copy) holds
        for i in range(updates):
            rel = files[int(rng.integers(len(files)))]
            ws.write_text(rel, ws.read_text(rel) + f"\nupdate zq{run_tag}m{i}x {' '.join(zipf_words(rng, vocab, 20))}\n")
            wall, cpu = time.perf_counter(), time.process_time()
            index.index_file(con, ws, rel)
            samples.append((time.perf_counter() - wall, time.process_time() - cpu))
            found = search(con, f"zq{run_tag}m{i}x", limit=1)
            searchable.append((time.perf_counter() - wall, time.process_time() - cpu))
            assert found and found[0]["path"] == rel, "an update was not searchable"
        print(f"service: single-file update (10 chunks re-indexed): {percentiles(samples)}")
        print(f"service: update -> found by the next search: {percentiles(searchable)}")
        samples = [timed(search, con, q, limit=10) for q in texts[:50]]
        print(f"service: search after the updates (stale rows not yet compacted): {percentiles(samples)}")
        print(f"service: process RSS {rss_mb():.0f} MB (peak {peak_rss_mb():.0f} MB, the reindex included)")
    db.close()

    t0 = time.perf_counter()
    with db.session() as con:
        search(con, texts[0])
    print(f"cold session open + one search (SQL): {1000 * (time.perf_counter() - t0):.0f} ms")


def copy_index(con, copies: int) -> None:
    """Copy every indexed row `copies - 1` times under `r<k>/` paths (new chunk ids), then compact: an index
    `copies` times larger without writing and parsing the files (the copies have no files on disk)."""
    index.compact(con, force=True)  # replaced chunks' postings go first: the copies get only live rows
    top = con.execute("SELECT coalesce(max(id), 0) + 1 FROM chunks").fetchone()[0]
    con.execute(f"CREATE OR REPLACE TEMP TABLE _copies AS SELECT range AS k FROM range(1, {int(copies)})")
    con.execute("INSERT INTO files SELECT 'r' || k || '/' || path, files.* EXCLUDE (path) FROM files, _copies")
    con.execute(f"INSERT INTO chunks SELECT id + k * {top}, 'r' || k || '/' || path, chunks.* EXCLUDE (id, path) "
                "FROM chunks, _copies")
    con.execute(f"INSERT INTO postings SELECT term, chunk_id + k * {top}, tf, length FROM postings, _copies")
    con.execute("INSERT INTO links SELECT 'r' || k || '/' || source, 'r' || k || '/' || target, "
                "links.* EXCLUDE (source, target) FROM links, _copies")
    con.execute(f"CREATE OR REPLACE SEQUENCE chunk_ids START {top * copies + 1}")
    con.execute("DROP TABLE _copies")
    index.compact(con, force=True)


def locomo_latency(data: Path, only: str | None, root: Path) -> None:
    """Warm search over the LoCoMo questions (categories 1-4) in one workspace of the conversations in `data`
    (benchmarks/locomo.py `load`): in SQL, then as the service searches."""
    from locomo import build_workspace, load, questions  # benchmarks/locomo.py

    convs = load(data, only)
    shutil.rmtree(root, ignore_errors=True)
    _, ws, _ = build_workspace(convs, str(root), "")
    texts = [qa["question"] for _, qa, _ in questions(convs)]
    db = IndexDB(ws)
    with db.session() as con:
        print(f"\n== LoCoMo: {len(convs)} conversations, {index.stats(con)['chunks']} chunks, {len(texts)} questions")
        for q in texts[:10]:
            search(con, q)
        print(f"warm search in SQL (limit 10): {percentiles([timed(search, con, q, limit=10) for q in texts])}")
    db.hold()
    with db.session() as con:
        search_cache.wait(con)
        for q in texts[:10]:
            search(con, q)
        print(f"service: warm search (limit 10): {percentiles([timed(search, con, q, limit=10) for q in texts])}")
    db.close()


def rss_mb() -> float:
    """Resident memory of this process now (Linux /proc), MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--root", help="parent folder for the generated workspaces (default: temp)")
    parser.add_argument("--reuse", action="store_true", help="keep an already generated workspace under --root")
    parser.add_argument("--keep-index", action="store_true", help="with --reuse: open its index, no reindex")
    parser.add_argument("--threads", type=int, help="DuckDB threads (default: DuckDB's choice, one per core)")
    parser.add_argument("--locomo", type=Path, help="also time warm search over the LoCoMo questions of this "
                        "data: the public locomo10.json or a folder of conv-<id>.json files (benchmarks/locomo.py)")
    parser.add_argument("--conversations", metavar="IDS", help="with --locomo: the conversations to use (dev: the five "
                        "docs/benchmarks.md measures; default all)")
    parser.add_argument("--replicate", type=int, default=1,
                        help="then copy the index this many times over in SQL and measure again (1M chunks from "
                             "100k without a 1M reindex)")
    args = parser.parse_args()
    base = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="dreamflow-scale-"))
    if args.locomo:
        locomo_latency(args.locomo, args.conversations, base / "ws-locomo")
    for size in args.sizes:
        run(base / f"ws-{size}", size, args.queries, args.updates, args.reuse, args.threads, args.replicate,
            args.keep_index)


if __name__ == "__main__":
    main()
