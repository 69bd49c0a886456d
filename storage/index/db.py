"""The index database `metadata/index.duckdb`: its schema and the cross-process lock around it.

DuckDB lets one process at a time open a file read-write, and an open connection blocks every other
process, readers included. So every use of the index goes through `IndexDB.session()`, which takes the
file lock `metadata/index.lock` (waiting up to `DREAMFLOW_LOCK_TIMEOUT` seconds, default 30, then
`IndexBusy`), opens the database, and closes it and releases the lock when the outermost session ends.
Opening attaches the file to an in-memory DuckDB (`ATTACH`, ~0.6 ms) and closing detaches it (checkpointed, the
file freed for other processes); the in-memory DuckDB is kept for the next open, of any index (`KEEP_IDLE`):
a new one costs ~7 ms.
Sessions nest; threads of one process take turns through an RLock and share the connection. The long-running
service passes `keep_open=True` to hold both for its lifetime. A process that may not write metadata/ (a
read-only file system, no write permission) opens the index read-only: reads answer from it as it is, and it is
neither created, healed nor rebuilt there.

The index is derived state and heals itself. It is (re)created and rebuilt from the workspace files on first
open and after a schema version change. A file DuckDB cannot open or whose write-ahead log fails to replay, an
index that breaks its own invariants after an unclean shutdown, and a fatal or internal DuckDB error in any
session (DuckDB invalidates the database after one) are all handled the same way: the files are moved aside to
`metadata/damaged/<time>/` with the error (the newest `KEEP_DAMAGED` sets are kept, for diagnosis), the index is
rebuilt from the workspace files, and one line on stderr says so. A session that met the damage ends with
`IndexRebuilt`; the next one finds a sound index.

After an unclean shutdown (a write-ahead log is left when the lock is first taken) the secondary indexes are
re-created from their tables: a process killed while DuckDB checkpointed on close left the two `links` ART
indexes missing the rows of its last transaction, although the table itself was whole, and the next checkpoint
made that permanent ("Failed to delete all rows from index" at the next delete of those rows). A checkpoint
before close does not help: the kill then lands in that checkpoint.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import duckdb

from storage.errors import DreamflowError, IndexBusy, IndexRebuilt
from storage.files.locks import FileLock, LockTimeout
from storage.files.workspace import Workspace
from storage.search import cache as search_cache

# DuckDB's Python client tries `import pandas` for every bound parameter value; when pandas is not
# installed each failed import walks sys.path (0.2-1 ms per value, most of a small query). Recording the
# absence once makes that check instant; nothing changes when pandas is installed.
if importlib.util.find_spec("pandas") is None:
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]

# The index layout. 7: postings keyed by storage.index.tokenize.term_hash (6: DuckDB's hash(), whose values could
# change with the DuckDB version; 6 added fact chunks: search_text, valid_from, valid_to). 9: a dialog's replies
# that say a value back are echoes (storage/index/chunking.says_back): conversations chunked anew. 10: a day page
# whose only text is generated gives no chunk (its frontmatter was one).
SCHEMA_VERSION = "10"

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
    length INTEGER,
    search_text VARCHAR,  -- a fact chunk: what BM25 and the vectors read instead of `text` (storage/text/model.Chunk)
    valid_from DATE,      -- a digest node's fact: its `since` ...
    valid_to DATE,        -- ... and `until` (exclusive); a card fact a dream consumed: those of the node fact it became
    became BIGINT         -- a card fact a dream consumed: the chunk of the node fact citing it (storage/index/indexer.py)
);
-- BM25 postings: `term` is storage.index.tokenize.term_hash of the term string (integers scan and sort several times faster
-- than strings); `length` repeats the chunk's BM25 length so scoring needs no join. Kept sorted by term
-- (zone maps then skip all but a few row groups per query term); rows of replaced chunks stay until
-- compaction, listed in `stale_chunks` and skipped by queries.
CREATE TABLE IF NOT EXISTS postings (term UBIGINT, chunk_id BIGINT, tf INTEGER, length INTEGER);
CREATE TABLE IF NOT EXISTS stale_chunks (id BIGINT);
CREATE TABLE IF NOT EXISTS links (
    source VARCHAR, target VARCHAR, anchor VARCHAR, alias VARCHAR, predicate VARCHAR, line INTEGER
);
{secondary_indexes}
CREATE TABLE IF NOT EXISTS embeddings (
    text_hash VARCHAR PRIMARY KEY, model VARCHAR, dim INTEGER, vector FLOAT[]
);
CREATE SEQUENCE IF NOT EXISTS chunk_ids START 1;
"""

# Neighbours and traversal look up both ends of a link. Re-created after an unclean shutdown (module docstring).
SECONDARY_INDEXES = {"links_source": "links (source)", "links_target": "links (target)"}
SCHEMA = SCHEMA.format(secondary_indexes="\n".join(
    f"CREATE INDEX IF NOT EXISTS {name} ON {on};" for name, on in SECONDARY_INDEXES.items()))

KEEP_DAMAGED = 2  # sets of damaged index files kept under metadata/damaged/ for diagnosis


def is_damage(exc: BaseException) -> bool:
    """True for DuckDB errors that mean the database itself is broken (DuckDB invalidates it after one)."""
    if isinstance(exc, (duckdb.FatalException, duckdb.InternalException)):
        return True
    return isinstance(exc, duckdb.Error) and "database has been invalidated" in str(exc)


def lock_timeout() -> float:
    """Seconds to wait for the index lock (`DREAMFLOW_LOCK_TIMEOUT`, default 30)."""
    try:
        return float(os.environ.get("DREAMFLOW_LOCK_TIMEOUT", "30"))
    except ValueError:
        return 30.0


@dataclass
class _Shared:
    """Per-process state of one index file, shared by every IndexDB object pointing at it."""

    file_lock: FileLock
    thread_lock: threading.RLock = field(default_factory=threading.RLock)
    con: duckdb.DuckDBPyConnection | None = None  # the in-memory DuckDB the index is attached to while open
    depth: int = 0
    keep_open: bool = False
    read_only: bool = False  # the open connection's: metadata/ could not be written when it was opened
    caches: weakref.WeakSet = field(default_factory=weakref.WeakSet)  # told to forget when the index is re-created


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
                shared = _shared[self.path] = _Shared(FileLock(self.lock_path, per_thread=False))
        if keep_open:
            shared.keep_open = True
        self._state = shared

    @property
    def read_only(self) -> bool:
        """True while the connection is read-only: this process may not write metadata/ (a read-only file
        system, no write permission). Reads answer from the index as it is; nothing heals or rebuilds it."""
        return self._state.read_only

    @contextmanager
    def session(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Hold the index lock and yield the shared connection, read-write unless `read_only` (nested sessions
        reuse it)."""
        state = self._state
        timeout = lock_timeout()
        if not state.thread_lock.acquire(timeout=timeout):
            raise IndexBusy(f"the index {self.path} is busy in another thread of this process (waited {timeout:g} s)")
        try:
            if state.con is None:
                self._open(timeout)
            if state.keep_open:  # the lock is ours for good: no other process writes, BM25 can run in memory
                search_cache.enable(state.con)
            state.depth += 1
            try:
                yield state.con
            except BaseException as exc:
                if state.depth == 1 and is_damage(exc) and not state.read_only:
                    raise self._heal(exc) from exc
                raise
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

    def hold(self) -> None:
        """Keep the connection (and the lock) open between sessions from now on, until `close` or `release`."""
        self._state.keep_open = True

    def release(self) -> None:
        """Stop keeping the connection open between sessions, without waiting: closed now when idle, else when
        the running session ends (a long reindex never holds up whoever calls this)."""
        state = self._state
        state.keep_open = False
        if state.thread_lock.acquire(blocking=False):
            try:
                if state.depth == 0 and not state.keep_open:
                    self._close()
            finally:
                state.thread_lock.release()

    def add_cache(self, cache) -> None:
        """Call `cache.forget()` whenever this process re-creates the index (cached chunk ids are then stale)."""
        self._state.caches.add(cache)

    def _heal(self, exc: BaseException) -> IndexRebuilt:
        """Set the damaged index aside and rebuild it from the files (the file lock stays held throughout)."""
        state = self._state
        search_cache.disable(state.con)
        _discard(state.con)  # an invalidated database may refuse even a detach
        state.con = None
        kept = self._set_aside(exc, announce=False)  # the IndexRebuilt error says it
        try:
            state.con = self._connect(unclean=False)
        except BaseException:
            state.file_lock.release()
            raise
        return IndexRebuilt(_first_line(exc), kept)

    def _set_aside(self, exc: BaseException, announce: bool = True) -> str:
        """Move the index files to metadata/damaged/<time>/ with the error and keep the newest sets; say so in
        one line on stderr when `announce`."""
        root = self.ws.metadata / "damaged"
        folder = root / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        folder.mkdir(parents=True, exist_ok=True)
        for p in (self.path, self.path.with_name(self.path.name + ".wal")):
            if p.exists():
                os.replace(p, folder / p.name)
        (folder / "error.txt").write_text(f"{type(exc).__name__}: {exc}\n", errors="replace")
        for old in sorted(root.iterdir())[:-KEEP_DAMAGED]:
            shutil.rmtree(old, ignore_errors=True)
        rel = folder.relative_to(self.ws.root).as_posix()
        for cache in list(self._state.caches):
            cache.forget()
        if announce:
            print(f"dreamflow: the index was damaged ({_first_line(exc)}); kept in {rel}, rebuilding it from the "
                  "files", file=sys.stderr, flush=True)
        return rel

    def _open(self, timeout: float) -> None:
        state = self._state
        state.read_only = not _writable(self.path)
        if not state.read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            state.file_lock.acquire(timeout=timeout)
        except LockTimeout:
            raise IndexBusy(
                f"the index {self.path} is locked by another Dreamflow process (waited {timeout:g} s); "
                "retry, or raise DREAMFLOW_LOCK_TIMEOUT"
            ) from None
        except OSError:  # no lock file, and none can be made: nobody writes here (DuckDB's own lock still holds)
            if not state.read_only:
                raise
        try:
            if state.read_only:
                state.con = self._connect_read_only()
                return
            # A write-ahead log left behind: the last owner died before closing (the file lock is ours now).
            state.con = self._connect(unclean=self.path.with_name(self.path.name + ".wal").exists())
        except BaseException:
            state.file_lock.release()
            raise

    def _close(self) -> None:
        state = self._state
        if state.con is not None:
            search_cache.disable(state.con)
            try:
                _detach(state.con)
            finally:
                state.con = None
                state.file_lock.release()

    def _connect_read_only(self) -> duckdb.DuckDBPyConnection:
        """Open the index for reading only (it cannot be created, healed or rebuilt here): a clear error when
        it is missing, unreadable or of another schema version."""
        how = "run `dreamflow reindex` where the workspace can be written"
        try:
            con = _attach(self.path, read_only=True)
        except duckdb.Error as exc:
            if "could not set lock" in str(exc).lower():
                raise IndexBusy(f"the index {self.path} is held by another process: {exc}") from exc
            raise DreamflowError(f"the index {self.path} cannot be read, and this workspace cannot be written "
                                 f"(read-only) to rebuild it ({_first_line(exc)}); {how}") from exc
        if _schema_version(con) != SCHEMA_VERSION:
            _detach(con)
            raise DreamflowError(f"the index {self.path} was built by another version of Dreamflow or DuckDB, and "
                                 f"this workspace cannot be written (read-only) to rebuild it; {how}")
        return con

    def _connect(self, unclean: bool) -> duckdb.DuckDBPyConnection:
        """Open the file, ensure the schema, rebuild when it is new; set it aside and rebuild when it cannot be
        opened, its log does not replay, or (after an unclean shutdown) it fails its checks."""
        con = None
        try:
            con = _attach(self.path)
            version = _schema_version(con)
            if version == SCHEMA_VERSION and unclean:
                _repair_after_crash(con)
        except duckdb.Error as exc:
            if "could not set lock" in str(exc).lower():
                raise IndexBusy(f"the index {self.path} is held by another process: {exc}") from exc
            _discard(con)  # whatever the damage did to that in-memory DuckDB, the rebuild starts on another
            self._set_aside(exc)
            con = _attach(self.path)
            version = None
        if version == SCHEMA_VERSION:
            return con
        try:
            for table in DERIVED_TABLES + ("meta",):
                con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute(SCHEMA)
            from storage.index.indexer import rebuild  # index.py builds on this module's tables

            rebuild(con, self.ws)
            # Written last: a crash before this point leaves no version, so the next open rebuilds again.
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        except BaseException:
            _discard(con)
            raise
        return con


ALIAS = "idx"  # the index's name in the in-memory DuckDB; queries name no database (`USE` makes it the default)
# Blocks of a new index file: 16 kB, not DuckDB's 256 kB. Each write's session ends in a checkpoint that writes
# every changed block whole; measured on a small workspace, a write then costs ~29 ms of CPU, not ~35, and the
# file stays ~10x smaller (0.65 MB, not 6 MB, after 50 writes). A file keeps the size it was made with.
NEW_BLOCK_SIZE = 16_384
KEEP_IDLE = 2  # in-memory DuckDBs (~2.6 MB each) kept with nothing attached, for the next opens
_idle: list[duckdb.DuckDBPyConnection] = []
_idle_guard = threading.Lock()


def _host() -> duckdb.DuckDBPyConnection:
    # Index queries take a few ms; a second DuckDB thread costs more in hand-offs than it saves there and
    # competes with the agent's own work (measured at 100k chunks on 2 busy cores: search p50 50 ms with one
    # thread, 79 ms with two). Bulk indexing is bound by Python parsing either way. Given at connect, no pool
    # of threads is started only to be stopped.
    con = duckdb.connect(":memory:", config={"threads": 1})
    con.execute("SET enable_progress_bar = false")  # long statements must not draw on the user's terminal
    return con


def _attach(path: Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """An idle (or new) in-memory DuckDB with the index file attached as its default database."""
    with _idle_guard:
        con = _idle.pop() if _idle else None
    con = con or _host()
    quoted = str(path).replace("'", "''")
    option = " (READ_ONLY)" if read_only else "" if path.exists() else f" (BLOCK_SIZE {NEW_BLOCK_SIZE})"
    try:
        con.execute(f"ATTACH '{quoted}' AS {ALIAS}{option}")
        con.execute(f"USE {ALIAS}")
    except BaseException:
        _discard(con)
        raise
    return con


def _detach(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back what an interrupted session left open, detach (checkpoint and free) the index file, and keep
    the in-memory DuckDB for the next open."""
    try:
        try:
            con.execute("ROLLBACK")
        except duckdb.TransactionException:
            pass  # none open: the usual case
        con.execute("USE memory")
        con.execute(f"DETACH {ALIAS}")
    except BaseException:
        _discard(con)  # closing it frees the file all the same
        raise
    with _idle_guard:
        if len(_idle) < KEEP_IDLE:
            _idle.append(con)
            return
    con.close()


def _discard(con: duckdb.DuckDBPyConnection | None) -> None:
    """Close an in-memory DuckDB (and the index attached to it) without asking anything of it."""
    if con is not None:
        try:
            con.close()
        except duckdb.Error:
            pass


def _writable(index: Path) -> bool:
    """Whether this process may write the index file and its folder (metadata/, or the workspace while
    metadata/ does not exist yet): False on a read-only file system or without write permission."""
    folder = index.parent if index.parent.exists() else index.parent.parent
    return os.access(folder, os.W_OK) and (not index.exists() or os.access(index, os.W_OK))


def _schema_version(con: duckdb.DuckDBPyConnection) -> str | None:
    try:  # asked directly: a look in information_schema first cost ~2 ms of each open
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.CatalogException:  # no meta table: a new (or foreign) file
        return None
    return row[0] if row else None


def _repair_after_crash(con: duckdb.DuckDBPyConnection) -> None:
    """Re-create the secondary indexes from their (whole) tables, check the invariants the writers keep, and
    checkpoint the replayed log; raises duckdb.Error (a damage) when the index is not sound."""
    for name, on in SECONDARY_INDEXES.items():
        con.execute(f"DROP INDEX IF EXISTS {name}")
        con.execute(f"CREATE INDEX {name} ON {on}")
    orphans = con.execute("""
        SELECT (SELECT count(*) FROM chunks WHERE path NOT IN (SELECT path FROM files))
             + (SELECT count(*) FROM links WHERE source NOT IN (SELECT path FROM files))
             + (SELECT count(*) FROM (SELECT path FROM files GROUP BY path HAVING count(*) > 1))
             + (SELECT count(*) FROM (SELECT id FROM chunks GROUP BY id HAVING count(*) > 1))
    """).fetchone()[0]
    if orphans:
        raise duckdb.InternalException(f"the index breaks its invariants ({orphans} orphan or duplicate rows)")
    con.execute(f"CHECKPOINT {ALIAS}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:200] if text else type(exc).__name__)
