"""SQL text that search (storage/search/search.py) and its in-memory cache (storage/search/arrays.py) both write:
values as literals, the select list of a file's facts, and `Expr`, which lets one formula over numbers also
be written as SQL (storage/index/bm25.py)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Iterable

from storage.text import validity
from storage.text.model import DIALOG


def sql_literal(value: Any) -> str:
    """A value as a DuckDB SQL literal: str, int, float, bool, None, date, or a list of those."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("\x00", "").replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(sql_literal(v) for v in value) + "]"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def in_list(values: Iterable[Any]) -> str:
    """The values as the inside of an SQL `IN (...)`."""
    return ", ".join(sql_literal(v) for v in values)


# Whether a chunk is one fact line (storage/index/chunking.py: its `search_text` the fact's words; a
# conversation's chunks have one too, what was said): each is one thing remembered, never capped per file
FACT_CHUNK = f"(search_text IS NOT NULL AND path NOT LIKE '{DIALOG}%')"

# A file's facts as search and its cache (storage/search/arrays.py) read them: name, description,
# date, and the validity keys of its frontmatter as written
FILE_FACTS = "name, description, strftime(date, '%Y-%m-%d'), " + ", ".join(
    f"json_extract_string(frontmatter, '$.{k}')" for k in validity.KEYS[:4])


class Expr:
    """An SQL expression that Python arithmetic and comparisons build on: `Expr("tf") + 1` is the expression
    `(tf + 1.0::DOUBLE)`, `Expr("a") > Expr("b")` is `(a > b)` and `&` is AND. A formula written over numbers
    (or numpy arrays) then also writes its SQL when given Exprs; numbers go in as DOUBLE (decimal arithmetic
    is slower), other values as literals."""

    def __init__(self, sql: str) -> None:
        self.sql = sql

    def __str__(self) -> str:
        return self.sql

    def _op(self, op: str, other: Any, swapped: bool = False) -> "Expr":
        other = other.sql if isinstance(other, Expr) else _operand(other)
        left, right = (other, self.sql) if swapped else (self.sql, other)
        return Expr(f"({left} {op} {right})")

    def __add__(self, other: Any) -> "Expr": return self._op("+", other)
    def __radd__(self, other: Any) -> "Expr": return self._op("+", other, True)
    def __sub__(self, other: Any) -> "Expr": return self._op("-", other)
    def __rsub__(self, other: Any) -> "Expr": return self._op("-", other, True)
    def __mul__(self, other: Any) -> "Expr": return self._op("*", other)
    def __rmul__(self, other: Any) -> "Expr": return self._op("*", other, True)
    def __truediv__(self, other: Any) -> "Expr": return self._op("/", other)
    def __rtruediv__(self, other: Any) -> "Expr": return self._op("/", other, True)
    def __gt__(self, other: Any) -> "Expr": return self._op(">", other)  # type: ignore[override]
    def __le__(self, other: Any) -> "Expr": return self._op("<=", other)  # type: ignore[override]
    def __and__(self, other: Any) -> "Expr": return self._op("AND", other)


def _operand(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value)!r}::DOUBLE"
    return sql_literal(value)


def ln(x: Any) -> Any:
    """Natural logarithm of a number, or of an Expr (DuckDB's ln)."""
    return Expr(f"ln({x.sql})") if isinstance(x, Expr) else math.log(x)
