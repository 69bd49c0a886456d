"""Data safety (issue 11): hostile files and requests never hang, crash, leak or lose data, on the CLI and
over HTTP. Crash recovery of moves is in tests/test_crash.py."""

import base64
import json
import os
import socket
import stat
import time

import pytest
from test_api import ApiServer
from test_cli import as_json, run

from engine.client import RemoteMemory
from storage.errors import Conflict, NotFound, PathError
from storage.memory import Memory
from storage.workspace import Workspace


@pytest.fixture
def mem(tmp_path):
    return Memory(tmp_path / "ws")


@pytest.fixture
def served(mem):
    server = ApiServer(mem)
    yield mem, RemoteMemory(server.url), server
    server.stop()


# ---- item 3: special files are skipped and reported, never opened --------------------------------------

def _hostile_entries(root):
    """A symlink loop, a FIFO posing as a note, a dangling symlink and (where the path fits) a socket."""
    os.symlink("loop", root / "digest" / "loop")
    os.mkfifo(root / "digest" / "wiki" / "pipe.md")
    os.symlink("nowhere.md", root / "digest" / "wiki" / "gone.md")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "digest" / "s.sock"))
    except OSError:  # AF_UNIX paths are limited to ~107 bytes
        pass
    return sock


def test_special_files_are_skipped_and_reported_on_the_cli(tmp_path):
    root = tmp_path / "ws"
    Memory(root).write("digest/wiki/a.md", "links [[digest/wiki/b.md]]", name="A", description="a")
    Memory(root).write("digest/wiki/b.md", "target", name="B", description="b")
    sock = _hostile_entries(root)
    try:
        kinds = {s["path"]: s["kind"] for s in as_json(root, "reconcile")["special_files"]}
        assert kinds["digest/loop"] == "symlink loop"
        assert kinds["digest/wiki/pipe.md"] == "FIFO"
        assert kinds["digest/wiki/gone.md"] == "dangling symlink"
        assert {s["path"] for s in as_json(root, "reindex")["special_files"]} == set(kinds)
        listed = as_json(root, "list", "digest")
        assert [e["path"] for e in listed["entries"]] == ["digest/wiki/a.md", "digest/wiki/b.md"]
        assert {s["path"] for s in listed["skipped"]} == set(kinds)
        shallow = as_json(root, "list", "digest", "--no-recursive")
        assert {s["path"] for s in shallow["skipped"]} >= {"digest/loop"}
        for path in ("digest/wiki/pipe.md", "digest/loop", "digest/wiki/gone.md"):
            for command in ("read", "stat"):
                proc = run(root, command, path, "--json")
                assert proc.returncode == 2, (command, path, proc.stdout)
                assert json.loads(proc.stdout)["error"]["type"] == "PathError"
        assert run(root, "move", "digest/wiki/pipe.md", "digest/wiki/p2.md").returncode == 2
        moved = as_json(root, "move", "digest/wiki/b.md", "digest/wiki/c.md")  # scans past the FIFO
        assert moved["rewritten"] == [{"path": "digest/wiki/a.md", "links": 1}]
        proc = run(root, "doctor", "--json")  # a FIFO once made doctor block forever holding the lock
        report = json.loads(proc.stdout)
        assert {s["path"] for s in report["special_files"]} == set(kinds)
        assert report["broken_links"] == []
        assert stat.S_ISFIFO(os.lstat(root / "digest" / "wiki" / "pipe.md").st_mode)
    finally:
        sock.close()


def test_reading_a_fifo_over_http_is_a_400(served):
    mem, remote, server = served
    os.mkfifo(mem.ws.root / "digest" / "pipe.md")
    status, body = server.raw("POST", "/ops/read", {"path": "digest/pipe.md"})
    assert status == 400 and body["error"]["type"] == "PathError" and "FIFO" in body["error"]["message"]
    with pytest.raises(PathError):
        remote.append("digest/pipe.md", "more")
    assert remote.list("digest")["skipped"] == [{"path": "digest/pipe.md", "kind": "FIFO"}]
