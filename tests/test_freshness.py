"""Reads without the service catch the index up with what changed on disk first (storage/index/freshness.py): the CLI,
`dreamflow mcp` over stdio and the Claude Code hook find what an editor added, changed or deleted; a read over
its time budget, or on a read-only workspace, answers from the index as it is and says it is behind and how to
catch up. The service's own memory never looks (its watcher does that: tests/test_watch.py)."""

import json
import os
import shutil
import subprocess
import sys
import time

import anyio
import pytest
from service_harness import DREAMFLOW
from test_hooks_inject import ANY_MATCH, hook, injected, prompt
from test_mcp import call, stdio

from storage.errors import InvalidInput
from storage.index import freshness
from storage.index.db import IndexDB
from storage.memory import Memory

pytestmark = pytest.mark.timeout(240)

TINY = {"DREAMFLOW_CATCH_UP_SECONDS": "0.000001"}  # each read indexes one changed file, then stops


def cli(ws, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([DREAMFLOW, "--workspace", str(ws), *args], capture_output=True, text=True, input="",
                          timeout=120, env={**os.environ, "DREAMFLOW_EMBEDDER": "none", **(env or {})})


def found(ws, query: str, env: dict | None = None) -> list[str]:
    done = cli(ws, "search", query, "--limit", "50", "--json", env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return sorted(hit["path"] for hit in json.loads(done.stdout))


@pytest.mark.e2e
def test_the_cli_finds_what_an_editor_added_changed_and_deleted(tmp_path):
    ws = tmp_path / "ws"
    for path, text in (("notes/mill.md", "The heron nests by the old mill."),
                       ("notes/bridge.md", "The otter den is under the bridge."),
                       ("notes/perch.md", "The kingfisher perches on the willow.")):
        assert cli(ws, "write", path, "--content", text).returncode == 0
    assert found(ws, "heron") == ["notes/mill.md"]

    (ws / "notes/sett.md").write_text("---\nname: Badger\n---\nThe badger sett is past the quarry.\n")  # an editor
    (ws / "notes/perch.md").write_text("The kingfisher moved to the alder.\n")  # in place, as Obsidian saves
    (ws / "notes/bridge.md").unlink()

    assert found(ws, "badger quarry") == ["notes/sett.md"]  # nothing said: the index caught up in time
    assert found(ws, "willow") == [] and found(ws, "alder") == ["notes/perch.md"]
    assert found(ws, "otter") == []
    stats = json.loads(cli(ws, "index-stats", "--json").stdout)
    assert stats["files"] == 3 and "index_behind" not in stats


@pytest.mark.e2e
def test_stdio_mcp_and_the_prompt_hook_find_an_outside_edit(tmp_path):
    ws = tmp_path / "ws"
    assert cli(ws, "write", "notes/mill.md", "--content", "The heron nests by the old mill.").returncode == 0
    (ws / "notes/sett.md").write_text("The badger sett is past the quarry, under the old beech.\n")

    async def session():
        async with stdio(ws) as client:
            hits = await call(client, "search", query="badger quarry")
            assert [h["path"] for h in hits.structured_content] == ["notes/sett.md"]
            assert "[the index" not in hits.content[0].text

    anyio.run(session)
    (ws / "notes/ferry.md").write_text("The ferry to the badger island leaves at dawn.\n")
    context = injected(hook(prompt("When does the ferry to the badger island leave?"), ws, env=ANY_MATCH),
                       "UserPromptSubmit")
    assert context is not None and "leaves at dawn" in context and "[the index" not in context


@pytest.mark.e2e
def test_a_read_over_its_budget_says_the_index_is_behind_and_how_to_catch_up_on_every_surface(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    assert cli(ws, "write", "notes/mill.md", "--content", "A pelican rests by the old mill.").returncode == 0
    for n in range(30):  # an export dropped into the folder
        (ws / f"notes/pelican-{n}.md").write_text(f"Pelican sighting {n} at the estuary.\n")

    text = cli(ws, "search", "pelican", env=TINY)
    assert text.returncode == 0 and "pelican" in text.stdout.lower()
    warning = text.stderr.strip()
    assert warning.startswith("warning: the index is behind the files: ") and "changed files not indexed" in warning
    assert "`dreamflow reconcile`" in warning and "`dreamflow start`" in warning and len(warning.splitlines()) == 1

    as_json = cli(ws, "search", "pelican", "--json", env=TINY)
    assert isinstance(json.loads(as_json.stdout), list)  # the list consumers know; the hint is on stderr
    recalled = json.loads(cli(ws, "recall", "pelican estuary", "--json", env=TINY).stdout)
    behind = recalled["index_behind"]
    assert behind["reason"] == "time" and 0 < behind["pending"] < 30 and "dreamflow reconcile" in behind["message"]

    monkeypatch.setenv("DREAMFLOW_CATCH_UP_SECONDS", TINY["DREAMFLOW_CATCH_UP_SECONDS"])

    async def session():
        async with stdio(ws) as client:
            hits = await call(client, "search", query="pelican estuary")
            assert hits.content[0].text.splitlines()[-1].startswith("[the index is behind the files: ")
            recall = await call(client, "recall", query="pelican estuary", budget=200)
            assert recall.structured_content["index_behind"]["reason"] == "time"

    anyio.run(session)
    context = injected(hook(prompt("Where was the pelican sighting?"), ws, env={**ANY_MATCH, **TINY}),
                       "UserPromptSubmit")
    assert context is not None and "[the index is behind the files: " in context

    assert cli(ws, "reconcile", "--json").returncode == 0
    assert len(found(ws, "pelican", env=TINY)) == 31  # caught up: every sighting, and nothing said


def test_a_walk_over_its_budget_says_the_index_may_be_behind(tmp_path, monkeypatch):
    mem = Memory(tmp_path / "ws")
    mem.write("notes/mill.md", "A pelican rests by the old mill.")
    for n in range(2 * freshness.CLOCK_EVERY):
        (mem.ws.root / f"notes/n-{n}.md").write_text(f"note {n}\n")
    monkeypatch.setenv("DREAMFLOW_CATCH_UP_SECONDS", "0.000001")
    stats = mem.index_stats()
    assert stats["index_behind"]["pending"] is None and stats["files"] == 1
    assert stats["index_behind"]["message"].startswith("the index may be behind the files (comparing its 256+ files")
    assert [h["path"] for h in mem.search("pelican")] == ["notes/mill.md"]  # the answer of the index as it is
    monkeypatch.setenv("DREAMFLOW_CATCH_UP_SECONDS", "30")
    assert mem.index_stats()["files"] == 1 + 2 * freshness.CLOCK_EVERY


def test_the_service_memory_never_looks_and_reconcile_agrees_with_the_catch_up(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.write("notes/mill.md", "The heron nests by the old mill.")
    mem.ws.write_text("notes/sett.md", "The badger sett is past the quarry.")
    (mem.ws.root / "notes/mill.md").write_text("The heron left the mill.\n")
    watched = Memory(mem.ws.root, db=IndexDB(mem.ws), watched=True)  # as dreamflow start opens it
    assert watched.search("badger") == [] and watched.search("heron")[0]["text"].startswith("The heron nests")
    assert [h["path"] for h in mem.search("badger")] == ["notes/sett.md"]
    assert mem.search("heron")[0]["text"].startswith("The heron left")
    counts = mem.reconcile()
    assert (counts["added"], counts["modified"], counts["deleted"]) == (0, 0, 0)


@pytest.mark.e2e
def test_a_read_waits_for_a_writer_holding_the_index_then_catches_up(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.write("notes/mill.md", "The heron nests by the old mill.")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom storage.files.locks import FileLock\n"
        "with FileLock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(1.5)\n"),
        str(mem.ws.metadata / "index.lock")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    mem.ws.write_text("notes/sett.md", "The badger sett is past the quarry.")  # while the other process writes
    started = time.monotonic()
    assert [h["path"] for h in mem.search("badger")] == ["notes/sett.md"]
    assert time.monotonic() - started > 0.5  # it waited for the lock (up to DREAMFLOW_LOCK_TIMEOUT), then looked
    holder.wait(timeout=30)


def test_iter_stats_walks_what_iter_files_does(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.write("notes/a.md", "a")
    mem.ws.write_text("notes/.hidden.md", "h")
    mem.ws.write_text("notes/b.md~", "backup")
    os.symlink("a.md", mem.ws.root / "notes/link.md")
    os.symlink("missing.md", mem.ws.root / "notes/dangling.md")
    os.symlink(tmp_path, mem.ws.root / "notes/outside")
    os.mkfifo(mem.ws.root / "notes/pipe")
    stats = dict(mem.ws.iter_stats())
    assert sorted(stats) == sorted(mem.ws.iter_files()) == ["notes/a.md", "notes/link.md"]
    assert stats["notes/link.md"].st_size == (mem.ws.root / "notes/a.md").stat().st_size


# ---- a workspace this process cannot write ------------------------------------------------------------------

def read_only_runner(tmp_path):
    """A function running `dreamflow --workspace WS ARGS` where WS cannot be written: a read-only bind mount in a
    private mount namespace (root), else the write permission taken away (another user); None when neither."""
    if os.geteuid() != 0:
        def run(ws, *args, env=None):
            modes = {p: p.stat().st_mode for p in [ws, *ws.rglob("*")] if not p.is_symlink()}
            for p, mode in modes.items():
                p.chmod(mode & ~0o222)
            try:
                return cli(ws, *args, env=env)
            finally:
                for p, mode in modes.items():
                    p.chmod(mode)
        return run
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        return None
    view = tmp_path / "read-only-view"
    view.mkdir()

    def run(ws, *args, env=None):
        mount = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"'
        return subprocess.run(["unshare", "-m", "sh", "-c", mount, "sh", str(ws), str(view), DREAMFLOW,
                               "--workspace", str(view), *args], capture_output=True, text=True, input="",
                              timeout=120, env={**os.environ, "DREAMFLOW_EMBEDDER": "none", **(env or {})})
    return run


@pytest.mark.e2e
def test_a_read_only_workspace_answers_reads_and_says_what_it_cannot_index(tmp_path):
    run = read_only_runner(tmp_path)
    if run is None:
        pytest.skip("no way here to make a workspace read-only for a process (not root, no mount namespace)")
    ws = tmp_path / "ws"
    assert cli(ws, "write", "notes/mill.md", "--content", "The heron nests by the old mill.").returncode == 0
    assert found(ws, "heron") == ["notes/mill.md"]
    (ws / "notes/sett.md").write_text("The badger sett is past the quarry.\n")  # then the folder turns read-only

    searched = run(ws, "search", "heron", "--json")
    assert searched.returncode == 0, searched.stderr
    assert [hit["path"] for hit in json.loads(searched.stdout)] == ["notes/mill.md"]
    assert "1 changed file not indexed" in searched.stderr and "read-only" in searched.stderr
    recalled = run(ws, "recall", "heron mill", "--session", "s1", "--json")
    assert recalled.returncode == 0, recalled.stderr
    answer = json.loads(recalled.stdout)
    assert "old mill" in answer["text"] and answer["index_behind"]["reason"] == "read_only"
    assert answer["index_behind"]["pending"] == 1
    listed = json.loads(run(ws, "list", "notes", "--json").stdout)
    assert [e["path"] for e in listed["entries"]] == ["notes/mill.md", "notes/sett.md"]  # listings read the disk
    wrote = run(ws, "write", "notes/new.md", "--content", "x")
    assert wrote.returncode != 0 and "Traceback" not in wrote.stderr and wrote.stderr.startswith("Error: ")
    assert not (ws / "notes/new.md").exists()
    assert found(ws, "badger") == ["notes/sett.md"]  # writable again: the next read catches up



def test_a_budget_that_is_not_a_number_is_a_clear_error(tmp_path, monkeypatch):
    mem = Memory(tmp_path / "ws")
    monkeypatch.setenv("DREAMFLOW_CATCH_UP_SECONDS", "fast")
    with pytest.raises(InvalidInput, match="DREAMFLOW_CATCH_UP_SECONDS must be a number of seconds, got 'fast'"):
        mem.search("heron")
