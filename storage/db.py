"""The index database `metadata/index.duckdb`: its schema and the cross-process lock around it.

DuckDB lets one process at a time open a file read-write, and an open connection blocks every other
process, readers included. So every use of the index goes through `IndexDB.session()`, which takes the
file lock `metadata/index.lock` (waiting up to `DREAMFLOW_LOCK_TIMEOUT` seconds, default 30, then
`IndexBusy`), opens the database, and closes it and releases the lock when the outermost session ends.
Sessions nest; threads of one process take turns through an RLock and share the connection. The long-running
service passes `keep_open=True` to hold both for its lifetime.

The index is derived state: on first open, after a schema version change, or when the file cannot be
opened (corrupt), it is (re)created and rebuilt from the workspace files.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import duckdb
import filelock

from storage.errors import IndexBusy
from storage.workspace import Workspace

# DuckDB's Python client tries `import pandas` for every bound parameter value; when pandas is not
# installed each failed import walks sys.path (0.2-1 ms per value, most of a small query). Recording the
# absence once makes that check instant; nothing changes when pandas is installed.
if importlib.util.find_spec("pandas") is None:
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]

# The index layout; the DuckDB version is part of it because postings store DuckDB's hash() of each term.
SCHEMA_VERSION = f"5 duckdb {duckdb.__version__}"  # 5: tags stored normalised (storage.markdown.normalize_tag)

# Tables derived from files; `embeddings` is a cache keyed by chunk content and survives rebuilds.
DERIVED_TABLES = ("files", "chunks", "postings", "stale_chunks", "links")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS files (
    path VARCHAR PRIMARY KEY,
    kind VARCHAR,
    mtime DOUBLE,
    size BIGINT,
    hash VARCHAR,
    name VARCHAR,
    description VARCHAR,
    frontmatter JSON,
    tags VARCHAR[],
    date DATE,
    line_count INTEGER,
    errors VARCHAR[],
    indexed_at DOUBLE
);
CREATE TABLE IF NOT EXISTS chunks (
    id BIGINT PRIMARY KEY,
    path VARCHAR,
    ord INTEGER,
    start_line INTEGER,
    end_line INTEGER,
    headings VARCHAR[],
    text VARCHAR,
    text_hash VARCHAR,
    length INTEGER
);
-- BM25 postings: `term` is DuckDB's hash() of the term string (integers scan and sort several times faster
-- than strings); `length` repeats the chunk's BM25 length so scoring needs no join. Kept sorted by term
-- (zone maps then skip all but a few row groups per query term); rows of replaced chunks stay until
-- compaction, listed in `stale_chunks` and skipped by queries.
CREATE TABLE IF NOT EXISTS postings (term UBIGINT, chunk_id BIGINT, tf INTEGER, length INTEGER);
CREATE TABLE IF NOT EXISTS stale_chunks (id BIGINT);
CREATE TABLE IF NOT EXISTS links (
    source VARCHAR, target VARCHAR, anchor VARCHAR, alias VARCHAR, predicate VARCHAR, line INTEGER
);
CREATE INDEX IF NOT EXISTS links_source ON links (source);  -- neighbours and traversal look up both ends
CREATE INDEX IF NOT EXISTS links_target ON links (target);
CREATE TABLE IF NOT EXISTS embeddings (
    text_hash VARCHAR PRIMARY KEY, model VARCHAR, dim INTEGER, vector FLOAT[]
);
CREATE SEQUENCE IF NOT EXISTS chunk_ids START 1;
"""


def lock_timeout() -> float:
    """Seconds to wait for the index lock (`DREAMFLOW_LOCK_TIMEOUT`, default 30)."""
    try:
        return float(os.environ.get("DREAMFLOW_LOCK_TIMEOUT", "30"))
    except ValueError:
        return 30.0


@dataclass
class _Shared:
    """Per-process state of one index file, shared by every IndexDB object pointing at it."""

    file_lock: filelock.FileLock
    thread_lock: threading.RLock = field(default_factory=threading.RLock)
    con: duckdb.DuckDBPyConnection | None = None
    depth: int = 0
    keep_open: bool = False


_shared: dict[Path, _Shared] = {}
_shared_guard = threading.Lock()


class IndexDB:
    """The DuckDB index of workspace `ws`; use `with IndexDB(ws).session() as con:`."""

    def __init__(self, ws: Workspace, keep_open: bool = False):
        self.ws = ws
        self.path = ws.metadata / "index.duckdb"
        self.lock_path = ws.metadata / "index.lock"
        with _shared_guard:
            shared = _shared.get(self.path)
            if shared is None:
                shared = _shared[self.path] = _Shared(filelock.FileLock(str(self.lock_path), thread_local=False))
        if keep_open:
            shared.keep_open = True
        self._state = shared

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Hold the index lock and yield the shared read-write connection (nested sessions reuse it)."""
        state = self._state
        timeout = lock_timeout()
        if not state.thread_lock.acquire(timeout=timeout):
            raise IndexBusy(f"the index {self.path} is busy in another thread of this process (waited {timeout:g} s)")
        try:
            if state.con is None:
                self._open(timeout)
            state.depth += 1
            try:
                yield state.con
            finally:
                state.depth -= 1
                if state.depth == 0 and not state.keep_open:
                    self._close()
        finally:
            state.thread_lock.release()

    def close(self) -> None:
        """Close the connection and release the lock now (for `keep_open` owners shutting down)."""
        state = self._state
        with state.thread_lock:
            state.keep_open = False
            if state.depth == 0:
                self._close()

    def _open(self, timeout: float) -> None:
        state = self._state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            state.file_lock.acquire(timeout=timeout)
        except filelock.Timeout:
            raise IndexBusy(
                f"the index {self.path} is locked by another Dreamflow process (waited {timeout:g} s); "
                "retry, or raise DREAMFLOW_LOCK_TIMEOUT"
            ) from None
        try:
            state.con = self._connect()
        except BaseException:
            state.file_lock.release()
            raise

    def _close(self) -> None:
        state = self._state
        if state.con is not None:
            try:
                state.con.close()
            finally:
                state.con = None
                state.file_lock.release()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """Open the file (recreating it when unreadable), ensure the schema, rebuild when it is new."""
        try:
            con = _connect(self.path)
            version = _schema_version(con)
        except duckdb.Error as exc:
            if "lock" in str(exc).lower():
                raise IndexBusy(f"the index {self.path} is held by another process: {exc}") from exc
            _remove_index_files(self.path)  # corrupt or unreadable: derived state, rebuilt below
            con = _connect(self.path)
            version = None
        if version == SCHEMA_VERSION:
            return con
        try:
            for table in DERIVED_TABLES + ("meta",):
                con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute(SCHEMA)
            from storage.index import rebuild  # index.py builds on this module's tables

            rebuild(con, self.ws)
            # Written last: a crash before this point leaves no version, so the next open rebuilds again.
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        except BaseException:
            con.close()
            raise
        return con


def _connect(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    con.execute("SET enable_progress_bar = false")  # long statements must not draw on the user's terminal
    # Index queries take a few ms; a second DuckDB thread costs more in hand-offs than it saves there and
    # competes with the agent's own work (measured at 100k chunks on 2 busy cores: search p50 50 ms with one
    # thread, 79 ms with two). Bulk indexing is bound by Python parsing either way.
    con.execute("SET threads = 1")
    return con


def _schema_version(con: duckdb.DuckDBPyConnection) -> str | None:
    has_meta = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'"
    ).fetchone()[0]
    if not has_meta:
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row[0] if row else None


def _remove_index_files(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
