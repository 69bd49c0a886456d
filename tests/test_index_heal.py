"""The index heals itself: a damaged DuckDB file, a log that does not replay, an index breaking its invariants
after a crash, or a fatal DuckDB error mid-command all end with the index set aside under metadata/damaged/ and
rebuilt from the files (storage/index/db.py), on the CLI, in-process and in the running service."""

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import duckdb
import pytest
from crash_harness import cli

from storage.errors import IndexRebuilt
from storage.files.workspace import Workspace
from storage.index import db as index_db
from storage.index.db import IndexDB
from storage.memory import Memory

FIXTURE = Path(__file__).parent / "fixtures" / "damaged-index.tar.gz"
HUB = "digest/wiki/hub14.md"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The workspace a SIGKILLed `move` left (recorded in a fault run: index file + write-ahead log)."""
    root = tmp_path_factory.mktemp("recorded")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    return root / "before_next_13"


def _copy(recorded: Path, tmp_path: Path, checkpointed: bool = False) -> Path:
    """A copy of the recorded workspace; `checkpointed`: as the old build left it after one more command (the
    log replayed and checkpointed by a plain DuckDB open, which made the broken `links` indexes permanent),
    brought to today's schema (version 6 added three columns to chunks, 8 one more) so that the damage, not the version, is
    what the next command meets."""
    root = tmp_path / "ws"
    shutil.copytree(recorded, root)
    if checkpointed:
        con = duckdb.connect(str(root / "metadata" / "index.duckdb"))
        for column in ("search_text VARCHAR", "valid_from DATE", "valid_to DATE", "became BIGINT"):
            con.execute(f"ALTER TABLE chunks ADD COLUMN {column}")
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [index_db.SCHEMA_VERSION])
        con.close()
    return root


def _linking(mem: Memory, path: str) -> int:
    return len({link["source"] for link in mem.stat(path)["links_in"]})


def _damaged_sets(root: Path) -> list[Path]:
    folder = root / "metadata" / "damaged"
    return sorted(folder.iterdir()) if folder.exists() else []


@pytest.mark.e2e
def test_the_recorded_kill_no_longer_breaks_reindex_move_or_doctor(recorded, tmp_path):
    root = _copy(recorded, tmp_path)
    for args in (["index-stats"], ["reindex"], ["move", HUB, "digest/wiki/hub15.md"], ["doctor", "--fix"]):
        done = cli(root, *args)
        assert done.returncode in (0, 1), (args, done.stderr)  # doctor exits 1 when the graph needs attention
        assert "Traceback" not in done.stderr and "FatalException" not in done.stderr
    mem = Memory(root)
    assert _linking(mem, "digest/wiki/hub15.md") == 300
    assert mem.doctor()["broken_links"] == []


@pytest.mark.e2e
def test_an_index_broken_for_good_is_set_aside_and_rebuilt_by_the_next_command(recorded, tmp_path):
    root = _copy(recorded, tmp_path, checkpointed=True)
    done = cli(root, "move", HUB, "digest/wiki/hub15.md")
    assert done.returncode == 10 and "Traceback" not in done.stderr
    assert "the index was damaged (FATAL Error" in done.stderr and "rebuilt from the files" in done.stderr
    [kept] = _damaged_sets(root)
    assert {p.name for p in kept.iterdir()} >= {"index.duckdb", "error.txt"}
    assert "Failed to delete all rows from index" in (kept / "error.txt").read_text()
    # The files are the truth: the move had finished there, and the rebuilt index says so.
    mem = Memory(root)
    assert _linking(mem, "digest/wiki/hub15.md") == 300
    assert cli(root, "move", "digest/wiki/hub15.md", HUB).returncode == 0
    assert cli(root, "reindex").returncode == 0


def test_reindex_of_a_broken_index_succeeds_and_says_where_the_damaged_one_is(recorded, tmp_path):
    root = _copy(recorded, tmp_path, checkpointed=True)
    result = Memory(root).reindex()
    assert result["files"] == 302 and result["damaged_index_kept_in"].startswith("metadata/damaged/")


def test_a_service_style_owner_heals_while_it_runs(recorded, tmp_path):
    root = _copy(recorded, tmp_path, checkpointed=True)
    ws = Workspace(root)
    db = IndexDB(ws, keep_open=True)
    try:
        mem = Memory(root, db=db)
        with pytest.raises(IndexRebuilt) as caught:
            mem.move(HUB, "digest/wiki/hub15.md")
        assert caught.value.kept.startswith("metadata/damaged/")
        # The same long-lived owner goes on with a sound index, without restarting.
        assert [h["path"] for h in mem.search("hub15", limit=50)]
        assert _linking(mem, "digest/wiki/hub15.md") == 300
        mem.move("digest/wiki/hub15.md", HUB)
        assert _linking(mem, HUB) == 300
    finally:
        db.close()


def _indexed(tmp_path: Path) -> Memory:
    mem = Memory(tmp_path / "ws")
    for i in range(5):
        mem.write(f"daily/2024-05-0{i + 1}/n{i}.md", f"note {i} about [[digest/wiki/hub.md]] and lisbon\n",
                  name=f"N{i}", description="d")
    mem.write("digest/wiki/hub.md", "# Hub\n\nporto\n", name="Hub", description="h")
    return mem


def test_a_log_that_does_not_replay_is_set_aside(tmp_path, capfd):
    mem = _indexed(tmp_path)
    path = mem.db.path
    con = duckdb.connect(str(path))
    con.execute("BEGIN")
    con.execute("DELETE FROM links WHERE target = 'digest/wiki/hub.md'")
    con.execute("INSERT INTO links SELECT 'x' || i, 'y', NULL, NULL, NULL, i FROM range(600) t(i)")
    con.execute("COMMIT")
    shutil.copy(path.with_name("index.duckdb.wal"), tmp_path / "saved.wal")
    con.close()  # checkpointed: the log is applied and removed
    shutil.copy(tmp_path / "saved.wal", path.with_name("index.duckdb.wal"))  # ...and comes back: replay fails
    capfd.readouterr()
    again = Memory(mem.ws.root)
    assert len(again.stat("digest/wiki/hub.md")["links_in"]) == 5
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "the index was damaged" in err and "rebuilding it from the files" in err
    assert len(_damaged_sets(mem.ws.root)) == 1


def test_a_file_that_is_not_a_database_is_set_aside(tmp_path):
    mem = _indexed(tmp_path)
    mem.db.path.write_bytes(os.urandom(300_000))
    assert [h["path"] for h in Memory(mem.ws.root).search("porto")] == ["digest/wiki/hub.md"]
    assert len(_damaged_sets(mem.ws.root)) == 1


_ORPHAN_AND_DIE = """
import duckdb, os, sys
con = duckdb.connect(sys.argv[1])
con.execute("DELETE FROM files WHERE path = 'digest/wiki/hub.md'")  # its chunks and links stay: orphans
os._exit(0)  # no close, no checkpoint: the log is left as a crash leaves it
"""


@pytest.mark.e2e
def test_after_a_crash_an_index_breaking_its_invariants_is_rebuilt(tmp_path):
    mem = _indexed(tmp_path)
    subprocess.run([sys.executable, "-c", _ORPHAN_AND_DIE, str(mem.db.path)], check=True)
    assert mem.db.path.with_name("index.duckdb.wal").exists()
    assert [h["path"] for h in Memory(mem.ws.root).search("porto")] == ["digest/wiki/hub.md"]
    [kept] = _damaged_sets(mem.ws.root)
    assert "invariants" in (kept / "error.txt").read_text()


def test_damaged_sets_kept_are_bounded(tmp_path):
    mem = _indexed(tmp_path)
    for _ in range(index_db.KEEP_DAMAGED + 2):
        mem.db.path.write_bytes(b"not a database" * 1000)
        Memory(mem.ws.root).index_stats()
    assert len(_damaged_sets(mem.ws.root)) == index_db.KEEP_DAMAGED


def test_a_clean_close_leaves_no_log_so_no_check_runs(tmp_path):
    mem = _indexed(tmp_path)
    mem.index_stats()
    assert not mem.db.path.with_name("index.duckdb.wal").exists()
    assert _damaged_sets(mem.ws.root) == []


@pytest.mark.e2e
def test_the_running_service_heals_without_a_restart(recorded, dreamflow_service, tmp_path):
    from service_harness import RunningService, loopback

    shutil.copytree(_copy(recorded, tmp_path / "copy", checkpointed=True), tmp_path / "ws")
    svc = RunningService.start(tmp_path, prefect_api=dreamflow_service.prefect_api, runner=False)
    try:
        moved = loopback.post(f"{svc.url}/ops/move", json={"src": HUB, "dst": "digest/wiki/hub15.md"}, timeout=60)
        assert moved.status_code == 503 and moved.json()["error"]["type"] == "IndexRebuilt"
        found = loopback.post(f"{svc.url}/ops/search", json={"query": "hub15", "limit": 50}, timeout=60)
        assert found.status_code == 200 and found.json()
        stat = loopback.post(f"{svc.url}/ops/stat", json={"path": "digest/wiki/hub15.md"}, timeout=60).json()
        assert len({link["source"] for link in stat["links_in"]}) == 300
        assert loopback.post(f"{svc.url}/ops/move", json={"src": "digest/wiki/hub15.md", "dst": HUB},
                             timeout=60).status_code == 200
    finally:
        assert svc.stop() == 0
    assert "the index was damaged" not in svc.log() or "Traceback" not in svc.log()
