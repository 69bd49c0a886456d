"""SQL text that search (storage/search.py) and its in-memory cache (storage/search_arrays.py) both write:
values as literals, and the select list of a file's facts."""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable

from storage import validity


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


# A file's facts as search and its cache (storage/search_arrays.py) read them: name, description,
# date, and the validity keys of its frontmatter as written
FILE_FACTS = "name, description, strftime(date, '%Y-%m-%d'), " + ", ".join(
    f"json_extract_string(frontmatter, '$.{k}')" for k in validity.KEYS[:4])
