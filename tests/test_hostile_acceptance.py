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
from test_cli import as_json, run, run_process

from deployments.watch import WorkspaceWatcher
from storage.errors import InvalidInput, PathError
from storage.files.workspace import NOT_UTF8
from storage.index import indexer as index
from storage.memory import Memory, recover

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
    shown = {"path": "digest/wiki/caf\ufffd.md", "kind": NOT_UTF8}
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


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server for the requests that must all be refused (each checks that nothing was written): started
    once for them (~0.3 s a start and stop)."""
    mem = Memory(tmp_path_factory.mktemp("served") / "ws")
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
    recover(Memory(tmp_path / "ws"))  # and the next command opens the workspace


def test_a_journal_entry_that_cannot_be_finished_never_stops_the_next_command(tmp_path, monkeypatch):
    from storage.text import graph_edit
    from storage.files import journal

    mem = Memory(tmp_path / "ws")
    journal.begin(mem.ws, "move", {"src": "digest/wiki/a.md", "dst": "digest/wiki/b.md", "files": {}})

    def full_disk(con, ws, plan):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(graph_edit, "replay_move", full_disk)
    again = recover(Memory(tmp_path / "ws"))  # used to raise: every command failed until the entry was removed
    assert "not finished" in json.dumps(again)
    assert len(journal.entries(mem.ws)) == 1  # kept: tried again next time
    monkeypatch.undo()
    recover(Memory(tmp_path / "ws"))
    assert journal.entries(mem.ws) == []


def test_every_listing_skips_and_reports_a_name_that_is_not_utf8(tmp_path):
    mem = _workspace_with_a_latin1_name(tmp_path / "ws")
    day = os.fsencode(mem.ws.root / "daily" / "2024-05-01")
    os.mkdir(day)
    with open(os.path.join(day, BAD_NAME), "wb") as fh:
        fh.write(b"---\nname: card\ntags: [boats]\n---\nA card.\n")
    os.mkdir(os.path.join(os.fsencode(mem.ws.root / "digest"), b"arch\xeff"))  # a folder named in Latin-1
    shown = {"path": "digest/wiki/caf\ufffd.md", "kind": NOT_UTF8}
    skipped = []
    assert list(mem.ws.iter_files("digest", skipped=skipped)) == ["digest/wiki/boats.md"]
    assert shown in skipped and {"path": "digest/arch\ufffdf", "kind": NOT_UTF8} in skipped
    for listing in (mem.list("digest"), mem.list("digest/wiki", recursive=False)):
        assert [e["path"] for e in listing["entries"]] == ["digest/wiki/boats.md"] and shown in listing["skipped"]
        json.dumps(listing, ensure_ascii=False).encode()  # a reply any surface can serialise
    day_page = mem.daily_reindex("2024-05-01")
    assert day_page["cards"] == [] and day_page["created"] is False
    assert {"path": "daily/2024-05-01/caf\ufffd.md", "kind": NOT_UTF8} in day_page["skipped"]
    assert mem.daily_list() == {"days": [], "truncated": False}
    assert mem.tags() == []
    assert shown in mem.reindex()["special_files"] and shown in mem.doctor()["special_files"]
    server = ApiServer(mem)
    try:
        status, answer = server.raw("POST", "/ops/list", b'{"prefix": "digest/wiki"}')  # was a 500
    finally:
        server.stop()
    assert status == 200 and shown in answer["skipped"], answer


@pytest.mark.e2e
def test_the_mcp_server_lists_tools_and_resources_past_a_name_that_is_not_utf8(tmp_path):
    from test_mcp import stdio

    import anyio

    ws = tmp_path / "ws"
    _workspace_with_a_latin1_name(ws)

    async def session():
        async with stdio(ws) as client:  # both used to crash the server
            resources = [r.name for r in (await client.list_resources()).resources]
            listed = await client.call_tool("list", {"prefix": "digest/wiki"})
            return resources, listed

    resources, listed = anyio.run(session)
    assert "digest/wiki/boats.md" in resources and not [r for r in resources if "caf" in r]
    assert not listed.is_error
    assert {"path": "digest/wiki/caf\ufffd.md", "kind": NOT_UTF8} in listed.structured_content["skipped"]


@pytest.mark.e2e
def test_a_path_with_a_lone_surrogate_is_a_path_error_on_every_path_argument(tmp_path):
    ws = tmp_path / "ws"
    mem = Memory(ws)
    mem.write("digest/wiki/a.md", "a\n")
    bad = "digest/wiki/\udcff.md"
    calls = [lambda: mem.write(bad, "x"), lambda: mem.read(bad), lambda: mem.list(bad), lambda: mem.stat(bad),
             lambda: mem.move("digest/wiki/a.md", bad), lambda: mem.append(bad, "x")]
    for call in calls:
        with pytest.raises(PathError, match="not valid UTF-8 text"):
            call()
    assert mem.tags() == [] and sorted(mem.ws.iter_files()) == ["digest/wiki/a.md"]  # nothing half-written
    proc = run_process(ws, "write", os.fsdecode(b"digest/wiki/\xff.md"), "--content", "x")  # argv bytes, not UTF-8
    assert proc.returncode == 2 and "not valid UTF-8 text" in proc.stderr and "Traceback" not in proc.stderr


def test_a_write_through_a_symlink_to_a_name_that_is_not_utf8_replaces_its_target(tmp_path):
    mem = _workspace_with_a_latin1_name(tmp_path / "ws")
    folder = os.fsencode(mem.ws.root / "digest" / "wiki")
    os.symlink(BAD_NAME, os.path.join(folder, b"cafe.md"))  # the temp file is named after the target
    mem.write("digest/wiki/cafe.md", "Kayaks, rewritten.\n")
    with open(os.path.join(folder, BAD_NAME), "rb") as fh:
        assert fh.read() == b"Kayaks, rewritten.\n"
    assert sorted(os.listdir(folder)) == sorted([b"boats.md", b"cafe.md", BAD_NAME])  # no temp file left


@pytest.mark.parametrize("bad", [5, ["digest"], {"path": "digest"}])
def test_arguments_of_the_wrong_type_are_invalid_input_not_a_crash(tmp_path, bad):
    mem = Memory(tmp_path / "ws")
    mem.write("digest/wiki/a.md", "a\n")
    calls = [
        lambda: mem.list(bad), lambda: mem.list("digest", extensions=[bad]), lambda: mem.read(bad),
        lambda: mem.upload_content(b"x", bad), lambda: mem.upload_content(bad, "x.txt"),
        lambda: mem.write("digest/wiki/b.md", bad), lambda: mem.append("digest/wiki/a.md", bad),
        lambda: mem.edit("digest/wiki/a.md", bad, "b"), lambda: mem.tags(bad), lambda: mem.daily_list(bad),
        lambda: mem.search("a", path_prefix=bad), lambda: mem.traverse([bad]), lambda: mem.list(limit=str(bad)),
        lambda: mem.relink("digest/wiki/a.md", "digest/wiki/c.md", before=bad),
        lambda: mem.frontmatter_update("digest/wiki/a.md", [bad]),
    ]
    for call in calls:
        with pytest.raises(InvalidInput):
            call()
    assert sorted(mem.ws.iter_files()) == ["digest/wiki/a.md"] and mem.read("digest/wiki/a.md")["content"].endswith("a\n")
    assert not list((mem.ws.root / "metadata" / "journal").glob("*.json"))  # relink used to stop half-way


@pytest.mark.parametrize("rewrite", [
    lambda mem, rel: mem.edit(rel, "beta", "gamma"),
    lambda mem, rel: mem.prepend(rel, "top"),
    lambda mem, rel: mem.frontmatter_update(rel, {"n": 1}),
])
def test_a_line_appended_between_the_check_and_the_rename_is_carried_over(tmp_path, monkeypatch, rewrite):
    from storage.files import workspace

    mem = Memory(tmp_path / "ws")
    rel = "digest/wiki/log.md"
    mem.write(rel, "alpha beta\n")
    real_replace = os.replace

    def replace_after_an_outside_append(src, dst):
        if str(dst).endswith("log.md"):
            with open(dst, "a") as fh:  # lands in the file about to be replaced (was lost)
                fh.write("outside line\n")
        real_replace(src, dst)

    monkeypatch.setattr(workspace.os, "replace", replace_after_an_outside_append)
    answer = rewrite(mem, rel)
    monkeypatch.undo()
    data = (mem.ws.root / rel).read_bytes()
    assert data.endswith(b"\noutside line\n") and data.count(b"outside line") == 1
    assert answer["hash"] == workspace.content_hash(data)  # the hash of the file as it now is
    assert mem.search("outside")  # and the index has it
