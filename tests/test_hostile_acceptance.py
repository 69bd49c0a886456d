"""Hostile input found by the issue-11 acceptance battery (benchmarks/hostile_battery.py).

- A file whose name bytes are not UTF-8 (an old Latin-1 archive) is skipped and reported, never fed to DuckDB
  (which invalidates the whole database on such text: one file used to stop reindex, reconcile, doctor --fix
  and `dreamflow start`).
- A JSON request carrying a lone surrogate is a 422, not a 500 half-way through the operation.
- Markdown nested absurdly deep is indexed as plain text at once (marko took minutes on it).
"""

import json
import os
import time

import pytest
from test_api import ApiServer
from test_cli import as_json, run

from deployments.watch import WorkspaceWatcher
from storage import index
from storage.memory import Memory

BAD_NAME = b"caf\xe9.md"  # "café.md" in Latin-1


def _workspace_with_a_latin1_name(root):
    mem = Memory(root)
    mem.write("digest/wiki/boats.md", "Catamarans have two hulls.\n")
    with open(os.path.join(os.fsencode(root / "digest" / "wiki"), BAD_NAME), "wb") as fh:
        fh.write(b"Kayaks have one hull. [[digest/wiki/boats.md]]\n")
    return mem


def test_a_name_that_is_not_utf8_is_skipped_by_reindex_reconcile_and_doctor(tmp_path):
    ws = tmp_path / "ws"
    _workspace_with_a_latin1_name(ws)
    shown = {"path": "digest/wiki/caf\ufffd.md", "kind": index.NOT_UTF8}
    for command in ("reindex", "reconcile"):
        proc = run(ws, command, "--json")
        assert proc.returncode == 0, proc.stderr
        assert shown in json.loads(proc.stdout)["special_files"]
    fixed = run(ws, "doctor", "--fix", "--json")
    assert "Traceback" not in fixed.stderr and fixed.returncode in (0, 1), fixed.stderr
    report = json.loads(fixed.stdout)
    assert shown in report["special_files"]
    assert not [d for d in report["drift"] if "caf" in d["path"]]  # not re-reported as "added" forever
    hits = as_json(ws, "search", "catamarans")
    assert [h["path"] for h in hits] == ["digest/wiki/boats.md"]  # the index was not invalidated


def test_the_watcher_and_index_file_leave_such_a_name_alone(tmp_path):
    mem = _workspace_with_a_latin1_name(tmp_path / "ws")
    rel = "digest/wiki/" + os.fsdecode(BAD_NAME)
    watcher = WorkspaceWatcher(mem.ws, lambda paths: None)
    assert watcher.relevant(str(mem.ws.root / rel)) is None
    with mem.db.session() as con:
        assert index.index_file(con, mem.ws, rel) is False
    assert mem.reconcile()["skipped"] == 1
    assert mem.search("catamarans")


@pytest.fixture
def served(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.write("digest/wiki/a.md", "a\n")
    server = ApiServer(mem)
    yield mem, server
    server.stop()


@pytest.mark.parametrize("route, body", [
    ("write", b'{"path": "digest/wiki/\\udcff.md", "content": "x"}'),
    ("write", b'{"path": "digest/wiki/ok.md", "content": "half \\ud800 a pair"}'),
    ("write", b'{"path": "digest/wiki/ok.md", "content": "x", "metadata": {"k\\udcff": 1}}'),
    ("read", b'{"path": "digest/wiki/\\udcff.md"}'),
    ("move", b'{"src": "digest/wiki/a.md", "dst": "digest/wiki/\\udcff.md"}'),
    ("list", b'{"prefix": "digest/\\udcff"}'),
    ("tags", b'{"tag": "\\udcff"}'),
    ("upload", b'{"name": "\\udcff.txt", "content": "eA=="}'),
    ("download", b'{"path": "digest/wiki/\\udcff.md"}'),
])
def test_a_lone_surrogate_in_a_request_is_a_422_and_writes_nothing(served, route, body):
    mem, server = served
    status, answer = server.raw("POST", f"/ops/{route}", body)
    assert status == 422, answer
    message = answer["error"]["message"]
    assert answer["error"]["type"] == "InvalidInput" and ("not valid Unicode" in message or "surrogate" in message)
    assert sorted(mem.ws.iter_files()) == ["digest/wiki/a.md"]


@pytest.mark.parametrize("body", [
    "- " * 200_000 + "x [[digest/wiki/a.md]]\n",                  # one 400 KB line, 200,000 lists deep
    ("> " * 60 + "q [[digest/wiki/a.md]]\n\n") * 2_000,           # many lines 60 quotes deep
])
def test_absurdly_nested_markdown_is_plain_text_at_once(tmp_path, body):
    mem = Memory(tmp_path / "ws")
    mem.ws.write_text("digest/wiki/deep.md", body)
    started = time.monotonic()
    mem.reindex()
    assert time.monotonic() - started < 5  # marko alone: 16 s and 40 s
    stat = mem.stat("digest/wiki/deep.md")
    assert any("Markdown structure not read" in e for e in stat["errors"])
    assert stat["links_out"] and stat["links_out"][0]["target"] == "digest/wiki/a.md"  # links still found
    assert mem.move("digest/wiki/deep.md", "digest/wiki/deeper.md")["to"] == "digest/wiki/deeper.md"


def test_a_move_next_to_a_file_whose_name_is_not_utf8_completes(tmp_path):
    mem = _workspace_with_a_latin1_name(tmp_path / "ws")  # its Latin-1 file links boats.md
    mem.write("digest/wiki/fleet.md", "see [[digest/wiki/boats.md]]\n")
    moved = mem.move("digest/wiki/boats.md", "digest/wiki/ships.md")  # used to fail half-way, journal left
    assert moved["rewritten"] == [{"path": "digest/wiki/fleet.md", "links": 1}]
    assert not list((mem.ws.root / "metadata" / "journal").glob("*.json"))
    Memory(tmp_path / "ws")  # and the next command opens the workspace


def test_a_journal_entry_that_cannot_be_finished_never_stops_the_next_command(tmp_path, monkeypatch):
    from storage import graph_edit, journal

    mem = Memory(tmp_path / "ws")
    journal.begin(mem.ws, "move", {"src": "digest/wiki/a.md", "dst": "digest/wiki/b.md", "files": {}})

    def full_disk(con, ws, plan):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(graph_edit, "_replay_move", full_disk)
    again = Memory(tmp_path / "ws")  # used to raise: every command failed until the entry was removed
    assert "not finished" in json.dumps(again.recovered)
    assert len(journal.entries(mem.ws)) == 1  # kept: tried again next time
    monkeypatch.undo()
    Memory(tmp_path / "ws")
    assert journal.entries(mem.ws) == []
