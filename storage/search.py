"""Recall over the index: `search` (BM25 [+ vectors] -> RRF -> link expansion), `node_search`, `traverse`.

BM25 (k1 = 1.2, b = 0.75) is scored in SQL over the `postings` table, with document frequencies and the
average chunk length taken from the live tables, so a write is visible to the next query. When a `vectors`
object is given (see storage/vectors.py) its candidates are fused with the keyword list by reciprocal rank
fusion: score = sum(weight / (RRF_K + rank)) over the lists a chunk appears in, divided by the best
possible sum, so the top hit of every list scores 1.0.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol, Sequence

import duckdb

from storage.tokenize import terms

K1 = 1.2
B = 0.75
RRF_K = 60
CANDIDATES = 50  # at least this many candidates from each list go into the fusion


class Vectors(Protocol):
    """What search needs from a vector index (storage/vectors.py)."""

    def candidates(
        self, con: duckdb.DuckDBPyConnection, query: str, k: int, path_prefix: str | None = None
    ) -> list[tuple[int, float]]: ...


# BM25 of the chunks that contain any query term. Document frequency counts live chunks only, so rows of a
# file deleted in the same transaction never count. `{filters}` narrows the scored chunks (files f).
_BM25_SQL = """
WITH query AS (
    SELECT term, count(*) AS qtf FROM (SELECT unnest($terms::VARCHAR[]) AS term) GROUP BY term
),
corpus AS (SELECT count(*)::DOUBLE AS n, avg(length)::DOUBLE AS avgdl FROM chunks),
matches AS (
    SELECT p.term, p.chunk_id, p.tf, c.length, c.path
    FROM postings p JOIN chunks c ON c.id = p.chunk_id
    WHERE p.term IN (SELECT term FROM query)
),
df AS (SELECT term, count(*)::DOUBLE AS df FROM matches GROUP BY term)
SELECT m.chunk_id,
       sum(q.qtf * ln(1 + (corpus.n - df.df + 0.5) / (df.df + 0.5))
           * m.tf * ($k1 + 1) / (m.tf + $k1 * (1 - $b + $b * m.length / corpus.avgdl))) AS score
FROM matches m
JOIN query q USING (term)
JOIN df USING (term)
CROSS JOIN corpus
JOIN files f ON f.path = m.path
WHERE {filters}
GROUP BY m.chunk_id
ORDER BY score DESC, m.chunk_id
LIMIT $limit
"""


def bm25(
    con: duckdb.DuckDBPyConnection,
    query: str,
    limit: int,
    filters: str = "TRUE",
    params: dict[str, Any] | None = None,
) -> list[tuple[int, float]]:
    """Top `limit` (chunk_id, BM25 score) for `query`, restricted by a SQL condition over files `f`."""
    qterms = terms(query)
    if not qterms:
        return []
    sql = _BM25_SQL.format(filters=filters)
    args = {"terms": qterms, "k1": K1, "b": B, "limit": limit, **(params or {})}
    return con.execute(sql, args).fetchall()


def _file_filters(
    start_date: Any = None,
    end_date: Any = None,
    tags: Sequence[str] | None = None,
    path_prefix: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """SQL condition over `files f` plus its parameters for the search filters."""
    conds, params = [], {}
    if start_date:
        conds.append("f.date >= $start_date")
        params["start_date"] = _as_date(start_date)
    if end_date:
        conds.append("f.date <= $end_date")
        params["end_date"] = _as_date(end_date)
    if tags:
        conds.append("list_has_any(f.tags, $tags::VARCHAR[])")
        params["tags"] = list(tags)
    if path_prefix:
        conds.append("starts_with(f.path, $path_prefix)")
        params["path_prefix"] = path_prefix.strip("/") + ("/" if path_prefix.endswith("/") else "")
    return (" AND ".join(conds) or "TRUE"), params


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
    weights: tuple[float, float] = (1.0, 1.0),
    rrf_k: int = RRF_K,
) -> list[dict]:
    """Chunks matching `query`: BM25 (+ vector) candidates fused by RRF, filtered, with linked neighbours.

    Filters: `start_date`/`end_date` (inclusive, on the file's daily/frontmatter date), `tags` (any of),
    `path_prefix`, `min_score` (minimum BM25 score for a keyword candidate). `weights` are the RRF weights of
    the (keyword, vector) lists. Each hit: path, start_line, end_line, score (fused), bm25, bm25_rank,
    vector_score, vector_rank, headings, text, name, description, date, chunk_id, neighbors (up to `expand`
    outgoing and `expand` incoming links of the hit's file, each with the neighbour's name/description).
    """
    if limit <= 0:
        return []
    filters, params = _file_filters(start_date, end_date, tags, path_prefix)
    pool = max(CANDIDATES, 3 * limit)
    keyword = bm25(con, query, pool, filters, params)
    if min_score is not None:
        keyword = [(cid, s) for cid, s in keyword if s >= min_score]
    semantic = _vector_candidates(con, vectors, query, pool, path_prefix, filters, params)
    fused = fuse([[cid for cid, _ in keyword], [cid for cid, _ in semantic]], weights, rrf_k)[:limit]
    if not fused:
        return []
    hits = _chunk_rows(con, [cid for cid, _ in fused])
    kw = {cid: (rank, s) for rank, (cid, s) in enumerate(keyword, 1)}
    vec = {cid: (rank, s) for rank, (cid, s) in enumerate(semantic, 1)}
    results = []
    for cid, score in fused:
        hit = hits.get(cid)
        if hit is None:
            continue
        hit["score"] = round(score, 6)
        hit["bm25_rank"], hit["bm25"] = kw.get(cid, (None, None))
        hit["vector_rank"], hit["vector_score"] = vec.get(cid, (None, None))
        results.append(hit)
    if expand > 0:
        neighbours = _neighbours(con, [h["chunk_id"] for h in results], expand)
        for hit in results:
            hit["neighbors"] = neighbours.get(hit["chunk_id"], [])
    else:
        for hit in results:
            hit["neighbors"] = []
    return results


def _vector_candidates(
    con: duckdb.DuckDBPyConnection,
    vectors: Vectors | None,
    query: str,
    k: int,
    path_prefix: str | None,
    filters: str,
    params: dict[str, Any],
) -> list[tuple[int, float]]:
    """The vector list, ranked, keeping only live chunks that pass the file filters."""
    if vectors is None:
        return []
    found = list(vectors.candidates(con, query, k, path_prefix=path_prefix) or [])
    if not found:
        return []
    allowed = {
        r[0]
        for r in con.execute(
            f"SELECT c.id FROM chunks c JOIN files f ON f.path = c.path WHERE c.id IN (SELECT unnest($ids)) AND {filters}",
            {"ids": [int(cid) for cid, _ in found], **params},
        ).fetchall()
    }
    return [(int(cid), float(s)) for cid, s in found if int(cid) in allowed]


_HIT_COLUMNS = ("chunk_id", "path", "start_line", "end_line", "headings", "text", "name", "description", "date")


def _chunk_rows(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, dict]:
    rows = con.execute(
        """
        SELECT c.id, c.path, c.start_line, c.end_line, c.headings, c.text, f.name, f.description,
               strftime(f.date, '%Y-%m-%d')
        FROM chunks c JOIN files f ON f.path = c.path
        WHERE c.id IN (SELECT unnest($ids::BIGINT[]))
        """,
        {"ids": ids},
    ).fetchall()
    return {r[0]: dict(zip(_HIT_COLUMNS, r)) for r in rows}


# Up to $n distinct neighbours per hit in each direction; links written inside the hit's own lines first.
_NEIGHBOURS_SQL = """
WITH hit AS (
    SELECT id, path, start_line, end_line FROM chunks WHERE id IN (SELECT unnest($ids::BIGINT[]))
),
edges AS (
    SELECT h.id AS hit, 'out' AS direction, l.target AS path, l.anchor, l.predicate, l.line,
           l.line BETWEEN h.start_line AND h.end_line AS inside
    FROM hit h JOIN links l ON l.source = h.path AND l.target <> h.path
    UNION ALL
    SELECT h.id, 'in', l.source, l.anchor, l.predicate, l.line, FALSE
    FROM hit h JOIN links l ON l.target = h.path AND l.source <> h.path
),
firsts AS (
    SELECT * FROM edges
    QUALIFY row_number() OVER (PARTITION BY hit, direction, path ORDER BY inside DESC, line) = 1
),
ranked AS (
    SELECT * FROM firsts
    QUALIFY row_number() OVER (PARTITION BY hit, direction ORDER BY inside DESC, line, path) <= $n
)
SELECT r.hit, r.path, f.name, f.description, r.anchor, r.predicate, r.direction, r.line, f.path IS NOT NULL
FROM ranked r LEFT JOIN files f ON f.path = r.path
ORDER BY r.hit, r.direction DESC, r.inside DESC, r.line, r.path
"""


def _neighbours(con: duckdb.DuckDBPyConnection, ids: list[int], n: int) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for hit, *row in con.execute(_NEIGHBOURS_SQL, {"ids": ids, "n": n}).fetchall():
        out.setdefault(hit, []).append(
            dict(zip(("path", "name", "description", "anchor", "predicate", "direction", "line", "exists"), row))
        )
    return out


def node_search(
    con: duckdb.DuckDBPyConnection, query: str, limit: int = 20, vectors: Vectors | None = None
) -> list[dict]:
    """Digest nodes matching `query`, one row per node: {path, name, description, score}; no bodies."""
    if limit <= 0:
        return []
    filters, params = _file_filters(path_prefix="digest/")
    pool = max(CANDIDATES, 5 * limit)
    keyword = bm25(con, query, pool, filters, params)
    semantic = _vector_candidates(con, vectors, query, pool, "digest/", filters, params)
    ids = [cid for cid, _ in keyword] + [cid for cid, _ in semantic]
    if not ids:
        return []
    path_of = dict(con.execute("SELECT id, path FROM chunks WHERE id IN (SELECT unnest($ids::BIGINT[]))",
                               {"ids": ids}).fetchall())
    fused = fuse([_first_paths(keyword, path_of), _first_paths(semantic, path_of)], (1.0, 1.0))[:limit]
    if not fused:
        return []
    info = {r[0]: r[1:] for r in con.execute(
        "SELECT path, name, description FROM files WHERE path IN (SELECT unnest($paths::VARCHAR[]))",
        {"paths": [p for p, _ in fused]},
    ).fetchall()}
    return [
        {"path": p, "name": info[p][0], "description": info[p][1], "score": round(s, 6)}
        for p, s in fused
        if p in info
    ]


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
    reached: dict[str, int] = {}
    for p in paths:
        reached.setdefault(p, 0)
    truncated = len(reached) > limit
    reached = dict(list(reached.items())[:limit])
    edges: dict[tuple, dict] = {}
    frontier = list(reached)
    for level in range(1, max(depth, 0) + 1):
        if not frontier or truncated:
            break
        found = _edges(con, frontier, direction, predicate)
        next_frontier = []
        for edge in found:
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
    info = {r[0]: r[1:] for r in con.execute(
        "SELECT path, name, description FROM files WHERE path IN (SELECT unnest($paths::VARCHAR[]))",
        {"paths": list(reached)},
    ).fetchall()}
    nodes = [
        {"path": p, "name": info.get(p, (None, None))[0], "description": info.get(p, (None, None))[1],
         "exists": p in info, "depth": d}
        for p, d in reached.items()
    ]
    return {"nodes": nodes, "edges": list(edges.values()), "truncated": truncated}


def _edges(con: duckdb.DuckDBPyConnection, frontier: list[str], direction: str, predicate: str | None) -> list[dict]:
    ends = {"forward": ["source"], "backward": ["target"], "both": ["source", "target"]}[direction]
    where = " OR ".join(f"{end} IN (SELECT unnest($paths::VARCHAR[]))" for end in ends)
    if predicate is not None:
        where = f"({where}) AND predicate = $predicate"
    params: dict[str, Any] = {"paths": frontier}
    if predicate is not None:
        params["predicate"] = predicate
    rows = con.execute(
        f"SELECT source, target, line, anchor, alias, predicate FROM links WHERE {where} ORDER BY source, line, target",
        params,
    ).fetchall()
    return [dict(zip(("source", "target", "line", "anchor", "alias", "predicate"), r)) for r in rows]
