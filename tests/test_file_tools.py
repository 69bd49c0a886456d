"""File tools that behave like ReMe's (issue 12): one path rule, portable names, Markdown-only operations,
body-only edits, folders, date filters that keep undated knowledge, normalised tags, day pages, ReMe import.
Each rule through the CLI and over HTTP (the agent tools and MCP call the same operations)."""

import json
import os
import time

import pytest
from test_api import ApiServer
from test_cli import as_json, ok, run

from engine.client import RemoteMemory
from storage.errors import Conflict, InvalidInput, NotFound, PathError
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
    mem.ws.write_text("resource/Makefile", "all:\n")  # an exact suffix-less file still wins
    assert remote.read("resource/Makefile", numbered=False)["content"] == "all:\n"


# ---- 2. names that break on other systems are refused ------------------------------------------------------

@pytest.mark.parametrize("name", ["bad?name.md", "a<b.md", 'quote".md', "pipe|x.md", "star*.md", "col:on.md",
                                  "trailing.md.", "trailing.", "folder /x.md", "ctl\x01.md", "CON.md"])
def test_invalid_names_are_refused_on_the_cli(root, tmp_path, name):
    as_json(root, "write", "digest/wiki/ok.md", "--content", "x")
    source = tmp_path / "up.txt"
    source.write_text("x")
    for args in (("write", f"digest/wiki/{name}", "--content", "x"), ("create", f"digest/wiki/{name}"),
                 ("append", f"digest/wiki/{name}", "--content", "x"),
                 ("move", "digest/wiki/ok.md", f"digest/{name}"), ("upload", str(source), "--name", name)):
        proc = run(root, *args, "--json")
        assert proc.returncode == 2 and error_of(proc)["type"] == "PathError", (args, proc.stdout)
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
    proc = run(root, "write", "resource/notes.txt", "--content", "plain", "--name", "N", "--json")
    assert proc.returncode == 2 and "not Markdown" in error_of(proc)["message"]
    assert not (root / "resource" / "notes.txt").exists()
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
    with pytest.raises(InvalidInput):
        remote.write("resource/data.csv", "x", metadata={"k": 1})
    assert (mem.ws.root / "resource/data.csv").read_text() == "a,b\n1,2\n"


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
