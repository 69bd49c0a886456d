"""storage/files/locks.py: exclusive file locks between processes and threads, re-entrant, with timeouts."""

import subprocess
import sys
import threading
import time

import pytest

from storage.files.locks import FileLock, LockTimeout

HOLD = """
import sys, time
from storage.files.locks import FileLock
lock = FileLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def holder(path, seconds: float) -> subprocess.Popen:
    """Another process holding the lock on `path` for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.e2e
def test_another_process_holds_it_until_it_exits(tmp_path):
    path = tmp_path / "meta" / "x.lock"  # its folder is made on first use
    proc = holder(path, 60)
    try:
        started = time.monotonic()
        with pytest.raises(LockTimeout):
            FileLock(path).acquire(timeout=0.3)
        assert 0.25 <= time.monotonic() - started < 5
        with pytest.raises(LockTimeout):
            FileLock(path).acquire(timeout=0)
    finally:
        proc.kill()  # a killed holder's lock goes with it: nothing to clean up
        proc.wait()
    with FileLock(path).held(5) as lock:
        assert lock.is_locked
    assert not lock.is_locked and path.exists()


@pytest.mark.e2e
def test_a_waiter_gets_it_when_the_holder_lets_go(tmp_path):
    path = tmp_path / "x.lock"
    proc = holder(path, 0.5)
    try:
        lock = FileLock(path).acquire(timeout=20)
        assert lock.is_locked
        lock.release()
    finally:
        proc.wait()


def test_reentrant_in_a_thread_and_exclusive_between_threads(tmp_path):
    lock = FileLock(tmp_path / "x.lock")
    got: list[bool] = []
    with lock:
        with lock:  # the same thread again: a count, no deadlock
            assert lock.is_locked
        assert lock.is_locked  # the outer hold remains
        other = threading.Thread(target=lambda: got.append(_try(lock, 0.2)))
        other.start()
        other.join()
        assert got == [False]  # another thread waits as another process does
        with pytest.raises(LockTimeout):
            FileLock(tmp_path / "x.lock").acquire(timeout=0.1)  # a second object on the path: a second holder
    assert not lock.is_locked
    other = threading.Thread(target=lambda: got.append(_try(lock, 1)))
    other.start()
    other.join()
    assert got == [False, True] and not lock.is_locked


def test_per_process_lock_is_shared_by_its_threads(tmp_path):
    """per_thread=False (the index lock): any thread of the holding process may take it again or release it."""
    lock = FileLock(tmp_path / "x.lock", per_thread=False).acquire(timeout=0)
    done: list[bool] = []

    def other():
        lock.acquire(timeout=0)
        lock.release()
        lock.release()  # the first thread's hold, given back here
        done.append(lock.is_locked)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert done == [False]
    lock.release()  # one more release than holds: nothing happens
    assert not lock.is_locked


def _try(lock: FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout)
    except LockTimeout:
        return False
    lock.release()
    return True


def test_a_checkpoint_lock_is_one_object_per_path_so_it_nests(ws):
    from storage.files import checkpoints

    with checkpoints.lock(ws, "x", timeout=1):
        with checkpoints.lock(ws, "x", timeout=1):  # the same thread again: no deadlock
            with pytest.raises(LockTimeout):
                FileLock(ws.metadata / "checkpoints/x.lock").acquire(timeout=0)  # held for other holders
    with FileLock(ws.metadata / "checkpoints/x.lock").held(1):
        pass  # and let go after the outer block
