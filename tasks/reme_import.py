"""Bring a ReMe workspace over (`dreamflow import-reme DIR`): the files as they are, ReMe's day pages
converted, its sessions marked as summarised, the index built. DIR itself is never changed.

ReMe's layout is Dreamflow's (session/dialog/<id>.jsonl, resource/[DATE/], daily/DATE.md and daily/DATE/*.md,
digest/{personal,procedure,wiki}/, literal-path wikilinks, `name`/`description` frontmatter), so files are
copied byte for byte, keeping their modification times. Left out: ReMe's `metadata/` (its derived indexes;
Dreamflow builds its own) and `mem_session/` (agent runtime state, not memory), hidden files, special files
and names no portable file system takes. ReMe's `<!-- notes:auto -->` day-page block becomes Dreamflow's card
list in place (`daily_reindex`); `memory_tags` are read by the indexer; a session whose daily card names it
(`session_id`) is checkpointed as summarised, so auto_memory does not summarise ReMe's history again.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.errors import InvalidInput
from storage.markdown import split_frontmatter
from storage.memory import REME_NOTES_START, bad_name
from storage.workspace import Workspace, read_regular, special_kind
from tasks import dialog

NOT_MEMORY = ("metadata", "mem_session")  # ReMe's derived indexes and agent runtime state
REME_FOLDERS = ("daily", "digest", "session", "resource")


def import_reme(memory, ws: Workspace, source: str | os.PathLike[str], overwrite: bool = False) -> dict:
    """Copy the ReMe workspace at `source` into `ws` (through `memory` for day pages and the index).

    A file already in the workspace with other content is a conflict: left as it is unless `overwrite`.
    Returns {source, copied, unchanged, conflicts, skipped, day_pages, sessions, index}.
    """
    root = Path(source).expanduser().resolve()
    if not root.is_dir():
        raise InvalidInput(f"{source} is not a folder")
    if not any((root / sub).is_dir() for sub in REME_FOLDERS):
        raise InvalidInput(f"{source} does not look like a ReMe workspace (no {', '.join(REME_FOLDERS)} folder)")
    if root != ws.root and (ws.root in root.parents or root in ws.root.parents):
        raise InvalidInput(f"{source} and the workspace {ws.root} contain one another; import from a separate folder")
    report: dict = {"source": str(root), "copied": [], "unchanged": 0, "conflicts": [], "skipped": [],
                    "day_pages": [], "sessions": []}
    for rel in _files(root, report["skipped"]):
        data = read_regular(root / rel)
        target = ws.root / rel
        if target.is_file() and read_regular(target) == data:
            report["unchanged"] += 1
            continue
        if os.path.lexists(target) and not overwrite:
            report["conflicts"].append(rel)
            continue
        ws.write_bytes(rel, data)
        st = (root / rel).stat()
        os.utime(ws.root / rel, ns=(st.st_atime_ns, st.st_mtime_ns))
        report["copied"].append(rel)
    for rel in _reme_day_pages(ws):
        report["day_pages"].append(memory.daily_reindex(Path(rel).stem)["path"])
    report["sessions"] = _mark_summarised(memory, ws)
    report["index"] = {k: v for k, v in memory.reconcile().items() if k != "special_files"}
    report["copied"] = len(report["copied"])
    return report


def _files(root: Path, skipped: list[dict]):
    """Workspace-relative paths of the regular files to bring over, in order; the rest goes to `skipped`."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in NOT_MEMORY]
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (here / d).is_symlink())
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if name.startswith("."):
                continue
            reason = special_kind(here / name) or (
                "symlink" if (here / name).is_symlink() else None) or next(
                (bad_name(part) for part in rel.split("/") if bad_name(part)), None)
            if reason:
                skipped.append({"path": rel, "reason": reason})
            else:
                yield rel


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
