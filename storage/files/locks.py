"""Exclusive locks on a file between processes: `flock` on POSIX, `msvcrt.locking` on Windows.

The `filelock` package did this until its 4.x releases began importing asyncio and their read-write locks at
`import filelock`: 0.1-0.3 s of every CLI command and hook process, more than a one-shot search's whole budget.
These are the few lines Dreamflow needs. A lock file is never deleted (deleting it races with a waiter that
opened it); it holds nothing. `flock` locks are per open file, so two FileLock objects on one path exclude each
other inside one process too, as across processes.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

POLL = 0.02  # seconds between tries while another holder has the lock


class LockTimeout(TimeoutError):
    """The lock was not free within the timeout."""


class FileLock:
    """An exclusive lock on `path`, re-entrant by count. `per_thread=True` (the default): one thread holds it
    at a time, other threads of the process wait as other processes do. `per_thread=False`: the process holds
    it, any of its threads may take it again or release it (the caller serialises its threads itself).
    `with lock:` waits as long as it takes, `with lock.held(T):` up to T seconds."""

    def __init__(self, path: str | os.PathLike, per_thread: bool = True):
        self.path = os.fspath(path)
        self._threads = threading.RLock() if per_thread else None
        self._guard = threading.Lock()
        self._fd: int | None = None
        self._count = 0

    @property
    def is_locked(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float = -1) -> "FileLock":
        """Take the lock, waiting up to `timeout` seconds (-1: as long as it takes); LockTimeout otherwise."""
        deadline = None if timeout < 0 else time.monotonic() + timeout
        if self._threads is not None and not self._threads.acquire(timeout=-1 if timeout < 0 else timeout):
            raise LockTimeout(f"{self.path} is held by another thread")
        try:
            while not self._try():
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeout(f"{self.path} is held by another process")
                time.sleep(POLL if deadline is None else max(0.0, min(POLL, deadline - time.monotonic())))
        except BaseException:
            if self._threads is not None:
                self._threads.release()
            raise
        return self

    def release(self) -> None:
        """Give one hold back; the last one unlocks the file."""
        with self._guard:
            if self._count == 0:
                return
            self._count -= 1
            if self._count == 0:
                fd, self._fd = self._fd, None
                _unlock(fd)
                os.close(fd)
        if self._threads is not None:
            self._threads.release()

    @contextmanager
    def held(self, timeout: float = -1) -> Iterator["FileLock"]:
        """`with lock.held(T):` the lock, waiting up to T seconds for it."""
        self.acquire(timeout)
        try:
            yield self
        finally:
            self.release()

    def _try(self) -> bool:
        with self._guard:
            if self._fd is not None:
                self._count += 1
                return True
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:  # a read-only file system, no write permission: an existing file still locks
                if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise
                fd = os.open(self.path, os.O_RDONLY)
            try:
                _lock(fd)
            except OSError:
                os.close(fd)
                return False
            self._fd, self._count = fd, 1
            return True

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
