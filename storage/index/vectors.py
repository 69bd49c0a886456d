"""Chunk embeddings in DuckDB, searched exactly from an in-memory numpy matrix.

- Storage: `embeddings(text_hash, model, dim, vector)` holds one row per distinct chunk text (keyed by the
  chunk's `text_hash`, so a moved or re-indexed file costs nothing). A chunk is embedded as overlapping
  *pieces* of about `PIECE_CHARS` characters (whole lines, half overlap) because small models read only the
  first ~256 word pieces; `vector` is the pieces' vectors concatenated (length = pieces x dim). The model id and
  dimension live in `meta`; a different model wipes the table and everything is embedded again.
- Filling: `backfill` embeds chunk texts that lack vectors in batches, outside any index session, so writes
  never wait for a model; `Backfiller` does the same on a background thread for long-running processes.
- Search: `VectorIndex` keeps every piece vector in one float32 matrix, refreshed incrementally from the same
  process's writes (a write from another process reloads it), and scores a query by brute force: a chunk's
  score is the best cosine of its pieces.

No torch or openai here: the embedder is any object with `model_id` and `embed(texts) -> float32 matrix`
with L2-normalised rows (see engine/models/embedders.py).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Protocol

import duckdb
import numpy as np

log = logging.getLogger(__name__)

PIECE_CHARS = 720  # ~120 English words, ~170 word pieces: MiniLM reads 256 (measured: docs/search.md)
OVERLAP = 0.0  # share of a piece the next one repeats (0.5 measured no better, and more pieces)
BATCH = 32

Progress = Callable[[int, int], None]


class EmbedFn(Protocol):
    model_id: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


# ---- pieces -----------------------------------------------------------------------------------------------


def _cut(line: str, budget: int) -> list[str]:
    """Split one over-long line at spaces (or hard, for text without spaces) into parts of <= budget chars."""
    parts, current = [], ""
    for word in line.split(" "):
        while len(word) > budget:
            if current:
                parts.append(current)
                current = ""
            parts.append(word[:budget])
            word = word[budget:]
        if current and len(current) + 1 + len(word) > budget:
            parts.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        parts.append(current)
    return parts


def pieces(text: str, budget: int | None = None) -> list[str]:
    """Overlapping windows of whole lines, each <= budget (default `PIECE_CHARS`) characters, each next one
    starting about halfway into the previous one."""
    budget = budget or PIECE_CHARS
    lines: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            lines.extend(_cut(line, budget) if len(line) > budget else [line])
    if not lines:
        return [text.strip()[:budget] or text[:budget]] if text.strip() else []
    out, start = [], 0
    while True:
        end, size = start, 0
        while end < len(lines) and (end == start or size + 1 + len(lines[end]) <= budget):
            size += len(lines[end]) + 1
            end += 1
        out.append("\n".join(lines[start:end]))
        if end >= len(lines):
            return out
        back, kept = end, 0  # step back over about OVERLAP of a window of lines, but always move forward
        while back - 1 > start and kept + len(lines[back - 1]) <= budget * OVERLAP:
            back -= 1
            kept += len(lines[back]) + 1
        start = back


# ---- the embeddings table ----------------------------------------------------------------------------------


def _meta(con: duckdb.DuckDBPyConnection, key: str) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def _set_meta(con: duckdb.DuckDBPyConnection, key: str, value: str) -> None:
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])


def stored_model(con: duckdb.DuckDBPyConnection) -> tuple[str | None, int | None]:
    """(model id, dimension) the stored vectors were made with; (None, None) before any."""
    dim = _meta(con, "embed_dim")
    return _meta(con, "embed_model"), int(dim) if dim else None


def version(con: duckdb.DuckDBPyConnection) -> int:
    """A counter bumped by every change to the embeddings table (lets searchers notice other writers)."""
    return int(_meta(con, "vectors_version") or 0)


def _bump(con: duckdb.DuckDBPyConnection) -> int:
    new = version(con) + 1
    _set_meta(con, "vectors_version", str(new))
    return new


def use_model(con: duckdb.DuckDBPyConnection, model_id: str, dim: int) -> bool:
    """Record the model the vectors come from; a different model or dimension deletes them all. True if wiped."""
    if stored_model(con) == (model_id, dim):
        return False
    con.execute("DELETE FROM embeddings")
    _set_meta(con, "embed_model", model_id)
    _set_meta(con, "embed_dim", str(dim))
    _bump(con)
    return True


def pending(con: duckdb.DuckDBPyConnection, limit: int = BATCH) -> list[tuple[str, str]]:
    """Up to `limit` (text_hash, text) pairs of chunk texts that have no vectors yet (a fact chunk's text: its
    `search_text`)."""
    return con.execute(
        """
        SELECT c.text_hash, any_value(coalesce(c.search_text, c.text)) FROM chunks c
        WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.text_hash = c.text_hash)
        GROUP BY c.text_hash ORDER BY min(c.id) LIMIT ?
        """,
        [limit],
    ).fetchall()


def _some_texts(con: duckdb.DuckDBPyConnection, limit: int) -> list[tuple[str, str]]:
    """Up to `limit` (text_hash, text) pairs of any chunk texts (to start a new model with)."""
    return con.execute(
        "SELECT text_hash, any_value(coalesce(search_text, text)) FROM chunks GROUP BY text_hash ORDER BY min(id) "
        "LIMIT ?", [limit]
    ).fetchall()


def status(con: duckdb.DuckDBPyConnection, model_id: str | None = None) -> dict:
    """{chunks, texts, embedded, pending, pieces, model, dim}: how far vectors lag the keyword index.

    With `model_id` (the configured embedder), vectors of any other model count as pending.
    """
    texts, embedded = con.execute(
        """
        SELECT count(DISTINCT c.text_hash),
               count(DISTINCT c.text_hash) FILTER (WHERE e.text_hash IS NOT NULL)
        FROM chunks c LEFT JOIN embeddings e ON e.text_hash = c.text_hash
        """
    ).fetchone()
    chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    model, dim = stored_model(con)
    n_pieces = con.execute("SELECT coalesce(sum(len(vector) // dim), 0) FROM embeddings").fetchone()[0]
    if model_id is not None and model != model_id:
        embedded, n_pieces = 0, 0
    return {"chunks": chunks, "texts": texts, "embedded": embedded, "pending": texts - embedded,
            "pieces": int(n_pieces), "model": model, "dim": dim}


def store(con: duckdb.DuckDBPyConnection, model_id: str, items: list[tuple[str, np.ndarray]]) -> int:
    """Save (text_hash, pieces x dim matrix) pairs made by `model_id`; returns the new table version.

    Vectors of a model other than the recorded one are ignored (the model changed while they were computed).
    """
    model, dim = stored_model(con)
    if model != model_id or not items:
        return version(con)
    # SQL literals: binding float lists costs the Python client ~70 ms per row, a literal ~1 ms.
    rows = [f"({_literal(h)}, {_literal(model_id)}, {int(dim)}, '[{','.join(map(str, m.ravel().tolist()))}]'::FLOAT[])"
            for h, m in items if m.shape[1] == dim]
    if rows:
        con.execute("INSERT OR REPLACE INTO embeddings VALUES " + ", ".join(rows))
    return _bump(con)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def prune(con: duckdb.DuckDBPyConnection, min_share: float = 0.0) -> int:
    """Delete vectors of texts no chunk has any more, if they are more than `min_share` of all rows (they are
    a cache: a text that comes back costs nothing); returns how many went."""
    if min_share > 0:
        orphans, rows = con.execute(
            """SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.text_hash = e.text_hash)),
                      count(*) FROM embeddings e"""
        ).fetchone()
        if orphans <= min_share * rows:
            return 0
    gone = con.execute(
        "DELETE FROM embeddings e WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.text_hash = e.text_hash)"
    ).fetchone()[0]
    if gone:
        _bump(con)
    return gone


def _load(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[np.ndarray]]:
    """Every stored (text_hash, pieces x dim matrix); fetched as numpy (Python lists cost ~10x more)."""
    cols = con.execute("SELECT text_hash, dim, vector FROM embeddings").fetchnumpy()
    mats = [np.asarray(v, dtype=np.float32).reshape(-1, int(d)) for d, v in zip(cols["dim"], cols["vector"])]
    return [str(h) for h in cols["text_hash"]], mats


# ---- filling ---------------------------------------------------------------------------------------------


def embed_texts(embedder: EmbedFn, texts: list[str]) -> list[np.ndarray]:
    """Embed each text as its pieces in one model call: one (pieces x dim) matrix per text."""
    split = [pieces(t) or [" "] for t in texts]
    flat = embedder.embed([p for ps in split for p in ps])
    out, at = [], 0
    for ps in split:
        out.append(flat[at:at + len(ps)])
        at += len(ps)
    return out


def backfill(db, embedder: EmbedFn, batch: int = BATCH, progress: Progress | None = None,
             index: "VectorIndex | None" = None, stop: threading.Event | None = None) -> dict:
    """Embed every chunk text lacking vectors, `batch` texts at a time, holding the index lock only to read
    and save (never while the model runs). Raises the embedder's error; what was saved stays saved.

    `db` is a `storage.index.db.IndexDB`; `index`, when given, takes the new vectors without a reload.
    Returns {embedded, pending, model}.
    """
    done = 0
    with db.session() as con:
        total = status(con, model_id=embedder.model_id)["pending"]
    if progress:
        progress(0, total)
    while not (stop and stop.is_set()):
        with db.session() as con:  # under another model every text is pending, whatever the table holds
            same_model = stored_model(con)[0] == embedder.model_id
            todo = pending(con, batch) if same_model else _some_texts(con, batch)
        if not todo:
            break
        vectors = embed_texts(embedder, [text for _, text in todo])
        with db.session() as con:
            if stored_model(con)[0] != embedder.model_id:  # first batch of a new model: start over with it
                use_model(con, embedder.model_id, int(vectors[0].shape[1]))
                if index is not None:
                    index.refresh(con)
            items = list(zip([h for h, _ in todo], vectors))
            before = version(con)
            after = store(con, embedder.model_id, items)
            if after == before:  # nothing stored (e.g. a dimension change mid-way): never loop on it
                raise RuntimeError(f"{embedder.model_id} returned vectors the index cannot take "
                                   f"(dimension {vectors[0].shape[1]}, index {stored_model(con)[1]})")
            if index is not None:
                index.added(before, after, items)
        done += len(todo)
        if progress:
            progress(min(done, max(total, done)), max(total, done))
    with db.session() as con:
        left = status(con)["pending"]
    return {"embedded": done, "pending": left, "model": embedder.model_id}


class Backfiller:
    """A daemon thread that runs `backfill` whenever `notify()` is called (e.g. after each write).

    An embedder failure is logged and retried later with backoff; keyword search is never affected.
    """

    def __init__(self, db, embedder: EmbedFn, index: "VectorIndex | None" = None, batch: int = BATCH,
                 retry_after: float = 30.0, max_retry_after: float = 600.0, poll: float = 5.0):
        self.db, self.embedder, self.index, self.batch = db, embedder, index, batch
        self.retry_after, self.max_retry_after, self.poll = retry_after, max_retry_after, poll
        self._seen: tuple | None = None
        self.last_error: str | None = None
        self._wake, self._stop = threading.Event(), threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dreamflow-embed", daemon=True)

    def start(self) -> "Backfiller":
        self._wake.set()  # catch up on whatever is pending at start
        self._thread.start()
        return self

    def notify(self) -> None:
        """Vectors may be missing: embed them soon."""
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is pending (or timeout); True when idle."""
        return self._idle.wait(timeout)

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _chunks_changed(self) -> bool:
        """Cheap look at the chunks table: did anything get indexed since the last pass?"""
        try:
            with self.db.session() as con:
                seen = con.execute("SELECT count(*), max(id) FROM chunks").fetchone()
        except Exception:  # noqa: BLE001 - index busy: look again at the next poll
            return False
        changed, self._seen = seen != self._seen, seen
        return changed

    def _run(self) -> None:
        delay = self.retry_after
        while not self._stop.is_set():
            woken = self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop.is_set():
                break
            if not woken and not self._chunks_changed():
                continue
            try:
                backfill(self.db, self.embedder, self.batch, index=self.index, stop=self._stop)
                with self.db.session() as con:
                    prune(con, min_share=0.1)  # a reload of the index follows, so only now and then
                self.last_error, delay = None, self.retry_after
                if not self._wake.is_set():
                    self._idle.set()
            except Exception as exc:  # noqa: BLE001 - embedder down: keep keyword search, retry later
                self.last_error = str(exc)
                log.warning("embedding failed, retrying in %.0f s: %s", delay, exc)
                if self._stop.wait(delay):
                    break
                delay = min(delay * 2, self.max_retry_after)
                self._wake.set()


# ---- search ------------------------------------------------------------------------------------------------


class VectorIndex:
    """Exact cosine search over every stored piece vector, held in memory.

    `embed_query(text) -> 1-D float32 vector` is injected (so storage never imports a model) and called only
    when there are vectors to search; `model_id` must match the stored vectors, else no candidates.
    `weight` and `rrf_k` set how search fuses this list with the keyword list (weight 1): the defaults were
    tuned for the local MiniLM on LoCoMo. `embedder` optionally rides along for a `Backfiller`.
    Pass an instance as `vectors=` to `storage.search.search.search` / `node_search`.
    """

    def __init__(self, model_id: str, embed_query: Callable[[str], np.ndarray], weight: float = 0.2,
                 rrf_k: int = 10, embedder: EmbedFn | None = None, close: float = 0.4):
        self.model_id = model_id
        self.embed_query = embed_query
        self.weight, self.rrf_k = weight, rrf_k
        self.close = close  # a cosine this model gives a text that answers a question (storage/search/relevance.py)
        self.embedder = embedder
        self._lock = threading.Lock()
        self._version = -1
        self._hashes: list[str] = []          # row owner i -> text_hash
        self._row_of: dict[str, int] = {}     # text_hash -> owner index
        self._blocks: list[np.ndarray] = []   # pending appends, folded into _matrix lazily
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._starts = np.zeros(0, dtype=np.int64)  # owner index -> its first matrix row (pieces are contiguous)
        self._query_cache: dict[str, np.ndarray] = {}
        self._prepared: dict[str, Future] = {}
        self._ids_of: dict[str, list[int]] = {}  # text_hash -> chunk ids (see _chunk_ids)
        self._ids_top, self._ids_rows = 0, 0
        self._worker: ThreadPoolExecutor | None = None

    # keeping the matrix in step with the table

    def refresh(self, con: duckdb.DuckDBPyConnection) -> None:
        """Reload from the table when another writer changed it since we last looked."""
        current = version(con)
        with self._lock:
            if current == self._version:
                return
            model, dim = stored_model(con)
            if model != self.model_id:
                self._reset([], [], current)
                return
            hashes, mats = _load(con)
            self._reset(hashes, mats, current)

    def forget(self) -> None:
        """Drop everything cached from the table (the index was re-created: chunk ids start again)."""
        with self._lock:
            self._reset([], [], -1)
            self._ids_of, self._ids_top, self._ids_rows = {}, 0, 0

    def added(self, before: int, after: int, items: list[tuple[str, np.ndarray]]) -> None:
        """Take vectors this process just stored (table went from version `before` to `after`)."""
        with self._lock:
            if before != self._version:
                return  # we were already behind: the next refresh reloads everything
            for h, m in items:
                if h in self._row_of:
                    self._version = -1  # replaced text: cheaper to reload than to patch
                    return
                self._row_of[h] = len(self._hashes)
                self._hashes.append(h)
                self._blocks.append((self._row_of[h], m))
            self._version = after

    def _reset(self, hashes: list[str], mats: list[np.ndarray], ver: int) -> None:
        self._hashes = list(hashes)
        self._row_of = {h: i for i, h in enumerate(hashes)}
        self._blocks = list(enumerate(mats))
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._starts = np.zeros(0, dtype=np.int64)
        self._version = ver

    def _fold(self) -> None:
        """Append pending blocks (owners in increasing order) to the matrix in one copy."""
        if not self._blocks:
            return
        mats = [m for _, m in self._blocks]
        sizes = np.array([len(m) for m in mats], dtype=np.int64)
        starts = len(self._matrix) + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        parts = [self._matrix] if len(self._matrix) else []
        self._matrix = np.ascontiguousarray(np.vstack(parts + mats), dtype=np.float32)
        self._starts = np.concatenate([self._starts, starts])
        self._blocks = []

    def __len__(self) -> int:
        with self._lock:
            self._fold()
            return len(self._hashes)

    # querying

    def _query_vector(self, query: str) -> np.ndarray | None:
        vec = self._query_cache.get(query)
        if vec is None:
            try:
                vec = np.asarray(self.embed_query(query), dtype=np.float32).ravel()
            except Exception as exc:  # noqa: BLE001 - no query vector: keyword results only
                log.warning("query embedding failed, keyword search only: %s", exc)
                return None
            if len(self._query_cache) > 256:
                self._query_cache.clear()
            self._query_cache[query] = vec
        return vec

    def prepare(self, con: duckdb.DuckDBPyConnection, query: str) -> None:
        """Start embedding and scoring `query` on a worker thread, so it overlaps the keyword query that
        search runs next (numpy and the model release the GIL); `scores` picks the result up."""
        snapshot = self._snapshot(con)
        if snapshot is not None:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dreamflow-vectors")
            self._prepared = {query: self._worker.submit(self._score, snapshot, query)}  # one search at a time

    def scores(self, con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], np.ndarray] | None:
        """(text hashes, best piece cosine per hash) for the query, or None when there is nothing to search."""
        prepared = self._prepared.pop(query, None)
        if prepared is not None:
            return prepared.result()
        snapshot = self._snapshot(con)
        return None if snapshot is None else self._score(snapshot, query)

    def _snapshot(self, con: duckdb.DuckDBPyConnection) -> tuple | None:
        self.refresh(con)
        with self._lock:
            self._fold()
            return (self._matrix, self._starts, self._hashes) if self._hashes else None

    def _score(self, snapshot: tuple, query: str) -> tuple[list[str], np.ndarray] | None:
        matrix, starts, hashes = snapshot
        q = self._query_vector(query)
        if q is None or q.shape[0] != matrix.shape[1]:
            return None
        return hashes, np.maximum.reduceat(matrix @ q, starts)

    def closeness(self, con: duckdb.DuckDBPyConnection, query: str, chunk_ids: list[int]) -> dict[int, float]:
        """{chunk id: the cosine of its text's closest piece to `query`} for the chunks of `chunk_ids` whose text
        has vectors: a few rows of the matrix, not all of it."""
        snapshot = self._snapshot(con) if chunk_ids else None
        q = self._query_vector(query) if snapshot is not None else None
        if q is None or q.shape[0] != snapshot[0].shape[1]:
            return {}
        matrix, starts, _ = snapshot
        row_of = self._row_of
        found = {}
        for cid, text_hash in con.execute(
                f"SELECT id, text_hash FROM chunks WHERE id IN ({', '.join(str(int(c)) for c in chunk_ids)})").fetchall():
            row = row_of.get(text_hash)
            if row is not None and row < len(starts):  # a text added since the snapshot waits for the next one
                end = starts[row + 1] if row + 1 < len(starts) else len(matrix)
                found[cid] = float((matrix[starts[row]:end] @ q).max())
        return found

    def candidates(self, con: duckdb.DuckDBPyConnection, query: str, k: int, path_prefix: str | None = None,
                   filters: str = "TRUE", params: dict | None = None) -> list[tuple[int, float]]:
        """The `k` chunks closest to the query: [(chunk_id, cosine)], best first, only chunks under
        `path_prefix` that pass the SQL condition `filters` over the chunk `c` and its file `f` (named `params`),
        as search builds it.

        Exact: texts are taken best-first in growing slices until k such chunks are found or none remain.
        """
        scored = self.scores(con, query)
        if scored is None or k <= 0:
            return []
        hashes, best = scored
        ids_of = self._chunk_ids(con)
        found: list[tuple[int, float]] = []
        taken, want = 0, k + 16  # most of the best texts pass: grow 8x when filters reject many
        while taken < len(best) and len(found) < k:
            want = min(want, len(best))
            top = np.argpartition(-best, want - 1)[:want] if want < len(best) else np.arange(len(best))
            top = top[np.argsort(-best[top], kind="stable")][taken:]
            taken = want
            ranked = [(cid, float(best[i])) for i in top for cid in ids_of.get(hashes[i], ())]
            found.extend(_passing(con, ranked, path_prefix, filters, params))
            want *= 8
        return found[:k]

    def _chunk_ids(self, con: duckdb.DuckDBPyConnection) -> dict[str, list[int]]:
        """text_hash -> chunk ids, kept in step cheaply: chunk ids only grow, so new rows are those past the
        highest id seen; ids of deleted chunks linger (`_passing` drops them) until they are 10% of the map."""
        top, live = con.execute("SELECT coalesce(max(id), 0), count(*) FROM chunks").fetchone()
        with self._lock:
            if self._ids_rows > 1.1 * live + 64:
                self._ids_of, self._ids_top, self._ids_rows = {}, 0, 0
            if top > self._ids_top:
                rows = con.execute("SELECT id, text_hash FROM chunks WHERE id > ?", [self._ids_top]).fetchall()
                for cid, h in rows:
                    self._ids_of.setdefault(h, []).append(cid)
                self._ids_top, self._ids_rows = top, self._ids_rows + len(rows)
            return self._ids_of


def _passing(con: duckdb.DuckDBPyConnection, ranked: list[tuple[int, float]], path_prefix: str | None,
             filters: str = "TRUE", params: dict | None = None) -> list[tuple[int, float]]:
    """The (chunk id, score) pairs, in order, whose chunk `c` still exists and passes the filters (over `c` and
    its file `f`)."""
    if not ranked:
        return []
    # Literal ids: chunk ids are sequential, so zone maps find them (a bound list becomes a slower join).
    conds = [f"c.id IN ({', '.join(str(int(cid)) for cid, _ in ranked)})"]
    if path_prefix:
        conds.append(f"starts_with(c.path, {_literal(path_prefix)})")
    join = ""
    if filters.strip() != "TRUE":
        join = "JOIN files f ON f.path = c.path"
        conds.append(f"({filters})")
    sql = f"SELECT c.id FROM chunks c {join} WHERE {' AND '.join(conds)}"
    ok = {r[0] for r in con.execute(sql, params or None).fetchall()}
    return [(cid, score) for cid, score in ranked if cid in ok]
