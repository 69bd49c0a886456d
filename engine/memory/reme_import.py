"""Bring a ReMe workspace over (`dreamflow import-reme DIR`): the files as they are, ReMe's day pages
converted, its sessions marked as summarised, the index built. DIR itself is never changed.

ReMe's layout is Dreamflow's (session/dialog/<id>.jsonl, resource/[DATE/], daily/DATE.md and daily/DATE/*.md,
digest/{personal,procedure,wiki}/, literal-path wikilinks, `name`/`description` frontmatter), so files are
copied byte for byte, keeping their modification times, streamed in 1 MiB chunks through the workspace's
atomic durable write. Left out without a word: ReMe's `metadata/` (its derived indexes; Dreamflow builds its
own), `mem_session/` (agent runtime state, not memory) and hidden or scratch files. Skipped and reported
(`skipped_count`, the first `SHOWN_SKIPS` in `skipped` with a reason), while the rest comes over: every entry
the tools would refuse to write (the workspace's path rules: names that are not UTF-8, `METADATA/` in any
letter case, too long, leaving the workspace through one of its symlinks; names no portable file system takes;
a backslash, which the tools read as a folder separator), symlinks and special files, unreadable entries, and
files over `max_bytes` (default `DREAMFLOW_MAX_BODY_BYTES`, 32 MiB, the largest body a tool takes; a 2 GB
sparse file is skipped from its size, never read). ReMe's `<!-- notes:auto -->` day-page block becomes
Dreamflow's card list in place (`daily_reindex`); `memory_tags` are read by the indexer; a session whose daily
card names it (`session_id`) is checkpointed as summarised, so auto_memory does not summarise ReMe's history
again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from engine.config.settings import Settings
from storage.arguments import new_path_problem
from storage.errors import DreamflowError, InvalidInput, PathError
from storage.files import dialog, redaction_log
from storage.files.day_page import REME_NOTES_START
from storage.files.workspace import Workspace, is_scratch_name, open_regular, shown_path, special_kind
from storage.text import redact
from storage.text.markdown import split_frontmatter

NOT_MEMORY = ("metadata", "mem_session")  # ReMe's derived indexes and agent runtime state
REME_FOLDERS = ("daily", "digest", "session", "resource")
CHUNK_BYTES = 1 << 20  # what one read or write of a copy holds
DIALOG = re.compile(r"session/dialog/[^/]+\.jsonl")  # conversation records: redacted as a turn's are
SHOWN_SKIPS = 50  # skipped entries listed in the report; `skipped_count` counts them all


def import_reme(memory, ws: Workspace, source: str | os.PathLike[str], overwrite: bool = False,
                max_bytes: int | None = None) -> dict:
    """Copy the ReMe workspace at `source` into `ws` (through `memory` for day pages and the index).

    A file already in the workspace with other content is a conflict: left as it is unless `overwrite`.
    Files over `max_bytes` (None: `DREAMFLOW_MAX_BODY_BYTES`) are skipped. Returns {source, copied,
    unchanged, conflicts, skipped, skipped_count, day_pages, redacted, private, sessions, index}.
    """
    max_bytes = Settings().max_body_bytes if max_bytes is None else max_bytes
    if max_bytes < 0:
        raise InvalidInput(f"the file size cap must be 0 or more bytes, not {max_bytes}")
    root = Path(source).expanduser().resolve()
    if not root.is_dir():
        raise InvalidInput(f"{source} is not a folder")
    if not any((root / sub).is_dir() for sub in REME_FOLDERS):
        raise InvalidInput(f"{source} does not look like a ReMe workspace (no {', '.join(REME_FOLDERS)} folder)")
    if root != ws.root and (ws.root in root.parents or root in ws.root.parents):
        raise InvalidInput(f"{source} and the workspace {ws.root} contain one another; import from a separate folder")
    report: dict = {"source": shown_path(str(root)), "copied": 0, "unchanged": 0, "conflicts": [], "skipped": [],
                    "skipped_count": 0, "day_pages": [], "sessions": []}

    def skip(rel: str, reason: str) -> None:
        report["skipped_count"] += 1
        if len(report["skipped"]) < SHOWN_SKIPS:
            report["skipped"].append({"path": shown_path(rel), "reason": reason})

    kept = dialog.Kept(redact.workspace_patterns(ws.root))
    for rel in _files(root, ws, skip):
        try:
            outcome = copy_file(root / rel, ws, rel, overwrite, max_bytes, kept)
        except OSError as exc:
            skip(rel, f"could not be copied ({exc.strerror or exc})")
            continue
        except DreamflowError as exc:
            skip(rel, str(exc))
            continue
        if outcome == "conflict":
            report["conflicts"].append(rel)
        else:
            report[outcome] += 1
    for rel in _reme_day_pages(ws):
        report["day_pages"].append(memory.daily_reindex(Path(rel).stem)["path"])
    redaction_log.add(ws, kept.counts, kept.private)
    report["redacted"], report["private"] = dict(kept.counts), kept.private
    report["sessions"] = _mark_summarised(memory, ws)
    report["index"] = {k: v for k, v in memory.reconcile().items() if k != "special_files"}
    return report


def _files(root: Path, ws: Workspace, skip: Callable[[str, str], None]) -> Iterator[str]:
    """Workspace-relative paths of the regular files to bring over, in order; the rest goes to `skip`
    (a refused folder once, with a trailing `/`, its content never looked at)."""
    def unreadable(exc: OSError) -> None:
        skip(Path(os.path.relpath(exc.filename, root)).as_posix() + "/", f"unreadable folder ({exc.strerror})")

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        kept = []
        for name in sorted(dirnames):
            if is_scratch_name(name) or (not prefix and name in NOT_MEMORY):
                continue
            reason = "symlink to a folder (not followed)" if (here / name).is_symlink() else _refusal(ws, prefix + name)
            if reason:
                skip(prefix + name + "/", reason)
            else:
                kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            if is_scratch_name(name):
                continue
            rel = prefix + name
            reason = special_kind(here / name) or (
                "symlink" if (here / name).is_symlink() else None) or _refusal(ws, rel)
            if reason:
                skip(rel, reason)
            else:
                yield rel


def _refusal(ws: Workspace, rel: str) -> str | None:
    """Why the tools would refuse to create `rel` in `ws`, or None: the workspace's path rules
    (`memory_path`), portable names (`new_path_problem`), and a path the tools would read as another one
    (a backslash separates folders for them)."""
    try:
        norm = ws.memory_path(rel)
    except PathError as exc:
        return str(exc)
    problem = new_path_problem(norm)
    if problem:
        return problem
    if norm != rel:
        return f"the tools read this path as {norm!r}" + (" (a backslash separates folders)" if "\\" in rel else "")
    return None


def copy_file(src: Path, ws: Workspace, rel: str, overwrite: bool, max_bytes: int,
              kept: dialog.Kept | None = None) -> str:
    """Copy `src` to `rel`, streamed, keeping its modification time: `copied`, `unchanged` (same bytes there)
    or `conflict` (other content there, no `overwrite`). InvalidInput when it is over `max_bytes`. A session
    dialog's records lose their secrets and `<private>` spans on the way (tallied in `kept`), as a turn's do."""
    with open_regular(src) as fh:
        st = os.fstat(fh.fileno())
        if st.st_size > max_bytes:
            raise InvalidInput(f"{st.st_size:,} bytes, over the import cap of {max_bytes:,} (--max-file-bytes)")
        target = ws.root / rel
        if kept is not None and DIALOG.fullmatch(rel):
            return _copy_dialog(fh, ws, rel, overwrite, kept, st)
        if target.is_file() and _same_content(fh, target):
            return "unchanged"
        if os.path.lexists(target) and not overwrite:
            return "conflict"
        fh.seek(0)
        written = ws.write_chunks(rel, _chunks(fh, max_bytes))
    os.utime(written, ns=(st.st_atime_ns, st.st_mtime_ns))
    return "copied"


def _copy_dialog(fh: BinaryIO, ws: Workspace, rel: str, overwrite: bool, kept: dialog.Kept,
                 st: os.stat_result) -> str:
    """`copy_file` of a session dialog: its lines redacted (`dialog.redact_line`), compared and written whole
    (it is under the import cap)."""
    mine = dialog.Kept(kept.patterns)  # tallied into `kept` only when written
    data = b"".join(dialog.redact_line(line, mine) for line in fh)
    target = ws.root / rel
    if target.is_file():
        with open_regular(target) as other:
            if other.read() == data:
                return "unchanged"
    if os.path.lexists(target) and not overwrite:
        return "conflict"
    written = ws.write_bytes(rel, data)
    os.utime(written, ns=(st.st_atime_ns, st.st_mtime_ns))
    kept.counts.update(mine.counts)
    kept.private += mine.private
    return "copied"


def _chunks(fh: BinaryIO, max_bytes: int) -> Iterator[bytes]:
    """The content of `fh` in `CHUNK_BYTES` pieces; InvalidInput once it passes `max_bytes` (it grew)."""
    total = 0
    while chunk := fh.read(CHUNK_BYTES):
        total += len(chunk)
        if total > max_bytes:
            raise InvalidInput(f"grew past the import cap of {max_bytes:,} bytes while it was copied")
        yield chunk


def _same_content(fh: BinaryIO, path: Path) -> bool:
    """True when the regular file at `path` holds exactly what `fh` holds (compared chunk by chunk)."""
    with open_regular(path) as other:
        if os.fstat(other.fileno()).st_size != os.fstat(fh.fileno()).st_size:
            return False
        while (mine := fh.read(CHUNK_BYTES)) == other.read(CHUNK_BYTES):
            if not mine:
                return True
        return False


def _reme_day_pages(ws: Workspace) -> list[str]:
    """Day index pages in the workspace that still hold ReMe's auto block."""
    pages = []
    for rel in ws.iter_files("daily"):
        if rel.count("/") == 1 and rel.endswith(".md") and REME_NOTES_START in ws.read_text(rel):
            pages.append(rel)
    return pages


def _mark_summarised(memory, ws: Workspace) -> list[str]:
    """Checkpoint every session some daily card names (`session_id`) as summarised up to its last record."""
    marked = []
    for rel in ws.iter_files("daily"):
        if rel.count("/") != 2 or not rel.endswith(".md"):
            continue
        session_id = split_frontmatter(ws.read_text(rel)).meta.get("session_id")
        if not isinstance(session_id, str) or session_id in marked:
            continue
        try:
            records = dialog.read_records(memory, session_id)
        except InvalidInput:  # not a session id Dreamflow accepts
            continue
        if records:
            dialog.mark_summarised(ws, session_id, len(records), rel)
            marked.append(session_id)
    return marked
