"""How much of a query a keyword match carries, in numbers that mean the same on a memory of 2 chunks or 2
million: what `recall`'s `min_score`, `min_relevance` and `min_words` (the thresholds of the Claude Code hook,
dreamflow/hooks/context.py) are compared with.

BM25 weighs a word by its inverse document frequency, ln(1 + (N - df + 0.5) / (df + 0.5)): about -ln of the
share of the N chunks that hold it, so a score is a statement about shares (4: the matched words together are
as rare as a word held by about one chunk in 55), whatever N is. Below FLOOR chunks a share cannot be that small (a word
in 1 of 2 notes weighs 0.69, and no match reached 4 until a memory had about ten files), so the memory counts
as FLOOR chunks, the missing ones holding none of the query's words: a word in 1 of 2 notes weighs what it
will once the memory has grown around it. From FLOOR chunks on, the score is the hit's BM25 score as search
ranks it. A query word no chunk holds weighs as much as the rarest word can.

A match must also hold `min_words` distinct words of the query: one shared word ("thanks", "line") tells
nothing, however rare it is in the memory. A query asking fewer words (`Who is my landlord?`: one) needs them
all; one of small talk only (`thanks!`, `ok`) asks nothing. Measured from one session to 20,000 files: docs/benchmarks.md
("The same thresholds at any size of memory").

With an embedder, meaning stands in for the words a fact does not use: a hit holding one word of the query (a rare
one: NEAR_SCORE) passes when its text is as close to the query as the vectors' `close` (a cosine; 0.4 for the local
MiniLM): "Which city do I live in?" finds "I moved to Porto, I don't live in Lisbon anymore." (0.41), which holds no
"city" and is no rare match for "live" alone. Measured on LoCoMo and the temporal stories: docs/benchmarks.md
("Meaning for the missing word").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from storage.index.bm25 import idf, saturation
from storage.index.tokenize import SMALL_TALK, term_hash, terms
from storage.search.sql import in_list, sql_literal

NEAR_SCORE = 2.0  # the least score of a hit that passes by meaning: its word of the query is still rare (as if
# held by one chunk in seven), so a common word ("work" among thousands of notes) does not let meaning alone decide
FLOOR = 50  # chunks: a smaller memory is weighed as if it had this many (a word in one of them is 2%); the
# thresholds were tuned on LoCoMo conversations of 45-86 chunks


@dataclass
class QueryTerms:
    """What the index holds of a query's (`text`) distinct terms: `df` {term: live chunks holding it (0: none)},
    `n` live chunks and `avgdl` their average length, as BM25 counts them (storage/search/search.py), except that
    a provenance chain counts once: a card fact a dream consumed is not counted (the node fact it became is: they are
    one thing remembered), so a word said once is as rare as one chunk, however many layers repeat it. Counted by
    subtraction (no DISTINCT): at 100k chunks the terms' counts take 18 ms for a query of 100k postings, 8 ms
    without chains, 22 ms with a DISTINCT count; only the hook's gate asks for them."""

    text: str
    terms: list[str]
    df: dict[str, int]
    n: int
    avgdl: float

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection, query: str) -> QueryTerms:
        qterms = list(dict.fromkeys(terms(query)))
        n, avgdl = con.execute("SELECT count(*) - count(became), coalesce(avg(length), 0) FROM chunks").fetchone()
        rows = con.execute(
            f"SELECT q.t, count(*) - count(consumed.id) FROM {_hashed(qterms)} q JOIN postings p ON p.term = q.h "
            f"LEFT JOIN (SELECT id FROM chunks WHERE became IS NOT NULL) consumed ON consumed.id = p.chunk_id "
            f"WHERE p.chunk_id NOT IN (SELECT id FROM stale_chunks) GROUP BY q.t"
        ).fetchall() if qterms else []
        return cls(query, qterms, {t: 0 for t in qterms} | dict(rows), n, float(avgdl))

    def weights(self) -> dict[str, float]:
        """{term: its BM25 weight over the index as it is}, terms no chunk holds left out: how recall tells a hit's
        lines that carry the query's rarer words."""
        return {t: idf(df, self.n) for t, df in self.df.items() if df}

    def relevance_weights(self) -> dict[str, float]:
        """{term: its weight over at least FLOOR chunks}; a term no chunk holds weighs as the rarest can."""
        n = max(self.n, FLOOR)
        return {t: idf(df, n) for t, df in self.df.items()}


def relevant(con: duckdb.DuckDBPyConnection, query: QueryTerms, chunk_ids: list[int], min_score: float | None = None,
             min_relevance: float | None = None, min_words: int | None = None, vectors: Any = None) -> bool:
    """Whether one of the chunks holds at least `min_words` distinct words of the query with a score (BM25 with the
    weights of `relevance_weights`) of at least `min_score` and of at least `min_relevance` times the query's
    weight (its words' weights together, what a chunk holding each word once about scores); or, with `vectors`
    (storage/index/vectors.VectorIndex) and `min_words`, holds one word of the query it asks, scores at least
    NEAR_SCORE and is as close to the query in meaning as `vectors.close`."""
    asked = set(query.terms) - SMALL_TALK  # `Who is my landlord?` asks one word, `thanks!` none
    needed = min(min_words or 0, len(asked)) if asked else (min_words or 0)
    weights = query.relevance_weights()
    floor = max(min_score or 0.0, (min_relevance or 0.0) * sum(weights.values()))
    held = _held(con, query, chunk_ids)
    near: list[int] = []
    for cid in chunk_ids:
        words = held.get(cid, [])  # a hit found by meaning alone: no words, score 0
        score = sum(weights[t] * saturation(tf, length, query.avgdl) for t, tf, length in words)
        if len(words) >= needed and score >= floor:
            return True
        if score >= NEAR_SCORE and any(t in asked for t, _, _ in words):
            near.append(cid)
    if not (near and min_words and vectors is not None and hasattr(vectors, "closeness")):
        return False
    return any(cos >= vectors.close for cos in vectors.closeness(con, query.text, near).values())


def _held(con: duckdb.DuckDBPyConnection, query: QueryTerms, chunk_ids: list[int]) -> dict[int, list[tuple]]:
    """{chunk id: [(query term, its count in the chunk, the chunk's length)]} of the chunks holding any."""
    present = [t for t in query.terms if query.df[t]]
    if not present or not chunk_ids:
        return {}
    held: dict[int, list[tuple]] = {}
    for cid, t, tf, length in con.execute(
            f"SELECT p.chunk_id, q.t, p.tf, p.length FROM {_hashed(present)} q "
            f"JOIN postings p ON p.term = q.h WHERE p.chunk_id IN ({in_list(chunk_ids)})").fetchall():
        held.setdefault(cid, []).append((t, tf, length))
    return held


def _hashed(words: list[str]) -> str:
    """The terms and their postings key as an SQL table (t, h)."""
    return (f"(SELECT unnest({sql_literal(words)}::VARCHAR[]) AS t, "
            f"unnest({sql_literal([term_hash(w) for w in words])}::UBIGINT[]) AS h)")
