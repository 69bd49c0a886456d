"""Two learned ranking directions on LoCoMo, prototyped in numpy/torch over the product's index (issue 20).

Same workspace and protocol as benchmarks/locomo.py (5 conversations in one workspace, 760 questions of
categories 1-4, each searched over all of them, one hit per file, session recall@k), and the same MiniLM
vectors as benchmarks/locomo_hybrid.py (cached embeddings under benchmarks/out/). Everything learned is fitted
on the questions of the TUNE conversations (conv-26, conv-30; settings chosen by leave-one-conversation-out
inside tune) and reported once on the HELD-OUT ones (conv-41, conv-42, conv-43).

1. A numpy copy of the product ranking (BM25 over the postings, the date boost, best-piece cosine, RRF with
   weights (1, 0.2) and k 10, first chunk per file) is checked against `storage.search.search.search` on every
   question, keyword and hybrid, before anything is compared.
2. Query adapter: q' = normalise(q + U V^T q) (rank r, U V^T regularised towards 0, i.e. W = I + low rank),
   trained with a softmax over the tune conversations' chunks (chunk score = best piece cosine, temperature
   tau) on (question, chunk holding an evidence turn) pairs; measured vector-only and fused as in the product.
3. Reranker: the top `--pool` files of the product's list (keyword or hybrid) re-scored by a linear model
   over per-file features (BM25 score and rank, best piece cosine and rank, query terms and IDF share matched
   by the best chunk and by the whole file, the date signal, lengths, agreement of the two lists), trained
   listwise (softmax over a question's candidates, all evidence files positive) with L2.

    python benchmarks/locomo_learned.py --data PATH [--conversations IDS] [--pool 30]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo  # noqa: E402
import locomo_hybrid  # noqa: E402

from engine.models.embedders import make_embedder  # noqa: E402
from storage.index import vectors  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402
from storage.index.tokenize import terms  # noqa: E402
from storage.search import search as S  # noqa: E402
from storage.search import timeref

TUNE = ("conv-26", "conv-30")
HYBRID = ((1.0, 0.2), 10)  # the product's fusion for the local MiniLM (storage/index/vectors.VectorIndex)
POOL = 150  # candidates per list, as search(limit=50) takes them


# ---- the data: index, vectors, questions --------------------------------------------------------------------

class Data:
    """Everything the prototype ranks with, in numpy, plus the product's own rankings to check against."""


def collect(convs: dict[str, dict]) -> Data:
    _, ws, turn_lines = locomo.build_workspace(convs, None, "locomo-learned-")
    db = IndexDB(ws)
    embedder = locomo_hybrid.CachedEmbedder(make_embedder())
    vectors.backfill(db, embedder, batch=64)
    index = vectors.VectorIndex(embedder.model_id, lambda q: embedder.embed([q])[0])
    d = Data()
    d.convs, d.turn_lines = convs, turn_lines
    with db.session() as con:
        rows = con.execute("SELECT c.id, c.path, c.start_line, c.end_line, c.length, c.text_hash, f.date "
                           "FROM chunks c JOIN files f ON f.path = c.path ORDER BY c.id").fetchall()
        d.cid = np.array([r[0] for r in rows])
        d.path = [r[1] for r in rows]
        d.lines = np.array([(r[2], r[3]) for r in rows])
        d.length = np.array([r[4] for r in rows], dtype=float)
        d.date = [r[6] for r in rows]
        row_of = {c: i for i, c in enumerate(d.cid)}
        d.files = sorted(set(d.path))
        file_of = {p: i for i, p in enumerate(d.files)}
        d.file = np.array([file_of[p] for p in d.path])
        d.session = [locomo.session_of(p) for p in d.files]
        post = con.execute("SELECT term, chunk_id, tf FROM postings WHERE chunk_id NOT IN "
                           "(SELECT id FROM stale_chunks)").fetchnumpy()
        d.p_term, d.p_row = post["term"].astype(np.uint64), np.array([row_of[c] for c in post["chunk_id"]])
        d.p_tf = post["tf"].astype(float)
        d.n, d.avgdl = len(rows), float(d.length.mean())
        # piece vectors, in the VectorIndex's order: pieces of one text are contiguous
        index.refresh(con)
        index._fold()
        d.P, starts, hashes = index._matrix, index._starts, index._hashes
        rows_of_hash: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            rows_of_hash.setdefault(r[5], []).append(i)
        assert all(len(v) == 1 for v in rows_of_hash.values()), "a text shared by chunks: not handled here"
        d.piece_row = np.repeat([rows_of_hash[h][0] for h in hashes], np.diff(np.append(starts, len(d.P))))
        d.qs = list(locomo.questions(convs))
        d.Q = embedder.embed([qa["question"] for _, qa, _ in d.qs])
        d.qterms, d.qspans, d.product = [], [], {"keyword": [], "hybrid": []}
        for conv_id, qa, _ in d.qs:
            q = list(dict.fromkeys(terms(qa["question"])))
            hashed = con.execute(f"SELECT {', '.join(f'hash({S.sql_literal(t)})' for t in q) or 'NULL'}").fetchone()
            d.qterms.append(np.array([h for h in hashed if h is not None], dtype=np.uint64))
            d.qspans.append(timeref.periods(qa["question"])[:S.DATE_SPANS])
            for mode, (weights, k) in (("keyword", ((1.0, 0.0), 60)), ("hybrid", HYBRID)):
                hits = S.search(con, qa["question"], limit=locomo.DISTINCT_POOL, expand=0,
                                vectors=None if mode == "keyword" else index, weights=weights, rrf_k=k)
                d.product[mode].append([file_of[h["path"]] for h in hits][:10])
    embedder.save()
    d.evidence_files = []
    d.evidence_rows = []
    for conv_id, qa, evidence in d.qs:
        files, chunk_rows = set(), set()
        for s, t in evidence:
            rel = next((p for p in d.files if locomo.session_of(p) == (conv_id, s)), None)
            if rel is None:
                continue
            files.add(file_of[rel])
            line = turn_lines[rel].get(f"D{s}:{t}")
            for i in np.flatnonzero(d.file == file_of[rel]):
                if line is not None and d.lines[i, 0] <= line <= d.lines[i, 1]:
                    chunk_rows.add(int(i))
        d.evidence_files.append(files)
        d.evidence_rows.append(sorted(chunk_rows))
    d.ev_sessions = [locomo.evidence_sessions(c, e) for c, _, e in d.qs]
    d.tune = np.array([c in TUNE for c, _, _ in d.qs])
    d.conv = np.array([c for c, _, _ in d.qs])
    d.category = [locomo.CATEGORIES[qa["category"]] for _, qa, _ in d.qs]
    return d


# ---- the product ranking, in numpy ---------------------------------------------------------------------------

def bm25_all(d: Data, qi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(BM25 per chunk row, which query terms each row holds [rows x terms], the terms' IDF) for question qi."""
    q = d.qterms[qi]
    sel = np.isin(d.p_term, q)
    rows, tf, term = d.p_row[sel], d.p_tf[sel], d.p_term[sel]
    scores = np.zeros(d.n)
    matched = np.zeros((d.n, len(q)), dtype=bool)
    idf = np.zeros(len(q))
    for j, t in enumerate(q):
        m = term == t
        df = m.sum()
        if not df:
            continue
        idf[j] = np.log(1 + (d.n - df + 0.5) / (df + 0.5))
        r = rows[m]
        scores[r] += idf[j] * tf[m] * (S.K1 + 1) / (tf[m] + S.K1 * (1 - S.B + S.B * d.length[r] / d.avgdl))
        matched[r, j] = True
    return scores, matched, idf


def dated_rows(d: Data, qi: int) -> np.ndarray:
    spans = d.qspans[qi]
    out = np.zeros(d.n, dtype=bool)
    for a, b in spans:
        end = b + dt.timedelta(days=S.DATE_AFTER)
        out |= np.array([x is not None and a <= x <= end for x in d.date])
    return out


def keyword_list(d: Data, qi: int, scores: np.ndarray, dated: np.ndarray) -> np.ndarray:
    """Chunk rows of the keyword list (top POOL by BM25, then the date boost), best first."""
    hit = np.flatnonzero(scores > 0)
    top = hit[np.lexsort((d.cid[hit], -scores[hit]))][:POOL]
    boosted = scores[top] * np.where(dated[top], S.DATE_BOOST, 1.0)
    return top[np.lexsort((d.cid[top], -boosted))]


def chunk_cosines(d: Data, q: np.ndarray) -> np.ndarray:
    """Best piece cosine per chunk row."""
    best = np.full(d.n, -np.inf)
    np.maximum.at(best, d.piece_row, d.P @ q)
    return best


def vector_list(d: Data, best: np.ndarray) -> np.ndarray:
    return np.argsort(-best, kind="stable")[:POOL]


def fused_files(d: Data, lists: list[np.ndarray], weights, k: int) -> tuple[list[int], dict]:
    """Files in order of their best fused chunk (per_file 1), and {chunk row: fused score}."""
    score: dict[int, float] = {}
    for ids, w in zip(lists, weights):
        if w <= 0:
            continue
        for rank, r in enumerate(ids, 1):
            score[int(r)] = score.get(int(r), 0.0) + w / (k + rank)
    order = sorted(score, key=lambda r: (-score[r], str(d.cid[r])))
    return list(dict.fromkeys(int(d.file[r]) for r in order)), score


def recall_table(d: Data, rankings: list[list[int]], mask: np.ndarray) -> dict:
    """recall@1/5/10 overall and recall@5 (@1) per category over the questions in mask."""
    out: dict = {}
    per: dict[int, list] = {k: [] for k in (1, 5, 10)}
    cats: dict[str, list] = {}
    for qi in np.flatnonzero(mask):
        ev = d.ev_sessions[qi]
        ses = [d.session[f] for f in rankings[qi]]
        r = {k: len(ev & set(ses[:k])) / len(ev) for k in (1, 5, 10)}
        for k, values in per.items():
            values.append(r[k])
        cats.setdefault(d.category[qi], []).append((r[1], r[5]))
    out["all"] = tuple(round(float(np.mean(per[k])), 3) for k in (1, 5, 10))
    for c in ("single-hop", "temporal", "multi-hop", "open-domain"):
        v = np.array(cats.get(c, [(0, 0)]))
        out[c] = (round(float(v[:, 0].mean()), 3), round(float(v[:, 1].mean()), 3))
    return out


def fmt(t: dict) -> str:
    return (f"all @1/@5/@10 {t['all'][0]:.3f}/{t['all'][1]:.3f}/{t['all'][2]:.3f}; " + "; ".join(
        f"{c} {t[c][1]:.3f} (@1 {t[c][0]:.3f})" for c in ("single-hop", "temporal", "multi-hop", "open-domain")))


# ---- (a) the query adapter ----------------------------------------------------------------------------------

def train_adapter(d: Data, train: np.ndarray, rank: int, decay: float, tau: float, epochs: int,
                  seed: int = 0) -> np.ndarray:
    """W (dim x dim) = I + U V^T fitted on the questions in `train`: softmax over the chunks of the train
    questions' conversations (score = best piece cosine of the adapted query / tau), positives the chunks that
    hold an evidence turn (their probabilities summed)."""
    import torch

    torch.manual_seed(seed)
    convs = sorted(set(d.conv[train]))
    rows = np.flatnonzero([d.session[f][0] in convs for f in d.file])
    local = {int(r): i for i, r in enumerate(rows)}
    pmask = np.isin(d.piece_row, rows)
    P = torch.tensor(d.P[pmask])
    owner = torch.tensor([local[int(r)] for r in d.piece_row[pmask]])
    qi = [i for i in np.flatnonzero(train) if d.evidence_rows[i]]
    Q = torch.tensor(d.Q[qi])
    pos = torch.zeros(len(qi), len(rows), dtype=torch.bool)
    for a, i in enumerate(qi):
        pos[a, [local[r] for r in d.evidence_rows[i]]] = True
    dim = P.shape[1]
    U = torch.nn.Parameter(torch.randn(dim, rank) * 0.01)
    V = torch.nn.Parameter(torch.randn(dim, rank) * 0.01)
    opt = torch.optim.Adam([U, V], lr=0.01)
    for _ in range(epochs):
        opt.zero_grad()
        q = Q + (Q @ V) @ U.T
        q = q / q.norm(dim=1, keepdim=True)
        s = q @ P.T  # questions x pieces
        best = torch.full((len(qi), len(rows)), -1e9).scatter_reduce(1, owner.expand(len(qi), -1), s, "amax")
        logp = torch.log_softmax(best / tau, dim=1)
        loss = -torch.logsumexp(logp.masked_fill(~pos, -1e9), dim=1).mean() + decay * ((U @ V.T) ** 2).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return (torch.eye(dim) + V @ U.T).numpy()  # row vector q @ W = q + (q V) U^T


def adapted_queries(d: Data, W: np.ndarray | None) -> np.ndarray:
    if W is None:
        return d.Q
    Q = d.Q @ W
    return Q / np.linalg.norm(Q, axis=1, keepdims=True)


# ---- (b) the reranker ----------------------------------------------------------------------------------------

FEATURES = ("bm25/max", "log bm25 rank", "file bm25 sum/max", "file chunks in keyword list", "cosine - max",
            "log vector rank", "rrf", "terms matched share", "idf share (best chunk)", "idf share (file)",
            "date", "log chunk length", "log file chunks", "in both top 10", "log rank gap")


def candidate_features(d: Data, qi: int, mode: str, pool: int, Q: np.ndarray) -> tuple[list[int], np.ndarray]:
    """(the product ranking's first `pool` files, their features [files x len(FEATURES)])."""
    scores, matched, idf = bm25_all(d, qi)
    dated = dated_rows(d, qi)
    kw = keyword_list(d, qi, scores, dated)
    best = chunk_cosines(d, Q[qi])
    vec = vector_list(d, best) if mode == "hybrid" else np.array([], dtype=int)
    weights, k = HYBRID if mode == "hybrid" else ((1.0, 0.0), 60)
    files, fused = fused_files(d, [kw, vec], weights, k)
    files = files[:pool]
    kw_rank = {int(r): i for i, r in enumerate(kw, 1)}
    vec_rank = {int(r): i for i, r in enumerate(vec, 1)}
    top_s = max(scores.max(), 1e-9)
    best_cos = best.max()
    idf_sum = max(idf.sum(), 1e-9)
    X = np.zeros((len(files), len(FEATURES)))
    for a, f in enumerate(files):
        rows = np.flatnonzero(d.file == f)
        lead = max(rows, key=lambda r: fused.get(int(r), 0.0))  # the file's best fused chunk
        kwr = min(kw_rank.get(int(r), POOL + 1) for r in rows)
        vr = min(vec_rank.get(int(r), POOL + 1) for r in rows) if mode == "hybrid" else POOL + 1
        in_kw = [r for r in rows if int(r) in kw_rank]
        X[a] = [
            scores[rows].max() / top_s, np.log1p(kwr), sum(scores[r] for r in in_kw) / top_s, len(in_kw),
            best[rows].max() - best_cos if mode == "hybrid" else 0.0, np.log1p(vr), fused.get(int(lead), 0.0),
            matched[lead].mean() if matched.shape[1] else 0.0, idf @ matched[lead] / idf_sum,
            idf @ matched[rows].any(axis=0) / idf_sum, float(dated[rows].any()), np.log(d.length[lead] + 1),
            np.log(len(rows)), float(kwr <= 10 and vr <= 10), abs(np.log1p(kwr) - np.log1p(vr)),
        ]
    return files, X


def fit_reranker(Xs: list[np.ndarray], ys: list[np.ndarray], l2: float, epochs: int = 300) -> tuple:
    """Linear listwise model: softmax over each question's candidates, positives' probability summed."""
    import torch

    allx = np.vstack(Xs)
    mu, sd = allx.mean(0), allx.std(0) + 1e-9
    w = torch.zeros(allx.shape[1], requires_grad=True, dtype=torch.float64)
    data = [(torch.tensor((x - mu) / sd), torch.tensor(y)) for x, y in zip(Xs, ys) if y.any()]
    opt = torch.optim.LBFGS([w], max_iter=epochs, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = sum(-torch.logsumexp(torch.log_softmax(x @ w, 0)[y], 0) for x, y in data) / len(data)
        loss = loss + l2 * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return mu, sd, w.detach().numpy()


def rerank(files: list[int], X: np.ndarray, model: tuple) -> list[int]:
    mu, sd, w = model
    s = ((X - mu) / sd) @ w
    return [files[i] for i in np.argsort(-s, kind="stable")]


# ---- main ---------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    locomo.add_data_options(parser)
    parser.add_argument("--pool", type=int, default=30, help="files the reranker re-scores")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: adapter, reranker")
    args = parser.parse_args()
    t0 = time.perf_counter()
    d = collect(locomo.load(args.data, args.conversations))
    print(f"{d.n} chunks, {len(d.files)} files, {len(d.P)} pieces, {len(d.qs)} questions "
          f"({d.tune.sum()} tune, {(~d.tune).sum()} held out); collected in {time.perf_counter() - t0:.0f} s")
    everyone = np.ones(len(d.qs), dtype=bool)

    def ranking(mode: str, Q: np.ndarray, mask: np.ndarray | None = None, fusion: tuple = HYBRID) -> list[list[int]]:
        out = []
        for qi in range(len(d.qs)):
            if mask is not None and not mask[qi]:
                out.append([])
                continue
            scores, _, _ = bm25_all(d, qi)
            kw = keyword_list(d, qi, scores, dated_rows(d, qi))
            vec = vector_list(d, chunk_cosines(d, Q[qi])) if mode != "keyword" else np.array([], dtype=int)
            weights, k = {"keyword": ((1.0, 0.0), 60), "vector": ((0.0, 1.0), 60), "hybrid": fusion}[mode]
            out.append(fused_files(d, [kw, vec], weights, k)[0][:10])
        return out

    base = {m: ranking(m, d.Q) for m in ("keyword", "vector", "hybrid")}
    for m in ("keyword", "hybrid"):
        same = sum(a == b for a, b in zip(base[m], d.product[m]))
        print(f"numpy copy vs product search, {m}: top 10 files identical for {same} of {len(d.qs)} questions")
        print(f"  product, all 760: {fmt(recall_table(d, d.product[m], everyone))}")
    for m, ranked in base.items():
        print(f"today {m:>7}: tune     {fmt(recall_table(d, ranked, d.tune))}")
        print(f"today {m:>7}: held out {fmt(recall_table(d, ranked, ~d.tune))}")

    if "adapter" not in args.skip:
        print("\n(a) query adapter W = I + U V^T; leave-one-conversation-out inside tune: vector recall@5, and hybrid "
              "recall@5 at vector RRF weight 0.2 / 0.35 / 0.5 (k 10)")
        fusions = [((1.0, w), 10) for w in (0.2, 0.35, 0.5)]
        grid = [None] + [(r, dec, 0.05, ep) for r in (8, 32) for dec in (0.1, 1.0) for ep in (100, 300)]
        best_cfg, best_val = (None, HYBRID), -1.0
        for cfg in grid:
            vals = []
            for held in TUNE:
                Qa = adapted_queries(d, None if cfg is None else train_adapter(d, d.tune & (d.conv != held), *cfg))
                m = d.conv == held
                vals.append([m.sum() * recall_table(d, ranking("vector", Qa, m), m)["all"][1]]
                            + [m.sum() * recall_table(d, ranking("hybrid", Qa, m, f), m)["all"][1] for f in fusions])
            v = np.sum(vals, axis=0) / d.tune.sum()
            name = "no adapter" if cfg is None else f"rank {cfg[0]:>2} decay {cfg[1]} tau {cfg[2]} steps {cfg[3]}"
            print(f"  {name}: vector {v[0]:.3f}, hybrid " + " / ".join(f"{x:.3f}" for x in v[1:]))
            for f, h in zip(fusions, v[1:]):
                if cfg is not None and h > best_val:
                    best_cfg, best_val = (cfg, f), h
        cfg, fusion = best_cfg
        Qa = adapted_queries(d, train_adapter(d, d.tune, *cfg))
        print(f"  chosen {cfg} with vector weight {fusion[0][1]}, trained on all tune questions:")
        for m in ("vector", "hybrid"):
            r = ranking(m, Qa, fusion=fusion)
            print(f"  adapter {m:>7}: tune     {fmt(recall_table(d, r, d.tune))}")
            print(f"  adapter {m:>7}: held out {fmt(recall_table(d, r, ~d.tune))}")

    if "reranker" not in args.skip:
        print(f"\n(b) listwise linear reranker of the top {args.pool} files; features: {', '.join(FEATURES)}")
        for mode in ("keyword", "hybrid"):
            cands = [candidate_features(d, qi, mode, args.pool, d.Q) for qi in range(len(d.qs))]
            ys = [np.array([f in d.evidence_files[qi] for f in files]) for qi, (files, _) in enumerate(cands)]
            cols = [i for i, f in enumerate(FEATURES) if mode == "hybrid" or f not in
                    ("cosine - max", "log vector rank", "in both top 10", "log rank gap")]
            best_l2, best_val = None, -1.0
            for l2 in (0.01, 0.1, 1.0, 10.0):
                got = []
                for held in TUNE:
                    tr = [qi for qi in np.flatnonzero(d.tune & (d.conv != held))]
                    model = fit_reranker([cands[q][1][:, cols] for q in tr], [ys[q] for q in tr], l2)
                    rr = [rerank(cands[q][0], cands[q][1][:, cols], model) if d.conv[q] == held else base[mode][q]
                          for q in range(len(d.qs))]
                    got.append((recall_table(d, rr, d.conv == held)["all"][1], (d.conv == held).sum()))
                val = sum(a * n for a, n in got) / sum(n for _, n in got)
                print(f"  {mode} l2 {l2}: leave-one-conversation-out recall@5 {val:.3f}")
                if val > best_val:
                    best_l2, best_val = l2, val
            tr = list(np.flatnonzero(d.tune))
            model = fit_reranker([cands[q][1][:, cols] for q in tr], [ys[q] for q in tr], best_l2)
            rr = [rerank(files, X[:, cols], model) for files, X in cands]
            print(f"  {mode} chosen l2 {best_l2}; weights (standardised features): " + ", ".join(
                f"{FEATURES[c]} {w:+.2f}" for c, w in zip(cols, model[2])))
            print(f"  reranked {mode:>7}: tune     {fmt(recall_table(d, rr, d.tune))}")
            print(f"  reranked {mode:>7}: held out {fmt(recall_table(d, rr, ~d.tune))}")


if __name__ == "__main__":
    main()
