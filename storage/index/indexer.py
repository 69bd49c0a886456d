"""Incremental indexing: keep the DuckDB tables in step with the workspace files (all SQL for writes).

Every file under the workspace except `metadata/` and scratch files is indexed: a `files` row (with its
parse errors, if any) and, for text, its chunks, BM25 postings and link edges. A changed file replaces
exactly its own rows inside one transaction; a deleted file's rows go. Writes are batched: rows are
collected in Python lists and inserted from numpy arrays in one statement per table, so a 100k-chunk
rebuild stays a matter of seconds. `rebuild` and `reconcile` each run in one transaction: a crash in the
middle leaves the index as it was before, and the next `reconcile` brings it up to date.

Provenance chains (decision: propagated at index time). A dialog line, the card fact citing it and the node fact
citing that (`(source:: [[daily/<day>/<card>.md#^f2]])`) are one thing remembered, which holds exactly when its
highest member does:
- a card fact's chunk takes the window (`valid_from`/`valid_to`) of the node fact citing it, and `became`, that
  node fact's chunk id: search keeps or drops it by the same window filter as any node fact (no join at query
  time: the search cache's window arrays hold it) and shows the chain once, as its node fact (storage/search/search.py).
  A card fact no node cites has no window: the newest thing known, a hit of its own;
- a conversation chunk is searched by the records no card fact cites (`Chunk.said`), and is left out when every
  one of its records is cited: the facts say them.
Writing a node re-indexes the cards its facts cite or cited, writing a card the conversations it cites or cited
(a few files a job run), in the same transaction; a batch indexes nodes, then cards, then the rest, so each sees
what cites it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterable, Iterator, NamedTuple

import duckdb

from storage.errors import DreamflowError
from storage.files import redaction_log
from storage.files.workspace import Workspace, content_hash, is_scratch_name, is_utf8, read_regular
from storage.index.tokenize import term_hash, terms
from storage.search import cache as search_cache
from storage.search.sql import in_list
from storage.text import redact
from storage.text.model import DIALOG, Chunk, ParsedFile, normalize_tag

Progress = Callable[[int, int], None]

BATCH_FILES = 500  # files parsed and written per insert batch
DIGEST, DAILY = "digest/", "daily/"  # nodes cite cards, cards cite conversations (DIALOG)
LINE_RANGE = re.compile(r"L(\d+)(?:-L(\d+))?")  # a link's line anchor: `L3`, `L3-L5`
RACY_SECONDS = 2.0  # a file modified this close to its indexing may have changed unseen: hash it


def is_indexed_path(rel: str) -> bool:
    """True for workspace paths the index covers: not under metadata/, not a scratch or hidden file, and a
    name that is UTF-8 (one that is not reaches Python as lone surrogates, and DuckDB invalidates the whole
    database on such text: one file named in Latin-1 would stop every later command)."""
    parts = rel.split("/")
    return parts[0] != "metadata" and not any(is_scratch_name(p) for p in parts) and is_utf8(rel)


# ---- single files ------------------------------------------------------------------------------------


def index_file(con: duckdb.DuckDBPyConnection, ws: Workspace, rel: str, force: bool = False) -> bool:
    """(Re)index `rel` if it changed (or always with `force`); a missing file is removed. True if rows changed."""
    if not is_utf8(rel):
        return False  # never in the index (see is_indexed_path), and DuckDB must never see it
    rel = ws.normalize(rel)
    path = ws.resolve(rel)
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is None or not path.is_file() or not is_indexed_path(rel):
        return remove_file(con, rel, ws)
    row = con.execute("SELECT mtime, size, hash, indexed_at FROM files WHERE path = ?", [rel]).fetchone()
    if row and not force and _same_stat(row, st):
        return False
    item = _read_and_parse(ws, rel, st, known_hash=row[2] if row and not force else None)
    if item is None:
        _touch(con, [(rel, st.st_mtime, st.st_size)])
        return False
    with _transaction(con):
        cited = _delete_paths(con, [rel]) | _insert_files(con, [item])
        _refresh(con, ws, cited - {rel})
    compact(con)
    return True


def remove_file(con: duckdb.DuckDBPyConnection, rel: str, ws: Workspace | None = None) -> bool:
    """Drop every row of `rel` (file, chunks, postings, outgoing links). True if it was indexed. With `ws`, the
    files a removed node or card cited are re-indexed (module docstring: their chains change)."""
    if not is_utf8(rel):
        return False  # never indexed
    if not con.execute("SELECT count(*) FROM files WHERE path = ?", [rel]).fetchone()[0]:
        return False
    with _transaction(con):
        cited = _delete_paths(con, [rel])
        if ws is not None:
            _refresh(con, ws, cited)
    compact(con)
    return True


# ---- whole workspace ---------------------------------------------------------------------------------


def reconcile(con: duckdb.DuckDBPyConnection, ws: Workspace, progress: Progress | None = None) -> dict:
    """Bring the index in line with the files: added, modified (mtime+size, hash on doubt), deleted; special
    entries (FIFOs, sockets, devices, symlink loops, dangling symlinks) are skipped and listed."""
    special: list[dict] = []
    on_disk = _stat_files(ws, special)
    counts = catch_up(con, ws, on_disk, changes(con, on_disk), progress=progress)
    del counts["pending"]  # none: no deadline
    return {**counts, "skipped": len(special), "special_files": special}


class Changes(NamedTuple):
    """What the index has not caught up with: `todo` (added paths, then those whose stat changed), `deleted`,
    and the `files` rows compared (path -> mtime, size, hash, indexed_at)."""

    todo: list[str]
    deleted: list[str]
    indexed: dict[str, tuple]


def changes(con: duckdb.DuckDBPyConnection, on_disk: dict[str, os.stat_result], racy: bool = True) -> Changes:
    """The files of `on_disk` (path -> stat, as `Workspace.iter_stats` yields them) the index has not caught up
    with by their size and mtime; with `racy`, also those indexed too soon after their last change to be sure
    (`catch_up` hashes them, and records their stat when the content is the same)."""
    indexed = {r[0]: r[1:] for r in con.execute("SELECT path, mtime, size, hash, indexed_at FROM files").fetchall()}
    todo = [p for p in on_disk if p not in indexed]  # added first, then the modified ones
    if racy:
        todo += [p for p, st in on_disk.items() if p in indexed and not _same_stat(indexed[p], st)]
    else:
        todo += [p for p, st in on_disk.items() if p in indexed and indexed[p][:2] != (st.st_mtime, st.st_size)]
    return Changes(todo, [p for p in indexed if p not in on_disk], indexed)


def catch_up(con: duckdb.DuckDBPyConnection, ws: Workspace, on_disk: dict[str, os.stat_result], found: Changes,
             progress: Progress | None = None, deadline: float | None = None) -> dict:
    """Index the `found` changes of `on_disk` in one transaction (none when there are none). With `deadline`
    (a `time.monotonic()` value), changed files are read until it has passed (at least one, so repeated calls
    get through); `pending` counts those left for later."""
    todo, deleted, indexed = found
    todo = sorted(todo, key=chain_order)
    total = len(on_disk)  # progress counts every file, so it ends where added + modified + unchanged does
    done = total - len(todo)  # settled by their stat alone
    counts = {"added": 0, "modified": 0, "deleted": len(deleted), "unchanged": done, "pending": 0}
    if progress:
        progress(done, total)
    if not deleted and not todo:
        return counts
    items: list[Item] = []
    touched: list[tuple[str, float, int]] = []
    cited: set[str] = set()  # files the changed nodes and cards cite or cited
    written: set[str] = set()

    def flush() -> None:
        cited.update(_delete_paths(con, [item[0].path for item in items if item[0].path in indexed]),
                     _insert_files(con, items))
        written.update(item[0].path for item in items)
        items.clear()
        if progress:
            progress(done, total)

    with _transaction(con):
        cited.update(_delete_paths(con, deleted))
        for at, rel in enumerate(todo):
            if deadline is not None and at and time.monotonic() > deadline:
                counts["pending"] = len(todo) - at
                break
            st = on_disk[rel]
            item = _read_and_parse(ws, rel, st, known_hash=indexed[rel][2] if rel in indexed else None)
            if item is None:  # content unchanged: only the stat moved
                touched.append((rel, st.st_mtime, st.st_size))
                counts["unchanged"] += 1
            else:
                items.append(item)
                counts["modified" if rel in indexed else "added"] += 1
            done += 1
            if len(items) == BATCH_FILES:
                flush()
        flush()
        _touch(con, touched)
        _refresh(con, ws, cited - written)
    compact(con)
    return counts


def rebuild(con: duckdb.DuckDBPyConnection, ws: Workspace, progress: Progress | None = None) -> dict:
    """Re-create the index from the files (one transaction); returns counts and seconds taken."""
    started = time.perf_counter()
    special: list[dict] = []
    on_disk = _stat_files(ws, special)
    paths = sorted(on_disk, key=chain_order)
    with _transaction(con):
        for table in ("postings", "stale_chunks", "chunks", "links", "files"):
            con.execute(f"DELETE FROM {table}")
        done = 0
        for batch in _batches(paths, BATCH_FILES):
            _insert_files(con, [_read_and_parse(ws, rel, on_disk[rel]) for rel in batch])
            done += len(batch)
            if progress:
                progress(done, len(paths))
        _sort_postings(con)
    if progress and not paths:
        progress(0, 0)
    result = stats(con)
    result["special_files"] = special
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def inbound(con: duckdb.DuckDBPyConnection, rel: str) -> list[dict]:
    """Links pointing at `rel`: [{source, line, anchor, alias, predicate}] ordered by source and line."""
    rows = con.execute(
        "SELECT source, line, anchor, alias, predicate FROM links WHERE target = ? ORDER BY source, line", [rel]
    ).fetchall()
    return [dict(zip(("source", "line", "anchor", "alias", "predicate"), r)) for r in rows]


# `stats`' keys in plain words, for people (the CLI's `index-stats`, the dashboard): (label, what it counts).
EXPLAINED = {
    "files": ("files", "files of the workspace in the index"),
    "chunks": ("passages", "the pieces of files search ranks (a section or a few paragraphs each)"),
    "links": ("links", "wikilinks between files"),
    "postings": ("word entries", "the keyword index: one entry per word of each passage"),
    "stale_chunks": ("replaced passages not yet dropped",
                     "passages of files changed or deleted since the index was last compacted: search skips them, "
                     "compaction drops them"),
    "unsorted_postings": ("word entries not yet sorted",
                          "keyword entries written since the index was last compacted: search reads them a little "
                          "slower until compaction sorts them"),
    "files_with_errors": ("files with errors", "files whose frontmatter or text could not be read (`dreamflow "
                                               "doctor` names them)"),
}


def stats(con: duckdb.DuckDBPyConnection) -> dict:
    """Counts: files, chunks, links, postings (and those awaiting compaction), files with errors, files by kind
    and by bucket (`daily`, `digest/wiki`, `digest/archive`, `resource`, ...; `.` for top-level files). Two
    queries (each costs a few ms of overhead on a loaded machine: the dashboard's overview asks on every load)."""
    chunks, links, postings, stale, unsorted = con.execute(f"""
        SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM links), (SELECT count(*) FROM postings),
               (SELECT count(*) FROM stale_chunks), ({_UNSORTED_SQL})""").fetchone()
    groups = con.execute(
        """SELECT kind, CASE WHEN NOT contains(path, '/') THEN '.'
                             WHEN starts_with(path, 'digest/') AND contains(path[8:], '/')
                                  THEN 'digest/' || split_part(path, '/', 2)
                             ELSE split_part(path, '/', 1) END AS bucket,
                  count(*), count(*) FILTER (WHERE len(errors) > 0)
           FROM files GROUP BY kind, bucket""").fetchall()
    by_kind: dict[str, int] = {}
    by_bucket: dict[str, int] = {}
    for kind, bucket, count, _ in groups:
        by_kind[kind] = by_kind.get(kind, 0) + count
        by_bucket[bucket] = by_bucket.get(bucket, 0) + count
    return {
        "files": sum(by_kind.values()),
        "chunks": chunks,
        "links": links,
        "postings": postings,
        "stale_chunks": stale,
        "unsorted_postings": unsorted,
        "files_with_errors": sum(errors for *_, errors in groups),
        "by_kind": dict(sorted(by_kind.items())),
        "by_bucket": dict(sorted(by_bucket.items())),
    }


def load_writer() -> None:
    """Import what indexing a file needs and reads never do (the parser, numpy): a few tenths of a second, once
    per process."""
    import numpy  # noqa: F401
    import storage.text.markdown  # noqa: F401


# ---- reading and parsing -----------------------------------------------------------------------------

Item = tuple[ParsedFile, float, int, str]  # parsed file, mtime, size, content hash


def _stat_files(ws: Workspace, skipped: list[dict] | None = None) -> dict[str, os.stat_result]:
    """stat of every indexable file; special entries (FIFOs, loops, ...) are appended to `skipped`."""
    return dict(ws.iter_stats(skipped))


def _same_stat(row: tuple, st: os.stat_result) -> bool:
    """Stored (mtime, size, hash, indexed_at) matches the file's stat and was not taken in its racy window."""
    mtime, size, _hash, indexed_at = row
    return mtime == st.st_mtime and size == st.st_size and (indexed_at or 0) - st.st_mtime > RACY_SECONDS


def _read_and_parse(ws: Workspace, rel: str, st: os.stat_result, known_hash: str | None = None) -> Item | None:
    """Parse one file for insertion; None when its content hash equals `known_hash` (unchanged)."""
    try:
        data = read_regular(ws.root / rel)
    except (OSError, DreamflowError) as exc:
        return ParsedFile(path=rel, kind="binary", errors=[f"unreadable: {exc}"]), st.st_mtime, st.st_size, ""
    digest = content_hash(data)
    if digest == known_hash:
        return None
    return _parse(rel, _kept_out(ws, rel, data)), st.st_mtime, st.st_size, digest


def _kept_out(ws: Workspace, rel: str, data: bytes) -> bytes:
    """The file's text as the index reads it: secrets replaced by markers (storage/text/redact.py, with the
    workspace's patterns; line breaks kept, so chunks keep their lines). The file on disk keeps them; what was
    left out is counted per file in the redaction log."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # not text: indexed as binary, no words of it are searchable
    try:
        patterns = redact.workspace_patterns(ws.root)
    except DreamflowError:  # a broken redact.yaml: the capture paths refuse with its error; the index goes on
        patterns = ()
    text, counts = redact.redact(text, patterns)
    redaction_log.indexed(ws, rel, counts)
    return text.encode("utf-8") if counts else data


def _parse(rel: str, data: bytes) -> ParsedFile:
    from storage.text.markdown import parse_file  # the parser's imports (PyYAML, marko): ~90 ms reads never need

    try:
        return parse_file(rel, data)
    except Exception as exc:  # parse_file promises not to raise; indexing must go on even if it does
        return ParsedFile(path=rel, kind="binary", errors=[f"could not parse ({type(exc).__name__}: {exc})"])


def chunk_terms(parsed: ParsedFile, chunk: Chunk) -> list[str]:
    """BM25 terms of one chunk: its text plus the file's name, description and the heading skeleton; a fact's:
    its `search_text` plus the file's name and headings (a node's description sums up its other facts, whose
    words would make every fact match)."""
    if chunk.search_text:
        return terms("\n".join(filter(None, (chunk.search_text, parsed.name, *chunk.headings))))
    return terms("\n".join(filter(None, (chunk.text, parsed.name, parsed.description, *chunk.headings))))


# ---- writing -----------------------------------------------------------------------------------------


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Every write of the derived tables runs in one; the service's search cache (storage/search/cache.py)
    re-reads what moved after each."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        search_cache.changed(con)
        raise
    con.execute("COMMIT")
    search_cache.changed(con)


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _delete_paths(con: duckdb.DuckDBPyConnection, paths: list[str]) -> set[str]:
    """Delete the rows of these files: chunks (their postings become stale until compaction), links out, files.
    Returns what the deleted nodes and cards cited (their chains change)."""
    if not paths:
        return set()
    if len(paths) == 1:  # one file: an equality on a literal lets zone maps and indexes find its rows
        match = "= " + "'" + paths[0].replace("'", "''") + "'"
    else:
        _register(con, "_paths", {"path": paths})
        match = "IN (SELECT path FROM _paths)"
    cited = _cited(con, paths)
    con.execute(f"""
        INSERT INTO stale_chunks SELECT id FROM chunks WHERE path {match};
        DELETE FROM chunks WHERE path {match};
        DELETE FROM links WHERE source {match};
        DELETE FROM files WHERE path {match};
    """)
    if len(paths) > 1:
        con.unregister("_paths")
    return cited


def chain_order(path: str) -> int:
    """Nodes, then cards, then the rest (conversations): the order a batch is indexed in, so that each file
    indexed sees what cites it (module docstring)."""
    return 0 if path.startswith(DIGEST) else 1 if path.startswith(DAILY) else 2


def _refresh(con: duckdb.DuckDBPyConnection, ws: Workspace, paths: set[str]) -> None:
    """Re-index these indexed files (cards, conversations: read again from the files) so they take the chains of
    what cites them now (module docstring); a file gone or never indexed is left to the usual catch-up."""
    if not paths:
        return
    indexed = con.execute(f"SELECT path FROM files WHERE path IN ({in_list(paths)})").fetchall()
    items = []
    for rel in sorted((r[0] for r in indexed), key=chain_order):
        try:
            st = (ws.root / rel).stat()
        except OSError:
            continue
        items.append(_read_and_parse(ws, rel, st))
    _delete_paths(con, [item[0].path for item in items])
    _insert_files(con, items)


def _cited(con: duckdb.DuckDBPyConnection, paths: list[str]) -> set[str]:
    """What the facts of these nodes and cards cite, as the links table has it: the cards a node's facts cite
    (`#^f2`), the conversations a card's facts cite (`#L3`)."""
    nodes = [p for p in paths if p.startswith(DIGEST)]
    cards = [p for p in paths if p.startswith(DAILY)]
    found = set()
    for sources, target, anchor in ((nodes, DAILY, "^"), (cards, DIALOG, "L")):
        if sources:
            found |= {r[0] for r in con.execute(
                f"SELECT DISTINCT target FROM links WHERE source IN ({in_list(sources)}) "
                f"AND starts_with(target, '{target}') AND starts_with(anchor, '{anchor}')").fetchall()}
    return found


def cited_lines(con: duckdb.DuckDBPyConnection, dialogs: list[str]) -> dict[str, set[int]]:
    """{conversation: the lines of it that card facts cite}."""
    if not dialogs:
        return {}
    cited: dict[str, set[int]] = {}
    for target, anchor in con.execute(f"""
        SELECT target, anchor FROM links
        WHERE target IN ({in_list(dialogs)}) AND starts_with(source, '{DAILY}') AND starts_with(anchor, 'L')
    """).fetchall():
        lines = cited.setdefault(target, set())
        for first, last in LINE_RANGE.findall(anchor):
            lines.update(range(int(first), int(last or first) + 1))
    return cited


def _chains(con: duckdb.DuckDBPyConnection, cards: list[str]) -> dict[tuple[str, str], tuple]:
    """{(card path, fact id): (node fact chunk id, valid_from, valid_to)} for the facts of `cards` that node facts
    cite: the citing fact that holds (no `until`) wins, else the one that ended last."""
    if not cards:
        return {}
    cites = con.execute(f"""
        SELECT target, anchor, source, line FROM links
        WHERE target IN ({in_list(cards)}) AND starts_with(source, '{DIGEST}') AND starts_with(anchor, '^')
    """).fetchall()
    if not cites:
        return {}
    facts = {(path, line): (cid, since, until) for cid, path, line, since, until in con.execute(f"""
        SELECT id, path, start_line, valid_from, valid_to FROM chunks
        WHERE path IN ({in_list({c[2] for c in cites})}) AND search_text IS NOT NULL
    """).fetchall()}
    found: dict[tuple[str, str], tuple] = {}
    for card, anchor, node, line in cites:
        fact = facts.get((node, line))
        key = (card, anchor[1:])
        if fact is not None and (key not in found or _ends_later(fact[2], found[key][2])):
            found[key] = fact
    return found


def _ends_later(until, other) -> bool:
    """Whether a window ending on `until` (None: open) outlasts one ending on `other`."""
    return other is not None and (until is None or until > other)


def _touch(con: duckdb.DuckDBPyConnection, rows: list[tuple[str, float, int]]) -> None:
    """Record a new mtime/size for files whose content hash did not change."""
    if not rows:
        return
    _register(con, "_touched", _columns(("path", "mtime", "size"), rows))
    con.execute(f"""
        UPDATE files SET mtime = t.mtime, size = t.size, indexed_at = {time.time()!r}
        FROM _touched t WHERE files.path = t.path
    """)
    con.unregister("_touched")


def _next_chunk_ids(con: duckdb.DuckDBPyConnection, n: int) -> int:
    """Reserve `n` consecutive chunk ids (never reused, so caches keyed by id never go stale); return the first."""
    if n == 0:
        return 0
    first, last = con.execute(
        "SELECT min(i), max(i) FROM (SELECT nextval('chunk_ids') AS i FROM range(?))", [n]
    ).fetchone()
    assert last - first + 1 == n, "chunk id sequence is not consecutive"
    return first


def _insert(con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, list], select: str) -> None:
    """INSERT INTO `table` SELECT `select` FROM the given columns (registered as numpy arrays)."""
    _register(con, "_batch", columns)
    try:
        con.execute(f"INSERT INTO {table} SELECT {select} FROM _batch")
    finally:
        con.unregister("_batch")


def _register(con: duckdb.DuckDBPyConnection, view: str, columns: dict[str, list]) -> None:
    """Expose Python lists to SQL as view `view` (numpy arrays: no per-row binding cost)."""
    # Object columns here hold only str/None. Without this, DuckDB samples each one for pandas types
    # (trying to import pandas per value), which costs more than the whole insert.
    con.execute("SET pandas_analyze_sample = 0")
    con.register(view, {name: _array(values) for name, values in columns.items()})


def _array(values: list) -> "np.ndarray":
    import numpy as np  # only writes need it: keeps `dreamflow search` from importing numpy (~50 ms)

    if values and isinstance(values[0], (int, float)) and not isinstance(values[0], bool):
        return np.array(values)
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _joined(values: Iterable[str]) -> str:
    """A list packed into one string (unit separator) for bulk insert; unpacked with string_split in SQL."""
    return "\x1f".join(v.replace("\x1f", " ") for v in values)


_LIST = "CASE WHEN {0} = '' THEN []::VARCHAR[] ELSE string_split({0}, chr(31)) END"


FILE_COLUMNS = ("path", "kind", "mtime", "size", "hash", "name", "description", "frontmatter", "tags", "date",
                "line_count", "errors")
CHUNK_COLUMNS = ("id", "path", "ord", "start_line", "end_line", "headings", "text", "text_hash", "length",
                 "search_text", "valid_from", "valid_to", "became")
POSTING_COLUMNS = ("term", "chunk_id", "tf", "length")
LINK_COLUMNS = ("source", "target", "anchor", "alias", "predicate", "line")


def _insert_files(con: duckdb.DuckDBPyConnection, items: list[Item]) -> set[str]:
    """Insert files, chunks, postings and links of parsed files (their old rows must be gone); a card's facts
    take the chains of the node facts citing them (module docstring). Returns the cards the inserted digest
    nodes cite."""
    if not items:
        return set()
    if len({chain_order(p.path) for p, *_ in items}) > 1:  # nodes, then cards, then the rest: each sees its chain
        ordered = sorted(items, key=lambda item: chain_order(item[0].path))
        return set().union(*(_insert_files(con, [i for i in ordered if chain_order(i[0].path) == k]) for k in range(3)))
    chains = _chains(con, [p.path for p, *_ in items if p.path.startswith(DAILY)])
    cited = cited_lines(con, [p.path for p, *_ in items if p.path.startswith(DIALOG)])
    files, chunks, links = [], [], []
    post_term: list[int] = []
    hashes: dict[str, int] = {}  # term -> term_hash, once per distinct term of the batch
    post_tf: list[int] = []
    post_chunk: list[int] = []
    post_length: list[int] = []
    chunk_id = _next_chunk_ids(con, sum(len(p.chunks) for p, *_ in items))
    for parsed, mtime, size, digest in items:
        files.append((
            parsed.path, parsed.kind, float(mtime), int(size), digest, parsed.name or "", parsed.description or "",
            json.dumps(parsed.frontmatter, ensure_ascii=False, default=str), _joined(dict.fromkeys(normalize_tag(t) for t in parsed.tags)),
            parsed.date or "", parsed.line_count, _joined(parsed.errors),
        ))
        for ord_, chunk in enumerate(_unsaid(parsed.chunks, cited.get(parsed.path))):
            toks = chunk_terms(parsed, chunk)
            became, valid_from, valid_to = chains.get((parsed.path, chunk.fact_id), (None, chunk.valid_from,
                                                                                     chunk.valid_to))
            chunks.append((
                chunk_id, parsed.path, ord_, chunk.start_line, chunk.end_line, _joined(chunk.headings), chunk.text,
                content_hash((chunk.search_text or chunk.text).encode("utf-8")), len(toks), chunk.search_text,
                str(valid_from or ""), str(valid_to or ""), became if became is not None else -1,
            ))
            counts = Counter(toks)
            post_term += [hashes.get(t) or hashes.setdefault(t, term_hash(t)) for t in counts]
            post_tf += counts.values()
            post_chunk += [chunk_id] * len(counts)
            post_length += [len(toks)] * len(counts)
            chunk_id += 1
        links += [(parsed.path, l.target, l.anchor, l.alias, l.predicate, l.line) for l in parsed.links]

    _insert(con, "files", _columns(FILE_COLUMNS, files), f"""
        path, kind, mtime, size, hash, nullif(name, ''), nullif(description, ''), frontmatter::JSON,
        {_LIST.format('tags')}, try_cast(nullif(date, '') AS DATE), line_count, {_LIST.format('errors')},
        {time.time()}""")
    if chunks:
        _insert(con, "chunks", _columns(CHUNK_COLUMNS, chunks), f"""
            id, path, ord, start_line, end_line, {_LIST.format('headings')}, text, text_hash, length, search_text,
            try_cast(nullif(valid_from, '') AS DATE), try_cast(nullif(valid_to, '') AS DATE), nullif(became, -1)""")
    if post_term:
        _insert(con, "postings", dict(zip(POSTING_COLUMNS, (post_term, post_chunk, post_tf, post_length))),
                ", ".join(POSTING_COLUMNS))
        con.execute(f"""
            UPDATE meta SET value = (value::BIGINT + {len(post_term)})::VARCHAR WHERE key = 'unsorted_postings'
        """)
    if links:
        _insert(con, "links", _columns(LINK_COLUMNS, links), ", ".join(LINK_COLUMNS))
    return _cited(con, [p.path for p, *_ in items])


def _unsaid(chunks: list[Chunk], cited: set[int] | None) -> list[Chunk]:
    """A conversation's chunks as the records no card fact cites (`cited` lines) or echoes
    (storage/index/chunking.echoes): searched by their words and shown as them (a hit never shows what the facts say
    in the conversation's words); a chunk all of whose records are cited is left out."""
    if not cited:
        return chunks
    from storage.index.chunking import echoes  # a write's: the chunker imports marko, which `dreamflow search` never needs

    cited = cited | echoes([record for chunk in chunks for record in chunk.said], cited)
    kept = []
    for chunk in chunks:
        left = [(speaker, text) for line, speaker, text in chunk.said if line not in cited]
        if chunk.said and not left:
            continue
        if len(left) < len(chunk.said):
            chunk = replace(chunk, search_text="\n".join(text for _, text in left),
                            text="\n\n".join(f"{speaker}: {text}" for speaker, text in left))
        kept.append(chunk)
    return kept


def _columns(names: tuple[str, ...], rows: list[tuple]) -> dict[str, list]:
    """Row tuples -> {column name: values}."""
    return {name: list(values) for name, values in zip(names, zip(*rows))}


# ---- compaction --------------------------------------------------------------------------------------

ROW_GROUP = 122_880  # DuckDB's row group size: the unit zone maps skip
COMPACT_SHARE = 0.05  # compact once this share of postings is unsorted or stale (and at least a row group)


def compact(con: duckdb.DuckDBPyConnection, force: bool = False) -> bool:
    """Drop stale postings and re-sort the table when enough has piled up (or `force`). True if it ran.

    Writes append postings at the end of the table and leave replaced chunks' postings behind (deleting
    them from a term-sorted table costs a full scan per write). Queries skip stale rows and read the unsorted
    tail in full, so both stay cheap while small; this folds them back in (about 3 s per 100k chunks).
    """
    sorted_, unsorted, stale, chunks = con.execute(f"""
        SELECT ({_SORTED_SQL}), ({_UNSORTED_SQL}), (SELECT count(*) FROM stale_chunks), (SELECT count(*) FROM chunks)
    """).fetchone()
    total = sorted_ + unsorted
    stale_postings = stale * total / max(chunks + stale, 1)
    if not force and unsorted + stale_postings < max(ROW_GROUP, COMPACT_SHARE * total):
        return False
    with _transaction(con):
        _sort_postings(con)
    return True


def _sort_postings(con: duckdb.DuckDBPyConnection) -> None:
    """Rewrite postings without stale rows, sorted by term; remember how many rows are sorted."""
    con.execute("""
        CREATE OR REPLACE TABLE postings AS
        SELECT * FROM postings WHERE chunk_id NOT IN (SELECT id FROM stale_chunks) ORDER BY term, chunk_id
    """)
    con.execute("""
        DELETE FROM stale_chunks;
        INSERT OR REPLACE INTO meta SELECT 'sorted_postings', count(*)::VARCHAR FROM postings;
        INSERT OR REPLACE INTO meta VALUES ('unsorted_postings', '0');
    """)


# Postings in the sorted part of the table, and those appended since the last sort (the unsorted tail),
# kept in `meta` so that checking whether to compact costs no scan.
_SORTED_SQL = "SELECT coalesce((SELECT value::BIGINT FROM meta WHERE key = 'sorted_postings'), 0)"
_UNSORTED_SQL = "SELECT coalesce((SELECT value::BIGINT FROM meta WHERE key = 'unsorted_postings'), 0)"
