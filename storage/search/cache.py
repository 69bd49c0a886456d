"""The service's search cache: which connection has one, its background load, and when it must re-check.

Only a process that holds the index for its lifetime (`IndexDB(keep_open=True)`, the service) enables a
cache (`enable`): while it holds the lock no other process writes, so its own writes are the only changes.
One-shot processes (the CLI) keep the SQL path and never import the cache's code (storage/search/arrays.py)
nor numpy. The cache is built on a thread over a cursor (one read transaction: a consistent snapshot) while
SQL answers; `of(con)` hands it out once loaded. `index._transaction` calls `changed` after each write, and
the cache's next query takes in what moved. A cache that finds too much changed (a reindex) is built again the
same way; IndexDB drops the cache of a connection it closes or heals (`disable`: a re-created index starts its
chunk ids again). What is held and how it stays exact: storage/search/arrays.py.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    from storage.search.arrays import SearchCache

log = logging.getLogger(__name__)
_slots: dict[int, "_Slot"] = {}
_guard = threading.Lock()


def enable(con: duckdb.DuckDBPyConnection) -> None:
    """Give connection `con` a cache (loaded in the background from its first use on)."""
    with _guard:
        slot = _slots.get(id(con))
        if slot is None or slot.con is not con:
            _slots[id(con)] = _Slot(con)
            # A long-lived process: let DuckDB's allocator hand freed memory back in the background (else the
            # peak of the load's queries stays resident: some 250 MB at 1M chunks).
            con.execute("SET allocator_background_threads = true")


def disable(con: duckdb.DuckDBPyConnection | None) -> None:
    """Drop the cache of `con` (it is being closed, or the index was re-created): stops a running load."""
    with _guard:
        slot = _slots.get(id(con))
        if slot is None or slot.con is not con:
            return
        del _slots[id(con)]
    slot.close()


def of(con: duckdb.DuckDBPyConnection) -> "SearchCache | None":
    """The loaded cache of `con`; None when it has none or it is still loading (then SQL answers)."""
    slot = _slots.get(id(con))
    return slot.ready() if slot is not None and slot.con is con else None


def wait(con: duckdb.DuckDBPyConnection, timeout: float | None = None) -> "SearchCache | None":
    """The cache of `con` once loaded (benchmarks, tests), or None (none enabled, or not within `timeout`)."""
    slot = _slots.get(id(con))
    if slot is None or slot.con is not con:
        return None
    slot.ready()
    slot.loaded.wait(timeout)
    return slot.ready()


def changed(con: duckdb.DuckDBPyConnection) -> None:
    """The index behind `con` was written (or a write was rolled back): re-check before the next query."""
    slot = _slots.get(id(con))
    if slot is not None and slot.con is con and slot.cache is not None:
        slot.cache.dirty = True


class _Slot:
    """The cache of one connection: built on a thread over a cursor (its own snapshot of the index), then
    swapped in and brought up to date by its first query; built again when a query finds too much changed."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        # A cursor starts in DuckDB's default database: it is pointed at the index `con` uses.
        self.database = con.execute("SELECT current_database()").fetchone()[0]
        self.cache: SearchCache | None = None
        self.loaded = threading.Event()
        self._thread: threading.Thread | None = None
        self._cursor: duckdb.DuckDBPyConnection | None = None
        self._closed = False

    def ready(self) -> "SearchCache | None":
        cache = self.cache
        if cache is not None and not cache.stale:
            return cache
        with _guard:
            if self.cache is not None and self.cache.stale:
                self.cache = None
                self.loaded.clear()
            if self.cache is None and not self._closed and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._load, name="dreamflow-search-cache", daemon=True)
                self._thread.start()
            return self.cache

    def _load(self) -> None:
        from storage.search.arrays import SearchCache

        fresh = SearchCache()
        try:
            with _guard:
                if self._closed:
                    return
                self._cursor = self.con.cursor()
                self._cursor.execute(f'USE "{self.database}"')
            self._cursor.execute("BEGIN TRANSACTION")  # one snapshot for every table read
            fresh.load(self._cursor, stop=lambda: self._closed)
            self._cursor.execute("COMMIT")
        except Exception as exc:  # noqa: BLE001 - interrupted by close(), the index went away, no memory: SQL answers
            if not self._closed:
                log.warning("search cache not loaded, searching in SQL: %s", exc)
                self._closed = True  # no retry on this connection (it is used as it was before caches)
            self.loaded.set()
            return
        finally:
            with _guard:
                if self._cursor is not None:
                    self._cursor.close()
                    self._cursor = None
        with _guard:
            if not self._closed:
                fresh.dirty = True  # writes since the snapshot: taken in by the first query
                self.cache = fresh
                self.loaded.set()

    def close(self) -> None:
        with _guard:
            self._closed = True
            self.cache = None
            cursor, thread = self._cursor, self._thread
        if cursor is not None:
            try:
                cursor.interrupt()
            except duckdb.Error:
                pass
        if thread is not None:
            thread.join(timeout=10)
        self.loaded.set()

