"""The intent journal: multi-file rewrites that a crash cannot leave half done.

A move, a relink or a retraction (storage/files/retraction.py) rewrites several files. Before it changes anything it records its plan in
`metadata/journal/<pid>-<n>.json` (written atomically and fsynced): the paths involved and, for every file it
is about to rewrite, that file's content hash. It then does the work, re-indexes, and removes the entry. A
process killed in between leaves the entry behind; the next process that opens the workspace
(`storage.memory.Memory`) finds it and finishes the work under the index lock (`storage/files/recovery.py`):
the hash guard makes replaying idempotent (a file already rewritten, or changed since, is left alone).

Entries of a live process are left to it; under the index lock every entry present is an interrupted one,
since operations hold the lock from `begin` to `finish`.

Each entry carries the sha256 of its canonical payload, checked by `load`: an entry torn, garbled or changed
after it was written raises `Damaged` (with the paths still legible in it) instead of being trusted or
dropped. Entries recovery cannot use (damaged, invalid, or failing `MAX_ATTEMPTS` replays) are moved to
`metadata/journal-quarantine/` (`quarantine`, the newest `QUARANTINE_KEEP` kept) so they are reported once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from storage.files.workspace import Workspace, fsync_folder, pid_alive

JOURNAL = "metadata/journal"
QUARANTINE = "metadata/journal-quarantine"
QUARANTINE_KEEP = 20  # set-aside entries kept for diagnosis; older ones are deleted
MAX_ATTEMPTS = 3  # failed replays (a full disk, an I/O error) before an entry is set aside
LEGIBLE = ("kind", "src", "dst", "target", "new_target", "node")  # written first: a torn entry still shows them
_FIELD = re.compile(r'[{,]\s*"(%s)"\s*:\s*("(?:[^"\\]|\\.)*")' % "|".join(LEGIBLE))
_counter = itertools.count(1)


class Damaged(Exception):
    """An entry that cannot be trusted (torn, garbled, failing its checksum); `legible`: its fields among
    `LEGIBLE` that can still be read, as hints for repairing from the files."""

    def __init__(self, reason: str, legible: dict[str, str]):
        super().__init__(reason)
        self.reason, self.legible = reason, legible


def begin(ws: Workspace, kind: str, plan: dict) -> Path:
    """Durably record that operation `kind` is about to carry out `plan`; returns the entry's path."""
    return _write(ws, f"{os.getpid()}-{next(_counter)}.json", {"kind": kind, "pid": os.getpid(), **plan})


def _write(ws: Workspace, name: str, entry: dict) -> Path:
    entry = {**{k: entry[k] for k in LEGIBLE if k in entry}, **entry}  # the short fields first
    # ASCII JSON: a path whose name is not UTF-8 (lone surrogates) is escaped, and read back the same.
    return ws.write_text(f"{JOURNAL}/{name}", json.dumps({**entry, "sha256": _checksum(entry)}))


def _checksum(entry: dict) -> str:
    canonical = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def finish(entry: Path) -> None:
    """The operation is complete (files and index): forget its entry."""
    try:
        entry.unlink()
    except FileNotFoundError:
        pass
    fsync_folder(entry.parent)


@contextmanager
def intent(ws: Workspace, kind: str, plan: dict) -> Iterator[Path]:
    """`begin` before the block, `finish` after it; an exception leaves the entry for recovery."""
    entry = begin(ws, kind, plan)
    yield entry
    finish(entry)


def entries(ws: Workspace) -> list[Path]:
    """Every journal entry, oldest first."""
    folder = ws.root / JOURNAL
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return []
    return sorted((folder / n for n in names), key=_order)


def interrupted(ws: Workspace) -> list[Path]:
    """Entries whose process is gone (or is this one, between operations): work to finish. One folder
    listing when there are none, so opening a workspace stays cheap."""
    out = []
    for entry in entries(ws):
        pid = entry.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or not pid_alive(int(pid)):
            out.append(entry)
    return out


def load(entry: Path) -> dict:
    """The verified plan of an entry (`kind`, `pid`, the operation's fields, `attempts` once retried), or
    `Damaged`. An entry is renamed into place only once complete, so damage means it was changed later."""
    try:
        raw = entry.read_bytes()
    except OSError as exc:
        raise Damaged(f"unreadable, {exc.strerror or exc}", {}) from None
    try:
        data = json.loads(raw)
    except ValueError:
        raise Damaged("torn or garbled, not JSON", _legible(raw)) from None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        raise Damaged("no checksum", _legible(raw))
    digest = data.pop("sha256")
    if digest != _checksum(data):
        raise Damaged("checksum mismatch", _legible(raw))
    return data


def _legible(raw: bytes) -> dict[str, str]:
    """The `LEGIBLE` fields whose JSON strings can still be read in a damaged entry's bytes (first of each)."""
    found: dict[str, str] = {}
    for m in _FIELD.finditer(raw.decode("ascii", "replace")):
        try:
            value = json.loads(m.group(2))
        except ValueError:
            continue
        found.setdefault(m.group(1), value)
    return found


def invalid(plan: dict) -> str | None:
    """Why a verified plan cannot be replayed (an unknown kind, a field missing or of the wrong type), or
    None."""
    fields = {"move": ("src", "dst"), "relink": ("target", "new_target"), "retract": ("node",)}.get(plan.get("kind"))
    if fields is None:
        return f"unknown kind {plan.get('kind')!r}"
    for name in fields:
        if not isinstance(plan.get(name), str):
            return f"{plan['kind']} without a {name} path"
    files = plan.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return f"{plan['kind']} without its files and their hashes"
    if plan["kind"] == "retract" and (not isinstance(plan.get("texts"), dict) or set(plan["texts"]) != set(files)
                                      or not all(isinstance(v, str) for v in plan["texts"].values())):
        return "retract without the new text of each of its files"
    if plan["kind"] == "relink" and not isinstance(plan.get("before"), (str, type(None))):
        return "relink whose former text is not text"
    return None


def failed_attempt(ws: Workspace, entry: Path, plan: dict) -> int:
    """Count one more failed replay of a verified entry (rewritten in place); returns the count so far."""
    before = plan.get("attempts")
    attempts = (before if isinstance(before, int) else 0) + 1
    try:
        _write(ws, entry.name, {**plan, "attempts": attempts})
    except OSError:
        pass  # a full disk: not counted, so the entry is retried until there is room again
    return attempts


def quarantine(ws: Workspace, entry: Path) -> str:
    """Move an entry recovery cannot use out of the journal, into `QUARANTINE` (kept for diagnosis, the newest
    `QUARANTINE_KEEP`); returns its new workspace-relative path."""
    folder = ws.root / QUARANTINE
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns()}-{entry.name}"  # fixed width: names sort oldest first
    os.replace(entry, folder / name)
    for old in sorted(n for n in os.listdir(folder) if not n.startswith("."))[:-QUARANTINE_KEEP]:
        try:
            os.unlink(folder / old)
        except OSError:
            pass
    fsync_folder(folder)
    fsync_folder(entry.parent)
    return f"{QUARANTINE}/{name}"


def _order(entry: Path) -> tuple[float, str]:
    try:
        return entry.stat().st_mtime, entry.name
    except OSError:
        return 0.0, entry.name
