"""Recall over the index: `search` (BM25 [+ vectors] -> RRF -> link expansion), `node_search`, `traverse`.

BM25 (storage/index/bm25.py) is scored in SQL over the `postings` table, with document frequencies and the
average chunk length taken from the live tables, so a write is visible to the next query. When a `vectors`
object is given (see storage/index/vectors.py) its candidates are fused with the keyword list by reciprocal rank
fusion: score = sum(weight / (RRF_K + rank)) over the lists a chunk appears in, divided by the best
possible sum, so the top hit of every list scores 1.0.

In the service (the index held open) storage/search/cache.py answers the same lookups from memory, with the
same formula and fact window (storage/index/bm25.py): each lookup below asks it first (`search_cache.of(con)`) and
runs its SQL when there is none.

Values go into these queries as SQL literals (`sql_literal`): constant IN lists are pruned with zone maps,
where a bound list becomes a join, and the Python client's per-value conversion is skipped.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Protocol, Sequence

import duckdb

from storage.index.bm25 import Window, holds, score
from storage.index.tokenize import term_hash, terms
from storage.search import cache as search_cache, timeref
from storage.search.sql import FACT_CHUNK, FILE_FACTS, Expr, in_list, sql_literal
from storage.text import validity
from storage.text.instructions import flags as instruction_flags
from storage.text.model import DIALOG, normalize_tag

RRF_K = 60
CANDIDATES = 50  # at least this many candidates from each list go into the fusion
PER_FILE = 1  # default cap on the chunks of one file among the results (more distinct memories per call)
MORE_RANGES = 10  # a hit's `more`: at most this many of its file's other matching line ranges
ARCHIVE = "digest/archive/"  # archived nodes: searched only when asked for
DATE_BOOST = 1.5  # BM25 factor of a chunk whose file is dated in a period the query names (storage/search/timeref.py)
DATE_AFTER = 7  # days after a named period that still count as in it: a note tells of the days before it
DATE_SPANS = 8  # at most this many of the periods a query names are looked up


class Vectors(Protocol):
    """What search needs from a vector index (storage/index/vectors.py)."""

    def candidates(
        self, con: duckdb.DuckDBPyConnection, query: str, k: int, path_prefix: str | None = None,
        filters: str = "TRUE", params: dict[str, Any] | None = None,
    ) -> list[tuple[int, float]]: ...
    # [(chunk id, score)] best first, only live chunks under `path_prefix` that pass `filters` (an SQL condition
    # over the chunk `c` and its file `f`, with `params`: the file filters and the fact window, as for BM25):
    # search takes them as they are


# BM25 of the chunks that contain any query term, best first. Postings carry the chunk length and the term's
# hash (storage.index.tokenize.term_hash); rows of replaced chunks (stale_chunks) are skipped. `{filters}` is a
# condition over the matched chunk `c` and its file `f`, applied to scored chunks before the limit.
_BM25_SQL = """
WITH matches AS (
    SELECT term, chunk_id, tf, length FROM postings
    WHERE term IN ({terms}) AND chunk_id NOT IN (SELECT id FROM stale_chunks)
),
df AS (SELECT term, count(*)::DOUBLE AS df FROM matches GROUP BY term),
corpus AS (SELECT count(*)::DOUBLE AS n, avg(length)::DOUBLE AS avgdl FROM chunks),
scored AS (
    SELECT chunk_id, sum({score}) AS score
    FROM matches JOIN df USING (term) CROSS JOIN corpus
    GROUP BY chunk_id
)
SELECT s.chunk_id, s.score FROM scored s
{join}
ORDER BY s.score DESC, s.chunk_id
LIMIT {limit}
""".replace("{score}", str(score(Expr("tf"), Expr("length"), Expr("df.df"), Expr("corpus.n"), Expr("corpus.avgdl"))))
_FILTER_JOIN = "JOIN chunks c ON c.id = s.chunk_id JOIN files f ON f.path = c.path WHERE {filters}"


def bm25(
    con: duckdb.DuckDBPyConnection,
    query: str,
    limit: int,
    filters: str = "TRUE",
    params: dict[str, Any] | None = None,
    window: Window | None = None,
) -> list[tuple[int, float]]:
    """Top `limit` (chunk_id, BM25 score) for `query`, restricted by a SQL condition over `c` and `f` and to the
    fact chunks that hold in `window` (see `_fact_window`)."""
    hashes = sorted({term_hash(t) for t in terms(query)})
    if not hashes:
        return []
    cache = search_cache.of(con)  # the service's in-memory postings: same ranking, no SQL
    if cache is not None and (found := cache.bm25(con, hashes, limit, filters, params, window)) is not None:
        return found
    filters = _within(filters, window)
    sql = _BM25_SQL.format(
        terms=", ".join(f"{h}::UBIGINT" for h in hashes), limit=int(limit),
        join="" if filters == "TRUE" else _FILTER_JOIN.format(filters=filters),
    )
    return con.execute(sql, params or None).fetchall()


def _file_filters(
    start_date: Any = None,
    end_date: Any = None,
    tags: Sequence[str] | None = None,
    path_prefix: str | None = None,
    include_archived: bool = False,
    strict_dates: bool = False,
    as_of: Any = None,
    history: bool = False,
) -> tuple[str, dict[str, Any]]:
    """SQL condition over `files f` (and its parameters, none so far) for the search filters.

    Archived digest nodes (digest/archive/) are left out unless `include_archived` or a path_prefix inside
    the archive asks for them. A date range applies to dated files only (undated ones, e.g. digest nodes,
    pass) unless `strict_dates`. Tags match when any is among the file's, compared normalised. Time
    (storage/text/validity.py): `as_of` a day keeps the digest nodes valid on it and the dated files up to it;
    otherwise superseded and expired digest nodes are left out unless `history`."""
    undated = "" if strict_dates else "f.date IS NULL OR "
    conds = []
    if as_of:
        conds.append(_valid_on(_as_date(as_of)))
    elif not history:
        conds.append(_current_on(dt.date.today()))
    if not include_archived and not (path_prefix or "").strip("/").startswith(ARCHIVE.rstrip("/")):
        conds.append(f"NOT starts_with(f.path, {sql_literal(ARCHIVE)})")
    if start_date:
        conds.append(f"({undated}f.date >= {sql_literal(_as_date(start_date))})")
    if end_date:
        conds.append(f"({undated}f.date <= {sql_literal(_as_date(end_date))})")
    if tags:
        conds.append(f"list_has_any(f.tags, {sql_literal([normalize_tag(t) for t in tags])}::VARCHAR[])")
    if path_prefix:
        prefix = path_prefix.strip("/") + ("/" if path_prefix.endswith("/") else "")
        conds.append(f"starts_with(f.path, {sql_literal(prefix)})")
    return (" AND ".join(conds) or "TRUE"), {}


def _fact_window(as_of: Any = None, history: bool = False) -> Window | None:
    """Which fact chunks (their `valid_from`/`valid_to`, a digest node fact's `since`/`until`) search keeps on
    top of the file filters: `as_of` a day, those that held on it (`since <= day < until`); by default those
    whose `until` has not come (retired facts are history); with `history` all (None). Open ends hold, and
    chunks without a window (not facts, or facts of cards) always pass."""
    if as_of:
        day = _as_date(as_of)
        return day, day
    return None if history else (None, dt.date.today())


def _within(filters: str, window: Window | None) -> str:
    """`filters` and the fact window as one SQL condition over the chunk `c` and its file `f`."""
    if window is None:
        return filters
    first, day = window
    cond = holds(Expr("coalesce(c.valid_from, '-infinity'::DATE)"), Expr("coalesce(c.valid_to, 'infinity'::DATE)"),
                 None if first is None else Expr(sql_literal(first)), Expr(sql_literal(day))).sql
    return cond if filters == "TRUE" else f"{filters} AND {cond}"


def _fm_date(key: str) -> str:
    return f"TRY_CAST(left(json_extract_string(f.frontmatter, '$.{key}'), 10) AS DATE)"


_DIGEST = "starts_with(f.path, 'digest/')"
_STATUS = "lower(coalesce(json_extract_string(f.frontmatter, '$.status'), ''))"


def _current_on(today: dt.date) -> str:
    """Not a digest node that is superseded or expired on `today` (storage/text/validity.status)."""
    day = sql_literal(today)
    return (f"NOT ({_DIGEST} AND ({_STATUS} IN ('superseded', 'expired') "
            f"OR coalesce({_fm_date('valid_to')} <= {day}, FALSE) OR coalesce({_fm_date('expires')} <= {day}, FALSE)))")


def _valid_on(day: dt.date) -> str:
    """Digest nodes whose facts held on `day` (`valid_from <= day < valid_to`, not expired by then), other files
    dated up to it."""
    d = sql_literal(day)
    return (f"(CASE WHEN {_DIGEST} THEN coalesce({_fm_date('valid_from')} <= {d}, TRUE) "
            f"AND coalesce({_fm_date('valid_to')} > {d}, TRUE) AND coalesce({_fm_date('expires')} > {d}, TRUE) "
            f"ELSE coalesce(f.date <= {d}, TRUE) END)")


def _as_date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value)[:10])


def fuse(lists: Sequence[Sequence[Any]], weights: Sequence[float], k: int = RRF_K) -> list[tuple[Any, float]]:
    """Reciprocal rank fusion of ranked id lists: [(id, score)] best first, score in 0..1."""
    best = sum(w / (k + 1) for w, ids in zip(weights, lists) if ids) or 1.0
    scores: dict[Any, float] = {}
    for ids, weight in zip(lists, weights):
        for rank, item in enumerate(ids, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(((item, s / best) for item, s in scores.items()), key=lambda x: (-x[1], str(x[0])))


def search(
    con: duckdb.DuckDBPyConnection,
    query: str,
    limit: int = 10,
    min_score: float | None = None,
    start_date: Any = None,
    end_date: Any = None,
    tags: Sequence[str] | None = None,
    path_prefix: str | None = None,
    expand: int = 3,
    vectors: Vectors | None = None,
    weights: tuple[float, float] | None = None,
    rrf_k: int | None = None,
    include_archived: bool = False,
    per_file: int | None = PER_FILE,
    strict_dates: bool = False,
    as_of: Any = None,
    history: bool = False,
) -> list[dict]:
    """Chunks matching `query`: BM25 (+ vector) candidates fused by RRF, filtered, with linked neighbours.

    Filters: `start_date`/`end_date` (inclusive, on the file's daily/frontmatter date; undated files pass
    unless `strict_dates`), `tags` (any of, normalised),
    `path_prefix`, `min_score` (minimum BM25 score for a keyword candidate), `include_archived` (also
    digest/archive/), `as_of` (only what was valid on that day: digest nodes by their validity window, their facts
    by their own `since`/`until`, dated files up to it), `history` (also superseded and expired digest nodes and
    retired facts, left out by default). `weights` are the RRF weights of the (keyword, vector) lists (default: 1
    and the vectors object's `weight`, if it has one); `rrf_k` defaults to the vectors object's `rrf_k`, else RRF_K.
    `per_file` caps the hits from one file (None: no cap), but not its fact lines: each is one thing remembered
    (a node holding every fact about the user would otherwise answer with one of them); a file's lower-ranked
    matching chunks then show up as the `more` line ranges ([start, end], best first, at most MORE_RANGES) of its
    last hit instead of taking result slots. The candidate pool widens until `limit` hits are found or every
    candidate was seen, so a file holding all the top candidates still leaves room for `limit` distinct files.
    A query naming a date or period ("in June 2023", "last week") ranks chunks of files dated then higher in
    the keyword list (`date_boost`); relative times count from `as_of` when given.
    A provenance chain (a card fact and the node fact it became, storage/index/indexer.py) is one hit: the node fact, in
    the place of its best-ranked member, its card facts as `evidence`; a card fact whose node fact no longer
    holds is left out like that node fact (kept with `history` or `as_of` a day it held).
    Each hit: path, start_line, end_line, score (fused), bm25, bm25_rank, vector_score, vector_rank, signals
    (which lists found it, see `signals`, and "date" when its file is dated in a period the query names),
    headings, text, name, description, date, status, valid_from, valid_to (a node fact's: its own window, and
    `superseded` once its `until` has come), replaced_by (a node fact's: what replaced it, if anything),
    evidence ([{path, start_line, end_line}] of the chain's card facts among the candidates), chunk_id, more,
    neighbors (up to
    `expand` outgoing and `expand` incoming links of the hit's file, each with the neighbour's name and
    description).
    """
    if limit <= 0:
        return []
    filters, params = _file_filters(start_date, end_date, tags, path_prefix, include_archived, strict_dates,
                                    as_of, history)
    window = _fact_window(as_of, history)
    holding = _file_filters(include_archived=include_archived, as_of=as_of, history=history)[0]
    pool = max(CANDIDATES, 3 * limit)
    spans = timeref.periods(query, _as_date(as_of) if as_of else None)[:DATE_SPANS]
    _prepare(vectors, con, query)
    weights = weights or (1.0, _vector_weight(vectors))
    rrf_k = rrf_k or _vector_rrf_k(vectors)
    while True:  # a file with many matching chunks can fill the pool: widen it until `limit` files are found
        keyword = bm25(con, query, pool, filters, params, window)
        full = len(keyword) >= pool
        if min_score is not None:
            keyword = [(cid, s) for cid, s in keyword if s >= min_score]
        keyword, dated = date_boost(con, keyword, spans)
        semantic = _vector_candidates(con, vectors, query, pool, path_prefix, _within(filters, window), params)
        full = full or len(semantic) >= pool
        fused = fuse([[cid for cid, _ in keyword], [cid for cid, _ in semantic]], weights, rrf_k)
        fused, members = one_per_chain(con, fused, filters, holding)
        kept, more = _top_hits(con, fused, limit, per_file)
        if len(kept) >= limit or not full:
            break
        pool *= 4
    if not kept:
        return []
    kw = {cid: (rank, s) for rank, (cid, s) in enumerate(keyword, 1)}
    vec = {cid: (rank, s) for rank, (cid, s) in enumerate(semantic, 1)}
    results = []
    for hit, score in kept:
        cid = hit["chunk_id"]
        hit["score"] = round(score, 6)
        hit["bm25_rank"], hit["bm25"] = kw.get(cid, (None, None))
        hit["vector_rank"], hit["vector_score"] = vec.get(cid, (None, None))
        hit["signals"] = signals(hit["bm25_rank"], hit["vector_rank"], weights, rrf_k) + ["date"] * (cid in dated)
        hit["more"] = more.get(cid, [])
        hit["evidence"] = members.get(cid, [])
        results.append(hit)
    _evidence_rows(con, results)
    neighbours = _neighbours(con, results, expand) if expand > 0 else {}
    # one files lookup for the hits and all their neighbours
    info = _file_info(con, {h["path"] for h in results} | {n["path"] for ns in neighbours.values() for n in ns})
    today = dt.date.today()
    for hit in results:
        fact_window = hit.pop("valid_from"), hit.pop("valid_to")
        hit.update(zip(_FILE_COLUMNS, info.get(hit["path"], (None,) * len(_FILE_COLUMNS))))
        if hit["path"].startswith(DIALOG):  # a conversation: the day it was said (its first record's)
            hit["date"] = fact_window[0]
        elif any(fact_window):  # a fact: its own validity (a card fact: the node fact's it became)
            hit["valid_from"], hit["valid_to"] = fact_window
            hit["status"] = validity.fact_status(hit["status"], fact_window[1], today)
            hit["replaced_by"] = validity.replaced_by(hit["text"])
        hit["flags"] = instruction_flags(hit["text"])  # a line speaking to the agent: data, flagged
        hit["neighbors"] = neighbours.get(hit["chunk_id"], [])
        for n in hit["neighbors"]:
            n["name"], n["description"] = info.get(n["path"], (None, None))[:2]
            n["status"] = info[n["path"]][3] if n["path"] in info else None
            n["exists"] = n["path"] in info
    return results


def one_per_chain(con: duckdb.DuckDBPyConnection, fused: list[tuple[int, float]], filters: str, holding: str
                  ) -> tuple[list[tuple[int, float]], dict[int, list[int]]]:
    """`fused` with each card fact a dream consumed in the place of the node fact it became (storage/index/indexer.py:
    one thing remembered, shown once, as its highest member), and {node fact chunk: the card fact chunks
    standing behind it}. A node fact the file filters leave out (`filters`) lets its card fact stand for it
    when its node holds (`holding`: not archived, superseded or expired); else the card fact goes with it."""
    heads = _heads(con, [cid for cid, _ in fused])
    if not heads:
        return fused, {}
    verdicts = {r[0]: r[1:] for r in con.execute(
        f"SELECT c.id, {filters}, {holding} FROM chunks c JOIN files f ON f.path = c.path "
        f"WHERE c.id IN ({in_list(set(heads.values()))})").fetchall()}
    out: list[tuple[int, float]] = []
    placed: set[int] = set()
    members: dict[int, list[int]] = {}
    for cid, score in fused:
        head = heads.get(cid)
        if head is not None:
            passes, holds = verdicts.get(head, (False, False))
            if passes:
                members.setdefault(head, []).append(cid)
                cid = head
            elif not holds:
                continue
        if cid not in placed:
            placed.add(cid)
            out.append((cid, score))
    return out, members


def _heads(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, int]:
    """{chunk id: the node fact chunk it became} of the consumed card facts among `ids`."""
    if not ids:
        return {}
    if (cache := search_cache.of(con)) is not None and (held := cache.heads(con, ids)) is not None:
        return held
    return dict(con.execute(
        f"SELECT id, became FROM chunks WHERE id IN ({in_list(ids)}) AND became IS NOT NULL").fetchall())


def _evidence_rows(con: duckdb.DuckDBPyConnection, hits: list[dict]) -> None:
    """Each hit's `evidence` (the card fact chunks behind a node fact) as {path, start_line, end_line}."""
    rows = _chunk_rows(con, [m for hit in hits for m in hit["evidence"]]) if any(h["evidence"] for h in hits) else {}
    for hit in hits:
        hit["evidence"] = [{"path": rows[m][0], "start_line": rows[m][1], "end_line": rows[m][2]}
                           for m in hit["evidence"] if m in rows]


def signals(bm25_rank: int | None, vector_rank: int | None, weights: Sequence[float], k: int) -> list[str]:
    """Names of the ranked lists that found a hit ("keyword", "vector"), the one that added most to its fused
    score first: what a reader needs to tell a word match from a match in meaning."""
    found = [(w / (k + rank), name) for name, rank, w in (("keyword", bm25_rank, weights[0]),
                                                           ("vector", vector_rank, weights[1]))
             if rank is not None and w > 0]
    return [name for _, name in sorted(found, key=lambda x: -x[0])]


def date_boost(
    con: duckdb.DuckDBPyConnection, keyword: list[tuple[int, float]], spans: list[tuple[dt.date, dt.date]]
) -> tuple[list[tuple[int, float]], set[int]]:
    """The keyword list re-ranked with the BM25 score of chunks whose file is dated inside one of `spans` (or
    up to DATE_AFTER days after it) times DATE_BOOST (scores reported unchanged), and the ids of those chunks.
    No spans (the query names no date): the list as it is, without a query."""
    if not spans or not keyword:
        return keyword, set()
    within = " OR ".join(f"f.date BETWEEN {sql_literal(a)} AND {sql_literal(b + dt.timedelta(days=DATE_AFTER))}"
                         for a, b in spans)
    dated = {r[0] for r in con.execute(
        f"SELECT c.id FROM chunks c JOIN files f ON f.path = c.path "
        f"WHERE c.id IN ({in_list(cid for cid, _ in keyword)}) AND ({within})"
    ).fetchall()}
    ranked = sorted(keyword, key=lambda x: (-x[1] * (DATE_BOOST if x[0] in dated else 1.0), x[0]))
    return ranked, dated


def _top_hits(
    con: duckdb.DuckDBPyConnection, fused: list[tuple[int, float]], limit: int, per_file: int | None
) -> tuple[list[tuple[dict, float]], dict[int, list[list[int]]]]:
    """The hits (chunk rows as dicts, with their fused score) of the first `limit` live chunks of `fused`, at
    most `per_file` per file (None: no cap), and {kept chunk id: [[start, end]] of its file's later candidates
    that the cap left out} (on the file's last kept chunk). Candidates are read in batches of 2 * limit, until
    the results are full."""
    capped = per_file is not None and per_file > 0
    cap = per_file if capped else limit
    kept: list[tuple[dict, float]] = []
    last: dict[str, int] = {}  # path -> its last kept chunk id
    count: dict[str, int] = {}
    more: dict[int, list[list[int]]] = {}
    at, step = 0, 2 * limit
    while at < len(fused) and len(kept) < limit:
        batch = fused[at:at + step]  # file facts come later (_file_info): a join here would scan every chunk
        at, step = at + step, 2 * step  # one file may hold many candidates: read on in growing batches
        rows = _chunk_rows(con, [c for c, _ in batch])
        for cid, score in batch:
            row = rows.get(cid)
            if row is None:  # deleted since it was ranked
                continue
            path, start, end, fact = row
            if (fact or count.get(path, 0) < cap) and len(kept) < limit:
                kept.append(({"chunk_id": cid, "path": path, "start_line": start, "end_line": end}, score))
                count[path] = count.get(path, 0) + 1
                last[path] = cid
            elif path in last and capped and len(more.get(last[path], ())) < MORE_RANGES:
                more.setdefault(last[path], []).append([start, end])
    texts = _chunk_texts(con, [h["chunk_id"] for h, _ in kept]) if kept else {}
    for hit, _ in kept:
        hit["headings"], hit["text"], hit["valid_from"], hit["valid_to"] = texts[hit["chunk_id"]]
    return kept, more


def _chunk_rows(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, tuple[str, int, int, bool]]:
    """{chunk id: (path, start_line, end_line, is a fact line)} of the chunks among `ids` that still exist."""
    if (cache := search_cache.of(con)) is not None and (held := cache.rows(con, ids)) is not None:
        return held
    return {r[0]: r[1:] for r in con.execute(
        f"SELECT id, path, start_line, end_line, {FACT_CHUNK} FROM chunks WHERE id IN ({in_list(ids)})"
    ).fetchall()}


def _chunk_texts(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, tuple]:
    """{chunk id: (headings, text, valid_from, valid_to)} of the chunks among `ids` (the window as YYYY-MM-DD)."""
    if (cache := search_cache.of(con)) is not None and (held := cache.chunk_texts(con, ids)) is not None:
        return held
    return {r[0]: r[1:] for r in con.execute(
        "SELECT id, headings, text, strftime(valid_from, '%Y-%m-%d'), strftime(valid_to, '%Y-%m-%d') FROM chunks "
        f"WHERE id IN ({in_list(ids)})").fetchall()}


def _vector_candidates(
    con: duckdb.DuckDBPyConnection,
    vectors: Vectors | None,
    query: str,
    k: int,
    path_prefix: str | None,
    filters: str,
    params: dict[str, Any],
) -> list[tuple[int, float]]:
    """The vector list, ranked: live chunks that pass the file filters (the vectors object applies them)."""
    if vectors is None:
        return []
    found = vectors.candidates(con, query, k, path_prefix=path_prefix, filters=filters, params=params) or []
    return [(int(cid), float(s)) for cid, s in found]


_FILE_COLUMNS = ("name", "description", "date", "status", "valid_from", "valid_to")


def _file_info(con: duckdb.DuckDBPyConnection, paths: Iterable[str]) -> dict[str, tuple]:
    """{path: (name, description, date 'YYYY-MM-DD', status, valid_from, valid_to)} for the indexed ones among
    `paths`: a digest node's status on today and validity window (storage/text/validity.py); a dated file is valid
    from its day, with no status (history)."""
    paths = list(paths)
    if not paths:
        return {}
    if (cache := search_cache.of(con)) is not None and (held := cache.file_info(con, paths)) is not None:
        return _file_facts(held.items())
    rows = con.execute(
        f"SELECT path, {FILE_FACTS} FROM files WHERE path IN ({in_list(paths)})").fetchall()
    return _file_facts((r[0], r[1:]) for r in rows)


def _file_facts(rows: Iterable[tuple[str, tuple]]) -> dict[str, tuple]:
    """{path: (name, description, date, status, valid_from, valid_to)} from (path, FILE_FACTS values) rows."""
    today = dt.date.today()
    info = {}
    for path, (name, description, date, *values) in rows:
        meta = dict(zip(validity.KEYS[:4], values))
        if path.startswith("digest/"):
            span = validity.window(meta)
            info[path] = (name, description, date, validity.status(meta, today), span["valid_from"], span["valid_to"])
        else:
            info[path] = (name, description, date, None, date, None)
    return info


# Links from and to the hits' files (two lookups: each uses its column's index; an OR would scan).
_NEIGHBOURS_SQL = """
SELECT source, target, anchor, predicate, line FROM links WHERE source IN ({paths}) AND source <> target
UNION ALL
SELECT source, target, anchor, predicate, line FROM links WHERE target IN ({paths}) AND source <> target
ORDER BY line, source, target
"""


def _neighbours(con: duckdb.DuckDBPyConnection, hits: list[dict], n: int) -> dict[int, list[dict]]:
    """Up to `n` outgoing and `n` incoming neighbours per hit (name/description/exists filled by the caller)."""
    paths = {h["path"] for h in hits}
    if not paths:
        return {}
    links = _link_rows(con, paths)
    picked: dict[int, list[tuple[str, tuple]]] = {}
    for hit in hits:
        out = sorted((l for l in links if l[0] == hit["path"]),
                     key=lambda l: not hit["start_line"] <= (l[4] or 0) <= hit["end_line"])
        inc = [l for l in links if l[1] == hit["path"]]
        chosen = []
        for direction, edges, end in (("out", out, 1), ("in", inc, 0)):
            seen: set[str] = set()
            for edge in edges:
                if edge[end] not in seen and len(seen) < n:
                    seen.add(edge[end])
                    chosen.append((direction, edge, edge[end]))
        picked[hit["chunk_id"]] = chosen
    return {
        cid: [
            {"path": path, "name": None, "description": None, "anchor": edge[2], "predicate": edge[3],
             "direction": direction, "line": edge[4], "exists": False}
            for direction, edge, path in chosen
        ]
        for cid, chosen in picked.items()
    }


def _link_rows(con: duckdb.DuckDBPyConnection, paths: set[str]) -> list[tuple]:
    """(source, target, anchor, predicate, line) of the links leaving or entering `paths`, by line."""
    if (cache := search_cache.of(con)) is not None and (held := cache.links(con, paths)) is not None:
        return held
    return con.execute(_NEIGHBOURS_SQL.format(paths=in_list(paths))).fetchall()


def node_search(
    con: duckdb.DuckDBPyConnection, query: str, limit: int = 20, vectors: Vectors | None = None,
    as_of: Any = None, history: bool = False, prefix: str = "digest/",
) -> list[dict]:
    """Digest nodes matching `query` (archived ones left out; `as_of` and `history` as in `search`), one row
    per node: {path, name, description, score, status, valid_from, valid_to}; `prefix`: one bucket's only
    (`digest/project/`)."""
    if limit <= 0:
        return []
    filters, params = _file_filters(path_prefix=prefix, as_of=as_of, history=history)
    window = _fact_window(as_of, history)
    pool = max(CANDIDATES, 5 * limit)
    _prepare(vectors, con, query)
    while True:  # a node with many matching chunks can fill the pool: widen it until `limit` nodes are found
        keyword = bm25(con, query, pool, filters, params, window)
        semantic = _vector_candidates(con, vectors, query, pool, prefix, _within(filters, window), params)
        ids = {cid for cid, _ in keyword} | {cid for cid, _ in semantic}
        if not ids:
            return []
        path_of = dict(con.execute(f"SELECT id, path FROM chunks WHERE id IN ({in_list(ids)})").fetchall())
        fused = fuse([_first_paths(keyword, path_of), _first_paths(semantic, path_of)],
                     (1.0, _vector_weight(vectors)), _vector_rrf_k(vectors))[:limit]
        if len(fused) >= limit or (len(keyword) < pool and len(semantic) < pool):
            break
        pool *= 4
    info = _file_info(con, [p for p, _ in fused])
    return [
        {"path": p, "name": info[p][0], "description": info[p][1], "score": round(s, 6),
         **dict(zip(_FILE_COLUMNS[3:], info[p][3:]))}
        for p, s in fused
        if p in info
    ]


def _prepare(vectors: Vectors | None, con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Let a vectors object that can (storage/index/vectors.py) score the query while BM25 runs."""
    if vectors is not None and hasattr(vectors, "prepare"):
        vectors.prepare(con, query)


def _vector_weight(vectors: Vectors | None) -> float:
    """RRF weight of the vector list: the vectors object's `weight` attribute, else 1."""
    return float(getattr(vectors, "weight", 1.0))


def _vector_rrf_k(vectors: Vectors | None) -> int:
    """RRF k: the vectors object's `rrf_k` attribute (tuned with its model), else RRF_K."""
    return int(getattr(vectors, "rrf_k", None) or RRF_K)


def _first_paths(ranked: list[tuple[int, float]], path_of: dict[int, str]) -> list[str]:
    """Paths in order of their best-ranked chunk."""
    seen: dict[str, None] = {}
    for cid, _ in ranked:
        if cid in path_of:
            seen.setdefault(path_of[cid])
    return list(seen)


def traverse(
    con: duckdb.DuckDBPyConnection,
    paths: Sequence[str],
    depth: int = 1,
    direction: str = "both",
    predicate: str | None = None,
    limit: int = 200,
) -> dict:
    """Walk links from `paths` up to `depth` hops: forward (source -> target), backward, or both.

    Returns {nodes: [{path, name, description, exists, depth}], edges: [{source, target, line, anchor,
    alias, predicate}], truncated}; at most `limit` nodes, and only edges between returned nodes.
    """
    if direction not in ("forward", "backward", "both"):
        raise ValueError(f"direction must be forward, backward or both, not {direction!r}")
    reached: dict[str, int] = dict.fromkeys(paths, 0)
    truncated = len(reached) > limit
    reached = dict(list(reached.items())[:limit])
    edges: dict[tuple, dict] = {}
    frontier = list(reached)
    for level in range(1, max(depth, 0) + 1):
        if not frontier:
            break
        next_frontier = []
        for edge in _edges(con, frontier, direction, predicate):
            for end in (edge["source"], edge["target"]):
                if end not in reached:
                    if len(reached) >= limit:
                        truncated = True
                        continue
                    reached[end] = level
                    next_frontier.append(end)
            if edge["source"] in reached and edge["target"] in reached:
                edges.setdefault(tuple(edge.values()), edge)
        frontier = next_frontier
    info = _file_info(con, reached)
    nodes = [
        {"path": p, "name": info.get(p, (None,))[0], "description": info.get(p, (None, None))[1],
         "exists": p in info, "depth": d}
        for p, d in reached.items()
    ]
    return {"nodes": nodes, "edges": list(edges.values()), "truncated": truncated}


def _edges(con: duckdb.DuckDBPyConnection, frontier: list[str], direction: str, predicate: str | None) -> list[dict]:
    """Links leaving (forward), entering (backward) or touching (both) the frontier, optionally one predicate."""
    ends = {"forward": ["source"], "backward": ["target"], "both": ["source", "target"]}[direction]
    only = "" if predicate is None else f" AND predicate = {sql_literal(predicate)}"
    rows = con.execute(" UNION ".join(
        f"SELECT source, target, line, anchor, alias, predicate FROM links WHERE {end} IN ({in_list(frontier)}){only}"
        for end in ends
    ) + " ORDER BY source, line, target").fetchall()
    return [dict(zip(("source", "target", "line", "anchor", "alias", "predicate"), r)) for r in rows]
