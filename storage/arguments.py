"""Checks of the arguments operations take: texts, counts, dates, and names of new files and folders.

An operation states each argument's check on its parameter (`limit: Count = 10`, `query: Query`): the
`Annotated` types below carry a `Check`, and `checked` runs them on every call before the operation, for
every caller alike (CLI, HTTP, MCP, Python), so the signature is the operation's one request model. The
surfaces derive their types from the same signature (the `Check`s are invisible to them). Each check raises
InvalidInput with a message that says what to give instead, never a crash deeper down.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from dataclasses import dataclass
from datetime import date as _date
from typing import Annotated, Any, Callable

from annotated_types import Ge, Le

from storage.errors import InvalidInput
from storage.files.workspace import ARCHIVE, is_utf8

DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
BAD_NAME_CHARS = re.compile(r'[<>:"|?*\x00-\x1f\x7f]')
RESERVED_NAMES = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
MAX_COUNT = 10**9  # ceiling for limits and depths: far above any workspace, far below overflowing SQL or dates
# The doctor's thresholds (storage/index/doctor.py), the defaults of every caller (Memory.doctor, the governance flows):
STALE_DAYS = 180  # a digest node nobody links to, not updated for this many days, is stale
OVERLONG_LINES = 300  # a digest node longer than this many lines is a split candidate


def check_query(query: str) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("the search query is empty: give some words to search for")
    check_text(query=query)


def check_text(**values: Any) -> None:
    """Refuse an optional text argument that is not a string, or holds lone surrogates (no file, index row or
    reply can carry them), with a clear error rather than a crash deeper down (in-process callers pass
    anything; the CLI, HTTP and MCP surfaces check types from the signatures first)."""
    for name, value in values.items():
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"{name} must be text, not {type(value).__name__}")
        if value is not None and not is_utf8(value):
            raise InvalidInput(f"{name} is not valid Unicode text (it holds a lone surrogate)")


def check_mapping(metadata: Any) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidInput(f"metadata must be a mapping, not {type(metadata).__name__}")


def check_texts(name: str, values: Any) -> None:
    """`_check_text` for an optional list of strings."""
    if values is not None and not isinstance(values, (list, tuple)):
        raise InvalidInput(f"{name} must be a list of strings, not {type(values).__name__}")
    for value in values or ():
        check_text(**{name: value})


def check_counts(high: int = MAX_COUNT, **counts: int) -> None:
    """Refuse a limit, depth or other count outside 0..high with a clear error (not a database or date
    overflow deeper down)."""
    for name, value in counts.items():
        if not isinstance(value, int):
            raise InvalidInput(f"{name} must be an integer, not {type(value).__name__}")
        if not 0 <= value <= high:
            raise InvalidInput(f"{name} must be between 0 and {high:,}, got {value}")


def bucket_name(bucket: str | None) -> str | None:
    """A digest bucket's name as a filter (`project`, also written `digest/project/`), or None for all."""
    return (bucket or "").strip().strip("/").removeprefix("digest/").strip("/") or None


def check_bucket(bucket: Any) -> None:
    """Refuse what cannot be a digest bucket: a bucket is `personal`, `procedure`, `wiki` or a folder of your
    own under `digest/`; one that is not there finds nothing."""
    check_text(bucket=bucket)
    name = bucket_name(bucket)
    if name is None:
        return
    if "/" in name or name in (".", ".."):
        raise InvalidInput(f"bucket must be one folder of digest/ (e.g. personal or project), got {bucket!r}")
    if name == ARCHIVE:
        raise InvalidInput("digest/archive/ holds archived nodes, no bucket: `search --include-archived` or "
                           "`--path-prefix digest/archive/` finds them")
    problem = bad_name(name)
    if problem:
        raise InvalidInput(f"bucket: {problem}")


def parse_date(value: str) -> str:
    if value == "today":
        return _date.today().isoformat()
    if not isinstance(value, str) or not DATE_RE.match(value):
        raise InvalidInput(f"date must be YYYY-MM-DD (or `today`), got {value!r}")
    try:
        return _date.fromisoformat(value).isoformat()
    except ValueError as exc:
        raise InvalidInput(f"not a calendar date: {value!r}") from exc


def search_date(value: str | None) -> str | None:
    """A search bound: YYYY-MM-DD, `today`, also unpadded (`2026-6-1`) or a timestamp's day
    (`2026-06-01T10:00`), as ReMe takes them; None when not given (None or empty)."""
    if not value:
        return None
    text = value.strip()
    if DATE_RE.match(text[:10]) and len(text) > 10 and text[10] in "T ":
        text = text[:10]
    unpadded = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", text)
    if unpadded:
        text = "{}-{:0>2}-{:0>2}".format(*unpadded.groups())
    return parse_date(text)


def new_path_problem(rel: str) -> str | None:
    """Why the normalised path `rel` cannot be a new file or folder: a name that breaks on other systems or
    sync tools (`bad_name`), or `~/...` (a home folder is never meant: paths are workspace-relative); or None."""
    if rel.startswith("~"):
        return "`~` is not expanded (paths are relative to the workspace, not home)"
    return next(filter(None, map(bad_name, rel.split("/"))), None)


def bad_name(name: str) -> str | None:
    """Why `name` cannot be a portable file or folder name (Windows, macOS, Linux, sync tools), or None."""
    if name != name.strip():
        return f"the name {name!r} starts or ends with whitespace"
    if name.endswith("."):
        return f"the name {name!r} ends with a dot"
    found = BAD_NAME_CHARS.search(name)
    if found:
        return f"the name {name!r} contains {found.group()!r} (not allowed: < > : \" | ? * and control characters)"
    if name.split(".", 1)[0].upper() in RESERVED_NAMES:
        return f"the name {name!r} is reserved on Windows"
    return None


# ---- checks stated on an operation's parameters ------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """Parameter metadata (`Annotated[int, Check(...)]`): `run(name, value)` raises InvalidInput for a bad value."""

    run: Callable[[str, Any], Any]


def count(high: int = MAX_COUNT, optional: bool = False) -> Check:
    """A count from 0 to `high` (`optional`: None too)."""
    return Check(lambda name, value: None if optional and value is None else check_counts(high, **{name: value}))


TEXT = Check(lambda name, value: check_text(**{name: value}))
TEXTS = Check(check_texts)
MAPPING = Check(lambda name, value: check_mapping(value))

Count = Annotated[int, Ge(0), Le(MAX_COUNT), count()]  # Ge/Le: the bounds in a job's JSON schema (engine/jobs.py)
Query = Annotated[str, Check(lambda name, value: check_query(value))]
Text = Annotated[str, TEXT]
OptionalText = Annotated[str | None, TEXT]
OptionalTexts = Annotated[list[str] | None, TEXTS]
Bucket = Annotated[str | None, Check(lambda name, value: check_bucket(value))]


def checked(cls: type) -> type:
    """Make every public method of `cls` run the `Check`s its parameters are annotated with on the arguments
    of each call (those given; defaults hold), in parameter order, before the method itself."""
    for name, fn in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(fn):
            setattr(cls, name, _checking(fn))
    return cls


def _checking(fn: Callable) -> Callable:
    signature = inspect.signature(fn)
    found: list[tuple[str, Check]] | None = None

    @functools.wraps(fn)
    def method(*args: Any, **kwargs: Any) -> Any:
        nonlocal found
        if found is None:  # the hints resolved on first use: the module is whole by then
            hints = typing.get_type_hints(fn, include_extras=True)
            found = [(param, meta) for param in signature.parameters
                     for meta in getattr(hints.get(param), "__metadata__", ()) if isinstance(meta, Check)]
        if found:
            try:
                given = signature.bind(*args, **kwargs).arguments
            except TypeError:
                return fn(*args, **kwargs)  # the call's own TypeError
            for param, check in found:
                if param in given:
                    check.run(param, given[param])
        return fn(*args, **kwargs)

    return method
