"""How many secrets and private spans were kept out of memory: `metadata/checkpoints/redactions.json`.

`written`: what was redacted before it was written (dialog records from every capture path, imported dialogs,
what the jobs wrote), by kind, and `private`: the `<private>` spans dropped; both only grow. `index`: per
indexed file, the secrets its text holds that the index left out (resources keep them on disk); a file's
entry is replaced each time it is indexed and dropped when it is removed. `summary` is what `status`, the
dashboard and `GET /status` show.
"""

from __future__ import annotations

from collections import Counter

from storage.files import checkpoints
from storage.files.workspace import Workspace

NAME = "redactions"


def workspace_of(memory) -> Workspace | None:
    """The workspace folder of a local memory, or of a service's on this machine."""
    if getattr(memory, "ws", None) is not None:
        return memory.ws
    root = getattr(memory, "root", None)
    return Workspace(root, create=False) if root is not None else None


def add(ws: Workspace, counts: Counter | dict, private: int = 0) -> None:
    """Count secrets redacted (`counts` by kind) and `private` spans dropped before a write."""
    if not any(counts.values()) and not private:
        return
    with checkpoints.update(ws, NAME) as data:
        written = Counter(data.get("written") or {})
        written.update({k: n for k, n in counts.items() if n})
        data["written"] = dict(sorted(written.items()))
        data["private"] = int(data.get("private") or 0) + private


def indexed(ws: Workspace, rel: str, counts: Counter | dict) -> None:
    """Record what the index left out of `rel` (nothing: its entry goes)."""
    counts = {k: n for k, n in counts.items() if n}
    if not counts and rel not in _recorded(ws):
        return
    with checkpoints.update(ws, NAME) as data:
        files = dict(data.get("index") or {})
        if counts:
            files[rel] = counts
        else:
            files.pop(rel, None)
        data["index"] = files


_RECORDED: dict[str, tuple[tuple, frozenset[str]]] = {}  # log file -> (its stat, the files it has index entries of)


def _recorded(ws: Workspace) -> frozenset[str]:
    """The files the log has index entries of, read again only when the log changed: indexing asks for every
    file it reads, and almost none holds a secret."""
    path = ws.root / checkpoints.FOLDER / f"{NAME}.json"
    try:
        st = path.stat()
    except OSError:
        return frozenset()
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    held = _RECORDED.get(str(path))
    if held is None or held[0] != stamp:
        held = stamp, frozenset(checkpoints.load(ws, NAME).get("index") or {})
        _RECORDED[str(path)] = held
    return held[1]


def summary(ws: Workspace) -> dict:
    """`{secrets, by_kind, private, index: {secrets, files, by_kind}}`: written counts plus what the index keeps
    out of files still there."""
    data = checkpoints.load(ws, NAME)
    written = Counter(data.get("written") or {})
    index: Counter = Counter()
    files = 0
    for rel, counts in (data.get("index") or {}).items():
        if isinstance(counts, dict) and (ws.root / rel).is_file():
            files += 1
            index.update(counts)
    return {"secrets": sum(written.values()), "by_kind": dict(sorted(written.items())),
            "private": int(data.get("private") or 0),
            "index": {"secrets": sum(index.values()), "files": files, "by_kind": dict(sorted(index.items()))}}
