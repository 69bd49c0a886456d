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

from engine.access.client import RemoteMemory
from storage.errors import Conflict, InvalidInput, PathError
from storage.files.workspace import Workspace
from storage.memory import Memory


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


# ---- item 4: metadata/ is unreachable, also through a symlink and in any letter case --------------------

def test_metadata_is_refused_through_a_symlink_on_the_cli(tmp_path):
    root = tmp_path / "ws"
    Memory(root).write("digest/wiki/a.md", "note", name="A", description="a")
    os.symlink("../metadata", root / "digest" / "metalink")
    index_before = (root / "metadata" / "index.duckdb").read_bytes()
    attempts = [
        ("write", "digest/metalink/x.md", "--content", "x"),
        ("append", "digest/metalink/x.md", "--content", "x"),
        ("read", "digest/metalink/index.lock"),
        ("delete", "digest/metalink/index.lock"),
        ("move", "digest/wiki/a.md", "digest/metalink/a.md"),
        ("list", "digest/metalink"),
        ("write", "Metadata/x.md", "--content", "x"),
        ("list", "METADATA"),
        ("download", "digest/wiki/a.md", str(root / "digest" / "metalink" / "index.duckdb"), "--overwrite"),
    ]
    for args in attempts:
        proc = run(root, *args, "--json")
        assert proc.returncode == 2, (args, proc.stdout)
        assert json.loads(proc.stdout)["error"]["type"] == "PathError", args
    assert (root / "metadata" / "index.duckdb").read_bytes() == index_before
    assert (root / "metadata" / "index.lock").exists() and not (root / "metadata" / "x.md").exists()
    assert [e["path"] for e in as_json(root, "list")["entries"]] == ["digest/wiki/a.md"]


def test_metadata_is_refused_through_a_symlink_over_http(served):
    mem, remote, server = served
    os.symlink("../metadata", mem.ws.root / "digest" / "metalink")
    for op, body in (("write", {"path": "digest/metalink/x.md", "content": "x"}),
                     ("read", {"path": "digest/metalink/index.lock"}),
                     ("list", {"prefix": "digest/metalink"}),
                     ("download", {"path": "digest/metalink/index.lock"})):
        status, answer = server.raw("POST", f"/ops/{op}", body)
        assert (status, answer["error"]["type"]) == (400, "PathError"), op
    mem.write("digest/wiki/a.md", "note")
    with pytest.raises(PathError):  # the client refuses to write into the service's metadata/ too
        remote.download("digest/wiki/a.md", str(mem.ws.root / "digest" / "metalink"))
    assert not (mem.ws.metadata / "a.md").exists()


# ---- item 5: over HTTP, upload takes bytes and download answers with them ------------------------------

def test_http_upload_and_download_never_take_server_paths(served, tmp_path):
    mem, remote, server = served
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    status, body = server.raw("POST", "/ops/upload", {"source": str(secret)})
    assert status == 422 and not any(mem.ws.root.glob("resource/**/secret.txt"))
    status, body = server.raw("POST", "/ops/download", {"path": "x.md", "dest": str(tmp_path / "out.md")})
    assert status == 422 and not (tmp_path / "out.md").exists()

    content = base64.b64encode(b"raw \x00 bytes").decode()
    status, body = server.raw("POST", "/ops/upload", {"content": content, "name": "blob.bin", "date": "2024-05-01"})
    assert (status, body) == (200, {"path": "resource/2024-05-01/blob.bin", "bytes": 11})
    status, body = server.raw("POST", "/ops/upload", {"content": content, "name": "blob.bin", "date": "2024-05-01"})
    assert status == 409
    status, body = server.raw("POST", "/ops/upload", {"content": "not base64!", "name": "b.bin"})
    assert status == 400 and body["error"]["type"] == "InvalidInput"

    boundary = "dreamflowboundary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"notes.md\"\r\n"
            f"Content-Type: text/markdown\r\n\r\n# Uploaded notes\r\n--{boundary}--\r\n").encode()
    conn = __import__("http.client").client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/ops/upload", body=form,
                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "X-Dreamflow-Request": "1"})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["path"] == "resource/notes.md"

    conn.request("POST", "/ops/download", body=json.dumps({"path": "resource/2024-05-01/blob.bin"}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/octet-stream"
    assert resp.read() == b"raw \x00 bytes"
    conn.close()
    assert mem.search("uploaded notes")[0]["path"] == "resource/notes.md"


def test_the_cli_through_the_service_moves_bytes_on_the_callers_side(served, tmp_path, monkeypatch):
    mem, remote, server = served
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local.txt").write_text("local notes")
    assert remote.upload("local.txt")["path"] == "resource/local.txt"
    out = remote.download("resource/local.txt", "fresh/folder/")  # trailing slash: a folder, created
    assert out["dest"] == str(tmp_path / "fresh" / "folder" / "local.txt")
    assert (tmp_path / "fresh" / "folder" / "local.txt").read_text() == "local notes"
    with pytest.raises(Conflict):
        remote.download("resource/local.txt", "fresh/folder/")


def test_download_into_a_missing_folder_ending_with_a_slash_creates_it(tmp_path):
    root = tmp_path / "ws"
    Memory(root).write("digest/wiki/a.md", "note", name="A", description="a")
    dest = tmp_path / "out" / "new"
    assert run(root, "download", "digest/wiki/a.md", str(tmp_path / "plain" / "a.md")).returncode == 3
    result = as_json(root, "download", "digest/wiki/a.md", f"{dest}/")
    assert result["dest"] == str(dest / "a.md") and (dest / "a.md").read_text().endswith("note\n")


# ---- item 8: outside edits are never lost; optimistic concurrency for callers -------------------------

def test_appends_racing_an_outside_writer_lose_no_line(mem):
    import threading

    mem.write("daily/log.md", "# Log\n", name="Log", description="shared log")
    path = mem.ws.root / "daily" / "log.md"
    stop = threading.Event()
    written = []

    def outside_writer():
        n = 0
        while not stop.is_set():
            with open(path, "a", encoding="utf-8") as fh:  # like `echo line >> log.md`
                fh.write(f"outside {n}\n")
            written.append(n)
            n += 1
            time.sleep(0.002)

    thread = threading.Thread(target=outside_writer)
    thread.start()
    try:
        for i in range(60):
            mem.append("daily/log.md", f"ours {i}")
    finally:
        stop.set()
        thread.join()
    lines = set(path.read_text(encoding="utf-8").splitlines())
    assert {f"ours {i}" for i in range(60)} <= lines
    assert [n for n in written if f"outside {n}" not in lines] == []


def test_expected_hash_refuses_a_stale_write_on_the_cli(tmp_path):
    root = tmp_path / "ws"
    first = as_json(root, "write", "digest/wiki/a.md", "--content", "v1", "--name", "A")
    assert first["hash"] == as_json(root, "read", "digest/wiki/a.md")["hash"] == as_json(root, "stat", "digest/wiki/a.md")["hash"]
    (root / "digest" / "wiki" / "a.md").write_text("changed by hand\n")
    for args in (("write", "--content", "v2"), ("append", "--content", "more"), ("prepend", "--content", "top"),
                 ("edit", "--old", "hand", "--new", "tool"), ("frontmatter-update", "--metadata", "k=1")):
        proc = run(root, args[0], "digest/wiki/a.md", *args[1:], "--expected-hash", first["hash"], "--json")
        assert proc.returncode == 4, (args, proc.stdout)
        assert json.loads(proc.stdout)["error"]["type"] == "Changed"
    assert (root / "digest" / "wiki" / "a.md").read_text() == "changed by hand\n"
    current = as_json(root, "read", "digest/wiki/a.md")["hash"]
    done = as_json(root, "edit", "digest/wiki/a.md", "--old", "hand", "--new", "tool", "--expected-hash", current)
    assert done["hash"] == as_json(root, "stat", "digest/wiki/a.md")["hash"] != current


def test_expected_hash_conflict_over_http_is_a_409(served):
    mem, remote, server = served
    written = remote.write("digest/wiki/a.md", "v1")
    mem.append("digest/wiki/a.md", "someone else")
    status, body = server.raw("POST", "/ops/append", {"path": "digest/wiki/a.md", "content": "x",
                                                      "expected_hash": written["hash"]})
    assert status == 409 and body["error"]["type"] == "Changed"
    fresh = remote.read("digest/wiki/a.md")["hash"]
    assert remote.append("digest/wiki/a.md", "x", expected_hash=fresh)["lines"] == 3


def test_edit_rereads_a_file_changed_between_read_and_replace(mem, monkeypatch):
    mem.write("digest/wiki/a.md", "alpha beta\n")
    real_write = Workspace.write_bytes
    raced = []

    def write_after_an_outside_change(self, rel, data, expect=None):
        if not raced and rel == "digest/wiki/a.md":
            raced.append(True)
            (self.root / rel).write_text("alpha beta\noutside line\n")
        return real_write(self, rel, data, expect)

    monkeypatch.setattr(Workspace, "write_bytes", write_after_an_outside_change)
    assert mem.edit("digest/wiki/a.md", "beta", "gamma")["replacements"] == 1
    assert (mem.ws.root / "digest/wiki/a.md").read_text() == "alpha gamma\noutside line\n"


# ---- item 9: modes are kept, new files follow the umask, writes are durable ---------------------------

@pytest.mark.e2e
def test_rewrites_keep_the_mode_and_new_files_follow_the_umask(tmp_path):
    root = tmp_path / "ws"
    note = root / "digest" / "wiki" / "a.md"
    as_json(root, "write", "digest/wiki/a.md", "--content", "v1")
    assert stat.S_IMODE(note.stat().st_mode) == 0o666 & ~_umask()
    for mode, args in ((0o640, ("edit", "digest/wiki/a.md", "--old", "v1", "--new", "v2")),
                       (0o604, ("append", "digest/wiki/a.md", "--content", "more")),
                       (0o664, ("write", "digest/wiki/a.md", "--content", "v3")),
                       (0o600, ("frontmatter-update", "digest/wiki/a.md", "--metadata", "k=1"))):
        note.chmod(mode)
        as_json(root, *args)
        assert stat.S_IMODE(note.stat().st_mode) == mode, args
    proc = __import__("subprocess").run(
        [__import__("sys").executable, "-m", "dreamflow", "--workspace", str(root), "write", "digest/wiki/b.md",
         "--content", "x"], preexec_fn=lambda: os.umask(0o027), capture_output=True, timeout=60)
    assert proc.returncode == 0 and stat.S_IMODE((root / "digest/wiki/b.md").stat().st_mode) == 0o640


def test_http_writes_keep_the_mode(served):
    mem, remote, server = served
    remote.write("digest/wiki/a.md", "v1")
    (mem.ws.root / "digest/wiki/a.md").chmod(0o644)
    remote.edit("digest/wiki/a.md", "v1", "v2")
    assert stat.S_IMODE((mem.ws.root / "digest/wiki/a.md").stat().st_mode) == 0o644


def test_writes_fsync_the_file_before_the_rename_and_the_folder_after(ws, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", None)), real_replace(a, b))[1])
    ws.write_text("digest/wiki/a.md", "durable\n")
    assert events[-3:] == [("fsync", False), ("replace", None), ("fsync", True)]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- item 10: one bad byte or line hides nothing ---------------------------------------------------------

def test_a_few_bad_bytes_or_lines_hide_nothing_on_the_cli(tmp_path):
    root = tmp_path / "ws"
    Workspace(root)
    (root / "digest" / "wiki" / "kiwi.md").write_bytes(
        b"---\nname: Kiwi\ndescription: flightless bird\n---\nThe kiwi \xff\xfe lays huge eggs.\n")
    (root / "session" / "dialog" / "s1.jsonl").write_bytes(
        b'{"role": "user", "content": "remember the zeppelin"}\n'
        b"\x00\x00garbage\x00\n"
        b'{"role": "user", "content": "caf\xe9 au lait"}\n'
        b"{truncated json\n")
    as_json(root, "reconcile")
    assert as_json(root, "search", "kiwi eggs")[0]["path"] == "digest/wiki/kiwi.md"
    note = as_json(root, "stat", "digest/wiki/kiwi.md")
    assert (note["kind"], note["name"], note["description"]) == ("markdown", "Kiwi", "flightless bird")
    assert any("not UTF-8" in e for e in note["errors"])
    assert as_json(root, "search", "zeppelin")[0]["path"] == "session/dialog/s1.jsonl"
    assert as_json(root, "search", "lait")[0]["path"] == "session/dialog/s1.jsonl"
    log = as_json(root, "stat", "session/dialog/s1.jsonl")
    assert log["kind"] == "jsonl" and any("1 lines with NUL bytes skipped" in e for e in log["errors"])
    assert "garbage" not in json.dumps(as_json(root, "search", "garbage"))
    kiwi = (root / "digest" / "wiki" / "kiwi.md").read_bytes()
    as_json(root, "edit", "digest/wiki/kiwi.md", "--old", "huge", "--new", "big")
    assert (root / "digest" / "wiki" / "kiwi.md").read_bytes() == kiwi.replace(b"huge", b"big")  # bad bytes kept


def test_a_bad_frontmatter_value_keeps_the_rest_and_doctor_lists_it(served):
    mem, remote, server = served
    (mem.ws.root / "digest" / "wiki" / "trip.md").write_text(
        '---\nname: Trip\ndescription: the spring trip\ndate: "2024-13-45"\n---\nWe saw kangaroos.\n')
    mem.reconcile()
    found = remote.stat("digest/wiki/trip.md")
    assert (found["name"], found["description"], found["date"]) == ("Trip", "the spring trip", None)
    listed = remote.doctor()["bad_frontmatter"]
    assert [row["path"] for row in listed] == ["digest/wiki/trip.md"] and "2024-13-45" in listed[0]["error"]


# ---- item 11: overlong names are path errors, `list ../` is refused, jobs write bounded cards ----------

@pytest.mark.parametrize("path", ["digest/" + "n" * 310 + ".md", "/".join(["digest"] + ["deep" * 20] * 60) + "/x.md"])
def test_overlong_names_and_paths_are_path_errors(tmp_path, served, path):
    root = tmp_path / "ws"
    for command in (("write", path, "--content", "x"), ("read", path), ("stat", path), ("list", path)):
        proc = run(root, *command, "--json")
        assert proc.returncode == 2, (command[0], proc.stdout[:300])
        assert json.loads(proc.stdout)["error"]["type"] == "PathError"
    mem, remote, server = served
    for op, body in (("write", {"path": path, "content": "x"}), ("read", {"path": path})):
        status, answer = server.raw("POST", f"/ops/{op}", body)
        assert (status, answer["error"]["type"]) == (400, "PathError")


def test_list_refuses_paths_outside_the_workspace(tmp_path, served):
    root = tmp_path / "ws"
    for prefix in ("../", "/", "..", "../..", "/etc"):
        proc = run(root, "list", prefix, "--json")
        assert proc.returncode == 2, (prefix, proc.stdout)
    assert as_json(root, "list", ".")["prefix"] == "" and as_json(root, "list")["prefix"] == ""
    mem, remote, server = served
    status, answer = server.raw("POST", "/ops/list", {"prefix": "../"})
    assert (status, answer["error"]["type"]) == (400, "PathError")


def test_jobs_write_at_most_the_cap_into_a_card(mem, monkeypatch):
    from engine.access.job_workspace import memory_of
    from storage.errors import TooLarge

    monkeypatch.setenv("DREAMFLOW_MAX_WRITE_CHARS", "1000")
    job = memory_of(str(mem.ws.root))
    with pytest.raises(TooLarge, match="DREAMFLOW_MAX_WRITE_CHARS"):
        job.write("digest/wiki/huge.md", "x" * 1001)
    assert not (mem.ws.root / "digest/wiki/huge.md").exists()
    assert job.write("digest/wiki/ok.md", "x" * 1000)["created"]
    with pytest.raises(TooLarge):
        job.append("digest/wiki/ok.md", "y" * 2000)
    with pytest.raises(TooLarge):
        job.edit("digest/wiki/ok.md", old="x", new="z" * 5000, replace_all=True)
    job.append("session/dialog/s1.jsonl", "r" * 5000)  # raw material is written as it comes


def test_the_cap_counts_everything_a_call_writes_however_the_path_is_spelt(mem, monkeypatch):
    from engine.access.job_workspace import memory_of

    monkeypatch.setenv("DREAMFLOW_MAX_WRITE_CHARS", "1000")
    job = memory_of(str(mem.ws.root))
    job.write("digest/wiki/ok.md", "x" * 900 + "\n")
    before = (mem.ws.root / "digest/wiki/ok.md").read_bytes()
    for call in (lambda: job.write(" digest/wiki/a.md", "x" * 1001),      # leading space, ./, backslashes
                 lambda: job.write(".\\daily\\2024-01-01\\c.md", "x" * 1001),
                 lambda: job.edit("digest/wiki/ok.md", "x", "z" * 999, replace_all=True),  # 900 x 999 chars
                 lambda: job.write("digest/wiki/b.md", "x", description="d" * 1001),
                 lambda: job.frontmatter_update("digest/wiki/ok.md", {"k": "v" * 1001})):
        with pytest.raises(InvalidInput, match="DREAMFLOW_MAX_WRITE_CHARS"):
            call()
    assert (mem.ws.root / "digest/wiki/ok.md").read_bytes() == before
    assert sorted(mem.ws.iter_files()) == ["digest/wiki/ok.md"]
    assert job.edit("digest/wiki/ok.md", "xx", "y", replace_all=True)["replacements"] == 450


def test_a_runaway_llm_card_fails_the_run_and_writes_nothing(prefect_harness, llm, mem, monkeypatch):
    from flows.auto_memory import auto_memory
    from llm_server import json_reply

    monkeypatch.setenv("DREAMFLOW_MAX_WRITE_CHARS", "5000")
    words = [f"word{n}" for n in range(1200)]

    def ten_long_facts(body):  # per turn: its message's words as ten grounded facts of 40 words (~3k characters)
        said = body["messages"][1]["content"].rsplit(": ", 1)[1].split()
        return json_reply({"title": "Runaway", "facts": [{"text": " ".join(said[i * 40:(i + 1) * 40]) + ".",
                                                          "about": "user", "kind": "fact", "source": [1]}
                                                         for i in range(10)]})

    llm.responder = ten_long_facts
    messages = [{"role": "user", "content": " ".join(words[n * 400:(n + 1) * 400]), "timestamp": "2024-05-08T09:00:00"}
                for n in range(3)]
    with pytest.raises(Exception, match="at most 5,000 characters"):
        auto_memory(session_id="s1", workspace=str(mem.ws.root), messages=messages)
    assert not list((mem.ws.root / "daily").rglob("*.md"))
    from storage.files import checkpoints

    assert not checkpoints.load(mem.ws, "sessions/s1").get("records")
