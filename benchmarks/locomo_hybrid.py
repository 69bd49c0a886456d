"""LoCoMo retrieval with vectors: keyword vs vector vs hybrid (RRF), on benchmarks/locomo.py's workspace.

Builds the same workspace (one daily note per session, all conversations in one workspace, each question
searched over all of them; `--per-conversation` filters by the conversation's tag instead), fills the vectors
with the configured embedder (`DREAMFLOW_EMBEDDER`, default the packaged local MiniLM; `openai` measures any
OpenAI-compatible endpoint set by `DREAMFLOW_EMBED_BASE_URL` / `DREAMFLOW_EMBED_MODEL`) through
`storage.index.vectors.backfill`, then runs benchmarks/locomo.py's evaluation in each mode. Embeddings of pieces and
questions are cached by text, one file per model under benchmarks/out/ (gitignored), so a rerun costs seconds
instead of minutes on 2 cores.

    python benchmarks/locomo_hybrid.py --data PATH [--modes keyword,vector,hybrid] [--weights 0.2] [--rrf-k 10] [--piece-chars 720] [--per-file 1]

`--piece-chars` sets the vector piece size (0 = one piece per keyword chunk) to measure granularity;
`--weights` and `--rrf-k` list vector RRF weights (keyword weight 1) and RRF k values to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
from engine.models.embedders import LOCAL_MODEL_ID, make_embedder  # noqa: E402
from storage.files.workspace import Workspace  # noqa: E402
from storage.index import vectors  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402
from storage.search import search as search_module  # noqa: E402
from storage.search.search import search  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"


class CachedEmbedder:
    """Wraps an embedder with a text -> vector cache kept in an .npz file (benchmarks only)."""

    def __init__(self, inner):
        self.inner, self.model_id = inner, inner.model_id
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.model_id).strip("-")
        self.path = OUT / ("embedding-cache.npz" if self.model_id == LOCAL_MODEL_ID else f"embedding-cache-{slug}.npz")
        self.cache: dict[str, np.ndarray] = {}
        self.computed = 0
        if self.path.exists():
            data = np.load(self.path)
            if str(data["model"]) == self.model_id:
                self.cache = dict(zip(data["keys"].tolist(), data["vectors"]))

    def embed(self, texts: list[str]) -> np.ndarray:
        keys = [hashlib.blake2b(t.encode(), digest_size=16).hexdigest() for t in texts]
        missing = {k: t for k, t in zip(keys, texts) if k not in self.cache}
        if missing:
            for k, v in zip(missing, self.inner.embed(list(missing.values()))):
                self.cache[k] = v
            self.computed += len(missing)
        return np.stack([self.cache[k] for k in keys])

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, model=self.model_id, keys=np.array(list(self.cache)), vectors=np.stack(list(self.cache.values())))
        os.replace(tmp, self.path)


def union_recall(ws: Workspace, convs: dict, index: vectors.VectorIndex, k: int = 5,
                 per_conversation: bool = False) -> float:
    """Share of evidence sessions found in the union of the keyword top k and the vector top k (one hit per
    file): what a fusion of the two lists into k results could reach at most, were it perfect."""
    total, n = 0.0, 0
    with IndexDB(ws).session() as con:
        for conv_id, qa, evidence in locomo.questions(convs):
            sessions = locomo.evidence_sessions(conv_id, evidence)
            found = set()
            for vectors_, weights in ((None, (1.0, 0.0)), (index, (0.0, 1.0))):
                hits = search(con, qa["question"], limit=k, tags=[conv_id] if per_conversation else None, expand=0,
                              vectors=vectors_, weights=weights)
                found |= {locomo.session_of(h["path"]) for h in hits}
            total += len(sessions & found) / len(sessions)
            n += 1
    return total / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    locomo.add_data_options(parser)
    parser.add_argument("--modes", default="keyword,vector,hybrid")
    parser.add_argument("--weights", default="0.2", help="comma-separated vector RRF weights for hybrid")
    parser.add_argument("--rrf-k", default="10", help="comma-separated RRF k values for hybrid")
    parser.add_argument("--piece-chars", type=int, default=vectors.PIECE_CHARS)
    parser.add_argument("--overlap", type=float, default=vectors.OVERLAP)
    parser.add_argument("--per-file", type=int, default=search_module.PER_FILE, help="chunks per file (0: no cap)")
    parser.add_argument("--per-conversation", action="store_true",
                        help="search each question within its conversation only (tag filter; secondary protocol)")
    args = parser.parse_args()
    vectors.OVERLAP = args.overlap

    vectors.PIECE_CHARS = args.piece_chars or 10**9  # 0: one piece per keyword chunk
    convs = locomo.load(args.data, args.conversations)
    _, ws, turn_lines = locomo.build_workspace(convs, None, "locomo-hybrid-")
    db = IndexDB(ws)
    inner = make_embedder()
    if inner is None:
        sys.exit("DREAMFLOW_EMBEDDER is none: set it to local or openai")
    embedder = CachedEmbedder(inner)
    t0 = time.perf_counter()
    filled = vectors.backfill(db, embedder, batch=64)
    with db.session() as con:
        st = vectors.status(con)
    print(f"{st['chunks']} chunks, {st['pieces']} vector pieces (piece <= {args.piece_chars or 'chunk'} chars, overlap {args.overlap}); "
          f"embedded {filled['embedded']} texts in {time.perf_counter() - t0:.1f} s ({embedder.computed} computed)")
    index = vectors.VectorIndex(embedder.model_id, lambda q: embedder.embed([q])[0])

    chosen = {"weights": (1.0, 1.0), "k": 60}

    def weighted_search(*a, weights=None, **kw):  # hybrid runs with the weight and k under test
        return search(*a, weights=chosen["weights"] if weights == (1.0, 1.0) else weights, rrf_k=chosen["k"], **kw)

    locomo.search = weighted_search
    locomo.make_vectors = lambda mode: None if mode == "keyword" else index
    try:
        grid = [(float(w), int(k)) for k in args.rrf_k.split(",") for w in args.weights.split(",")]
        for mode in args.modes.split(","):
            for w, k in (grid if mode == "hybrid" else [(None, 60)]):
                chosen["weights"], chosen["k"] = (1.0, w or 1.0), k
                result = locomo.evaluate(ws, convs, turn_lines, mode, args.per_file or None, args.per_conversation)
                groups, groups_at_1 = result.pop("recall@5 by group"), result.pop("recall@1 by group")
                label = f"{mode} (vector weight {w}, rrf k {k})" if w else mode
                print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in result.items()
                                                if k.startswith(("recall", "mrr", "search"))))
                print("    recall@5 by group: " + ", ".join(f"{g} {v}" for g, v in groups.items()))
                print("    recall@1 by group: " + ", ".join(f"{g} {v}" for g, v in groups_at_1.items()))
        ceiling = union_recall(ws, convs, index, per_conversation=args.per_conversation)
        print(f"ceiling of any fusion: keyword top 5 + vector top 5 sessions hold {ceiling:.4f} of the evidence")
    finally:
        embedder.save()


if __name__ == "__main__":
    main()
