"""The workspace folder: its layout, safe path resolution, safe reads and durable atomic writes.

Every path that enters Dreamflow is workspace-relative. `Workspace.resolve` refuses absolute paths, `..`
segments, names too long for the file system and symlinks that lead outside the root; `memory_path` also
refuses anything whose resolved path is in `metadata/` (case-insensitively). Reads open regular files only
(never a FIFO, socket or device: they could block or have side effects). Writes go through a temp file
`.<name>.<pid>-<rand>.tmp` in the target folder, fsynced, renamed over the target and the folder fsynced;
the target keeps its mode (new files get the umask's). A rewrite checks the file is unchanged just before
the rename and carries over what others append in between (`write_bytes`). Temp files of a process killed
mid-write are removed by the next process that opens the workspace for writing (`clean_stale_temps`, called by
`storage.memory.recover`).

Opening a workspace also gives it its `.gitignore` files (`GITIGNORES`), so a workspace inside a git repository
never has its derived state committed by accident, nor, unless the team decides so, its raw conversations.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from storage.errors import Changed, InvalidInput, NotFound, PathError

# The digest's buckets every workspace has (the dream files new nodes in them). A folder of your own under
# `digest/` (`digest/project/`) is a bucket too, first-class everywhere (`digest_buckets`); `digest/archive/`
# is where archived nodes go, no bucket.
BUCKETS = ("personal", "procedure", "wiki")
ARCHIVE = "archive"
LAYOUT = (
    "session/dialog",
    "resource",
    "daily",
    *(f"digest/{bucket}" for bucket in BUCKETS),
    "metadata",
)
MAX_NAME_BYTES = 255   # one path component (ext4, APFS, NTFS all stop here)
MAX_PATH_BYTES = 4000  # a workspace-relative path (PATH_MAX is 4096 with the root in front)
# `<folder>/.gitignore` files every workspace holds: written when missing (on every open, so older workspaces get
# them too), atomically, and never rewritten, so an edit of yours stands. Dot files are never memory (not
# listed, indexed or searched).
GITIGNORES = {
    "metadata": "# Written by Dreamflow: metadata/ is derived state (the index, locks, checkpoints, job results),\n"
                "# rebuilt from the workspace's files on first use. Never commit it.\n*\n",
    "session/dialog": "# Written by Dreamflow: raw conversations stay on the machine that recorded them (they hold\n"
                      "# whatever was said and pasted); the cards distilled from them are the memory to share.\n"
                      "# To commit them too, replace the `*` line below with a comment (do not delete this file:\n"
                      "# a missing one is written again).\n*\n!.gitignore\n",
}
WRITERS = "metadata/journal"  # `writer-<pid>` markers: processes that may leave temp files behind
NOT_UTF8 = "file name that is not UTF-8"  # the kind a skipped entry with such a name is reported as
_TEMP_RE = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}\.tmp$")
_marked: set[Path] = set()  # workspace roots this process has marked as written to


def digest_buckets(folders: Iterable[str]) -> list[str]:
    """The digest's buckets given the names of the folders in `digest/` (as `list` shows them, `project/` or
    `digest/project/` alike): the standard ones first (`BUCKETS`, present or not), then your own folders by
    name; `archive` and dot folders are no bucket."""
    own = {name.rstrip("/").rsplit("/", 1)[-1] for name in folders}
    own = {name for name in own if name and not name.startswith(".") and name != ARCHIVE and name not in BUCKETS}
    return [*BUCKETS, *sorted(own)]


class Workspace:
    """A memory workspace rooted at `root`; created with its standard layout on first use."""

    def __init__(self, root: str | os.PathLike[str], create: bool = True):
        self.root = Path(root).expanduser().resolve()
        if create:
            for sub in LAYOUT:
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            for folder, text in GITIGNORES.items():
                if not os.path.lexists(self.root / folder / ".gitignore"):
                    self._create_once(f"{folder}/.gitignore", text.encode())

    @property
    def metadata(self) -> Path:
        """Folder of derived state (index, checkpoints): deleting it loses no memory."""
        return self.root / "metadata"

    def normalize(self, rel: str) -> str:
        """Return the canonical posix form of a workspace-relative path, or raise PathError."""
        if not isinstance(rel, str):
            raise InvalidInput(f"a path must be a string, not {type(rel).__name__}")
        if not rel.strip():
            raise PathError("path must be a non-empty workspace-relative string")
        if not is_utf8(rel):  # lone surrogates: no UTF-8 file name, index row or reply can hold them
            raise PathError("path is not valid UTF-8 text")
        text = rel.strip().replace("\\", "/")
        if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
            raise PathError(f"absolute paths are not allowed: {_short(rel)} (use a path relative to the workspace)")
        parts = [p for p in PurePosixPath(text).parts if p not in ("", ".")]
        if not parts:
            raise PathError(f"path {rel!r} names the workspace root, not a file")
        if any(p == ".." for p in parts):
            raise PathError(f"path {_short(rel)} escapes the workspace ('..' is not allowed)")
        if "\x00" in text:
            raise PathError("path contains a NUL byte")
        for part in parts:
            if len(part.encode()) > MAX_NAME_BYTES:
                raise PathError(f"file name {_short(part)} is longer than {MAX_NAME_BYTES} bytes")
        norm = "/".join(parts)
        if len(norm.encode()) > MAX_PATH_BYTES:
            raise PathError(f"path {_short(rel)} is longer than {MAX_PATH_BYTES} bytes")
        return norm

    def resolve(self, rel: str) -> Path:
        """Absolute path for a workspace-relative one; refuses anything that leaves the workspace."""
        norm = self.normalize(rel)
        path = self.root / norm
        if not self.contains(path):
            raise PathError(f"path {_short(rel)} leaves the workspace through a symlink")
        return path

    def contains(self, path: str | os.PathLike[str]) -> bool:
        """True when `path`, with every symlink resolved (loops left as they are), is inside the root."""
        real = Path(os.path.realpath(path))
        return real == self.root or self.root in real.parents

    def in_metadata(self, rel: str) -> bool:
        """True when `rel`, as written or once symlinks are resolved, is `metadata/` or inside it, in any
        letter case (a case-insensitive file system would take `Metadata/` for it)."""
        norm = self.normalize(rel)
        real = Path(os.path.realpath(self.root / norm))
        candidates = [norm]
        if real == self.root or self.root in real.parents:
            candidates.append(real.relative_to(self.root).as_posix())
        return any(c.split("/", 1)[0].casefold() == "metadata" for c in candidates)

    def memory_path(self, rel: str) -> str:
        """Normalised path of a memory file: inside the workspace and not reaching `metadata/`."""
        norm = self.normalize(rel)
        self.resolve(norm)
        if self.in_metadata(norm):
            raise PathError(f"{_short(norm)} reaches metadata/, which holds derived state only")
        return norm

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

    def regular(self, rel: str) -> Path:
        """The path of `rel` when it is a regular file (or a symlink to one); NotFound when nothing is
        there, PathError for a folder, FIFO, socket, device, symlink loop or dangling symlink."""
        path = self.resolve(rel)
        kind = special_kind(path)
        if kind == "missing":
            raise NotFound(f"no such file: {self.normalize(rel)}")
        if kind == "folder":
            raise PathError(f"{self.normalize(rel)} is a folder, not a file")
        if kind is not None:
            raise PathError(f"{self.normalize(rel)} is a {kind}, not a regular file: Dreamflow never opens it")
        return path

    def read_bytes(self, rel: str) -> bytes:
        """Bytes of a regular file (see `regular`)."""
        return read_regular(self.regular(rel))

    def read_text(self, rel: str) -> str:
        """Text of a file, decoded as UTF-8 (undecodable bytes replaced)."""
        return self.read_bytes(rel).decode("utf-8", errors="replace")

    def write_bytes(self, rel: str, data: bytes, expect: str | bool | None = None) -> Path:
        """Durably and atomically write `data` to `rel` (through an in-workspace symlink to its target);
        returns the path written.

        `expect` guards a read-modify-write: a content hash the file must still have, or False for "must
        not exist"; checked just before the rename (after the slow part, the fsync), else `Changed`. Lines
        another program appends in the instant between that check and the rename land in the old file: they
        are carried over to the end of the new one.
        """
        return self._write_atomic(rel, (data,), expect)

    def write_chunks(self, rel: str, chunks: Iterable[bytes]) -> Path:
        """`write_bytes` for content given as chunks (a large copy in bounded memory): the same temp file,
        fsync and rename; an exception from `chunks` leaves the target as it was and no temp file."""
        return self._write_atomic(rel, chunks, None)

    def _write_atomic(self, rel: str, chunks: Iterable[bytes], expect: str | bool | None) -> Path:
        path = self.resolve(rel)
        kind = special_kind(path)
        if kind not in (None, "missing"):
            raise PathError(f"{self.normalize(rel)} is a {kind}, not a regular file: Dreamflow never writes it")
        path = Path(os.path.realpath(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = None  # a new file: the umask decides, as for any file the user creates
        self._mark_writer()
        fd, tmp = _temp_file(path)
        try:
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                _write_all(fd, chunks)
            finally:
                os.close(fd)
            checked = _open_unchanged(path, expect) if expect is not None else None
            try:
                os.replace(tmp, path)
            except BaseException:
                if checked:
                    os.close(checked[0])
                raise
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        fsync_folder(path.parent)
        if checked:
            _carry_over_appends(*checked, path)
        return path

    def _create_once(self, rel: str, data: bytes) -> None:
        """Create `rel` holding `data` unless something is there (a hard link of a complete temp file: atomic,
        and never replacing what exists). Skipped where it cannot be written (a read-only workspace)."""
        path = self.root / rel
        try:
            self._mark_writer()
            fd, tmp = _temp_file(path)
        except OSError:
            return
        try:
            try:
                _write_all(fd, (data,))
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return
            except OSError:  # a file system without hard links
                if not os.path.lexists(path):
                    os.replace(tmp, path)
            fsync_folder(path.parent)
        except OSError:
            pass
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def append_bytes(self, rel: str, data: bytes) -> None:
        """Durably append `data` to the existing regular file `rel`, in place (O_APPEND, one write, fsync):
        what others append meanwhile is kept, and a killed process leaves the old content intact."""
        path = self.regular(rel)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            kind = _mode_kind(os.fstat(fd).st_mode)
            if kind is not None:
                raise PathError(f"{self.normalize(rel)} is a {kind}, not a regular file")
            _write_all(fd, (data,))
        finally:
            os.close(fd)

    def write_text(self, rel: str, text: str) -> Path:
        return self.write_bytes(rel, text.encode("utf-8"))

    def iter_files(self, prefix: str = "", include_metadata: bool = False, skipped: list[dict] | None = None):
        """Yield workspace-relative paths of regular files under `prefix`, skipping temp and hidden files.

        Special entries (FIFOs, sockets, devices, symlink loops, dangling symlinks, symlinks leaving the
        workspace or into metadata/) and names that are not UTF-8 (see `skip_unless_utf8`) are never yielded;
        when `skipped` is a list, each is appended to it as `{path, kind}`. Symlinked folders are not
        descended into.
        """
        for rel, _ in self._walk(prefix, include_metadata, skipped):
            yield rel

    def iter_stats(self, skipped: list[dict] | None = None) -> Iterator[tuple[str, os.stat_result]]:
        """Yield (path, stat) of every file `iter_files` yields, each stat taken from the walk's own folder
        entry (no path resolved again: 4-8 µs a file, where `Path.stat` and `isfile` per path took 35); a file
        gone meanwhile is left out."""
        for rel, entry in self._walk("", False, skipped):
            try:
                st = entry.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield rel, st

    def _walk(self, prefix: str, include_metadata: bool, skipped: list[dict] | None):
        """(path, folder entry) of each file `iter_files` yields."""
        base = self.resolve(prefix) if prefix else self.root
        if not base.is_dir():
            return
        stack = [(str(base), self.normalize(prefix) + "/" if prefix else "")]
        while stack:
            folder, rel_dir = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            subfolders = []
            for entry in entries:
                rel = rel_dir + entry.name
                if is_scratch_name(entry.name) or (rel == "metadata" and not include_metadata):
                    continue
                if skip_unless_utf8(rel, skipped):
                    continue
                if entry.is_symlink():
                    kind = special_kind(entry.path)
                    if kind is None and not self.contains(entry.path):
                        kind = "symlink leaving the workspace"
                    elif kind is None and not include_metadata and self.in_metadata(rel):
                        kind = "symlink into metadata/"
                elif entry.is_dir(follow_symlinks=False):
                    subfolders.append((entry.path, rel + "/"))
                    continue
                else:  # the type scandir saw; a FIFO, socket or device is not a regular file
                    kind = None if entry.is_file(follow_symlinks=False) else special_kind(entry.path)
                if kind is None:
                    yield rel, entry
                elif skipped is not None and kind not in ("folder", "missing"):  # symlinked folders: not followed
                    skipped.append({"path": rel, "kind": kind})
            stack.extend(reversed(subfolders))

    def _mark_writer(self) -> None:
        """Leave `metadata/journal/writer-<pid>` while this process writes: a process killed mid-write
        leaves it behind, which tells the next one to look for its temp files."""
        if self.root in _marked:
            return
        marker = self.root / WRITERS / f"writer-{os.getpid()}"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        _marked.add(self.root)
        atexit.register(_unmark, marker)

    def clean_stale_temps(self) -> list[str]:
        """Remove the temp files of writer processes that died (their `writer-<pid>` marker is left);
        returns the removed paths. Cheap when no writer died: one folder listing."""
        dead = set()
        folder = self.root / WRITERS
        try:
            markers = [m for m in os.listdir(folder) if m.startswith("writer-")]
        except OSError:
            return []
        for marker in markers:
            pid = marker.removeprefix("writer-")
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                dead.add(pid)
        if not dead:
            return []
        removed = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in filenames:
                m = _TEMP_RE.match(name)
                if m and m.group(1) in dead:
                    full = os.path.join(dirpath, name)
                    try:
                        os.unlink(full)
                    except OSError:
                        continue
                    removed.append(self.relative(full))
        for pid in dead:
            _unmark(folder / f"writer-{pid}")
        return sorted(removed)


SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_session_id(session_id: str) -> str:
    """Return `session_id` if it is usable as a file name (turns, recall), else raise InvalidInput (the whole
    id must match: `$` would let a trailing newline through into the file name)."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id):
        raise InvalidInput(
            f"session id {session_id!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return session_id


def is_utf8(text: str) -> bool:
    """False for text holding lone surrogates: how Python hands over a file name whose bytes are not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def skip_unless_utf8(rel: str, skipped: list[dict] | None) -> bool:
    """True (and `rel` reported in `skipped`, its bad bytes shown as U+FFFD) when its name is not UTF-8.

    Such a name is never yielded by `iter_files`: DuckDB invalidates the whole database on such text, JSON
    replies cannot carry it, and no path argument can name it (`normalize` refuses lone surrogates)."""
    if is_utf8(rel):
        return False
    if skipped is not None:
        skipped.append({"path": shown_path(rel), "kind": NOT_UTF8})
    return True


def shown_path(rel: str) -> str:
    """`rel` as a report can carry it: the bytes of a name that is not UTF-8 shown as U+FFFD."""
    return rel if is_utf8(rel) else rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def content_hash(data: bytes) -> str:
    """Hash of file or chunk content (blake2b, 128 bits, hex): what `hash` fields and `expected_hash` hold."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _open_unchanged(path: Path, expect: str | bool) -> tuple[int, int] | None:
    """Check that `path` still has content hash `expect` (False: does not exist), else `Changed`. Returns the
    file, still open, and the size checked (None when it does not exist), for `_carry_over_appends`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        fd = None
    current: str | bool = False
    try:
        if fd is not None:
            if _mode_kind(os.fstat(fd).st_mode) is not None:
                raise Changed(f"{path.name} is no longer a regular file")
            data = _read_rest(fd)
            current = content_hash(data)
        if current != expect:
            raise Changed(f"{path.name} changed while it was being rewritten" if expect is not False
                          else f"{path.name} was created meanwhile")
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return (fd, len(data)) if fd is not None else None


def _carry_over_appends(old: int, size: int, path: Path) -> None:
    """Append to the new file at `path` what others appended to the replaced one (open as `old`, `size`
    bytes when checked) after the check; closes `old`."""
    try:
        os.lseek(old, size, os.SEEK_SET)
        while tail := _read_rest(old):  # again: a writer that still has the old file open may add more
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
            try:
                _write_all(fd, (tail,))
            finally:
                os.close(fd)
    finally:
        os.close(old)


def _read_rest(fd: int) -> bytes:
    """The bytes of `fd` from its offset to the end."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """None for a regular file (or a symlink to one); else what is there: `missing`, `folder`, `FIFO`,
    `socket`, `device`, `symlink loop`, `dangling symlink` (found with stat, never by opening it)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "dangling symlink" if os.path.islink(path) else "missing"
        if exc.errno == errno.ENAMETOOLONG:
            return "missing"
        return f"unreadable entry ({exc.strerror})"
    return _mode_kind(st.st_mode)


def _mode_kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """Bytes of the regular file at `path` (see `open_regular`)."""
    with open_regular(path) as fh:
        return fh.read()


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """The regular file at `path`, open for reading. Checked with stat before opening and with fstat after
    (opened non-blocking, so a FIFO swapped in meanwhile cannot hang a read); PathError for anything else."""
    kind = special_kind(path)
    if kind == "missing":
        raise NotFound(f"no such file: {path}")
    if kind is not None:
        raise PathError(f"{path} is a {kind}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    fh = os.fdopen(fd, "rb")
    try:
        kind = _mode_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise PathError(f"{path} is a {kind}, not a regular file")
    except BaseException:
        fh.close()
        raise
    return fh


def _write_all(fd: int, chunks: Iterable[bytes]) -> None:
    """Write all of `chunks` to `fd`, in order (one at a time: a generator is never held whole), and fsync."""
    for data in chunks:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    os.fsync(fd)


def fsync_folder(folder: str | os.PathLike[str]) -> None:
    """Make a rename or removal in `folder` durable (a no-op where folders cannot be fsynced)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """True while process `pid` exists (also when it belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _temp_file(path: Path) -> tuple[int, str]:
    """A new temp file beside `path`, created with mode 0666 minus the umask (so a new file gets the mode
    any file the user creates gets)."""
    stem = os.fsencode(path.name)[:200].decode(errors="ignore")
    prefix = f".{stem}.{os.getpid()}-"
    while True:
        tmp = str(path.parent / f"{prefix}{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue


def _unmark(marker: Path) -> None:
    try:
        marker.unlink()
    except OSError:
        pass


def _short(text: str, keep: int = 80) -> str:
    """`text` quoted, cut in the middle when long (a 5,000-character path makes an unreadable message)."""
    return repr(text) if len(text) <= keep else repr(text[:keep // 2] + "…" + text[-keep // 2:])


def is_scratch_name(name: str) -> bool:
    """True for editor swap/backup files and our own temp files, which are never memory."""
    return (
        name.startswith(".")
        or name.endswith(("~", ".swp", ".swx", ".tmp", ".part"))
        or name.startswith("#")
        or name == "4913"  # vim's write-permission probe
    )
