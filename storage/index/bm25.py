"""BM25 and the fact window, written once for both search paths: the SQL query of storage/search/search.py (given
storage.search.sql.Expr column names, these functions write its SQL) and the service's in-memory cache
(storage/search/arrays.py: given numbers and numpy arrays, they compute). Same formula, same order of
operations: the same float64 scores.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from storage.search.sql import ln

K1 = 1.2
B = 0.75

Window = tuple[dt.date | None, dt.date]  # fact chunks kept: `valid_from <= first` (None: any) and `day < valid_to`


def score(tf: Any, length: Any, df: Any, n: Any, avgdl: Any) -> Any:
    """BM25 (k1 = K1, b = B) of one term in one chunk: `tf` occurrences in a chunk of `length` terms, the term
    in `df` of the `n` chunks, whose average length is `avgdl`. A chunk's score is the sum over query terms."""
    return idf(df, n) * saturation(tf, length, avgdl)


def idf(df: Any, n: Any) -> Any:
    """BM25's inverse document frequency of a term held by `df` of `n` chunks."""
    return ln(1 + (n - df + 0.5) / (df + 0.5))


def saturation(tf: Any, length: Any, avgdl: Any) -> Any:
    """BM25's term-frequency part: `tf` occurrences in a chunk of `length` terms (average length `avgdl`)."""
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))


def holds(valid_from: Any, valid_to: Any, first: Any, day: Any) -> Any:
    """A fact chunk's window (`valid_from`, `valid_to`; open ends as the earliest and latest value) keeps it
    for a search window (`first`, `day`; see storage/search/search.py `_fact_window`): `valid_from <= first` (any
    start when `first` is None) and `day < valid_to`."""
    keep = valid_to > day
    return keep if first is None else keep & (valid_from <= first)
