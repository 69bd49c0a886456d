"""Reads without a watcher: the index caught up with what changed on disk first, within a time budget.

The service's watcher (deployments/watch.py) re-indexes what an editor changes as it happens. A process
without one (the CLI without the service, `dreamflow mcp` over stdio, the Claude Code hook, a flow run in
this process) would answer from an index that misses it. So a read that answers from the index first calls
`catch_up`: one `os.scandir` walk stats every file (`Workspace.iter_stats`), `index.changes` compares size
and mtime with the `files` table and `index.catch_up` re-indexes what was added, modified or deleted. All of
it within `budget()` seconds: past it the read stops (what it indexed stays), answers from the index as it
is and says so (`behind`). An index that cannot be written (a read-only workspace) is compared only. The
report reaches the user as one warning line on stderr (this module's logger, as storage's other warnings),
as the `index_behind` field of a read's dict answer, and through `noticed` for surfaces whose answer has no
room for a field (a list of hits).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Iterator

from storage.errors import InvalidInput

if TYPE_CHECKING:
    import duckdb

    from storage.files.workspace import Workspace

log = logging.getLogger(__name__)

BUDGET = 0.1  # seconds; a check took 5 ms at 272 files, 80-100 ms at 10k, 1.3 s at 100k (docs/benchmarks.md)
CLOCK_EVERY = 256  # files walked between two looks at the clock
CATCH_UP = "run `dreamflow reconcile`, or `dreamflow start` (its watcher keeps the index up to date)"

_noticed: ContextVar[list[dict] | None] = ContextVar("index_behind", default=None)


def budget() -> float:
    """Seconds a read may spend catching the index up: `DREAMFLOW_CATCH_UP_SECONDS` (default 0.1; 0: reads never
    look at the files)."""
    value = os.environ.get("DREAMFLOW_CATCH_UP_SECONDS") or str(BUDGET)
    try:
        return max(0.0, float(value))
    except ValueError:
        raise InvalidInput(f"DREAMFLOW_CATCH_UP_SECONDS must be a number of seconds, got {value!r}") from None


def catch_up(con: duckdb.DuckDBPyConnection, ws: Workspace, seconds: float, writable: bool = True) -> dict | None:
    """Index what changed on disk since the index last saw it, within `seconds`: None when the index is now up
    to date, else `behind`'s report (also logged and passed to `noticed`)."""
    from storage.index import indexer as index  # not at import: a surface that only forwards to the service never loads DuckDB

    deadline = time.monotonic() + seconds
    on_disk = {}
    for n, (rel, st) in enumerate(ws.iter_stats()):
        if n % CLOCK_EVERY == 0 and n and time.monotonic() > deadline:
            return behind(None, "time", f"comparing its {n:,}+ files with the index takes longer than the "
                                        f"{seconds:g} s a read allows")
        on_disk[rel] = st
    # Size and mtime alone (reconcile also re-reads files indexed within 2 s of a change, for clocks too coarse
    # to tell): so a read after one of Dreamflow's own writes hashes, writes and imports nothing.
    found = index.changes(con, on_disk, racy=False)
    if not found.todo and not found.deleted:
        return None
    if not writable:
        return behind(len(found.todo) + len(found.deleted), "read_only", "this workspace is read-only here",
                      "run `dreamflow reconcile` where it can be written")
    loading = time.monotonic()
    index.load_writer()  # once per process, not counted: the budget bounds what grows with the files
    deadline += time.monotonic() - loading
    pending = index.catch_up(con, ws, on_disk, found, deadline=deadline)["pending"]
    return behind(pending, "time", f"indexing them takes longer than the {seconds:g} s a read allows") if pending \
        else None


def behind(pending: int | None, reason: str, why: str, how: str = CATCH_UP) -> dict:
    """The `index_behind` report: `pending` changed files not indexed yet (None: unknown, the walk did not
    finish), `reason` (`time` or `read_only`) and the message a person reads: what, why, how to catch up."""
    if pending is None:
        what = "the index may be behind the files"
    else:
        what = f"the index is behind the files: {pending:,} changed file{'' if pending == 1 else 's'} not indexed"
    report = {"pending": pending, "reason": reason, "message": f"{what} ({why}); {how}"}
    log.warning("warning: %s", report["message"])
    found = _noticed.get()
    if found is not None:
        found.append(report)
    return report


@contextmanager
def noticed() -> Iterator[list[dict]]:
    """Collect the reports of the reads run in this context (this thread), for a surface to put in its answer."""
    found: list[dict] = []
    token = _noticed.set(found)
    try:
        yield found
    finally:
        _noticed.reset(token)
