"""Crash safety of multi-file rewrites: a `move` SIGKILLed in the middle of its rewrite (over hundreds of linking
notes; at a kill point the child announces, so every kill lands there on any machine) leaves no link to a missing
file and no temp file once the next command has run (see tests/crash_harness.py; benchmarks/crash_move.py runs
more trials at random points). A journal entry that is damaged, invalid or keeps failing is set
aside once and the graph repaired from the files instead (benchmarks/hostile_battery.py `journal_damage`)."""

import json
import os
import random
import shutil
import subprocess
import sys

import pytest
from crash_harness import DST, SRC, build_template, dangling, kill_at_rewrite, kill_during_close, trial

from storage.files import journal
from storage.files.workspace import WRITERS
from storage.memory import Memory, recover

TRIALS = 10
LINKING = 300


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("template") / "ws", linking=LINKING)


@pytest.mark.e2e
def test_killed_moves_leave_no_link_to_a_missing_file(template, tmp_path):
    rng = random.Random(11)
    points = [n * LINKING // TRIALS for n in range(TRIALS)]  # killed after 0, 30, ... 270 of 300 notes rewritten
    results = [trial(template, tmp_path, n, 0, rng, keep=True, at_rewrite=at) for n, at in enumerate(points)]
    assert [r["dangling_after"] for r in results] == [0] * TRIALS
    assert [r["temps_after"] for r in results] == [0] * TRIALS
    assert all(r["moved"] for r in results)
    interrupted = [n for n, r in enumerate(results) if r["mid_move"]]
    assert len(interrupted) >= 2, "too few kills landed in the middle of a move"
    assert interrupted == list(range(TRIALS))  # every kill point is mid-move: links to the old path were left
    root = tmp_path / f"trial-{interrupted[0]}"
    mem = Memory(root)  # the recovered move is indexed too
    assert mem.doctor()["broken_links"] == []
    assert len(mem.stat(DST)["links_in"]) == LINKING * 3
    assert not (root / SRC).exists() and dangling(root) == 0


@pytest.mark.e2e
def test_next_command_through_the_cli_finishes_an_interrupted_move(template, tmp_path):
    result = trial(template, tmp_path, 0, 0, random.Random(0), via="cli", at_rewrite=LINKING // 2)
    assert result["mid_move"]  # the CLI found half the links still naming the old path
    assert (result["dangling_after"], result["temps_after"], result["moved"]) == (0, 0, True)


@pytest.mark.e2e
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
        assert mem.doctor_fix()["broken_links"] == []
        assert [h["path"] for h in mem.search("line three")][:1] == [SRC]
        assert dangling(root) == 0 and not list((root / "metadata" / "journal").glob("*.json"))
        shutil.rmtree(root)


def _open(root):
    """The workspace opened for writing, as every process that writes opens it: (memory, what recovery did)."""
    memory = Memory(root)
    return memory, recover(memory)


def _crash_after(monkeypatch, writes: int):
    """Make the graph edit die (as a kill would) after `writes` rewritten files."""
    from storage.text import graph_edit

    real = graph_edit.write_text
    done = []

    def write(ws, rel, text):
        if len(done) == writes:
            raise KeyboardInterrupt("killed")
        done.append(rel)
        real(ws, rel, text)

    monkeypatch.setattr(graph_edit, "write_text", write)


def _linked(tmp_path, n=12):
    mem = Memory(tmp_path / "ws")
    mem.write("digest/wiki/old.md", "# Old\n\nfirst\nsecond\n", name="Old", description="o")
    mem.write("digest/wiki/new.md", "# New\n\nintro\nfirst\nsecond\n", name="New", description="n")
    for i in range(n):
        mem.write(f"digest/wiki/n{i}.md", f"see [[digest/wiki/old.md#L7|first line]] ({i})", name=f"N{i}")
    return mem


def _half_relinked(tmp_path, monkeypatch, n=12, writes=5):
    """A workspace whose relink of old.md to new.md was killed after `writes` of its `n` files."""
    mem = _linked(tmp_path, n)
    _crash_after(monkeypatch, writes)
    with pytest.raises(KeyboardInterrupt):
        mem.relink("digest/wiki/old.md", "digest/wiki/new.md")
    monkeypatch.undo()
    return mem


def test_an_interrupted_relink_is_finished_by_the_next_open(tmp_path, monkeypatch):
    mem = _half_relinked(tmp_path, monkeypatch)
    texts = [(mem.ws.root / f"digest/wiki/n{i}.md").read_text() for i in range(12)]
    assert sum("new.md#L8|first line" in t for t in texts) == 5  # half done, as a crash would leave it
    reopened, recovered = _open(mem.ws.root)
    assert recovered["operations"][0]["kind"] == "relink"
    texts = [(mem.ws.root / f"digest/wiki/n{i}.md").read_text() for i in range(12)]
    assert all("[[digest/wiki/new.md#L8|first line]]" in t for t in texts)  # anchors followed once, not twice
    assert len(reopened.stat("digest/wiki/new.md")["links_in"]) == 12
    assert journal.entries(mem.ws) == []


def _files(root) -> dict:
    """Every file under `root` (metadata/ too) with its bytes and modification time."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.e2e
def test_constructing_a_memory_touches_no_file_until_the_workspace_is_opened_for_writing(tmp_path, monkeypatch):
    mem = _half_relinked(tmp_path, monkeypatch)
    pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                         text=True).stdout.strip()  # a writer that died mid-write: its marker and temp file
    (mem.ws.root / WRITERS / f"writer-{pid}").write_text("")
    (mem.ws.root / f"digest/wiki/.n0.md.{pid}-0123abcd.tmp").write_text("half")
    before = _files(mem.ws.root)
    assert journal.interrupted(mem.ws)
    reopened = Memory(mem.ws.root)
    assert _files(mem.ws.root) == before  # nothing replayed, cleaned or indexed by construction
    done = recover(reopened)  # the explicit step
    assert done["operations"][0]["kind"] == "relink" and journal.entries(mem.ws) == []
    assert done["temp_files_removed"] and not (mem.ws.root / f"digest/wiki/.n0.md.{pid}-0123abcd.tmp").exists()


@pytest.mark.parametrize("opener", ["cli-process", "service", "job"])
def test_every_writer_opens_the_workspace_for_writing(tmp_path, monkeypatch, opener):
    from engine.access.client import local_memory
    from engine.access.job_workspace import memory_of

    mem = _half_relinked(tmp_path, monkeypatch, n=3, writes=1)
    assert journal.interrupted(mem.ws)
    if opener == "service":
        local_memory(mem.ws.root, keep_open=True).db.close()  # what the service's hosting opens
    elif opener == "job":
        memory_of(str(mem.ws.root))
    else:
        local_memory(mem.ws.root)  # what a CLI command, the hook, capture and stdio MCP open
    assert journal.entries(mem.ws) == []
    texts = [(mem.ws.root / f"digest/wiki/n{i}.md").read_text() for i in range(3)]
    assert all("[[digest/wiki/new.md#L8|first line]]" in t for t in texts)


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
    _, recovered = _open(mem.ws.root)
    assert recovered["operations"][0]["outcome"].startswith("rolled back")
    assert (mem.ws.root / "digest/wiki/old.md").is_file() and not (mem.ws.root / "digest/wiki/moved.md").exists()
    assert dangling(mem.ws.root) == 0 and journal.entries(mem.ws) == []


@pytest.mark.e2e
def test_a_live_process_entry_is_left_alone(tmp_path):
    import subprocess
    import sys

    mem = _linked(tmp_path, n=1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        entry = mem.ws.root / journal.JOURNAL / f"{sleeper.pid}-1.json"
        entry.write_text(json.dumps({"kind": "move", "src": "a.md", "dst": "b.md", "files": {}}))
        assert _open(mem.ws.root)[1] == {} and entry.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _open(mem.ws.root)[1]["operations"][0]["kind"] == "move" and not entry.exists()


# ---- journal entries that cannot be trusted (issue 21, item 2) -------------------------------------------

SMALL = 60  # linking notes: a move still takes long enough to be killed in the middle of its rewrite


@pytest.fixture(scope="module")
def small_template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("small") / "ws", linking=SMALL)


def _killed_mid_move(template, root):
    """A copy of the template whose move was SIGKILLed half way through its rewrite (links to SRC left on disk)."""
    shutil.copytree(template, root)
    kill_at_rewrite(root, SMALL // 2)
    entries = list((root / journal.JOURNAL).glob("*.json"))
    assert dangling(root) and len(entries) == 1, "the kill point is after the rename, before the last rewrite"
    return entries[0]


def _flip_a_bit_in_a_planned_hash(entry, root):
    """Flip one bit of the recorded hash of a note the move had not rewritten yet: the entry still parses."""
    data = bytearray(entry.read_bytes())
    plan = json.loads(data)
    note = next(rel for rel in plan["files"] if f"[[{SRC}" in (root / rel).read_text())
    at = data.index(f'"{note}": "'.encode()) + len(note) + 8
    data[at] ^= 0x01
    entry.write_bytes(bytes(data))


@pytest.mark.e2e
@pytest.mark.parametrize("damage", ["truncated", "bit-flipped", "garbage"])
def test_a_damaged_entry_of_a_killed_move_still_leads_to_a_repaired_graph(small_template, tmp_path, caplog,
                                                                          damage):
    root = tmp_path / "ws"
    entry = _killed_mid_move(small_template, root)
    before = dangling(root)
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:len(entry.read_bytes()) // 2])
    elif damage == "bit-flipped":
        _flip_a_bit_in_a_planned_hash(entry, root)
    else:
        entry.write_bytes(b"\x00\xff" * 64)
    with caplog.at_level("WARNING"):
        mem, recovered = _open(root)  # used to drop the entry silently (or replay it wrongly): 180 links dangled
    assert dangling(root) == 0, f"{before} links to the missing file before, still some after"
    assert mem.doctor()["broken_links"] == []
    assert len(mem.stat(DST)["links_in"]) == SMALL * 3
    assert journal.entries(mem.ws) == []
    kept = list((root / journal.QUARANTINE).iterdir())
    assert [p.name.endswith(entry.name) for p in kept] == [True]  # set aside for diagnosis, not deleted
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and entry.name in lines[0] and "retargeted" in lines[0], lines
    assert recovered["graph_repaired"]["retargeted"]


def test_an_invalid_entry_is_quarantined_once_then_silent(tmp_path, caplog):
    mem = _linked(tmp_path, n=2)
    journal.begin(mem.ws, "move", {"src": "digest/wiki/old.md"})  # parses, but says nothing of where to
    with caplog.at_level("WARNING"):
        _, first = _open(mem.ws.root)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "invalid" in lines[0] and journal.QUARANTINE in lines[0], lines
    assert "set aside" in first["operations"][0]["outcome"]
    assert journal.entries(mem.ws) == [] and len(list((mem.ws.root / journal.QUARANTINE).iterdir())) == 1
    caplog.clear()
    with caplog.at_level("WARNING"):
        _, second = _open(mem.ws.root)  # used to warn "could not finish" on every command, forever
    assert second == {} and not [r for r in caplog.records if r.levelname == "WARNING"]
    assert (mem.ws.root / "digest/wiki/old.md").is_file() and dangling(mem.ws.root) == 0


def test_the_quarantine_keeps_only_the_newest_entries(tmp_path):
    mem = _linked(tmp_path, n=1)
    folder = mem.ws.root / journal.QUARANTINE
    folder.mkdir(parents=True)
    for i in range(journal.QUARANTINE_KEEP):
        (folder / f"{1_000_000_000_000_000_000 + i}-1-{i}.json").write_text("{}")
    journal.begin(mem.ws, "teleport", {})
    _open(mem.ws.root)
    kept = sorted(folder.iterdir())
    assert len(kept) == journal.QUARANTINE_KEEP and kept[0].name.endswith("-1-1.json")  # the oldest dropped
    assert json.loads(kept[-1].read_text())["kind"] == "teleport"


def test_an_entry_whose_replay_keeps_failing_is_set_aside_after_a_few_tries(tmp_path, monkeypatch):
    from storage.text import graph_edit

    mem = _linked(tmp_path, n=3)
    mem.ws.write_text("digest/wiki/moved.md", (mem.ws.root / "digest/wiki/old.md").read_text())
    (mem.ws.root / "digest/wiki/old.md").unlink()  # as if the move was killed just after its rename
    journal.begin(mem.ws, "move", {"src": "digest/wiki/old.md", "dst": "digest/wiki/moved.md",
                                   "files": graph_edit._hashes(mem.ws, [f"digest/wiki/n{i}.md" for i in range(3)])})

    def broken(con, ws, plan):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(graph_edit, "replay_move", broken)
    for _ in range(journal.MAX_ATTEMPTS - 1):
        assert "not finished" in _open(mem.ws.root)[1]["operations"][0]["outcome"]
        assert len(journal.entries(mem.ws)) == 1
    _, last = _open(mem.ws.root)
    assert "set aside" in last["operations"][0]["outcome"]
    assert journal.entries(mem.ws) == [] and dangling(mem.ws.root) == 0  # the graph repaired from the files
    assert _open(mem.ws.root)[1] == {}


def test_a_torn_entry_still_names_the_destination_when_the_content_is_not_unique(tmp_path, monkeypatch):
    mem = _linked(tmp_path, n=6)
    copy = (mem.ws.root / "digest/wiki/old.md").read_bytes()
    mem.ws.write_bytes("digest/wiki/copy.md", copy)  # the same content twice: the hash alone cannot place it
    _crash_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        mem.move("digest/wiki/old.md", "digest/wiki/moved.md")
    monkeypatch.undo()
    entry = journal.entries(mem.ws)[0]
    text = entry.read_text()
    entry.write_text(text[:text.index('"files"')])  # torn after src and dst
    reopened, recovered = _open(mem.ws.root)
    assert dangling(mem.ws.root) == 0
    assert len(reopened.stat("digest/wiki/moved.md")["links_in"]) == 6
    assert recovered["operations"][0]["dst"] == "digest/wiki/moved.md"


def test_a_repair_that_fails_is_said_once_and_left_to_doctor_fix(tmp_path, monkeypatch, caplog):
    from storage.index import doctor

    mem = _linked(tmp_path, n=2)
    journal.begin(mem.ws, "move", {"src": "digest/wiki/old.md"}).write_bytes(b'{"kind": "move", "src": "digest')

    def full_disk(con, ws, known=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(doctor, "repair", full_disk)
    with caplog.at_level("WARNING"):
        _, first = _open(mem.ws.root)
        _, second = _open(mem.ws.root)
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1 and "not repaired" in lines[0] and "doctor --fix" in lines[0], lines
    assert first["graph_repaired"] is None and second == {}
