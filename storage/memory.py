"""`Memory`: the one facade every caller uses (CLI, HTTP API, flows, agent tools).

Each public method is an operation: workspace-relative paths in (checked by `Workspace.resolve`), JSON-ready
dicts/lists out. Methods that change files do so atomically and re-index the changed files inside one
`IndexDB.session()` before returning, so `write` then `search` finds the new text at once, from any process.
Methods that answer from the index first index what other programs changed on disk, unless a watcher does
(storage/index/freshness.py); what that left behind is their answer's `index_behind`.
`engine/ops.py` lists these methods once; the CLI, routes and tool schemas are built from their signatures,
type hints and docstrings, so keep those accurate. Argument checks live in storage/arguments.py, how `read`
shows a file in storage/files/text_view.py, the day page's card list in storage/files/day_page.py.
"""

from __future__ import annotations

import mimetypes
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterator, Literal

from storage.arguments import (MAPPING, OVERLONG_LINES, STALE_DAYS, TEXTS, Bucket, Count, OptionalText, OptionalTexts,
                               Query, Text, bucket_name, checked, count, new_path_problem, parse_date, search_date)
from storage.errors import Changed, Conflict, IndexRebuilt, InvalidInput, NotFound, PathError
from storage.files.day_page import day_page
from storage.files.text_view import READ_CHARS, READ_CHARS_MAX, decode, page, split_head, text_lines
from storage.files.workspace import (
    Workspace,
    check_session_id,
    content_hash,
    fsync_folder,
    is_scratch_name,
    read_regular,
    skip_unless_utf8,
    special_kind,
)

if TYPE_CHECKING:  # duckdb loads on first use, so a CLI call that goes to the service never imports it
    from storage.index.db import IndexDB

# The parser, indexer and doctor (PyYAML, marko, ...) are imported inside the methods that use them, so
# read-only commands such as `dreamflow search` start ~50 ms faster.

Progress = Callable[[int, int], None]

DAILY_DIR_RE = re.compile(r"^daily/(\d{4}-\d{2}-\d{2})(?:/|\.md$)")
LINKING_SKIP = ("resource/", "session/")  # raw material is never rewritten, even when it mentions a path
REWRITE_ATTEMPTS = 5  # re-reads when an outside writer changes a file between our read and our rename
MAX_DAYS = 100_000  # ceiling for day counts (about 270 years back stays a valid date)
RECALL_MIN, RECALL_MAX = 50, 100_000  # token budgets `recall` takes


@checked
class Memory:
    """File tools, search and index maintenance over one workspace.

    `db` defaults to a short-lived-session `IndexDB` for the workspace; `vectors` (optional, see
    storage/index/vectors.py) adds semantic candidates to `search` and `node_search`. `watched`: a watcher keeps the
    index up to date (the service's), so reads answer from it without looking at the files first. A process
    that writes calls `recover(memory)` first (crash recovery is a step of opening for writing, not of
    construction).
    """

    def __init__(self, workspace_root: str | os.PathLike[str], db: IndexDB | None = None, vectors: Any = None,
                 watched: bool = False):
        self.ws = Workspace(workspace_root)
        self.watched = watched
        if db is None:
            from storage.index.db import IndexDB

            db = IndexDB(self.ws)
        self.db = db
        self.vectors = vectors
        if vectors is not None:
            db.add_cache(vectors)

    # ---- writing files -------------------------------------------------------------------------------

    def write(
        self,
        path: str,
        content: Text = "",
        name: OptionalText = None,
        description: OptionalText = None,
        metadata: Annotated[dict[str, Any] | None, MAPPING] = None,
        expected_hash: str | None = None,
    ) -> dict:
        """Write a file (overwriting), keeping existing frontmatter keys not given; `.md` added if no suffix."""
        return self._write(path, content, name, description, metadata, create=False, expected_hash=expected_hash)

    def create(
        self,
        path: str,
        content: Text = "",
        name: OptionalText = None,
        description: OptionalText = None,
        metadata: Annotated[dict[str, Any] | None, MAPPING] = None,
    ) -> dict:
        """Create a new file with frontmatter (name, description, metadata); fails if it already exists."""
        return self._write(path, content, name, description, metadata, create=True)

    def edit(self, path: str, old: Text, new: Text, replace_all: bool = False, expected_hash: str | None = None) -> dict:
        """Replace text `old` with `new` in the body (never the frontmatter); `old` must match exactly once unless
        replace_all is set."""
        if not old:
            raise InvalidInput("`old` must be non-empty text to find in the file")
        rel = self._file(path)
        replaced = 0

        def change(text: str | None) -> str:
            nonlocal replaced
            head, body = split_head(rel, self._need(rel, text))
            count = body.count(old)
            if count == 0 and old in head:
                raise Conflict(f"the text to replace is only in the frontmatter of {rel}; edit changes the body "
                               "only (use frontmatter-update for frontmatter keys)")
            if count == 0:
                raise Conflict(f"the text to replace was not found in {rel}")
            if count > 1 and not replace_all:
                raise Conflict(
                    f"the text to replace matches {count} times in {rel}: include more context or use replace_all"
                )
            replaced = count if replace_all else 1
            return head + (body.replace(old, new) if replace_all else body.replace(old, new, 1))

        text, digest = self._rewrite(rel, change, expected_hash)
        return {"path": rel, "replacements": replaced, "lines": _line_count(text), "hash": digest}

    def append(self, path: str, content: Text, expected_hash: str | None = None) -> dict:
        """Append content to the end of a file (created if missing), on a new line."""
        rel = self._file(path, creating=True)
        addition = _with_newline(content)
        with self.db.session() as con:
            try:
                data = self.ws.read_bytes(rel)
            except NotFound:
                if expected_hash is not None:
                    raise Changed(f"{rel} does not exist, so it cannot have hash {expected_hash}") from None
                self._check_new_name(rel)
                text, digest = self._rewrite(rel, lambda text: _appended(text or "", addition), missing_ok=True)
                return {"path": rel, "created": True, "lines": _line_count(text), "hash": digest}
            if expected_hash is not None and content_hash(data) != expected_hash:
                raise Changed(f"{rel} changed since it was read: its hash is {content_hash(data)}, not "
                              f"{expected_hash}; read it again and retry")
            self._decode(rel, data)  # refuses binary files
            # In place, not read-modify-replace: lines others append meanwhile cannot be lost.
            self.ws.append_bytes(rel, (b"\n" if data and not data.endswith(b"\n") else b"") + addition.encode())
            data = self.ws.read_bytes(rel)
            self._reindex(con, rel)
        return {"path": rel, "created": False, "lines": _line_count(self._decode(rel, data)),
                "hash": content_hash(data)}

    def prepend(self, path: str, content: Text, expected_hash: str | None = None) -> dict:
        """Insert content at the start of the body, after any frontmatter block (at the start of other files)."""
        rel = self._file(path)
        cut = 0

        def change(text: str | None) -> str:
            nonlocal cut
            head, body = split_head(rel, self._need(rel, text))
            cut = head.count("\n")
            return head + _with_newline(content) + body

        text, digest = self._rewrite(rel, change, expected_hash)
        return {"path": rel, "inserted_at_line": cut + 1, "lines": _line_count(text), "hash": digest}

    def delete(self, path: str) -> dict:
        """Delete a file, or a folder with everything in it (never metadata/ or the workspace root); returns the
        links from other files (outside the folder) that now point to a deleted file."""
        from storage.index import indexer as index

        rel = self._file(path, folders=True)
        with self.db.session() as con:
            target = self.ws.resolve(rel)
            if target.is_dir() and not target.is_symlink():
                return self._delete_folder(con, rel, target)
            target = self.ws.regular(rel)
            target.unlink()
            fsync_folder(target.parent)
            index.remove_file(con, rel, self.ws)
            still = [link for link in index.inbound(con, rel) if link["source"] != rel]
        return {"path": rel, "deleted": True, "type": "file", "inbound": still}

    def _delete_folder(self, con, rel: str, target: Path) -> dict:
        from storage.index import indexer as index

        inside = rel + "/"
        gone = [r[0] for r in con.execute("SELECT path FROM files WHERE starts_with(path, ?) ORDER BY path",
                                          [inside]).fetchall()]
        files = sorted(set(gone) | set(self.ws.iter_files(rel)))
        shutil.rmtree(target)
        fsync_folder(target.parent)
        for path in gone:
            index.remove_file(con, path, self.ws)
        still = [{**link, "target": path} for path in files for link in index.inbound(con, path)
                 if not link["source"].startswith(inside)]
        return {"path": rel, "deleted": True, "type": "dir", "files": files, "inbound": still}

    def move(self, src: str, dst: str, overwrite: bool = False) -> dict:
        """Move a file and rewrite `[[src]]` links in every file that has them, keeping anchors and aliases;
        an existing destination file is replaced only with `overwrite`."""
        from storage.text import graph_edit

        old, new = self._file(src), self._rel(dst)
        self._check_new_name(new)
        if not PurePosixPath(new).suffix and PurePosixPath(old).suffix:
            new = self._rel(new + PurePosixPath(old).suffix)
        if old == new:
            raise InvalidInput("source and destination are the same path")
        if any(c in new for c in "[]|#"):
            raise InvalidInput(f"{new!r} cannot be a wikilink target: no [ ] | # in file names")
        with self.db.session() as con:
            return graph_edit.move(con, self.ws, old, new, overwrite=overwrite)

    def frontmatter_update(self, path: str, metadata: Annotated[dict[str, Any], MAPPING], expected_hash: str | None = None) -> dict:
        """Set frontmatter keys (other keys and the body are kept as they are)."""
        from storage.text.markdown import render_frontmatter

        rel = self._markdown(path)
        if not metadata:
            raise InvalidInput("no fields to update: give at least one key=value")
        meta: dict = {}

        def change(text: str | None) -> str:
            nonlocal meta
            meta, body = self._meta_and_body(rel, self._need(rel, text))
            meta.update(metadata)
            return render_frontmatter(meta, body)

        _, digest = self._rewrite(rel, change, expected_hash)
        return {"path": rel, "frontmatter": meta, "hash": digest}

    def frontmatter_delete_keys(self, path: str, keys: Annotated[list[str], TEXTS], expected_hash: str | None = None) -> dict:
        """Remove frontmatter keys (missing keys are reported, not an error; with none present the file is left
        byte for byte as it was)."""
        from storage.text.markdown import render_frontmatter

        rel = self._markdown(path)
        if not keys:
            raise InvalidInput("no keys to delete: give at least one frontmatter key")
        meta: dict = {}
        deleted: list[str] = []

        def change(text: str | None) -> str | None:
            nonlocal meta, deleted
            meta, body = self._meta_and_body(rel, self._need(rel, text))
            deleted = [k for k in keys if k in meta]
            for k in deleted:
                del meta[k]
            return render_frontmatter(meta, body) if deleted else None  # nothing to remove: bytes untouched

        _, digest = self._rewrite(rel, change, expected_hash)
        return {"path": rel, "deleted": deleted, "missing": [k for k in keys if k not in deleted], "frontmatter": meta,
                "hash": digest}

    def daily_reindex(self, date: str) -> dict:
        """Write the day index page daily/DATE.md linking that day's cards; text outside the list is kept. A day
        with no cards and no page gets none (`created: false`); a page already up to date is not rewritten
        (`changed: false`)."""
        day = parse_date(date)
        rel = f"daily/{day}.md"
        skipped: list[dict] = []
        with self.db.session() as con:
            cards = self._day_cards(day, skipped)
            page = self.ws.resolve(rel)
            existing = self._read_text(rel) if page.is_file() else None
            text = day_page(day, cards, existing) if cards or existing is not None else None
            changed = text is not None and text != existing
            if changed:
                self.ws.write_text(rel, text)
                self._reindex(con, rel)
        return {"path": rel, "date": day, "cards": cards, "created": changed and existing is None,
                "changed": changed, "skipped": skipped}

    def upload(self, source: Text, name: str | None = None, date: str | None = None, overwrite: bool = False) -> dict:
        """Copy an outside file into resource/[DATE/] (DATE may be `today`); only the destination is checked."""
        from storage.files import outside

        data, source_name = outside.read_source(source)
        result = self.upload_content(data, name or source_name, date=date, overwrite=overwrite)
        return {**result, "source": str(Path(source).expanduser().resolve())}

    def upload_content(self, content: bytes, name: Text, date: str | None = None, overwrite: bool = False) -> dict:
        """Store `content` as resource/[DATE/]NAME: what `upload` does with a file's bytes (the HTTP form)."""
        folder = f"resource/{parse_date(date)}" if date else "resource"
        if not isinstance(content, bytes | bytearray):
            raise InvalidInput(f"upload content must be bytes, not {type(content).__name__}")
        if not name or not name.strip():
            raise InvalidInput("an upload needs a file name")
        rel = self._rel(f"{folder}/{name}")
        self._check_new_name(rel)
        with self.db.session() as con:
            if self.ws.resolve(rel).exists() and not overwrite:
                raise Conflict(f"{rel} already exists (pass overwrite, --overwrite on the CLI, to replace it)")
            self.ws.write_bytes(rel, content)
            self._reindex(con, rel)
        return {"path": rel, "bytes": len(content)}

    # ---- reading files -------------------------------------------------------------------------------

    def read(self, path: str, start_line: int | None = None, end_line: int | None = None, numbered: bool = True,
             max_chars: Annotated[int, count(READ_CHARS_MAX)] = READ_CHARS) -> dict:
        """Read a text file, optionally lines start_line..end_line (1-based, inclusive), with line numbers. An
        answer holds at most max_chars characters (whole lines): when more lines follow, `truncated` is true
        and `next_start_line` says where to continue (a single longer line is cut, see `cut_line`)."""
        if any(n is not None and not isinstance(n, int) for n in (start_line, end_line)):
            raise InvalidInput("start_line and end_line must be integers")
        if max_chars < 1:
            raise InvalidInput("max_chars must be at least 1")
        rel = self._file(path)
        data = self.ws.read_bytes(rel)
        lines = text_lines(rel, data)
        first = start_line or 1
        last = min(end_line or len(lines), len(lines))
        if first < 1 or (end_line is not None and end_line < first):
            raise InvalidInput(f"bad line range {start_line}..{end_line}: lines are 1-based and start <= end")
        if lines and first > len(lines):
            raise InvalidInput(f"start_line {first} is past the end of {rel} ({len(lines)} lines)")
        content, shown, cut = page(lines, first, last, numbered, max_chars)
        end = first + shown - 1
        return {"path": rel, "start_line": first, "end_line": end, "total_lines": len(lines),
                "content": content, "hash": content_hash(data), "truncated": end < last,
                "next_start_line": end + 1 if end < last else None, "cut_line": cut}

    def stat(self, path: str) -> dict:
        """Size, dates, kind and MIME type, name/description, tags, frontmatter (Markdown), outgoing links and
        inbound links of one file; of a folder
        (`type: dir`), its counts of files and sub-folders and their total size."""
        from storage.index import indexer as index
        from storage.text.markdown import parse_file

        rel = self._file(path, folders=True)
        if self.ws.resolve(rel).is_dir():
            return self._folder_stat(rel)
        full = self.ws.regular(rel)
        st = full.stat()
        data = read_regular(full)
        parsed = parse_file(rel, data)
        with self._reading() as (con, behind):
            links_in = index.inbound(con, rel)
        return _telling(behind, {
            "path": rel,
            "type": "file",
            "kind": parsed.kind,
            "mime": _mime(rel),
            "size": st.st_size,
            "mtime": _iso(st.st_mtime),
            "lines": parsed.line_count,
            "name": parsed.name,
            "description": parsed.description,
            "tags": parsed.tags,
            "frontmatter": parsed.frontmatter if parsed.kind == "markdown" else None,
            "date": parsed.date,
            "errors": parsed.errors,
            "links_out": [asdict(link) for link in parsed.links],
            "links_in": links_in,
            "hash": content_hash(data),
        })

    def _folder_stat(self, rel: str) -> dict:
        full = self.ws.resolve(rel)
        if not full.is_dir() or full.is_symlink():
            raise PathError(f"{rel} is a symlink to a folder: not followed")
        files = list(self.ws.iter_files(rel))
        folders = sum(len([d for d in dirs if not d.startswith(".")]) for _, dirs, _ in os.walk(full))
        return {"path": rel, "type": "dir", "files": len(files), "folders": folders,
                "size": sum((self.ws.root / f).stat().st_size for f in files), "mtime": _iso(full.stat().st_mtime)}

    def list(self, prefix: str = "", recursive: bool = True, limit: Count = 200,
             sort: Literal["path", "mtime"] = "path", extensions: OptionalTexts = None, offset: Count = 0) -> dict:
        """List files under a folder or path prefix (recursive by default; folders end with `/` otherwise),
        by path or newest first (`sort: mtime`), optionally only some extensions (`md`, `.jsonl`); a prefix
        that matches nothing lists nothing. At most `limit` entries: when more follow, `truncated` is true and
        `next_offset` is the offset of the next page."""
        wanted = {e.strip().lower().lstrip(".") for e in extensions or [] if e.strip().strip(".")}
        norm = "" if isinstance(prefix, str | None) and (prefix or "").strip() in ("", ".", "./") else self._rel(prefix)
        base = self.ws.resolve(norm) if norm else self.ws.root
        folder, start = (norm, "") if base.is_dir() or not norm else (str(PurePosixPath(norm).parent), norm)
        folder = "" if folder == "." else folder
        skipped: list[dict] = []
        if recursive:
            names = (r for r in self.ws.iter_files(folder, skipped=skipped) if r.startswith(start))
        else:
            names = (r for r in self._children(folder, skipped) if r.startswith(start))
        if wanted:
            names = (r for r in names if not r.endswith("/") and PurePosixPath(r).suffix.lower().lstrip(".") in wanted)
        if sort == "mtime":  # every entry must be seen before the newest `limit` are known
            everything = [self._entry(rel) for rel in names]
            everything.sort(key=lambda e: (-e.get("mtime_ns", 0), e["path"]))
            names = (e["path"] for e in everything)
        entries = []
        truncated = False
        for at, rel in enumerate(names):
            if at < offset:
                continue
            if len(entries) >= limit:
                truncated = True
                break
            entries.append(self._entry(rel))
        for entry in entries:
            entry.pop("mtime_ns", None)
        return {"prefix": norm, "entries": entries, "offset": offset, "truncated": truncated,
                "next_offset": offset + len(entries) if truncated else None,
                "skipped": [s for s in skipped if s["path"].startswith(start)]}

    def frontmatter_get(self, path: str) -> dict:
        """The frontmatter of a Markdown file as a mapping (with the parse error, if the YAML is malformed)."""
        from storage.text.markdown import split_frontmatter

        rel = self._markdown(path)
        fm = split_frontmatter(self._read_text(rel))
        return {"path": rel, "frontmatter": fm.meta, "error": fm.error}

    def tags(self, tag: OptionalText = None, limit: Count = 100) -> list[dict]:
        """Tags with file counts and date range; with `tag`, that tag's files. Tags come from the `tags` and
        `memory_tags` frontmatter keys and are counted normalised (case-folded, spaces as `_`: `New York` and
        `new york` are `new_york`)."""
        from storage.text.model import normalize_tag

        tag = normalize_tag(tag) if tag is not None else None
        with self._reading() as (con, _):
            rows = con.execute(
                """SELECT tag, count(*) AS files, min(date) AS first_date, max(date) AS last_date
                   FROM (SELECT unnest(tags) AS tag, date FROM files)
                   WHERE ? IS NULL OR tag = ?
                   GROUP BY tag ORDER BY files DESC, tag LIMIT ?""",
                [tag, tag, limit],
            ).fetchall()
            result = [
                {"tag": t, "files": n, "first_date": _str(first), "last_date": _str(last)}
                for t, n, first, last in rows
            ]
            if tag is not None and result:
                paths = con.execute(
                    "SELECT path, name, description, date FROM files WHERE list_contains(tags, ?) "
                    "ORDER BY date DESC NULLS LAST, path LIMIT ?",
                    [tag, limit],
                ).fetchall()
                result[0]["paths"] = [
                    {"path": p, "name": n, "description": d, "date": _str(day)} for p, n, d, day in paths
                ]
        return result

    def daily_list(self, date: str | None = None, limit: Count = 30) -> dict:
        """Days that have daily cards (the notes of daily/DATE/, one per conversation or resource), newest
        first; with `date`, that day's cards with name and description (not the files in its sub-folders)."""
        if date:
            day = parse_date(date)
            return {"date": day, "index_page": self.ws.resolve(f"daily/{day}.md").is_file(),
                    "cards": self._day_cards(day)}
        days: dict[str, dict] = {}
        for rel in self.ws.iter_files("daily"):
            m = DAILY_DIR_RE.match(rel)
            if not m:
                continue
            entry = days.setdefault(m.group(1), {"date": m.group(1), "cards": 0, "index_page": False})
            if rel.endswith(".md") and rel.count("/") == 1:
                entry["index_page"] = True
            elif rel.endswith(".md") and rel.count("/") == 2:
                entry["cards"] += 1
        ordered = sorted(days.values(), key=lambda d: d["date"], reverse=True)
        return {"days": ordered[:limit], "truncated": len(ordered) > limit}

    def download(self, path: str, dest: Text, overwrite: bool = False) -> dict:
        """Copy a workspace file out to an outside path: an existing folder or a DEST ending with `/` (created
        if missing) keeps the file name; refuses to overwrite, and refuses the workspace's metadata/."""
        from storage.files import outside

        rel = self._file(path)
        _, data = self.download_content(rel)
        out = outside.save(data, dest, PurePosixPath(rel).name, overwrite, self.ws.root)
        return {"path": rel, "dest": str(out.resolve()), "bytes": out.stat().st_size}

    def download_content(self, path: str) -> tuple[str, bytes]:
        """(workspace path, bytes) of a file: what `download` writes out (the HTTP form answers with them)."""
        rel = self._file(path)
        return rel, self.ws.read_bytes(rel)

    # ---- search and graph ----------------------------------------------------------------------------

    def search(
        self,
        query: Query,
        limit: Count = 10,
        min_score: float | None = None,
        start_date: OptionalText = None,
        end_date: OptionalText = None,
        tags: OptionalTexts = None,
        path_prefix: OptionalText = None,
        expand: Count = 3,
        include_archived: bool = False,
        per_file: Count = 1,
        strict_dates: bool = False,
        as_of: OptionalText = None,
        history: bool = False,
    ) -> list[dict]:
        """Search memory by keywords and meaning: the best matching passages (path, line range, text), one per
        file unless per_file allows more (each fact line is one of its own), each with the files it links to and
        from, and with its status (current, superseded, expired) and validity (valid_from, valid_to). Superseded
        and expired digest nodes are left out unless history; as_of answers what was valid on that day. Each hit
        names the signals that found it: keyword, vector, and date when the query names a date or period ("in June
        2023", "last week") the hit's file is dated in, which ranks it higher. A date range keeps undated files
        (digest nodes) unless strict_dates; tags match any of them."""
        from storage.search import search as _search

        with self._reading() as (con, _):
            return _search.search(
                con, query, limit=limit, min_score=min_score,
                start_date=search_date(start_date), end_date=search_date(end_date), tags=tags or None, path_prefix=path_prefix or None, expand=expand, vectors=self.vectors,
                include_archived=include_archived, per_file=per_file or None, strict_dates=strict_dates,
                as_of=search_date(as_of), history=history,
            )

    def recall(self, query: str, budget: int = 2000, session: OptionalText = None, start_date: str | None = None,
               end_date: str | None = None, tags: list[str] | None = None, path_prefix: str | None = None,
               min_score: float | None = None, min_relevance: float | None = None, min_words: int | None = None,
               as_of: str | None = None, history: bool = False) -> dict:
        """Evidence for a question, packed to fit a context window: the most relevant lines of the best matching
        files within `budget` tokens, each cited as path:start-end (the lines `read` shows; a piece of another
        workspace this one reads as NAME:path:start-end) with its date, in `text`; `tokens` is what it takes. With `session`, nothing that session was already given comes again
        (`withheld` counts the lines left out); use a new session id for a fresh context. With `min_score`,
        `min_relevance` and/or `min_words`, nothing unless something new comes from a keyword match that relevant
        (the same numbers mean the same on a memory of any size). Superseded and expired digest nodes are left out
        unless history; as_of answers what was valid on that day."""
        from storage.search import recall as _recall

        if session is not None:
            check_session_id(session)
        seen = _recall.given(self.ws, session) if session else set()
        answer, keys = self.evidence(query, budget, seen, start_date=start_date, end_date=end_date, tags=tags,
                                     path_prefix=path_prefix, min_score=min_score, min_relevance=min_relevance,
                                     min_words=min_words, as_of=as_of, history=history)
        if session and not self.db.read_only:  # a read-only workspace keeps no record: all is new each time
            _recall.remember(self.ws, session, keys, query=query, items=answer["items"])
        return {**answer, "session": session}

    def evidence(self, query: Query, budget: Annotated[int, count(RECALL_MAX)] = 2000,
                 given: set[str] | frozenset[str] = frozenset(), start_date: OptionalText = None,
                 end_date: OptionalText = None, tags: OptionalTexts = None, path_prefix: OptionalText = None,
                 min_score: float | None = None, min_relevance: float | None = None,
                 min_words: Annotated[int | None, count(optional=True)] = None, as_of: OptionalText = None,
                 history: bool = False) -> tuple[dict, list]:
        """`recall`'s answer without a session's record: (answer, keys of the lines it gives), leaving out the
        lines whose key is in `given`. What each workspace gives a recall across workspaces (engine/access/scoped.py)."""
        from storage.search import recall as _recall

        if budget < RECALL_MIN:
            raise InvalidInput(f"budget must be at least {RECALL_MIN} tokens, got {budget}")
        with self._reading() as (con, behind):
            answer, keys = _recall.recall(
                con, self.ws, query, budget, given=set(given), vectors=self.vectors, min_words=min_words,
                start_date=search_date(start_date), end_date=search_date(end_date), tags=tags or None,
                path_prefix=path_prefix or None, min_score=min_score,
                min_relevance=min_relevance, as_of=search_date(as_of), history=history)
        return _telling(behind, answer), keys

    def node_search(self, query: Query, limit: Count = 20, as_of: OptionalText = None, history: bool = False,
                    bucket: Bucket = None) -> list[dict]:
        """Search digest nodes only: one row per node (path, name, description, score, status, valid_from,
        valid_to), no chunk text. Superseded and expired nodes are left out unless history; as_of answers what
        was valid on that day; bucket keeps one folder of digest/ (personal, procedure, wiki or your own)."""
        from storage.search import search as _search

        bucket = bucket_name(bucket)
        prefix = f"digest/{bucket}/" if bucket else "digest/"
        with self._reading() as (con, _):
            return _search.node_search(con, query, limit=limit, vectors=self.vectors,
                                       as_of=search_date(as_of), history=history, prefix=prefix)

    def traverse(
        self,
        paths: Annotated[list[str], TEXTS],
        depth: Count = 1,
        direction: Literal["forward", "backward", "both", "out", "in"] = "both",
        predicate: OptionalText = None,
        limit: Count = 200,
    ) -> dict:
        """Walk the link graph from paths: the files reached (name, description, hops away) and the links
        between them (source -> target); forward follows the links a file makes, backward finds the files that
        link to it (`out` and `in` mean the same)."""
        from storage.search import search as _search

        rels = [self._node(p) for p in paths]
        with self._reading() as (con, behind):
            return _telling(behind, _search.traverse(con, rels, depth=depth, direction={
                "out": "forward", "in": "backward"}.get(direction, direction), predicate=predicate, limit=limit))

    def trace(self, path: Text, fact: OptionalText = None) -> dict:
        """Trace a fact to where it comes from: from a fact of a digest node or card (its block id `f2`,
        `path#^f2`, or a line number) down through the facts it was consolidated from to the original dialog
        records (role, created_at, text, jsonl line) or resource lines, as a tree of steps in `chain`. A line of
        an older prose card or node is traced through the links on it; links that lead nowhere (a missing file
        or anchor, a cycle) are steps of type `broken`, also listed in `problems`."""
        import datetime as dt

        from storage.search import trace as _trace

        target, anchor = _trace.start(path, fact)
        rel = self._file(target)

        def read(link: str) -> list[str]:
            checked = self._rel(link)
            return text_lines(checked, self.ws.read_bytes(checked))

        return _trace.trace(read, rel, anchor, dt.date.today())

    def retract(self, path: str, fact: Text, reason: OptionalText = None, correct: OptionalText = None) -> dict:
        """Retract a wrong fact of a digest node everywhere it came from: the node fact moves to History as
        retracted today (with the reason; `--as-of` an earlier day still shows it), the card facts it was
        consolidated from are marked retracted, so no later dream or auto-memory run learns it again from them or
        from the messages they cite; with `correct`, the person's words become the fact that holds from today.
        Facts written from the retracted one are listed in `review`. Nothing is deleted; journaled like a move."""
        import datetime as dt

        from storage.text import facts
        from storage.files import journal, retraction

        if correct is not None and not correct.strip():
            raise InvalidInput("`correct` must be the true fact's words")
        rel = self._file(path)
        if not rel.startswith("digest/") or not rel.endswith(".md"):
            raise InvalidInput(f"{rel} is not a digest node: retract takes a node's fact (digest/...md and its ^f<n>);"
                               " a card's facts are retracted through the node fact citing them")
        fid = retraction.fact_id(fact)
        day = dt.date.today().isoformat()
        with self.db.session() as con:
            texts = {rel: self._read_text(rel)}
            new_node, wrong, fixed = retraction.node_text(texts[rel], rel, fid, day, reason, correct)
            new = {rel: self._described(rel, texts[rel], new_node)}
            cards, lines, missing = retraction.card_sources(wrong), [], []
            for card, card_fact in cards:
                if card not in texts:  # read once, however many of its facts the node fact cites
                    try:
                        texts[card] = self._read_text(card)
                    except NotFound:
                        texts[card] = None
                if texts[card] is None:
                    missing.append(f"{card}#^{card_fact}")
                    continue
                marked = retraction.card_text(new.get(card, texts[card]), card_fact, day)
                if marked is not None:
                    new[card] = self._described(card, texts[card], marked)
                said = facts.by_id(texts[card]).get(card_fact)
                lines += [s for s in (said.sources if said else ()) if s not in lines]
            plan = retraction.plan(rel, texts, new)
            with journal.intent(self.ws, "retract", plan):
                written = retraction.replay(con, self.ws, plan)
            review = retraction.derived(con, self.ws, rel, wrong, cards)
        result = {"path": rel, "fact": fid, "text": wrong.text, "retracted": day, "reason": reason, "until": day,
                  "cards": [f"{c}#^{f}" for c, f in cards if f"{c}#^{f}" not in missing], "lines": lines,
                  "correction": {"fact": fixed.id, "text": fixed.text, "since": day} if fixed else None,
                  "review": review, "written": written}
        if missing:
            result["missing"] = missing
        return result

    def _described(self, rel: str, before: str, after: str) -> str:
        """`after` with its frontmatter `description` refreshed when the jobs wrote it from the facts of `before`
        (their first current facts): a retracted fact leaves it; a person's own description is kept."""
        from storage.text.facts import describe
        from storage.text.markdown import render_frontmatter, split_frontmatter

        old, new = split_frontmatter(before), split_frontmatter(after)
        if old.error or new.error or new.meta.get("description") != describe(old.body) or not describe(old.body):
            return after
        return render_frontmatter({**new.meta, "description": describe(new.body)}, new.body)

    # ---- graph governance ----------------------------------------------------------------------------

    def doctor(self, dup_threshold: float | None = None, stale_days: Annotated[int, count(MAX_DAYS)] = STALE_DAYS,
               overlong_lines: Count = OVERLONG_LINES) -> dict:
        """Check memory health without changing anything: broken links and anchors, digest nodes nothing links
        to or without sources, near-duplicates, malformed frontmatter, files the index has not caught up with."""
        return self._doctor(False, dup_threshold, stale_days, overlong_lines)

    def doctor_fix(self, dup_threshold: float | None = None,
                   stale_days: Annotated[int, count(MAX_DAYS)] = STALE_DAYS, overlong_lines: Count = OVERLONG_LINES
                   ) -> dict:
        """Repair what is safe to repair mechanically, then report as doctor does: re-index files the index has
        not caught up with, and point links to moved files at their new paths (this rewrites those links)."""
        return self._doctor(True, dup_threshold, stale_days, overlong_lines)

    def _doctor(self, fix: bool, dup_threshold: float | None, stale_days: int, overlong_lines: int) -> dict:
        from storage.index import doctor

        threshold = doctor.DUP_THRESHOLD if dup_threshold is None else dup_threshold
        with self.db.session() as con:
            return doctor.check(con, self.ws, fix=fix, dup_threshold=threshold, stale_days=stale_days,
                                overlong_lines=overlong_lines)

    def relink(self, target: str, new_target: str, before: OptionalText = None) -> dict:
        """Point every link to `target` at `new_target` (aliases, predicates kept; line anchors follow their text)."""
        from storage.text import graph_edit

        old, new = self.ws.normalize(target), self._rel(new_target)
        with self.db.session() as con:
            return graph_edit.relink(con, self.ws, old, new, before=before)

    # ---- index maintenance ---------------------------------------------------------------------------

    def reindex(self, progress: Progress | None = None) -> dict:
        """Rebuild the whole index from the files (metadata/ is derived; nothing is lost)."""
        from storage.index import indexer as index

        try:
            with self.db.session() as con:
                return index.rebuild(con, self.ws, progress=progress)
        except IndexRebuilt as exc:  # the damaged index was set aside and rebuilt: what was asked for is done
            with self.db.session() as con:
                return {**index.rebuild(con, self.ws, progress=progress), "damaged_index_kept_in": exc.kept}

    def reconcile(self, progress: Progress | None = None) -> dict:
        """Bring the index up to date with files changed outside Dreamflow (added, modified, deleted)."""
        from storage.index import indexer as index

        with self.db.session() as con:
            return index.reconcile(con, self.ws, progress=progress)

    def index_stats(self) -> dict:
        """Counts of indexed files, chunks and links, and other index facts."""
        from storage.index import indexer as index

        with self._reading() as (con, behind):
            return _telling(behind, index.stats(con))

    def optimize(self) -> dict:
        """Compact the search index now (writes do it as they pile up): drop the rows of replaced text and the
        vectors no file uses any more. Never changes memory files."""
        from storage.index import indexer as index, vectors

        with self.db.session() as con:
            compacted = index.compact(con, force=True)
            pruned = vectors.prune(con)
            return {"compacted": compacted, "vectors_pruned": pruned, **index.stats(con)}

    # ---- helpers -------------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[tuple[Any, dict | None]]:
        """An index session for a read: (connection, what the index is still behind the files: None when
        nothing). Unless `watched`, what changed on disk is indexed first, within `freshness.budget()`."""
        from storage.index import freshness

        with self.db.session() as con:
            seconds = 0 if self.watched else freshness.budget()
            yield con, freshness.catch_up(con, self.ws, seconds, writable=not self.db.read_only) if seconds else None

    def _rel(self, path: str) -> str:
        """Normalised workspace-relative path, refusing `..`, absolute paths, escaping symlinks and anything
        that reaches metadata/ (also through a symlink, in any letter case)."""
        return self.ws.memory_path(path)

    def _file(self, path: str, creating: bool = False, folders: bool = False) -> str:
        """The file `path` names: a path without a suffix means `<path>.md` when that file exists (also over a
        suffix-less file of the same name, as in ReMe), else the path itself if it exists, else `<path>.md` (so
        "no such file" names the file looked for). `creating` (write, create): always `.md`. `folders` (stat,
        delete): an existing folder of exactly that name wins (`daily/DATE` is the day folder, not its page)."""
        rel = self._rel(path)
        if PurePosixPath(rel).suffix or rel.endswith("."):  # `name.`: refused as it is (see bad_name)
            return rel
        md = self._rel(rel + ".md")
        exact = self.ws.root / rel
        if creating:
            return md
        if folders and exact.is_dir():
            return rel
        if os.path.lexists(self.ws.root / md) or not os.path.lexists(exact):
            return md
        return rel

    def _node(self, path: str) -> str:
        """A graph start path: the path rule of the file tools (`digest/wiki/kyoto` is `.../kyoto.md` when that
        exists), else the path as written (a link target need not exist)."""
        rel = self.ws.normalize(path)
        try:
            if not PurePosixPath(rel).suffix and self.ws.exists(self._rel(rel + ".md")):
                return rel + ".md"
        except PathError:  # `.md` form out of bounds: the path as written
            pass
        return rel

    def _markdown(self, path: str) -> str:
        """`_file`, refusing files that are not Markdown (frontmatter operations)."""
        from storage.text.markdown import file_kind

        rel = self._file(path)
        if file_kind(rel) != "markdown":
            raise InvalidInput(f"{rel} is not markdown: frontmatter operations apply to .md files only")
        return rel

    def _check_new_name(self, rel: str) -> None:
        """Refuse a new file or folder path that `new_path_problem` finds fault with."""
        problem = new_path_problem(rel)
        if problem:
            raise PathError(f"{rel!r}: {problem}")

    def _reindex(self, con, *rels: str) -> None:
        """Re-index changed files before the write returns (a missing file's rows are removed)."""
        from storage.index import indexer as index

        for rel in rels:
            index.index_file(con, self.ws, rel, force=True)

    def _read_text(self, rel: str) -> str:
        return self._decode(rel, self.ws.read_bytes(rel))

    def _decode(self, rel: str, data: bytes, errors: str = "replace") -> str:
        return decode(rel, data, errors)

    def _meta_and_body(self, rel: str, text: str) -> tuple[dict, str]:
        from storage.text.markdown import split_frontmatter

        fm = split_frontmatter(text)
        if fm.error:
            raise Conflict(f"the frontmatter of {rel} is malformed ({fm.error}); fix it with edit first")
        return dict(fm.meta), fm.body

    def _write(self, path, content, name, description, metadata, create: bool, expected_hash=None) -> dict:
        from storage.text.markdown import file_kind

        rel = self._file(path, creating=True)
        ignored = []
        if file_kind(rel) == "markdown":
            compose = self._with_frontmatter(rel, content, name, description, metadata)
        else:  # other files: the content as given; frontmatter arguments are ignored and said so (as ReMe does)
            ignored = [k for k, v in (("name", name), ("description", description), ("metadata", metadata))
                       if v not in (None, "", {})]
            compose = lambda existing: content or ""  # noqa: E731
        existed = False

        def change(text: str | None) -> str:
            nonlocal existed
            existed = text is not None
            if existed and create:
                raise Conflict(f"{rel} already exists (use write to overwrite it)")
            if not existed:
                self._check_new_name(rel)
            return compose(text)

        text, digest = self._rewrite(rel, change, expected_hash, missing_ok=True)
        result = {"path": rel, "created": not existed, "lines": _line_count(text), "bytes": len(text.encode()),
                  "hash": digest}
        if ignored:
            result["ignored"] = ignored
            result["note"] = (f"{' and '.join(ignored)} ignored: {rel} is not Markdown, so it has no frontmatter; "
                              "the content was written verbatim")
        return result

    def _with_frontmatter(self, rel, content, name, description, metadata) -> Callable[[str | None], str]:
        """How `write` builds a Markdown file from the existing text (None: new file): the given frontmatter
        keys set over the existing ones, the given body."""
        from storage.text.markdown import render_frontmatter, split_frontmatter

        given = split_frontmatter(content or "")
        if given.error:
            raise InvalidInput(f"the frontmatter at the start of the content is malformed: {given.error}")
        updates = {**given.meta, **{k: v for k, v in (metadata or {}).items() if v is not None}}
        updates.update({k: v.strip() for k, v in (("name", name), ("description", description)) if v and v.strip()})

        def compose(existing: str | None) -> str:
            if existing is not None:
                meta, _ = self._meta_and_body(rel, existing)
            else:
                meta = {k: updates[k] for k in ("name", "description") if k in updates}
            meta.update(updates)
            return render_frontmatter(meta, _with_newline(given.body))

        return compose

    def _rewrite(self, rel: str, change: Callable[[str | None], str | None], expected_hash: str | None = None,
                 missing_ok: bool = False) -> tuple[str, str]:
        """Read `rel`, compute its new text with `change(text)` (None when the file is missing), write it and
        re-index; returns (text, content hash). A file changed by someone else between the read and the
        rename is read again and the change re-applied (REWRITE_ATTEMPTS times, then Conflict), so an outside
        writer's lines are never lost. `expected_hash`: the caller's view; a different file is a Conflict.
        `change` returning None leaves the file as it is."""
        with self.db.session() as con:
            for _ in range(REWRITE_ATTEMPTS):
                try:
                    data = self.ws.read_bytes(rel)
                except NotFound:
                    if not missing_ok and expected_hash is None:
                        raise
                    data = None
                current = content_hash(data) if data is not None else False
                if expected_hash is not None and current != expected_hash:
                    raise Changed(f"{rel} changed since it was read: its hash is {current or 'none (missing)'}, "
                                  f"not {expected_hash}; read it again and retry")
                text = self._decode(rel, data, errors="surrogateescape") if data is not None else None
                changed = change(text)
                if changed is None and data is not None:  # nothing to change: the file is not rewritten
                    return text, current
                new = changed.encode("utf-8", "surrogateescape")  # bytes that were not UTF-8 stay as they were
                try:
                    path = self.ws.write_bytes(rel, new, expect=current)
                except Changed:
                    continue
                if path.stat().st_size != len(new):  # lines appended meanwhile were carried over
                    new = read_regular(path)
                self._reindex(con, rel)
                return new.decode("utf-8", "replace"), content_hash(new)
        raise Conflict(f"{rel} kept changing while being rewritten ({REWRITE_ATTEMPTS} attempts); try again")

    def _need(self, rel: str, text: str | None) -> str:
        if text is None:
            raise NotFound(f"no such file: {rel}")
        return text

    def _day_cards(self, day: str, skipped: list[dict] | None = None) -> list[dict]:
        from storage.text.markdown import split_frontmatter

        cards = []
        for rel in self.ws.iter_files(f"daily/{day}", skipped=skipped):
            if rel.endswith(".md") and rel.count("/") == 2:  # the day's own cards, not files in sub-folders
                meta = split_frontmatter(self.ws.read_text(rel)).meta
                cards.append({"path": rel, "name": _str(meta.get("name")), "description": _str(meta.get("description")),
                              "frontmatter": meta})
        return cards

    def _children(self, folder: str, skipped: list[dict]):
        """Direct entries of `folder` (sub-folders end with `/`); special entries go to `skipped`."""
        base = self.ws.resolve(folder) if folder else self.ws.root
        if not base.is_dir():
            return
        for entry in sorted(os.scandir(base), key=lambda e: e.name):
            rel = f"{folder}/{entry.name}" if folder else entry.name
            if is_scratch_name(entry.name) or rel == "metadata" or skip_unless_utf8(rel, skipped):
                continue
            kind = special_kind(entry.path)
            if kind == "folder" and not entry.is_symlink():
                yield rel + "/"
            elif kind is None and not self.ws.in_metadata(rel) and self.ws.contains(entry.path):
                yield rel
            elif kind not in ("folder", "missing"):
                skipped.append({"path": rel, "kind": kind or "symlink out of bounds"})

    def _entry(self, rel: str) -> dict:
        if rel.endswith("/"):
            return {"path": rel, "type": "folder"}
        st = self.ws.resolve(rel).stat()
        return {"path": rel, "type": "file", "size": st.st_size, "mtime": _iso(st.st_mtime), "mtime_ns": st.st_mtime_ns}


def recover(memory: Memory) -> dict:
    """Open the workspace of `memory` for writing: finish what a killed process left, its journaled moves and
    relinks (storage/files/recovery.py) and its temp files; returns what was done (`{}` when nothing: two folder
    listings). Every process that writes calls it once before its first write (engine.access.client.local_memory);
    constructing a `Memory` touches no file."""
    from storage.files import journal

    done: dict = {}
    temps = memory.ws.clean_stale_temps()
    if temps:
        done["temp_files_removed"] = temps
    if journal.interrupted(memory.ws):
        from storage.files import recovery

        try:
            with memory.db.session() as con:
                done.update(recovery.recover(con, memory.ws))
        except IndexRebuilt:  # the replay met a damaged index, now rebuilt from the files: replay on it
            with memory.db.session() as con:
                done.update(recovery.recover(con, memory.ws))
    return done


def _telling(behind: dict | None, result: dict) -> dict:
    """A read's answer with `index_behind` when the index is behind the files (the field is absent otherwise)."""
    return {**result, "index_behind": behind} if behind else result


def _appended(text: str, addition: str) -> str:
    return (text + "\n" if text and not text.endswith("\n") else text) + addition


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


def _line_count(text: str) -> int:
    from storage.text.model import split_lines

    return len(split_lines(text))


def _mime(rel: str) -> str:
    from storage.text.markdown import file_kind

    if file_kind(rel) == "markdown":
        return "text/markdown"
    return mimetypes.guess_type(rel)[0] or "application/octet-stream"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).isoformat(timespec="seconds")


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
