"""File tools that behave like ReMe's (issue 12): one path rule, portable names, Markdown-only operations,
body-only edits, folders, date filters that keep undated knowledge, normalised tags, day pages, ReMe import.
Each rule through the CLI and over HTTP (the agent tools and MCP call the same operations)."""

import json
import os
import subprocess
import sys
import time

import pytest
from test_api import ApiServer
from test_cli import as_json, ok, run

from engine.access.client import RemoteMemory
from storage.errors import InvalidInput, NotFound, PathError
from storage.memory import Memory


@pytest.fixture
def root(tmp_path):
    return tmp_path / "ws"


@pytest.fixture
def served(tmp_path):
    mem = Memory(tmp_path / "served")
    server = ApiServer(mem)
    yield mem, RemoteMemory(server.url), server
    server.stop()


def error_of(proc):
    return json.loads(proc.stdout)["error"]


# ---- 1. one path rule: a suffix-less path is <path>.md everywhere ----------------------------------------

def test_suffixless_paths_resolve_to_md_on_the_cli(root):
    as_json(root, "write", "digest/wiki/kyoto", "--content", "temples", "--name", "Kyoto")
    assert as_json(root, "read", "digest/wiki/kyoto")["path"] == "digest/wiki/kyoto.md"
    assert as_json(root, "stat", "digest/wiki/kyoto")["name"] == "Kyoto"
    assert as_json(root, "frontmatter-get", "digest/wiki/kyoto")["frontmatter"]["name"] == "Kyoto"
    as_json(root, "frontmatter-update", "digest/wiki/kyoto", "--metadata", "k=1")
    as_json(root, "frontmatter-delete-keys", "digest/wiki/kyoto", "k")
    assert as_json(root, "edit", "digest/wiki/kyoto", "--old", "temples", "--new", "shrines")["path"].endswith(".md")
    assert as_json(root, "append", "digest/wiki/kyoto", "--content", "more")["created"] is False
    as_json(root, "prepend", "digest/wiki/kyoto", "--content", "top")
    assert as_json(root, "move", "digest/wiki/kyoto", "digest/wiki/kyoto-city")["to"] == "digest/wiki/kyoto-city.md"
    assert as_json(root, "delete", "digest/wiki/kyoto-city")["path"] == "digest/wiki/kyoto-city.md"
    assert not list((root / "digest" / "wiki").iterdir())


def test_suffixless_paths_resolve_to_md_over_http(served):
    mem, remote, server = served
    remote.write("digest/wiki/osaka", "food", name="Osaka")
    assert remote.read("digest/wiki/osaka")["path"] == "digest/wiki/osaka.md"
    assert remote.stat("digest/wiki/osaka")["type"] == "file"
    assert remote.frontmatter_get("digest/wiki/osaka")["frontmatter"] == {"name": "Osaka"}
    mem.ws.write_text("resource/Makefile", "all:\n")  # a suffix-less file without a .md namesake
    assert remote.read("resource/Makefile", numbered=False)["content"] == "all:\n"


# ---- 2. names that break on other systems are refused ------------------------------------------------------

BAD_NAMES = ["bad?name.md", "a<b.md", 'quote".md', "pipe|x.md", "star*.md", "col:on.md", "trailing.md.", "trailing.",
             "folder /x.md", "ctl\x01.md", "CON.md"]


def test_invalid_names_are_refused_on_the_cli(root, tmp_path):
    as_json(root, "write", "digest/wiki/ok.md", "--content", "x")
    source = tmp_path / "up.txt"
    source.write_text("x")
    for args in (("write", "digest/wiki/bad?name.md", "--content", "x"), ("create", "digest/wiki/a<b.md"),
                 ("append", "digest/wiki/trailing.", "--content", "x"), ("move", "digest/wiki/ok.md", "digest/CON.md"),
                 ("upload", str(source), "--name", "pipe|x.md")):
        proc = run(root, *args, "--json")
        assert proc.returncode == 2 and error_of(proc)["type"] == "PathError", (args, proc.stdout)
    mem = Memory(root)  # every name, every creating operation (the CLI calls the same methods)
    for name in BAD_NAMES:
        for call in (lambda: mem.write(f"digest/wiki/{name}", "x"), lambda: mem.create(f"digest/wiki/{name}"),
                     lambda: mem.append(f"digest/wiki/{name}", "x"), lambda: mem.move("digest/wiki/ok.md", f"digest/{name}"),
                     lambda: mem.upload(str(source), name=name)):
            with pytest.raises(PathError):
                call()
    assert sorted(os.listdir(root / "digest" / "wiki")) == ["ok.md"]


def test_invalid_names_are_refused_over_http(served):
    mem, remote, server = served
    status, body = server.raw("POST", "/ops/write", {"path": "digest/bad?name.md", "content": "x"})
    assert (status, body["error"]["type"]) == (400, "PathError")
    with pytest.raises(PathError):
        remote.write("digest/folder./x.md", "x")
    mem.ws.write_text("digest/legacy?.md", "made by hand\n")  # an existing odd name can still be edited
    assert remote.append("digest/legacy?.md", "more")["created"] is False


# ---- 3. Markdown-only operations refuse other files --------------------------------------------------------

def test_non_markdown_files_get_no_frontmatter_on_the_cli(root):
    # as ReMe does: the content is written verbatim and the answer says name/description were ignored
    result = as_json(root, "write", "resource/notes.txt", "--content", "plain", "--name", "N",
                     "--description", "D")
    assert result["ignored"] == ["name", "description"] and "not Markdown" in result["note"]
    assert (root / "resource" / "notes.txt").read_text() == "plain"
    proc = run(root, "create", "resource/more.txt", "--content", "x", "--name", "N")
    assert proc.returncode == 0 and "name ignored: resource/more.txt is not Markdown" in proc.stdout
    as_json(root, "write", "resource/notes.txt", "--content", "---\nkey: verbatim\n---\nplain")
    assert (root / "resource" / "notes.txt").read_text() == "---\nkey: verbatim\n---\nplain"
    before = (root / "resource" / "notes.txt").read_bytes()
    for args in (("frontmatter-update", "--metadata", "k=1"), ("frontmatter-get",), ("frontmatter-delete-keys", "k")):
        proc = run(root, args[0], "resource/notes.txt", *args[1:], "--json")
        assert proc.returncode == 2 and "not markdown" in error_of(proc)["message"], args
    assert (root / "resource" / "notes.txt").read_bytes() == before
    as_json(root, "write", "digest/wiki/a.md", "--content", "body", "--name", "A", "--metadata", "z=1")
    untouched = (root / "digest" / "wiki" / "a.md").read_bytes()
    mtime = (root / "digest" / "wiki" / "a.md").stat().st_mtime_ns
    result = as_json(root, "frontmatter-delete-keys", "digest/wiki/a.md", "absent", "missing")
    assert result["deleted"] == [] and result["missing"] == ["absent", "missing"]
    assert (root / "digest" / "wiki" / "a.md").read_bytes() == untouched
    assert (root / "digest" / "wiki" / "a.md").stat().st_mtime_ns == mtime


def test_non_markdown_files_get_no_frontmatter_over_http(served):
    mem, remote, server = served
    remote.write("resource/data.csv", "a,b\n1,2\n")
    status, body = server.raw("POST", "/ops/frontmatter_update", {"path": "resource/data.csv", "metadata": {"k": 1}})
    assert status == 400 and "not markdown" in body["error"]["message"]
    written = remote.write("resource/data.csv", "x,y\n", name="Data", metadata={"k": 1})
    assert written["ignored"] == ["name", "metadata"] and "written verbatim" in written["note"]
    assert (mem.ws.root / "resource/data.csv").read_text() == "x,y\n"


# ---- 4. edit works on the body only --------------------------------------------------------------------------

def test_edit_changes_the_body_only_on_the_cli(root):
    as_json(root, "write", "digest/wiki/foo.md", "--content", "foo lives here, foo again", "--name", "foo")
    done = as_json(root, "edit", "digest/wiki/foo.md", "--old", "foo", "--new", "bar", "--replace-all")
    assert done["replacements"] == 2
    assert as_json(root, "frontmatter-get", "digest/wiki/foo.md")["frontmatter"]["name"] == "foo"
    assert "bar lives here, bar again" in (root / "digest" / "wiki" / "foo.md").read_text()
    as_json(root, "write", "digest/wiki/only.md", "--content", "nothing", "--name", "needle", "--description", "d")
    proc = run(root, "edit", "digest/wiki/only.md", "--old", "needle", "--new", "pin", "--json")
    assert proc.returncode == 4 and "only in the frontmatter" in error_of(proc)["message"]
    assert as_json(root, "frontmatter-get", "digest/wiki/only.md")["frontmatter"]["name"] == "needle"


def test_edit_changes_the_body_only_over_http(served):
    mem, remote, server = served
    remote.write("digest/wiki/t.md", "tag body", name="tag")
    status, body = server.raw("POST", "/ops/edit", {"path": "digest/wiki/t.md", "old": "name: tag", "new": "x"})
    assert status == 409 and "frontmatter" in body["error"]["message"]
    assert remote.edit("digest/wiki/t.md", "tag", "label")["replacements"] == 1
    assert remote.frontmatter_get("digest/wiki/t.md")["frontmatter"]["name"] == "tag"


# ---- 5. folders: delete, stat; move --overwrite; list --sort mtime and extensions --------------------------

def _project(root):
    as_json(root, "write", "digest/wiki/trip/plan.md", "--content", "see [[digest/wiki/trip/notes.md]]", "--name", "P")
    as_json(root, "write", "digest/wiki/trip/notes.md", "--content", "notes", "--name", "N")
    as_json(root, "write", "digest/wiki/trip/deep/more.md", "--content", "more", "--name", "M")
    as_json(root, "write", "digest/wiki/outside.md", "--content", "[[digest/wiki/trip/notes.md]] [[digest/wiki/trip/deep/more.md]]")


def test_folders_on_the_cli(root):
    _project(root)
    folder = as_json(root, "stat", "digest/wiki/trip")
    assert (folder["type"], folder["files"], folder["folders"]) == ("dir", 3, 1) and folder["size"] > 0
    for bad in ("metadata", ".", "/", "digest/wiki/../.."):
        assert run(root, "delete", bad, "--json").returncode == 2, bad
    gone = as_json(root, "delete", "digest/wiki/trip")
    assert gone["type"] == "dir" and len(gone["files"]) == 3
    assert {(l["source"], l["target"]) for l in gone["inbound"]} == {
        ("digest/wiki/outside.md", "digest/wiki/trip/notes.md"), ("digest/wiki/outside.md", "digest/wiki/trip/deep/more.md")}
    assert not (root / "digest" / "wiki" / "trip").exists()
    assert as_json(root, "search", "notes")[0]["path"] == "digest/wiki/outside.md"  # the index forgot them


def test_move_overwrite_and_list_sort_and_extensions_on_the_cli(root):
    as_json(root, "write", "digest/wiki/a.md", "--content", "new a")
    as_json(root, "write", "digest/wiki/b.md", "--content", "old b")
    as_json(root, "write", "digest/wiki/c.md", "--content", "links [[digest/wiki/a.md]]")
    assert run(root, "move", "digest/wiki/a.md", "digest/wiki/b.md").returncode == 4
    moved = as_json(root, "move", "digest/wiki/a.md", "digest/wiki/b.md", "--overwrite")
    assert moved["rewritten"] == [{"path": "digest/wiki/c.md", "links": 1}]
    assert "new a" in (root / "digest" / "wiki" / "b.md").read_text()
    (root / "resource").mkdir(exist_ok=True)
    for i, name in enumerate(("old.txt", "mid.md", "new.jsonl")):
        path = root / "resource" / name
        path.write_text("x")
        os.utime(path, (time.time() - 100 + i * 10, time.time() - 100 + i * 10))
    newest = as_json(root, "list", "resource", "--sort", "mtime")["entries"]
    assert [e["path"] for e in newest] == ["resource/new.jsonl", "resource/mid.md", "resource/old.txt"]
    only = as_json(root, "list", "resource", "--extensions", "md", "--extensions", ".jsonl", "--sort", "mtime",
                   "--limit", "1")
    assert [e["path"] for e in only["entries"]] == ["resource/new.jsonl"] and only["truncated"]


def test_folders_over_http(served):
    mem, remote, server = served
    remote.write("daily/2024-05-01/a.md", "a")
    remote.write("digest/wiki/x.md", "[[daily/2024-05-01/a.md]]")
    assert remote.stat("daily/2024-05-01")["type"] == "dir"
    status, body = server.raw("POST", "/ops/delete", {"path": "metadata"})
    assert status == 400
    result = remote.delete("daily/2024-05-01")
    assert result["files"] == ["daily/2024-05-01/a.md"] and result["inbound"][0]["source"] == "digest/wiki/x.md"
    assert [e["path"] for e in remote.list("digest", sort="mtime", extensions=["md"])["entries"]] == ["digest/wiki/x.md"]


# ---- 6. date filters keep undated knowledge; empty queries are usage errors; tags are any-of -----------------

def _dated(root):
    as_json(root, "write", "daily/2024-07-01/kangaroo.md", "--content", "kangaroo sighting", "--name", "Trip")
    as_json(root, "write", "daily/2024-01-01/kangaroo-old.md", "--content", "kangaroo long ago", "--name", "Old")
    as_json(root, "write", "digest/wiki/kangaroo.md", "--content", "kangaroo facts", "--name", "Kangaroo",
            "--metadata", "tags=[\"animals\", \"Australia\"]")


def test_date_filters_keep_undated_knowledge_on_the_cli(root):
    _dated(root)
    since = {h["path"] for h in as_json(root, "search", "kangaroo", "--start-date", "2024-06-01")}
    assert since == {"daily/2024-07-01/kangaroo.md", "digest/wiki/kangaroo.md"}
    strict = {h["path"] for h in as_json(root, "search", "kangaroo", "--start-date", "2024-06-01", "--strict-dates")}
    assert strict == {"daily/2024-07-01/kangaroo.md"}
    for query in ("", "   "):
        proc = run(root, "search", query, "--json")
        assert proc.returncode == 2 and error_of(proc)["type"] == "InvalidInput"
    anyof = {h["path"] for h in as_json(root, "search", "kangaroo", "--tags", "australia", "--tags", "nope")}
    assert anyof == {"digest/wiki/kangaroo.md"}
    assert "any of these tags" in ok(root, "search", "--help").stdout
    assert "--strict-dates" in ok(root, "search", "--help").stdout


def test_date_filters_keep_undated_knowledge_over_http(served):
    mem, remote, server = served
    mem.write("daily/2024-07-01/k.md", "kangaroo day")
    mem.write("digest/wiki/k.md", "kangaroo node")
    assert {h["path"] for h in remote.search("kangaroo", start_date="2024-06-01")} == {"daily/2024-07-01/k.md", "digest/wiki/k.md"}
    status, body = server.raw("POST", "/ops/search", {"query": " "})
    assert (status, body["error"]["type"]) == (400, "InvalidInput")


# ---- 7. tags are normalised for counting and filtering; ReMe's memory_tags is read ----------------------------

def test_tags_are_normalised_on_the_cli(root):
    as_json(root, "write", "daily/2024-05-01/a.md", "--content", "a", "--metadata", 'tags=["Travel", "New York"]')
    as_json(root, "write", "daily/2024-05-02/b.md", "--content", "b", "--metadata", 'tags=["travel"]')
    as_json(root, "write", "daily/2024-05-03/c.md", "--content", "c", "--metadata", 'memory_tags=["new   york"]')
    counts = {t["tag"]: t["files"] for t in as_json(root, "tags")}
    assert counts == {"travel": 2, "new_york": 2}
    assert {p["path"] for p in as_json(root, "tags", "New York")[0]["paths"]} == {"daily/2024-05-01/a.md", "daily/2024-05-03/c.md"}
    assert as_json(root, "stat", "daily/2024-05-01/a.md")["tags"] == ["Travel", "New York"]  # the file's spelling
    assert "Travel" in (root / "daily" / "2024-05-01" / "a.md").read_text()


def test_tags_are_normalised_over_http(served):
    mem, remote, server = served
    mem.write("digest/wiki/k.md", "kangaroo", metadata={"memory_tags": ["Wild Life"]})
    assert remote.tags()[0]["tag"] == "wild_life"
    assert remote.search("kangaroo", tags=["WILD life"])[0]["path"] == "digest/wiki/k.md"


# ---- 8. days: direct cards only; ReMe's auto block replaced in place -------------------------------------------

REME_DAY = """---
name: '2024-05-08'
description: 1 note(s) today.
---
My own intro line.

<!-- notes:auto -->
- [[daily/2024-05-08/old.md]] name: Old
<!-- /notes:auto -->

Closing words.
"""


def test_days_on_the_cli(root):
    as_json(root, "write", "daily/2024-05-08/trip.md", "--content", "t", "--name", "Trip", "--description", "d")
    as_json(root, "write", "daily/2024-05-08/attachments/scan.md", "--content", "s", "--name", "Scan")
    assert [c["path"] for c in as_json(root, "daily-list", "2024-05-08")["cards"]] == ["daily/2024-05-08/trip.md"]
    assert as_json(root, "daily-list")["days"][0]["cards"] == 1
    (root / "daily" / "2024-05-08.md").write_text(REME_DAY)
    page = as_json(root, "daily-reindex", "2024-05-08")
    assert [c["path"] for c in page["cards"]] == ["daily/2024-05-08/trip.md"]
    text = (root / "daily" / "2024-05-08.md").read_text()
    assert "notes:auto" not in text and text.count("dreamflow:cards:start") == 1
    assert text.index("My own intro line.") < text.index("[[daily/2024-05-08/trip.md|Trip]]") < text.index("Closing words.")
    assert "attachments" not in text


def test_days_over_http(served):
    mem, remote, server = served
    remote.write("daily/2024-05-08/a.md", "a", name="A")
    remote.write("daily/2024-05-08/sub/b.md", "b", name="B")
    mem.ws.write_text("daily/2024-05-08.md", REME_DAY)
    assert [c["path"] for c in remote.daily_reindex("2024-05-08")["cards"]] == ["daily/2024-05-08/a.md"]
    assert "notes:auto" not in (mem.ws.root / "daily/2024-05-08.md").read_text()


# ---- 9. a ReMe workspace comes over with `dreamflow import-reme DIR` -------------------------------------------

def _reme_workspace(base):
    """A small ReMe workspace as ReMe writes it (layout and formats of agentscope-ai/ReMe)."""
    files = {
        "session/dialog/s1.jsonl": "".join(json.dumps(m) + "\n" for m in (
            {"id": "m1", "name": "user", "role": "user", "content": "Plan Lisbon in June",
             "created_at": "2024-05-08 09:00:00.000"},
            {"id": "m2", "name": "assistant", "role": "assistant",
             "content": [{"type": "text", "text": "Flights first, then the tram 28."}],
             "created_at": "2024-05-08 09:01:00.000"})),
        "resource/2024-05-08/report.txt": "Tram 28 runs every 12 minutes.\n",
        "daily/2024-05-08/lisbon-trip.md": (
            "---\nname: Lisbon trip\ndescription: Planning the June trip\nsession_id: s1\n"
            "source_conversation: '[[session/dialog/s1.jsonl]]'\nmemory_tags: [Travel, New York]\n---\n"
            "# Lisbon\n\nTake the tram 28 ([[resource/2024-05-08/report.txt]]).\n"),
        "daily/2024-05-08.md": ("---\nname: '2024-05-08'\ndescription: 1 note(s) today.\n---\n"
                                "<!-- notes:auto -->\n- [[daily/2024-05-08/lisbon-trip.md]] name: Lisbon trip "
                                "description: Planning the June trip\n<!-- /notes:auto -->\n"),
        "digest/wiki/lisbon.md": ("---\nname: Lisbon\ndescription: The city\ntags: [travel]\n---\nHills and trams.\n\n"
                                  "## Sources\n\nFrom [[daily/2024-05-08/lisbon-trip.md]].\n"),
        "metadata/catalog.json": "{}",
        "mem_session/agentscope/state.json": "{}",
    }
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    return files


def _snapshot(base):
    return {p.relative_to(base).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(base.rglob("*")) if p.is_file()}


def test_import_reme_on_the_cli(root, tmp_path):
    reme = tmp_path / "reme"
    files = _reme_workspace(reme)
    before = _snapshot(reme)
    result = as_json(root, "import-reme", str(reme))
    assert (result["copied"], result["conflicts"], result["skipped"]) == (5, [], [])
    assert result["day_pages"] == ["daily/2024-05-08.md"] and result["sessions"] == ["s1"]
    assert _snapshot(reme) == before  # the ReMe folder is left as it was
    for rel in ("session/dialog/s1.jsonl", "resource/2024-05-08/report.txt", "daily/2024-05-08/lisbon-trip.md",
                "digest/wiki/lisbon.md"):
        assert (root / rel).read_text() == files[rel], rel
        assert (root / rel).stat().st_mtime_ns == before[rel][1]
    assert not (root / "mem_session").exists() and not (root / "metadata" / "catalog.json").exists()
    page = (root / "daily" / "2024-05-08.md").read_text()
    assert "notes:auto" not in page and "[[daily/2024-05-08/lisbon-trip.md|Lisbon trip]]" in page
    assert as_json(root, "search", "tram")[0]["path"] in {"resource/2024-05-08/report.txt", "daily/2024-05-08/lisbon-trip.md"}
    assert {t["tag"]: t["files"] for t in as_json(root, "tags")} == {"travel": 2, "new_york": 1}
    assert as_json(root, "doctor")["broken_links"] == []
    again = as_json(root, "import-reme", str(reme))
    assert again["copied"] == 0 and again["conflicts"] == ["daily/2024-05-08.md"]  # ours now; kept
    proc = run(root, "import-reme", str(tmp_path / "nothing-here"), "--json")
    assert proc.returncode == 2


def test_imported_workspace_works_over_http_and_resumes_sessions(tmp_path):
    from storage.files import dialog

    reme = tmp_path / "reme"
    _reme_workspace(reme)
    root = tmp_path / "ws"
    as_json(root, "import-reme", str(reme))
    mem = Memory(root)
    server = ApiServer(mem)
    try:
        remote = RemoteMemory(server.url)
        assert [c["path"] for c in remote.daily_list("2024-05-08")["cards"]] == ["daily/2024-05-08/lisbon-trip.md"]
        assert remote.stat("daily/2024-05-08/lisbon-trip")["tags"] == ["Travel", "New York"]
        assert remote.search("hills")[0]["path"] == "digest/wiki/lisbon.md"
    finally:
        server.stop()
    assert dialog.pending(mem, mem.ws, "s1").start == 2  # ReMe summarised them: not again


def _hostile_entries(reme, outside):
    """Entries a ReMe folder may hold that the tools refuse (issue 21): workspace path -> expected reason."""
    (reme / "digest/wiki/a\\b.md").write_text("a backslash\n")  # the tools would write digest/wiki/a/b.md
    with open(os.path.join(os.fsencode(reme / "resource"), b"caf\xe9.txt"), "wb") as fh:  # a Latin-1 name
        fh.write(b"not utf-8\n")
    os.mkdir(os.path.join(os.fsencode(reme / "digest"), b"\xff-folder"))
    for folder in ("METADATA", "Metadata"):
        (reme / folder).mkdir()
        (reme / folder / "index.md").write_text("derived\n")
    with open(reme / "resource/huge.bin", "wb") as fh:  # sparse: 64 MiB of size, no blocks
        fh.truncate(64 << 20)
    (outside / "secret.md").write_text("outside\n")
    os.symlink(outside / "secret.md", reme / "digest/wiki/out.md")
    os.symlink(outside, reme / "digest/out-folder")
    os.mkfifo(reme / "resource/pipe.txt")
    (reme / "digest/wiki/con.md").write_text("reserved on Windows\n")
    return {
        "digest/wiki/a\\b.md": "backslash", "resource/caf\ufffd.txt": "not valid UTF-8",
        "digest/\ufffd-folder/": "not valid UTF-8", "METADATA/": "reaches metadata/", "Metadata/": "reaches metadata/",
        "resource/huge.bin": "over the import cap", "digest/wiki/out.md": "symlink",
        "digest/out-folder/": "symlink to a folder", "resource/pipe.txt": "FIFO", "digest/wiki/con.md": "reserved",
    }


def test_import_reme_skips_and_reports_what_the_tools_refuse(root, tmp_path):
    """Issue 21 item 6: one hostile source; the import finishes, lists each skip, builds the index."""
    reme, outside = tmp_path / "reme", tmp_path / "outside"
    outside.mkdir()
    _reme_workspace(reme)
    (reme / "resource/multi-chunk.txt").write_bytes(os.urandom(3 << 20) + b"\nzeppelin\n")  # 3 chunks, under the cap
    expected = _hostile_entries(reme, outside)
    result = as_json(root, "import-reme", str(reme), env={"DREAMFLOW_MAX_BODY_BYTES": str(4 << 20)})  # the default cap
    reasons = {row["path"]: row["reason"] for row in result["skipped"]}
    assert set(reasons) == set(expected) and result["skipped_count"] == len(expected)
    for rel, why in expected.items():
        assert why in reasons[rel], (rel, reasons[rel])
    assert result["copied"] == 6 and result["sessions"] == ["s1"]
    assert (root / "resource/multi-chunk.txt").read_bytes() == (reme / "resource/multi-chunk.txt").read_bytes()
    assert sorted(p.name for p in root.iterdir()) == ["daily", "digest", "metadata", "resource", "session"]
    assert sorted(os.listdir(root / "digest/wiki")) == ["lisbon.md"]  # no a/b.md, no symlink, no con.md
    assert sorted(os.listdir(root / "resource")) == ["2024-05-08", "multi-chunk.txt"]
    assert not any(name.endswith(".tmp") for _, _, names in os.walk(root) for name in names)
    assert as_json(root, "search", "hills")[0]["path"] == "digest/wiki/lisbon.md"  # the index is built
    assert as_json(root, "doctor")["broken_links"] == []
    text = ok(root, "import-reme", str(reme), "--max-file-bytes", str(4 << 20)).stdout
    assert f"{len(expected)} entries skipped" in text and "skipped resource/huge.bin: 67,108,864 bytes" in text
    assert "Traceback" not in text


@pytest.mark.e2e
def test_import_reme_copies_large_files_in_bounded_memory(root, tmp_path):
    """The import's copy step streams: a 96 MiB file under a raised cap grows the process by far less (the
    old copy read it whole). The index then reads files whole, which the default 32 MiB cap bounds."""
    reme = tmp_path / "reme"
    (reme / "resource").mkdir(parents=True)
    with open(reme / "resource/big.bin", "wb") as fh:
        fh.truncate(96 << 20)
        fh.seek(50 << 20)
        fh.write(b"middle")
    script = ("import resource, sys; from pathlib import Path; from storage.files.workspace import Workspace\n"
              "from engine.memory.reme_import import copy_file\n"
              "ws = Workspace(sys.argv[1]); before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "assert copy_file(Path(sys.argv[2]), ws, 'resource/big.bin', False, 100 << 20) == 'copied'\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)")
    proc = subprocess.run([sys.executable, "-c", script, str(root), str(reme / "resource/big.bin")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) < 16 << 10, f"RSS grew by {int(proc.stdout) >> 10} MB"  # KiB
    with open(root / "resource/big.bin", "rb") as fh:
        assert os.fstat(fh.fileno()).st_size == 96 << 20
        fh.seek(50 << 20)
        assert fh.read(6) == b"middle"
    assert os.stat(root / "resource/big.bin").st_mtime_ns == os.stat(reme / "resource/big.bin").st_mtime_ns


def test_a_chunked_write_that_fails_midway_leaves_the_old_file_and_no_temp(root):
    from storage.files.workspace import Workspace

    ws = Workspace(root)
    ws.write_bytes("resource/a.bin", b"old")

    def chunks():
        yield b"x" * (1 << 20)
        raise OSError("the source went away")

    with pytest.raises(OSError):
        ws.write_chunks("resource/a.bin", chunks())
    assert os.listdir(root / "resource") == ["a.bin"] and (root / "resource/a.bin").read_bytes() == b"old"
    ws.write_chunks("resource/a.bin", iter((b"new ", b"content")))
    assert (root / "resource/a.bin").read_bytes() == b"new content"


def test_download_through_the_service_uses_the_path_rule(served, tmp_path, monkeypatch):
    mem, remote, server = served
    mem.write("digest/wiki/kyoto.md", "temples")
    monkeypatch.chdir(tmp_path)
    result = remote.download("digest/wiki/kyoto", "out/")
    assert result["path"] == "digest/wiki/kyoto.md" and (tmp_path / "out" / "kyoto.md").read_text().endswith("temples\n")


# ---- acceptance review against ReMe's file-tool tests (agentscope-ai/ReMe tests/unit) ------------------------

def test_suffixless_path_prefers_md_over_a_same_name_file_and_names_the_md_when_missing(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.ws.write_text("LICENSE", "plain\n")
    mem.ws.write_text("LICENSE.md", "---\nname: L\n---\nmarkdown\n")
    assert mem.read("LICENSE")["path"] == mem.stat("LICENSE")["path"] == "LICENSE.md"  # ReMe: .md wins
    mem.ws.write_text("daily/2024-05-08/a.md", "card\n")
    mem.ws.write_text("daily/2024-05-08.md", "---\nname: day\n---\npage\n")
    assert mem.read("daily/2024-05-08")["path"] == "daily/2024-05-08.md"  # read: the page
    assert mem.frontmatter_get("daily/2024-05-08")["frontmatter"] == {"name": "day"}
    assert mem.stat("daily/2024-05-08")["type"] == "dir"  # stat and delete: the folder of that name
    for call in (lambda: mem.read("notes/none"), lambda: mem.frontmatter_get("notes/none"),
                 lambda: mem.stat("notes/none"), lambda: mem.delete("notes/none")):
        with pytest.raises(NotFound, match=r"notes/none\.md"):  # not "not markdown", and the .md looked for
            call()
    assert mem.traverse(["daily/2024-05-08"])["nodes"][0]["path"] == "daily/2024-05-08.md"
    mem.write("notes/x.md", "[[daily/2024-05-08/a.md]]")
    for direction, reached in (("out", "daily/2024-05-08/a.md"), ("in", "notes/x.md")):  # ReMe's direction names
        start = "notes/x" if direction == "out" else "daily/2024-05-08/a"
        assert reached in {n["path"] for n in mem.traverse([start], direction=direction)["nodes"]}
    assert mem.delete("daily/2024-05-08")["type"] == "dir" and mem.ws.exists("daily/2024-05-08.md")


def test_write_treats_empty_flags_as_not_given_and_refuses_home_paths(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.write("notes/a", "body", name="", description="  ")
    assert mem.ws.read_text("notes/a.md") == "body\n"  # ReMe: no `name: ''` block
    mem.write("notes/a", "body", name="  Kept  ", metadata={"drop": None, "keep": 1})
    assert mem.frontmatter_get("notes/a")["frontmatter"] == {"name": "Kept", "keep": 1}
    mem.write("notes/a", "new body", name="")
    assert mem.frontmatter_get("notes/a")["frontmatter"]["name"] == "Kept"
    mem.write("notes/plain.txt", "x", name="", metadata={})  # empty flags are no frontmatter request
    for path in ("~/notes.md", "~x/y.md"):
        with pytest.raises(PathError, match="~"):
            mem.write(path, "x")
    assert not (mem.ws.root / "~").exists()


def test_frontmatter_operations_with_nothing_to_do_are_refused(root):
    mem = Memory(root)
    mem.write("notes/a.md", "body", name="A")
    before = (root / "notes" / "a.md").read_bytes()
    with pytest.raises(InvalidInput, match="no fields"):
        mem.frontmatter_update("notes/a", {})
    with pytest.raises(InvalidInput, match="no keys"):
        mem.frontmatter_delete_keys("notes/a", [])
    assert error_of(run(root, "frontmatter-update", "notes/a", "--metadata", "{}", "--json"))["exit_code"] == 2
    assert (root / "notes" / "a.md").read_bytes() == before


def test_read_drops_a_utf8_bom(root):
    mem = Memory(root)
    mem.ws.write_bytes("notes/bom.md", "\ufeff---\nname: B\n---\nline\n".encode())
    assert mem.read("notes/bom", numbered=False)["content"].startswith("---\n")
    assert mem.frontmatter_get("notes/bom")["frontmatter"] == {"name": "B"}
    assert mem.list("notes/b")["entries"][0]["path"] == "notes/bom.md"  # a prefix in an existing folder
    assert mem.list("nowhere/at/all")["entries"] == []  # a prefix: nothing matches, nothing listed (flows rely on it)


def test_daily_reindex_creates_no_empty_page_and_leaves_a_current_page_alone(tmp_path):
    mem = Memory(tmp_path / "ws")
    empty = mem.daily_reindex("2031-01-01")
    assert (empty["cards"], empty["created"], empty["changed"]) == ([], False, False)
    assert not mem.ws.resolve("daily/2031-01-01.md").exists()  # ReMe: no page for a day without notes
    mem.write("daily/2024-05-08/a.md", "x", name="A", metadata={"session_id": "s1", "mood": "good"})
    first = mem.daily_reindex("2024-05-08")
    assert (first["created"], first["changed"]) == (True, True)
    page = mem.ws.resolve("daily/2024-05-08.md")
    stamp = page.stat().st_mtime_ns
    time.sleep(0.01)
    again = mem.daily_reindex("2024-05-08")
    assert (again["created"], again["changed"]) == (False, False) and page.stat().st_mtime_ns == stamp
    card = mem.daily_list("2024-05-08")["cards"][0]  # ReMe: each note with its whole frontmatter
    assert card["frontmatter"] == {"name": "A", "session_id": "s1", "mood": "good"}


def test_search_dates_take_unpadded_days_and_timestamps_like_reme(root):
    mem = Memory(root)
    mem.write("daily/2024-05-08/a.md", "kangaroo in may")
    mem.write("daily/2024-04-01/b.md", "kangaroo in april")
    for start in ("2024-5-1", "2024-05-01T09:30:00", "2024-05-01 09:30"):
        assert [h["path"] for h in mem.search("kangaroo", start_date=start, strict_dates=True)] == [
            "daily/2024-05-08/a.md"], start
    with pytest.raises(InvalidInput):
        mem.search("kangaroo", start_date="2024-13-01")
    assert [h["path"] for h in as_json(root, "search", "kangaroo", "--end-date", "2024-4-30")] == [
        "daily/2024-04-01/b.md"]
    assert error_of(run(root, "search", "kangaroo", "--start-date", "May", "--json"))["exit_code"] == 2


def test_review_rules_over_http(served):
    mem, remote, server = served
    mem.ws.write_text("notes/LICENSE", "plain\n")
    mem.ws.write_text("notes/LICENSE.md", "markdown\n")
    assert remote.read("notes/LICENSE")["path"] == "notes/LICENSE.md"
    with pytest.raises(InvalidInput):
        remote.frontmatter_update("notes/LICENSE", {})
    assert remote.daily_reindex("2031-01-01")["created"] is False
    mem.write("notes/k.md", "x", name="K", metadata={"tags": ["a"]})
    info = remote.stat("notes/k")  # ReMe's stat: MIME type and the frontmatter of a Markdown file
    assert (info["mime"], info["frontmatter"]) == ("text/markdown", {"name": "K", "tags": ["a"]})
    assert (remote.stat("notes/LICENSE.md")["mime"], mem.stat("notes/LICENSE.md")["frontmatter"]) == (
        "text/markdown", {})
    assert [h["path"] for h in remote.search("markdown", start_date="2024-1-1")] == ["notes/LICENSE.md"]
