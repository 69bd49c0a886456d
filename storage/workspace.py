"""The workspace folder: its layout, safe path resolution and atomic writes.

Every path that enters Dreamflow is workspace-relative. `Workspace.resolve` refuses absolute paths, `..`
segments and symlinks that lead outside the root; every write goes through a temp file and `os.replace`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath

from storage.errors import NotFound, PathError

LAYOUT = (
    "session/dialog",
    "resource",
    "daily",
    "digest/personal",
    "digest/procedure",
    "digest/wiki",
    "metadata",
)


class Workspace:
    """A memory workspace rooted at `root`; created with its standard layout on first use."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True):
        self.root = Path(root).expanduser().resolve()
        if create:
            for sub in LAYOUT:
                (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def metadata(self) -> Path:
        """Folder of derived state (index, checkpoints): deleting it loses no memory."""
        return self.root / "metadata"

    def normalize(self, rel: str) -> str:
        """Return the canonical posix form of a workspace-relative path, or raise PathError."""
        if not isinstance(rel, str) or not rel.strip():
            raise PathError("path must be a non-empty workspace-relative string")
        text = rel.strip().replace("\\", "/")
        if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
            raise PathError(f"absolute paths are not allowed: {rel!r} (use a path relative to the workspace)")
        parts = [p for p in PurePosixPath(text).parts if p not in ("", ".")]
        if not parts:
            raise PathError(f"path {rel!r} names the workspace root, not a file")
        if any(p == ".." for p in parts):
            raise PathError(f"path {rel!r} escapes the workspace ('..' is not allowed)")
        if "\x00" in text:
            raise PathError("path contains a NUL byte")
        return "/".join(parts)

    def resolve(self, rel: str) -> Path:
        """Absolute path for a workspace-relative one; refuses anything that leaves the workspace."""
        norm = self.normalize(rel)
        path = self.root / norm
        real = path.resolve()
        if real != self.root and self.root not in real.parents:
            raise PathError(f"path {rel!r} leaves the workspace through a symlink")
        return path

    def relative(self, path: str | os.PathLike[str]) -> str:
        """Workspace-relative posix path of an absolute path inside the workspace."""
        p = Path(path)
        if not p.is_absolute():
            p = self.root / p
        try:
            return p.relative_to(self.root).as_posix()
        except ValueError as exc:
            raise PathError(f"{path} is outside the workspace {self.root}") from exc

    def exists(self, rel: str) -> bool:
        return self.resolve(rel).is_file()

    def read_bytes(self, rel: str) -> bytes:
        path = self.resolve(rel)
        if not path.is_file():
            raise NotFound(f"no such file: {self.normalize(rel)}")
        return path.read_bytes()

    def read_text(self, rel: str) -> str:
        """Text of a file, decoded as UTF-8 (undecodable bytes replaced)."""
        return self.read_bytes(rel).decode("utf-8", errors="replace")

    def write_bytes(self, rel: str, data: bytes) -> Path:
        """Atomically write `data` to `rel`: temp file in the same folder, fsync, rename."""
        path = self.resolve(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return path

    def write_text(self, rel: str, text: str) -> Path:
        return self.write_bytes(rel, text.encode("utf-8"))

    def iter_files(self, prefix: str = "", include_metadata: bool = False):
        """Yield workspace-relative paths of regular files under `prefix`, skipping temp files."""
        base = self.resolve(prefix) if prefix else self.root
        if not base.exists():
            return
        root = str(self.root)
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            if not include_metadata and (rel_dir == "metadata" or rel_dir.startswith("metadata/")):
                dirnames[:] = []
                continue
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if is_scratch_name(name):
                    continue
                full = os.path.join(dirpath, name)
                if os.path.islink(full) and self.root not in Path(full).resolve().parents:
                    continue
                yield name if rel_dir == "." else f"{rel_dir}/{name}"


def is_scratch_name(name: str) -> bool:
    """True for editor swap/backup files and our own temp files, which are never memory."""
    return (
        name.startswith(".")
        or name.endswith(("~", ".swp", ".swx", ".tmp", ".part"))
        or name.startswith("#")
        or name == "4913"  # vim's write-permission probe
    )
