"""Crash safety of multi-file rewrites: a `move` SIGKILLed at random points (over hundreds of linking notes)
leaves no link to a missing file and no temp file once the next command has run (see tests/crash_harness.py;
benchmarks/crash_move.py runs more trials)."""

import json
import os
import random
import shutil

import pytest
from crash_harness import DST, SRC, build_template, calibrate, dangling, kill_during_close, trial

from storage import journal
from storage.memory import Memory

TRIALS = 10
LINKING = 300


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("template") / "ws", linking=LINKING)


def test_killed_moves_leave_no_link_to_a_missing_file(template, tmp_path):
    window = calibrate(template, tmp_path)
    rng = random.Random(11)
    results = [trial(template, tmp_path, n, window, rng, keep=True) for n in range(TRIALS)]
    assert [r["dangling_after"] for r in results] == [0] * TRIALS
    assert [r["temps_after"] for r in results] == [0] * TRIALS
    assert all(r["moved"] for r in results)
    interrupted = [n for n, r in enumerate(results) if r["mid_move"]]
    assert len(interrupted) >= 2, "too few kills landed in the middle of a move"
    root = tmp_path / f"trial-{interrupted[0]}"
    mem = Memory(root)  # the recovered move is indexed too
    assert mem.doctor()["broken_links"] == []
    assert len(mem.stat(DST)["links_in"]) == LINKING * 3
    assert not (root / SRC).exists() and dangling(root) == 0


def test_next_command_through_the_cli_finishes_an_interrupted_move(template, tmp_path):
    result = trial(template, tmp_path, 0, 0.05, random.Random(0), via="cli")
    assert (result["dangling_after"], result["temps_after"], result["moved"]) == (0, 0, True)


def test_moves_killed_while_the_index_closes_leave_every_next_command_working(template, tmp_path):
    rng = random.Random(21)
    for n in range(3):
        root = tmp_path / f"close-{n}"
        shutil.copytree(template, root)
        kill_during_close(root, rng)
        mem = Memory(root)  # whatever the kill left, the next commands work on a sound index
        assert mem.index_stats()["files"] == LINKING + 1
        assert len({link["source"] for link in mem.stat(DST)["links_in"]}) == LINKING
        mem.move(DST, SRC)
        assert mem.doctor(fix=True)["broken_links"] == []
        assert [h["path"] for h in mem.search("line three")][:1] == [SRC]
        assert dangling(root) == 0 and not list((root / "metadata" / "journal").glob("*.json"))
        shutil.rmtree(root)


def _crash_after(monkeypatch, writes: int):
    """Make the graph edit die (as a kill would) after `writes` rewritten files."""
    from storage import graph_edit

    real = graph_edit._write
    done = []

    def write(ws, rel, text):
        if len(done) == writes:
            raise KeyboardInterrupt("killed")
        done.append(rel)
        real(ws, rel, text)

    monkeypatch.setattr(graph_edit, "_write", write)


def _linked(tmp_path, n=12):
    mem = Memory(tmp_path / "ws")
    mem.write("digest/wiki/old.md", "# Old\n\nfirst\nsecond\n", name="Old", description="o")
    mem.write("digest/wiki/new.md", "# New\n\nintro\nfirst\nsecond\n", name="New", description="n")
    for i in range(n):
        mem.write(f"digest/wiki/n{i}.md", f"see [[digest/wiki/old.md#L7|first line]] ({i})", name=f"N{i}")
    return mem


def test_an_interrupted_relink_is_finished_by_the_next_open(tmp_path, monkeypatch):
    mem = _linked(tmp_path)
    _crash_after(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        mem.relink("digest/wiki/old.md", "digest/wiki/new.md")
    monkeypatch.undo()
    texts = [(mem.ws.root / f"digest/wiki/n{i}.md").read_text() for i in range(12)]
    assert sum("new.md#L8|first line" in t for t in texts) == 5  # half done, as a crash would leave it
    reopened = Memory(mem.ws.root)
    assert reopened.recovered["operations"][0]["kind"] == "relink"
    texts = [(mem.ws.root / f"digest/wiki/n{i}.md").read_text() for i in range(12)]
    assert all("[[digest/wiki/new.md#L8|first line]]" in t for t in texts)  # anchors followed once, not twice
    assert len(reopened.stat("digest/wiki/new.md")["links_in"]) == 12
    assert journal.entries(mem.ws) == []


def test_a_move_killed_before_the_rename_is_rolled_back(tmp_path, monkeypatch):
    mem = _linked(tmp_path, n=3)
    real_replace = os.replace

    def killed_at_the_rename(src, dst):
        if str(src).endswith("old.md"):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_at_the_rename)
    with pytest.raises(KeyboardInterrupt):
        mem.move("digest/wiki/old.md", "digest/wiki/moved.md")
    monkeypatch.undo()
    reopened = Memory(mem.ws.root)
    assert reopened.recovered["operations"][0]["outcome"].startswith("rolled back")
    assert (mem.ws.root / "digest/wiki/old.md").is_file() and not (mem.ws.root / "digest/wiki/moved.md").exists()
    assert dangling(mem.ws.root) == 0 and journal.entries(mem.ws) == []


def test_a_live_process_entry_is_left_alone(tmp_path):
    import subprocess
    import sys

    mem = _linked(tmp_path, n=1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        entry = mem.ws.root / journal.JOURNAL / f"{sleeper.pid}-1.json"
        entry.write_text(json.dumps({"kind": "move", "src": "a.md", "dst": "b.md", "files": {}}))
        assert Memory(mem.ws.root).recovered == {} and entry.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert Memory(mem.ws.root).recovered["operations"][0]["kind"] == "move" and not entry.exists()
