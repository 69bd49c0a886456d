"""What search reads, held in memory for the service (storage/search/cache.py says when): BM25 postings,
chunk line ranges and fact windows, file facts (name, description, date) and links.

The SQL BM25 query (storage/search/search.py) costs a few ms at a thousand chunks and tens of ms at a million, and
each point lookup of a search (chunk rows, links, file facts) costs 0.3-10 ms of DuckDB planning; the same
answers from numpy arrays and dicts held in memory cost a fraction of that.

Layout: chunk ids sorted (ids only grow) with their BM25 length, file, line range, fact window (`valid_from`,
`valid_to` as days since 1970, open ends as the int32 extremes), the node fact a card fact became (`became`,
storage/index/indexer.py) and a liveness mask;
postings by term (storage.index.tokenize.term_hash, as in the `postings` table) in one CSR array of dense chunk
positions and term frequencies, plus the postings of chunks added since the load, by term in small pieces;
{path: (name, description, date)} of every file; the links as arrays over a table of path names (`_Links`);
chunk texts (headings, text) only while the index holds at most TEXT_CHUNKS chunks (past
that one query per search fetches the hits' texts).

Kept in step by pulling from the tables, so it is exact whatever a write did and whether it committed:
`index._transaction` marks the cache dirty (search_cache.changed), and the next query reads what moved. Chunks with an
id past the highest one held are new (with their postings: the zone maps of `chunk_id` skip the old row
groups); a file is always rewritten whole, so the older chunks of a file with new ones went; when the live
count still differs, `stale_chunks` names the others that went (and, should a compaction have emptied it,
the ids are compared). Files whose chunks came or went get their row and links re-read; a file count that
still differs (a file without chunks, an image say, came or went) reads all file rows and links again. A
large change (a reindex) marks the cache `stale`: storage/search/cache.py builds a new one.

Scores equal the SQL path's: the same formula (storage/index/bm25.py) in float64 (N, avgdl and df over live chunks);
only the order in which one chunk's per-term parts are added may differ (a last-bit difference at most). Filters are SQL
conditions over the file `f`: each is evaluated once per file with one query, cached per condition, and
re-evaluated for files whose chunks changed. A condition naming the chunk `c`, or one whose answer moves
with the clock (`current_date`, `now()`: the mask would go stale), falls back to SQL. The fact window
(storage/search/search.py `_fact_window`) comes apart from the filters and is kept by the same `holds` as in SQL,
on the held window arrays.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from typing import Any, Callable

import duckdb
import numpy as np

from storage.index.bm25 import Window, holds, score
from storage.search.sql import FACT_CHUNK, FILE_FACTS, in_list

TEXT_CHUNKS = 120_000  # chunk texts held in memory up to this many chunks (chunks are <= ~1.5 kB: <= 180 MB)
SLICES = 16  # the postings load runs in this many term-hash ranges (bounds its transient memory)
RELOAD_SHARE = 0.25  # more new or dead chunks than this share of the held ones: reload instead of patching
PIECES = 16  # a term's pieces of added postings are joined into one past this many
MASKS = 8  # filter conditions remembered (least recently used dropped)
LINK_ROWS = 50_000  # files whose links are kept as tuples once asked for (cleared when full)
_CHUNK_REF = re.compile(r"\bc\.")
_VOLATILE = re.compile(r"\b(current_\w+|now|today|random|get_current_\w+)\b", re.IGNORECASE)  # masks would go stale
_NO_LINE = -(2**63)  # a link's NULL line in the int64 array
_OPEN_FROM, _OPEN_TO = -(2**31), 2**31 - 1  # a fact window's open ends (NULL) in the int32 day arrays
_EPOCH = dt.date(1970, 1, 1)
_BECAME = "coalesce(became, -1) AS became"
_FACT = f"{FACT_CHUNK} AS fact"
_WINDOW_DAYS = (f"coalesce(valid_from - DATE '1970-01-01', {_OPEN_FROM})::INTEGER AS valid_from, "
                f"coalesce(valid_to - DATE '1970-01-01', {_OPEN_TO})::INTEGER AS valid_to")


class SearchCache:
    """In-memory postings, chunk facts, file facts and links of one index (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.stale = False  # too much changed to patch: the slot builds a new one
        self._reset()

    def _reset(self) -> None:
        """Empty state (before a load)."""
        self.dirty = False
        self.ids = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.lengths = np.zeros(0, dtype=np.float64)
        self.file_of = np.zeros(0, dtype=np.int32)
        self.lines = np.zeros((0, 2), dtype=np.int64)
        self.windows = np.zeros((0, 2), dtype=np.int32)  # per chunk: valid_from, valid_to (days since 1970)
        self.became = np.zeros(0, dtype=np.int64)  # per chunk: a consumed card fact's node fact chunk, else -1
        self.fact = np.zeros(0, dtype=bool)  # per chunk: one fact line (storage/search/sql.FACT_CHUNK)
        self.paths: list[str] = []
        self.file_index: dict[str, int] = {}
        self.terms = np.zeros(0, dtype=np.uint64)
        self.offsets = np.zeros(1, dtype=np.int64)
        self.post_idx = np.zeros(0, dtype=np.int32)
        self.post_tf = np.zeros(0, dtype=np.int32)
        self.added: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.n_live = 0
        self.total_length = 0
        self.info: dict[str, tuple] = {}  # path -> its storage.search.sql.FILE_FACTS of every file
        self.link_table: _Links | None = None  # every link but self-links
        self.texts: dict[int, tuple] | None = None  # chunk id -> (headings, text), small indexes only
        self.masks: dict[tuple, list] = {}  # key -> [bool per file, paths to re-check]
        self._scored: tuple | None = None  # the last query's scores (search widens its pool: same query again)
        self._acc, self._seen = np.zeros(0), np.zeros(0, dtype=bool)  # scratch of _score, one per chunk

    # ---- keeping in step -------------------------------------------------------------------------------

    def sync(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Take in what changed since the last query; False when too much did (the cache is then stale)."""
        if self.dirty and not self.stale:
            self._catch_up(con)
            self.dirty = False
        return not self.stale

    def load(self, con: duckdb.DuckDBPyConnection, stop: Callable[[], bool] = lambda: False) -> None:
        """Read everything from the index (`con`: a connection inside one read transaction); `stop()` true
        ends the load between two reads (duckdb.InterruptException)."""
        self._reset()
        self.paths = [r[0] for r in con.execute("SELECT DISTINCT path FROM chunks ORDER BY path").fetchall()]
        self.file_index = {p: i for i, p in enumerate(self.paths)}
        rows = con.execute(f"""
            SELECT c.id, p.i::INTEGER AS i, c.start_line, c.end_line, c.length, {_WINDOW_DAYS}, {_BECAME},
                   {_FACT} FROM chunks c
            JOIN (SELECT path, (row_number() OVER (ORDER BY path) - 1) AS i FROM (SELECT DISTINCT path FROM chunks)) p
            USING (path) ORDER BY c.id
        """).fetchnumpy()
        self.ids = rows["id"].astype(np.int64)
        self.file_of = rows["i"].astype(np.int32)
        self.lines = np.stack([rows["start_line"].astype(np.int64), rows["end_line"].astype(np.int64)], axis=1)
        self.lengths = rows["length"].astype(np.float64)
        self.windows = np.stack([rows["valid_from"].astype(np.int32), rows["valid_to"].astype(np.int32)], axis=1)
        self.became = rows["became"].astype(np.int64)
        self.fact = rows["fact"].astype(bool)
        self.live = np.ones(len(self.ids), dtype=bool)
        self.n_live, self.total_length = len(self.ids), int(rows["length"].astype(np.int64).sum())
        total, top_tf = con.execute("SELECT count(*), coalesce(max(tf), 0) FROM postings").fetchone()
        idx, tfs = np.empty(total, dtype=np.int32), np.empty(total, dtype=_tf_dtype(top_tf))
        terms, counts, at = [], [], 0
        edges = [i * 2**64 // SLICES for i in range(SLICES + 1)]  # ascending ranges: terms come out sorted
        for lo, hi in zip(edges, edges[1:]):
            if stop():
                raise duckdb.InterruptException("the search cache load was stopped")
            part = con.execute(
                f"SELECT term, chunk_id, tf FROM postings WHERE term >= {lo} AND term <= {hi - 1} "
                "AND chunk_id NOT IN (SELECT id FROM stale_chunks)"
            ).fetchnumpy()
            t, pos, tf = self._positions(part)
            order = np.lexsort((pos, t))
            unique, count = np.unique(t[order], return_counts=True)
            idx[at:at + len(t)], tfs[at:at + len(t)] = pos[order], tf[order]
            at += len(t)
            terms.append(unique)
            counts.append(count)
        self.post_idx, self.post_tf = idx[:at], tfs[:at]
        self.terms = np.concatenate(terms).astype(np.uint64)
        self.offsets = np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64)
        self._load_files(con)
        if self.n_live <= TEXT_CHUNKS:
            self.texts = {}
            self._read_texts(con)

    def _read_texts(self, con: duckdb.DuckDBPyConnection) -> None:
        for cid, headings, text in con.execute("SELECT id, headings, text FROM chunks").fetchall():
            self.texts[cid] = (headings, text)

    def _load_files(self, con: duckdb.DuckDBPyConnection) -> None:
        self.info = {}
        self.link_table = _Links(con)
        self._read_files(con, None)

    def _read_files(self, con: duckdb.DuckDBPyConnection, paths: list[str] | None) -> None:
        """Read the file rows of `paths` (None: of every file) and, for listed paths, their outgoing links."""
        listed = "" if paths is None else f"IN ({in_list(paths)})"
        for path, *facts in con.execute(
                f"SELECT path, {FILE_FACTS} FROM files"
                + ("" if paths is None else f" WHERE path {listed}")).fetchall():
            self.info[path] = tuple(facts)
        if paths is not None:
            self.link_table.add(con.execute(
                f"SELECT source, target, anchor, predicate, line FROM links WHERE source <> target AND source {listed}"
            ).fetchall())

    def _drop_files(self, paths: set[str]) -> None:
        for path in paths:
            self.info.pop(path, None)
            self.link_table.drop(path)

    def _catch_up_files(self, con: duckdb.DuckDBPyConnection, changed: set[str], count: int) -> None:
        """Re-read the rows and links of the `changed` files; read them all again when the file count (now
        `count`) still differs (a file without chunks came or went)."""
        self._drop_files(changed)
        listed = sorted(changed)
        for at in range(0, len(listed), 1000):
            self._read_files(con, listed[at:at + 1000])
        if len(self.info) != count:
            self._load_files(con)

    def _held(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dense positions of chunk `ids` int64, mask of the ids held): positions are meaningful where held."""
        pos = np.searchsorted(self.ids, ids)
        held = pos < len(self.ids)
        held[held] = self.ids[pos[held]] == ids[held]
        return pos, held

    def _positions(self, part: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(term, dense chunk position, tf) of fetched postings rows, rows of unknown chunks dropped."""
        pos, ok = self._held(part["chunk_id"].astype(np.int64))
        return part["term"].astype(np.uint64)[ok], pos[ok].astype(np.int32), part["tf"].astype(np.int64)[ok]

    def _catch_up(self, con: duckdb.DuckDBPyConnection) -> None:
        held = int(self.ids[-1]) if len(self.ids) else 0
        count, fresh, files = con.execute(f"""
            SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks WHERE id > {held}),
                   (SELECT count(*) FROM files)
        """).fetchone()
        changed_files: set[int] = set()
        if fresh or count != self.n_live:  # chunks came or went
            if fresh > RELOAD_SHARE * max(self.n_live, 1000):
                self.stale = True
                return
            if fresh:  # a file with new chunks was rewritten whole: its older chunks went
                changed_files = self._add_chunks(con, held)
                rewritten = np.isin(self.file_of, np.fromiter(changed_files, dtype=np.int32))
                self._kill(self.ids[rewritten & (self.ids <= held)], changed_files)
            if self.n_live != count:  # a file went: its chunks are among the tombstones
                gone = con.execute(f"SELECT id FROM stale_chunks WHERE id <= {held}").fetchnumpy()["id"]
                self._kill(gone.astype(np.int64), changed_files)
            if self.n_live != count:  # a compaction dropped tombstones we never saw: compare the ids
                current = con.execute("SELECT id FROM chunks").fetchnumpy()["id"].astype(np.int64)
                self._kill(self.ids[self.live & ~np.isin(self.ids, current)], changed_files)
            if len(self.live) - self.n_live > RELOAD_SHARE * max(len(self.live), 1000):
                self.stale = True
                return
            if self.texts is not None and self.n_live > TEXT_CHUNKS:
                self.texts = None
        changed = {self.paths[i] for i in changed_files}
        for entry in self.masks.values():
            entry[1] |= changed
        self._scored = None
        self._catch_up_files(con, changed, files)

    def _add_chunks(self, con: duckdb.DuckDBPyConnection, held: int) -> set[int]:
        rows = con.execute(f"SELECT id, path, start_line, end_line, length, {_WINDOW_DAYS}, {_BECAME}, {_FACT}"
                           f"{', headings, text' * (self.texts is not None)} FROM chunks WHERE id > {held} ORDER BY id"
                           ).fetchall()
        if self.texts is not None:
            self.texts.update((r[0], r[9:]) for r in rows)
        files = []
        for _, path, *_rest in rows:
            if path not in self.file_index:
                self.file_index[path] = len(self.paths)
                self.paths.append(path)
                for entry in self.masks.values():
                    entry[0] = np.append(entry[0], False)
            files.append(self.file_index[path])
        first = len(self.ids)
        self.ids = np.concatenate([self.ids, np.array([r[0] for r in rows], dtype=np.int64)])
        self.file_of = np.concatenate([self.file_of, np.array(files, dtype=np.int32)])
        self.lines = np.concatenate([self.lines, np.array([r[2:4] for r in rows], dtype=np.int64).reshape(-1, 2)])
        self.lengths = np.concatenate([self.lengths, np.array([r[4] for r in rows], dtype=np.float64)])
        self.windows = np.concatenate([self.windows, np.array([r[5:7] for r in rows], dtype=np.int32).reshape(-1, 2)])
        self.became = np.concatenate([self.became, np.array([r[7] for r in rows], dtype=np.int64)])
        self.fact = np.concatenate([self.fact, np.array([r[8] for r in rows], dtype=bool)])
        self.live = np.concatenate([self.live, np.ones(len(rows), dtype=bool)])
        self.n_live += len(rows)
        self.total_length += sum(int(r[4]) for r in rows)
        part = con.execute(f"SELECT term, chunk_id, tf FROM postings WHERE chunk_id > {held}").fetchnumpy()
        terms, pos, tf = self._positions(part)
        order = np.lexsort((pos, terms))
        terms, pos, tf = terms[order], pos[order], tf[order]
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(terms)) + 1, [len(terms)]]).tolist()
        for term, lo, hi in zip(terms[bounds[:-1]].tolist() if len(terms) else [], bounds, bounds[1:]):
            pieces = self.added.setdefault(term, [])
            pieces.append((pos[lo:hi], tf[lo:hi]))
            if len(pieces) > PIECES:
                self.added[term] = [(np.concatenate([x for x, _ in pieces]), np.concatenate([y for _, y in pieces]))]
        return set(files) if first < len(self.ids) else set()

    def _kill(self, ids: np.ndarray, changed_files: set[int]) -> None:
        """Mark these chunk ids dead (those held and still live); their files go into `changed_files`."""
        pos, held = self._held(ids)
        pos = pos[held]
        pos = pos[self.live[pos]]
        if not len(pos):
            return
        self.live[pos] = False
        if self.texts is not None:
            for cid in self.ids[pos].tolist():
                self.texts.pop(cid, None)
        self.n_live -= len(pos)
        self.total_length -= int(self.lengths[pos].sum())
        changed_files |= set(self.file_of[pos].tolist())

    # ---- querying --------------------------------------------------------------------------------------

    def bm25(self, con: duckdb.DuckDBPyConnection, hashes: list[int], limit: int, filters: str,
             params: dict[str, Any] | None, window: Window | None = None) -> list[tuple[int, float]] | None:
        """Top `limit` (chunk id, BM25 score) of the chunks holding any of the term `hashes` (sorted, distinct)
        as storage.search.search.bm25 ranks them, fact chunks only within `window`; None when the SQL path must answer
        (a filter over the chunk `c`, or one that moves with the clock)."""
        if _CHUNK_REF.search(filters) or _VOLATILE.search(filters):
            return None
        with self._lock:
            if not self.sync(con):
                return None
            cand, scores = self._score(hashes)
            if len(cand) and filters.strip() != "TRUE":
                keep = self._mask(con, filters, params)[self.file_of[cand]]
                cand, scores = cand[keep], scores[keep]
            if len(cand) and window is not None:
                first, day = window
                keep = holds(self.windows[cand, 0], self.windows[cand, 1],
                             None if first is None else (first - _EPOCH).days, (day - _EPOCH).days)
                cand, scores = cand[keep], scores[keep]
            if len(cand) > limit:
                cut = np.partition(scores, len(scores) - limit)[len(scores) - limit]
                top = scores >= cut
                cand, scores = cand[top], scores[top]
            ids = self.ids[cand]
            order = np.lexsort((ids, -scores))[:limit]
            return [(int(i), float(s)) for i, s in zip(ids[order], scores[order])]

    def rows(self, con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, tuple[str, int, int, bool]] | None:
        """{chunk id: (path, start_line, end_line, is a fact line)} of the live chunks among `ids` (None: ask SQL)."""
        with self._lock:
            if not self.sync(con):
                return None
            want = np.asarray(ids, dtype=np.int64)
            pos = np.minimum(np.searchsorted(self.ids, want), max(len(self.ids) - 1, 0))
            out = {}
            for cid, p in zip(want.tolist(), pos.tolist()):
                if len(self.ids) and self.ids[p] == cid and self.live[p]:
                    start, end = self.lines[p]
                    out[cid] = (self.paths[self.file_of[p]], int(start), int(end), bool(self.fact[p]))
            return out

    def heads(self, con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, int] | None:
        """{chunk id: the node fact chunk it became} of the consumed card facts among `ids` (None: ask SQL)."""
        with self._lock:
            if not self.sync(con):
                return None
            want = np.asarray(ids, dtype=np.int64)
            pos, held = self._held(want)
            became = self.became[pos[held]]
            return dict(zip(want[held][became >= 0].tolist(), became[became >= 0].tolist()))

    def links(self, con: duckdb.DuckDBPyConnection, paths: set[str]) -> list[tuple] | None:
        """Links leaving or entering `paths` (self-links left out), as storage.search.search._link_rows orders them."""
        with self._lock:
            if not self.sync(con):
                return None
            rows = self.link_table.of(paths)
            return sorted(rows, key=lambda r: (r[4] is None, r[4] or 0, r[0], r[1], r[2] or "", r[3] or ""))

    def file_info(self, con: duckdb.DuckDBPyConnection, paths: list[str]) -> dict[str, tuple] | None:
        """{path: its FILE_FACTS values} for the indexed ones among `paths`."""
        with self._lock:
            if not self.sync(con):
                return None
            return {p: self.info[p] for p in paths if p in self.info}

    def chunk_texts(self, con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, tuple] | None:
        """{chunk id: (headings, text, valid_from, valid_to)} of the live chunks among `ids` (as storage.search.search
        reads them: the window as YYYY-MM-DD or None); None when texts are not held."""
        with self._lock:
            if not self.sync(con) or self.texts is None:
                return None
            held = [cid for cid in ids if cid in self.texts]
            windows = self.windows[np.searchsorted(self.ids, np.asarray(held, dtype=np.int64))].tolist()
            return {cid: (list(self.texts[cid][0]), self.texts[cid][1], _day(start, _OPEN_FROM), _day(end, _OPEN_TO))
                    for cid, (start, end) in zip(held, windows)}

    def _postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """(dense chunk positions, tfs) of one term, dead chunks included."""
        parts = []
        at = np.searchsorted(self.terms, np.uint64(term))
        if at < len(self.terms) and self.terms[at] == term:
            lo, hi = self.offsets[at], self.offsets[at + 1]
            parts.append((self.post_idx[lo:hi], self.post_tf[lo:hi]))
        parts += self.added.get(term, [])
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
        return np.concatenate([p for p, _ in parts]), np.concatenate([f for _, f in parts])

    def _score(self, hashes: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(dense positions, BM25 scores) of the live chunks holding any of the term hashes."""
        if self._scored is not None and self._scored[0] == hashes:
            return self._scored[1]
        n = float(self.n_live)
        avgdl = self.total_length / n if n else 0.0
        everyone = self.n_live == len(self.ids)
        found = []
        for term in hashes:
            pos, tf = self._postings(term)
            if not everyone:
                alive = self.live[pos]
                pos, tf = pos[alive], tf[alive]
            if not len(pos):
                continue
            found.append((pos, score(tf.astype(np.float64), self.lengths[pos], float(len(pos)), n, avgdl)))
        if not found:
            result = (np.zeros(0, dtype=np.int64), np.zeros(0))
        elif len(found) == 1:
            result = (found[0][0].astype(np.int64), found[0][1])
        else:  # dense accumulation in query-term order (terms by hash, as the sorted table holds them)
            if len(self._acc) != len(self.ids):
                self._acc, self._seen = np.zeros(len(self.ids)), np.zeros(len(self.ids), dtype=bool)
            for pos, part in found:
                self._acc[pos] += part  # positions are distinct within one term
                self._seen[pos] = True
            cand = np.flatnonzero(self._seen)
            result = (cand, self._acc[cand])
            self._acc[cand], self._seen[cand] = 0.0, False
        self._scored = (hashes, result)
        return result

    def _mask(self, con: duckdb.DuckDBPyConnection, filters: str, params: dict[str, Any] | None) -> np.ndarray:
        """Bool per held file: passes the SQL condition `filters` over `files f` (re-checked where changed)."""
        key = (filters, tuple(sorted((params or {}).items(), key=lambda kv: kv[0])))
        entry = self.masks.pop(key, None)
        if entry is None:
            passing = {r[0] for r in con.execute(f"SELECT f.path FROM files f WHERE {filters}", params or None).fetchall()}
            entry = [np.array([p in passing for p in self.paths], dtype=bool), set()]
        elif entry[1]:
            recheck = sorted(entry[1])
            listed = in_list(recheck)
            passing = {r[0] for r in con.execute(
                f"SELECT f.path FROM files f WHERE f.path IN ({listed}) AND ({filters})", params or None).fetchall()}
            for p in recheck:
                entry[0][self.file_index[p]] = p in passing
            entry[1] = set()
        self.masks[key] = entry  # most recently used last
        while len(self.masks) > MASKS:
            self.masks.pop(next(iter(self.masks)))
        return entry[0]

    def nbytes(self) -> int:
        """Bytes held in numpy arrays (the term -> hash map, paths and masks not counted)."""
        arrays = [self.ids, self.live, self.lengths, self.file_of, self.lines, self.windows, self.became, self.fact,
                  self.terms, self.offsets, self.post_idx, self.post_tf]
        if self.link_table is not None:
            t = self.link_table
            arrays += [t.source, t.target, t.anchor, t.predicate, t.line, t.alive, t.by_target, t.target_sorted]
        return sum(a.nbytes for a in arrays) + sum(p.nbytes + f.nbytes for ps in self.added.values() for p, f in ps)


class _Links:
    """Every link but self-links: numpy arrays over a table of path names, sorted by source (and a permutation
    by target), plus the links of files re-read since, per source as tuples (the base rows of a re-read source
    are marked gone). A million links take some 40 MB; as Python tuples they took 420."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        names = "SELECT source AS name FROM links UNION SELECT target FROM links"
        self.names = [r[0] for r in con.execute(f"SELECT name FROM ({names}) ORDER BY name").fetchall()]
        self.index = {name: i for i, name in enumerate(self.names)}
        rows = con.execute(f"""
            WITH n AS (SELECT name, (row_number() OVER (ORDER BY name) - 1)::INTEGER AS i FROM ({names}))
            SELECT ns.i AS s, nt.i AS t, anchor, predicate, coalesce(line, {_NO_LINE}) AS line
            FROM links JOIN n ns ON ns.name = links.source JOIN n nt ON nt.name = links.target
            WHERE source <> target ORDER BY s
        """).fetchnumpy()
        self.source, self.target = np.asarray(rows["s"], dtype=np.int32), np.asarray(rows["t"], dtype=np.int32)
        self.anchor = np.array(rows["anchor"].tolist(), dtype=object)
        self.predicate = np.array(rows["predicate"].tolist(), dtype=object)
        self.line = np.asarray(rows["line"], dtype=np.int64)
        self.alive = np.ones(len(self.source), dtype=bool)
        self.by_target = np.argsort(self.target, kind="stable").astype(np.int32)
        self.target_sorted = self.target[self.by_target]
        self.added: dict[str, list[tuple]] = {}  # source -> its links read since (source, target, anchor, predicate, line)
        self.added_into: dict[str, dict[str, None]] = {}  # target -> the sources in `added` linking to it
        self.rows_of: dict[int, tuple[list, list]] = {}  # name -> its base rows (out, in) as tuples, as asked

    def drop(self, source: str) -> None:
        """Forget the links leaving `source` (it is being re-read, or it went)."""
        i = self.index.get(source)
        if i is not None:
            span = self._span(self.source, i)
            self.alive[span] = False
            for name in [i, *self.target[span].tolist()]:  # the tuples that showed them
                self.rows_of.pop(name, None)
        for row in self.added.pop(source, ()):
            sources = self.added_into.get(row[1])
            if sources is not None:
                sources.pop(source, None)
                if not sources:
                    del self.added_into[row[1]]

    def add(self, rows: list[tuple]) -> None:
        for row in rows:
            self.added.setdefault(row[0], []).append(row)
            self.added_into.setdefault(row[1], {})[row[0]] = None

    def of(self, paths: set[str]) -> list[tuple]:
        """The links leaving `paths`, then those entering them (a link between two of them: twice)."""
        out, into = [], []
        for path in paths:
            i = self.index.get(path)
            if i is not None:
                held = self.rows_of.get(i)
                if held is None:
                    if len(self.rows_of) >= LINK_ROWS:
                        self.rows_of = {}
                    span = self._span(self.source, i)
                    held = self.rows_of[i] = (self._rows(np.arange(span.start, span.stop)),
                                              self._rows(self.by_target[self._span(self.target_sorted, i)]))
                out += held[0]
                into += held[1]
            out += self.added.get(path, ())
            into += [row for source in self.added_into.get(path, ()) for row in self.added[source] if row[1] == path]
        return out + into

    @staticmethod
    def _span(ordered: np.ndarray, i: int) -> slice:
        """The rows of name `i` in an int32 array sorted by name (searched as int32: a Python int would make
        numpy cast the whole array first)."""
        key = np.int32(i)
        return slice(int(np.searchsorted(ordered, key)), int(np.searchsorted(ordered, key, side="right")))

    def _rows(self, at: np.ndarray) -> list[tuple]:
        at = at[self.alive[at]]
        names = self.names
        return [(names[s], names[t], a, p, None if line == _NO_LINE else line) for s, t, a, p, line in zip(
            self.source[at].tolist(), self.target[at].tolist(), self.anchor[at].tolist(), self.predicate[at].tolist(),
            self.line[at].tolist())]


def _day(days: int, open_end: int) -> str | None:
    """A fact window's end as YYYY-MM-DD (None when open)."""
    return None if days == open_end else (_EPOCH + dt.timedelta(days=days)).isoformat()


def _tf_dtype(top: int) -> type:
    """The smallest unsigned type holding term frequencies up to `top`."""
    return np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.int32
