"""The workspace watcher on real watchdog events in a temp dir: what is reported, what is ignored, debounce."""

import os
import threading
import time

import pytest

from deployments.watch import Debouncer, WorkspaceWatcher


class Recorder:
    """Thread-safe list of the batches a callback received."""

    def __init__(self):
        self.batches: list[list] = []
        self._lock = threading.Lock()

    def __call__(self, batch):
        with self._lock:
            self.batches.append(sorted(batch, key=str))

    @property
    def items(self) -> list:
        with self._lock:
            return [x for b in self.batches for x in b]


def wait_for(predicate, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def watched(ws):
    changes, resources = Recorder(), Recorder()
    watcher = WorkspaceWatcher(ws, changes, resources, quiet=0.05, resource_quiet=0.4).start()
    time.sleep(0.1)  # inotify watches are in place once the observer thread runs
    yield ws, watcher, changes, resources
    watcher.stop()


def settle(watcher, extra=0.0):
    time.sleep(0.1 + extra)
    wait_for(watcher.idle, what="watcher to go idle")


def test_atomic_save_reports_the_file_once_not_its_temp(watched):
    ws, watcher, changes, resources = watched
    ws.write_text("daily/2024-05-01/card.md", "# Card\n")
    wait_for(lambda: "daily/2024-05-01/card.md" in changes.items, what="daily card change")
    settle(watcher)
    assert set(changes.items) == {"daily/2024-05-01/card.md"}
    assert resources.items == []


def test_scratch_files_metadata_and_dot_folders_are_ignored(watched):
    ws, watcher, changes, resources = watched
    root = ws.root
    for rel in ["daily/.card.md.swp", "daily/card.md~", "daily/#card.md#", "daily/4913", "daily/x.tmp",
                "metadata/index.duckdb", "metadata/turns.json", ".git/HEAD", "resource/.obsidian/app.json"]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("scratch")
    (root / "digest/wiki/real.md").write_text("real")
    wait_for(lambda: "digest/wiki/real.md" in changes.items, what="the real file")
    settle(watcher, 0.5)
    assert set(changes.items) == {"digest/wiki/real.md"}
    assert resources.items == []


def test_resource_write_is_debounced_to_one_report(watched):
    ws, watcher, changes, resources = watched
    path = ws.root / "resource/2024-05-01/notes.txt"
    path.parent.mkdir(parents=True)
    with open(path, "w") as fh:  # created, then several modified events of one slow write
        for i in range(5):
            fh.write(f"line {i}\n")
            fh.flush()
            os.fsync(fh.fileno())
            time.sleep(0.05)
    wait_for(lambda: resources.items, what="resource report")
    settle(watcher, 0.6)
    assert resources.batches == [["resource/2024-05-01/notes.txt"]]
    assert "resource/2024-05-01/notes.txt" in changes.items  # resources are indexed too


def test_delete_and_rename_report_both_paths(watched):
    ws, watcher, changes, resources = watched
    ws.write_text("digest/wiki/a.md", "a")
    wait_for(lambda: "digest/wiki/a.md" in changes.items, what="create")
    os.rename(ws.root / "digest/wiki/a.md", ws.root / "digest/wiki/b.md")
    wait_for(lambda: "digest/wiki/b.md" in changes.items, what="rename target")
    (ws.root / "digest/wiki/b.md").unlink()
    settle(watcher)
    assert changes.items.count("digest/wiki/a.md") == 2  # created, then moved away
    assert changes.items.count("digest/wiki/b.md") == 2  # moved in, then deleted


def test_moving_a_folder_asks_for_reconcile(watched):
    ws, watcher, changes, resources = watched
    ws.write_text("daily/2024-05-01/card.md", "x")
    settle(watcher)
    os.rename(ws.root / "daily/2024-05-01", ws.root / "daily/2024-05-02")
    wait_for(lambda: None in changes.items, what="reconcile request")


def test_nested_folders_made_at_once_are_all_watched_without_warnings(recwarn, watched):
    """watchdog 7 warns on every `mkdir -p` that races its recursive walk; the service log must not fill with it."""
    ws, watcher, changes, resources = watched
    cards = [f"daily/2024-06-{day:02d}/topic/card.md" for day in range(1, 21)]
    for card in cards:
        os.makedirs(ws.root / card.rsplit("/", 1)[0])
        ws.write_text(card, "# Card\n")
    wait_for(lambda: set(cards) <= set(changes.items), what="every nested card reported")
    settle(watcher)
    assert [str(w.message)[:80] for w in recwarn if issubclass(w.category, RuntimeWarning)] == []


def test_debouncer_flushes_a_busy_key_after_max_wait():
    seen = Recorder()
    deb = Debouncer(seen, quiet=0.2, max_wait=0.5)
    start = time.monotonic()
    while time.monotonic() - start < 1.2:  # a key touched every 50 ms never goes quiet
        deb.add("k")
        time.sleep(0.05)
    deb.stop()
    assert 2 <= len(seen.batches) <= 4, seen.batches


def test_debouncer_survives_a_failing_flush():
    calls = []

    def flush(batch):
        calls.append(batch)
        if len(calls) == 1:
            raise RuntimeError("boom")

    deb = Debouncer(flush, quiet=0.01, max_wait=0.1)
    deb.add("a")
    wait_for(lambda: len(calls) == 1 and deb.idle(), what="first flush")
    deb.add("b")
    wait_for(lambda: len(calls) == 2, what="second flush after a failure")
    deb.stop()
    assert calls == [["a"], ["b"]]
