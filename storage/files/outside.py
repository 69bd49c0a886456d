"""Files outside the workspace, on the machine of whoever runs the command: an upload's source and a
download's destination.

Only the CLI (in-process, or its client talking to the service) calls these: over HTTP an upload sends the
file's bytes and a download answers with them, so no remote caller ever names a path on the server.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.errors import Conflict, NotFound, PathError
from storage.files.workspace import Workspace, fsync_folder, read_regular


def read_source(source: str) -> tuple[bytes, str]:
    """(bytes, file name) of an outside regular file to upload."""
    path = Path(source).expanduser()
    if not path.exists() and not path.is_symlink():
        raise NotFound(f"no such file to upload: {source}")
    if path.is_dir():
        raise PathError(f"{source} is a folder; upload takes one file")
    return read_regular(path), path.name


def save(data: bytes, dest: str, name: str, overwrite: bool = False, workspace: Path | None = None) -> Path:
    """Write `data` atomically to the outside path `dest` and return it.

    An existing folder, or a `dest` ending with `/` (created when missing), receives the file as `name`; an
    existing file is replaced only with `overwrite`. A destination inside `workspace`'s `metadata/` (the
    live index) is refused, however it is spelt.
    """
    out = Path(dest).expanduser()
    if dest.endswith(("/", os.sep)):
        out.mkdir(parents=True, exist_ok=True)
    if out.is_dir():
        out = out / name
    if workspace is not None:
        _refuse_metadata(out, Workspace(workspace, create=False))
    if out.exists() and not overwrite:
        raise Conflict(f"{out} already exists (pass overwrite, --overwrite on the CLI, to replace it)")
    if not out.parent.is_dir():
        raise NotFound(f"destination folder does not exist: {out.parent} (end DEST with / to create it)")
    tmp = out.parent / f".{out.name}.{os.getpid()}.download.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_folder(out.parent)
    return out


def _refuse_metadata(out: Path, ws: Workspace) -> None:
    real = Path(os.path.realpath(out))
    if real == ws.root or ws.root in real.parents:
        rel = real.relative_to(ws.root).as_posix()
        if rel.split("/", 1)[0].casefold() == "metadata":
            raise PathError(f"{out} is in the workspace's metadata/ (derived state): download elsewhere")
