"""Vector costs on this machine: local embedding throughput, and hybrid search latency at 10k and 100k chunks.

1. Throughput: embeds LoCoMo chunk texts (chunked by the index, split into pieces as `storage.index.vectors` does)
   with the packaged MiniLM on the CPU: chunks/s, pieces/s, and the time to embed one query.
2. Latency: benchmarks/scale.py's generated workspace of N chunks, with precomputed vectors, random but
   clustered (cluster centre + noise, normalised; as many pieces per chunk as `pieces()` gives its text), stored
   through `storage.index.vectors.store`. Reports the store and reload time, vector candidates p50/p95 and hybrid
   `search` p50/p95 next to keyword-only on the same queries (query vectors precomputed too: add the query
   embedding time from part 1 for a cold query).

    python benchmarks/vectors.py --data PATH [--sizes 10000 100000] [--queries 200] [--throughput-chunks 64] [--root DIR]

`--data` is LoCoMo (benchmarks/locomo.py `load`), whose first conversation part 1 embeds; `--throughput-chunks 0`
skips part 1 and needs no data.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
import scale  # noqa: E402
from storage.files.workspace import Workspace  # noqa: E402
from storage.index import vectors  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402
from storage.search.search import search  # noqa: E402

DIM = 384
CLUSTERS = 256


def percentiles(samples: list[float]) -> str:
    ms = sorted(1000 * s for s in samples)
    return f"p50 {ms[len(ms) // 2]:.1f} ms, p95 {ms[int(len(ms) * 0.95)]:.1f} ms"


def throughput(n_chunks: int, root: Path, convs: dict[str, dict]) -> None:
    from engine.models.embedders import LocalEmbedder

    ws = Workspace(root / "throughput")
    conv_id = next(iter(convs))
    locomo.write_conversation(ws, conv_id, convs[conv_id])
    with IndexDB(ws).session() as con:
        texts = [r[0] for r in con.execute("SELECT text FROM chunks ORDER BY id LIMIT ?", [n_chunks]).fetchall()]
    emb = LocalEmbedder()
    emb.embed(["warm up"])  # model load is not throughput
    n_pieces = sum(len(vectors.pieces(t)) for t in texts)
    t0 = time.perf_counter()
    vectors.embed_texts(emb, texts)
    took = time.perf_counter() - t0
    q = [time.perf_counter()]
    for question in ("When did Caroline go to the support group?", "What does Melanie paint?", "Where did they travel?"):
        emb.embed([question])
        q.append(time.perf_counter())
    per_query = min(b - a for a, b in zip(q, q[1:]))
    print(f"embedding (MiniLM, CPU, {vectors.PIECE_CHARS}-char pieces): {len(texts)} chunks ({n_pieces} pieces, "
          f"{sum(map(len, texts)) / len(texts):.0f} chars/chunk) in {took:.1f} s = {len(texts) / took:.1f} chunks/s, "
          f"{n_pieces / took:.1f} pieces/s; one query {1000 * per_query:.0f} ms")


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    """`n` unit vectors, each near a random cluster centre."""
    m = centres[rng.integers(len(centres), size=n)] + rng.normal(0, 0.6 / np.sqrt(DIM), size=(n, DIM))
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def latency(root: Path, chunks: int, queries: int) -> None:
    rng = np.random.default_rng(11)
    ws_root = root / f"ws-{chunks}"
    t0 = time.perf_counter()
    ws = scale.write_workspace(ws_root, chunks)
    db = IndexDB(ws)
    with db.session() as con:  # first open builds the index
        texts = con.execute("SELECT text_hash, any_value(text) FROM chunks GROUP BY text_hash").fetchall()
    print(f"\n{chunks} chunks: workspace written and indexed in {time.perf_counter() - t0:.1f} s")

    centres = rng.normal(size=(CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    model = "bench:clustered"
    t0 = time.perf_counter()
    n_pieces = 0
    with db.session() as con:
        vectors.use_model(con, model, DIM)
        for start in range(0, len(texts), 500):
            batch = texts[start:start + 500]
            items = []
            for h, text in batch:
                k = len(vectors.pieces(text))
                items.append((h, clustered(rng, centres, k)))
                n_pieces += k
            vectors.store(con, model, items)
    store_s = time.perf_counter() - t0

    words = scale.make_vocabulary(np.random.default_rng(7))
    qrng = np.random.default_rng(1)  # the same queries as benchmarks/scale.py
    query_texts = [" ".join(scale.zipf_words(qrng, words, int(qrng.integers(3, 8)))) for _ in range(queries)]
    query_vecs = dict(zip(query_texts, clustered(rng, centres, queries)))
    index = vectors.VectorIndex(model, query_vecs.__getitem__)
    with db.session() as con:
        t0 = time.perf_counter()
        index.refresh(con)
        len(index)
        load_s = time.perf_counter() - t0
        print(f"vectors: {n_pieces} pieces ({n_pieces / len(texts):.1f} per chunk), stored in {store_s:.1f} s, "
              f"loaded into memory in {load_s:.2f} s ({index._matrix.nbytes / 1e6:.0f} MB)")
        for label, run in (
            ("vector candidates (k=50)", lambda q: index.candidates(con, q, 50)),
            ("keyword search", lambda q: search(con, q, limit=10)),
            ("hybrid search", lambda q: search(con, q, limit=10, vectors=index)),
        ):
            for q in query_texts[:10]:  # warm caches
                run(q)
            times = []
            for q in query_texts:
                t0 = time.perf_counter()
                run(q)
                times.append(time.perf_counter() - t0)
            print(f"  {label:>26}: {percentiles(times)}")
    shutil.rmtree(ws_root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--throughput-chunks", type=int, default=64, help="0 skips the throughput part")
    parser.add_argument("--root", help="work folder (default: a temp folder)")
    parser.add_argument("--piece-chars", type=int, default=vectors.PIECE_CHARS)
    locomo.add_data_options(parser)
    args = parser.parse_args()
    convs = locomo.load(args.data, args.conversations) if args.throughput_chunks else {}
    vectors.PIECE_CHARS = args.piece_chars
    root = Path(args.root or tempfile.mkdtemp(prefix="bench-vectors-"))
    if args.throughput_chunks:
        throughput(args.throughput_chunks, root, convs)
    for size in args.sizes:
        latency(root, size, args.queries)


if __name__ == "__main__":
    main()
