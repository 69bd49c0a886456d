"""The DuckDB index on real files: incremental updates, reconcile, bad input, crash safety, two processes."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from storage.errors import IndexBusy
from storage.index import indexer as index
from storage.index.db import IndexDB
from storage.search.search import search, traverse

NOTE = "---\nname: {name}\ndescription: {desc}\n---\n# {name}\n\n{body}\n"


def write_note(ws, rel, name, body, desc="a note"):
    ws.write_text(rel, NOTE.format(name=name, desc=desc, body=body))


def rows(con, sql, *params):
    return con.execute(sql, list(params)).fetchall()


def paths_found(con, query, **kw):
    return [h["path"] for h in search(con, query, expand=0, **kw)]


def test_first_session_builds_the_index_from_files(ws):
    write_note(ws, "digest/wiki/kiwi.md", "Kiwi", "The kiwi is a flightless bird.")
    ws.write_text("session/dialog/s1.jsonl", '{"role": "user", "content": "remember the zeppelin"}\n')
    ws.write_text("resource/notes.txt", "plain text about a quokka\n")
    with IndexDB(ws).session() as con:
        assert index.stats(con)["files"] == 3
        assert paths_found(con, "flightless bird") == ["digest/wiki/kiwi.md"]
        assert paths_found(con, "zeppelin") == ["session/dialog/s1.jsonl"]
        assert paths_found(con, "quokka") == ["resource/notes.txt"]


def test_changed_file_replaces_exactly_its_own_rows(ws):
    write_note(ws, "digest/wiki/a.md", "A", "apples and [[digest/wiki/b.md]]")
    write_note(ws, "digest/wiki/b.md", "B", "bananas and [[digest/wiki/a.md]]")
    with IndexDB(ws).session() as con:
        b_before = rows(con, "SELECT id, text FROM chunks WHERE path = 'digest/wiki/b.md'")
        assert index.index_file(con, ws, "digest/wiki/a.md") is False  # unchanged: nothing to do

        write_note(ws, "digest/wiki/a.md", "A", "apricots now, linking [[digest/wiki/c.md]]")
        assert index.index_file(con, ws, "digest/wiki/a.md") is True

        assert rows(con, "SELECT id, text FROM chunks WHERE path = 'digest/wiki/b.md'") == b_before
        assert rows(con, "SELECT target FROM links WHERE source = 'digest/wiki/a.md'") == [("digest/wiki/c.md",)]
        assert rows(con, "SELECT source FROM links WHERE source = 'digest/wiki/b.md'") == [("digest/wiki/b.md",)]
        assert paths_found(con, "apples") == []
        assert paths_found(con, "apricots") == ["digest/wiki/a.md"]
        assert paths_found(con, "bananas") == ["digest/wiki/b.md"]
        assert index.index_file(con, ws, "digest/wiki/a.md", force=True) is True


def test_deleted_file_disappears_from_search_and_graph(ws):
    write_note(ws, "digest/wiki/a.md", "A", "walrus facts, see [[digest/wiki/b.md]]")
    write_note(ws, "digest/wiki/b.md", "B", "more walrus")
    with IndexDB(ws).session() as con:
        assert index.inbound(con, "digest/wiki/b.md")[0]["source"] == "digest/wiki/a.md"
        (ws.root / "digest/wiki/a.md").unlink()
        assert index.index_file(con, ws, "digest/wiki/a.md") is True  # missing file -> removed
        assert paths_found(con, "walrus") == ["digest/wiki/b.md"]
        assert index.inbound(con, "digest/wiki/b.md") == []
        graph = traverse(con, ["digest/wiki/b.md"], direction="both")
        assert graph["edges"] == [] and [n["path"] for n in graph["nodes"]] == ["digest/wiki/b.md"]
        assert index.remove_file(con, "digest/wiki/a.md") is False


def test_reconcile_picks_up_changes_made_behind_the_index(ws):
    for name in ("keep", "edit", "gone", "touch"):
        write_note(ws, f"daily/2024-01-02/{name}.md", name, f"{name} original words")
    db = IndexDB(ws)
    with db.session():
        pass
    old = time.time() - 60
    for name in ("keep", "edit", "gone", "touch"):  # written a minute ago: outside the racy window
        os.utime(ws.root / f"daily/2024-01-02/{name}.md", (old, old))
    with db.session() as con:
        index.reconcile(con, ws)
    write_note(ws, "daily/2024-01-02/edit.md", "edit", "edit flamingo words")  # same size, new mtime
    (ws.root / "daily/2024-01-02/gone.md").unlink()
    write_note(ws, "daily/2024-01-03/new.md", "new", "new pelican text")
    os.utime(ws.root / "daily/2024-01-02/touch.md")  # mtime moves, content does not: hash says unchanged
    with db.session() as con:
        counts = index.reconcile(con, ws)
        assert counts == {"added": 1, "modified": 1, "deleted": 1, "unchanged": 2, "skipped": 0, "special_files": []}
        assert paths_found(con, "pelican") == ["daily/2024-01-03/new.md"]
        assert paths_found(con, "flamingo") == ["daily/2024-01-02/edit.md"]
        assert sorted(paths_found(con, "original")) == ["daily/2024-01-02/keep.md", "daily/2024-01-02/touch.md"]
        assert index.reconcile(con, ws) == {"added": 0, "modified": 0, "deleted": 0, "unchanged": 4, "skipped": 0,
                                              "special_files": []}


def test_reconcile_progress_counts_the_files_its_answer_counts(ws):
    for name in ("a", "b", "c", "d"):
        write_note(ws, f"daily/2024-01-02/{name}.md", name, f"{name} words")
        os.utime(ws.root / f"daily/2024-01-02/{name}.md", (time.time() - 60,) * 2)  # outside the racy window
    db = IndexDB(ws)
    with db.session():
        pass
    for name in ("a", "b", "c"):  # mtime moves, content does not: 3 files to look at, all 4 unchanged
        os.utime(ws.root / f"daily/2024-01-02/{name}.md", (time.time() - 30,) * 2)
    seen = []
    with db.session() as con:
        counts = index.reconcile(con, ws, progress=lambda done, total: seen.append((done, total)))
    assert counts["unchanged"] == 4 and seen[0] == (1, 4) and seen[-1] == (4, 4), seen


def test_binary_and_malformed_files_never_stop_indexing(ws):
    ws.write_bytes("resource/photo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00binary")
    ws.write_text("digest/wiki/bad.md", "---\nname: [unclosed\n---\nthe ocelot survives bad yaml\n")
    ws.write_text("digest/wiki/good.md", "# Good\n\nthe ocelot is fine here too\n")
    with IndexDB(ws).session() as con:
        (kind, errors, n_chunks), = rows(con, """
            SELECT f.kind, f.errors, count(c.id) FROM files f LEFT JOIN chunks c ON c.path = f.path
            WHERE f.path = 'resource/photo.png' GROUP BY ALL""")
        assert kind == "binary" and errors and n_chunks == 0
        assert rows(con, "SELECT len(errors) > 0 FROM files WHERE path = 'digest/wiki/bad.md'") == [(True,)]
        assert sorted(paths_found(con, "ocelot")) == ["digest/wiki/bad.md", "digest/wiki/good.md"]
        assert index.stats(con)["files_with_errors"] == 2


def test_metadata_and_scratch_files_are_not_indexed(ws):
    ws.write_text("digest/wiki/real.md", "marmot\n")
    (ws.root / "digest/wiki/.real.md.swp").write_text("marmot swap")
    (ws.root / "digest/wiki/real.md~").write_text("marmot backup")
    (ws.root / "metadata/notes.md").write_text("marmot derived")
    with IndexDB(ws).session() as con:
        assert rows(con, "SELECT path FROM files") == [("digest/wiki/real.md",)]
        assert index.index_file(con, ws, "metadata/notes.md") is False
        assert paths_found(con, "marmot") == ["digest/wiki/real.md"]


def test_name_and_description_are_searchable(ws):
    write_note(ws, "digest/personal/diet.md", "Dietary preferences", "Avoids peanuts.", desc="what the user eats")
    with IndexDB(ws).session() as con:
        assert paths_found(con, "dietary") == ["digest/personal/diet.md"]
        assert paths_found(con, "eats") == ["digest/personal/diet.md"]


def test_compaction_keeps_results_and_drops_stale_postings(ws):
    for i in range(5):
        write_note(ws, f"digest/wiki/n{i}.md", f"n{i}", f"heron number {i} " * (i + 1))
    with IndexDB(ws).session() as con:
        for i in range(3):
            write_note(ws, f"digest/wiki/n{i}.md", f"n{i}", f"heron edited {i} " * (i + 2))
            index.index_file(con, ws, f"digest/wiki/n{i}.md")
        before = [(h["path"], round(h["bm25"], 9)) for h in search(con, "heron edited", expand=0)]
        assert index.stats(con)["stale_chunks"] == 3
        assert index.compact(con, force=True) is True
        stats = index.stats(con)
        assert stats["stale_chunks"] == 0 and stats["unsorted_postings"] == 0
        assert rows(con, "SELECT count(*) FROM postings WHERE chunk_id NOT IN (SELECT id FROM chunks)") == [(0,)]
        assert [(h["path"], round(h["bm25"], 9)) for h in search(con, "heron edited", expand=0)] == before


def test_corrupt_index_file_is_rebuilt_from_files(ws):
    write_note(ws, "digest/wiki/x.md", "X", "the narwhal note")
    (ws.metadata / "index.duckdb").write_bytes(b"this is not a duckdb file" * 100)
    with IndexDB(ws).session() as con:
        assert paths_found(con, "narwhal") == ["digest/wiki/x.md"]


def test_schema_version_change_rebuilds(ws):
    write_note(ws, "digest/wiki/x.md", "X", "the okapi note")
    with IndexDB(ws).session() as con:
        con.execute("UPDATE meta SET value = 'old' WHERE key = 'schema_version'")
        con.execute("DELETE FROM chunks")
    with IndexDB(ws).session() as con:
        assert paths_found(con, "okapi") == ["digest/wiki/x.md"]


def test_sessions_nest_and_threads_take_turns(ws):
    db = IndexDB(ws)
    with db.session() as outer:
        with IndexDB(ws).session() as inner:  # another object for the same workspace shares the connection
            assert inner is outer
    errors = []

    def worker(n):
        try:
            for i in range(5):
                ws.write_text(f"digest/wiki/t{n}-{i}.md", f"thread {n} tapir {i}\n")
                with db.session() as con:
                    index.index_file(con, ws, f"digest/wiki/t{n}-{i}.md")
                    search(con, "tapir")
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.session() as con:
        assert len(paths_found(con, "tapir", limit=50)) == 15


def _run(code, ws, **env):
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), str(ws.root)],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


WRITER = """
    import sys
    from storage.files.workspace import Workspace
    from storage.index.db import IndexDB
    from storage.index import indexer as index
    from storage.search import search
    ws = Workspace(sys.argv[1])
    tag = "{tag}"
    for i in range(15):
        rel = f"digest/wiki/{{tag}}-{{i}}.md"
        ws.write_text(rel, f"capybara from {{tag}} number {{i}}\\n")
        with IndexDB(ws).session() as con:
            index.index_file(con, ws, rel)
            search.search(con, "capybara")
    print("ok")
"""


@pytest.mark.e2e
def test_two_processes_contend_without_lock_errors(ws):
    procs = [_run(WRITER.format(tag=tag), ws) for tag in ("p1", "p2")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    with IndexDB(ws).session() as con:
        assert index.stats(con)["files"] == 30
        assert len(paths_found(con, "capybara", limit=100)) == 30


@pytest.mark.e2e
def test_a_held_lock_gives_index_busy_with_a_clear_message(ws, monkeypatch):
    holder = _run("""
        import sys, time
        from storage.files.workspace import Workspace
        from storage.index.db import IndexDB
        with IndexDB(Workspace(sys.argv[1])).session():
            print("holding", flush=True)
            time.sleep(30)
    """, ws)
    try:
        assert holder.stdout.readline().strip() == "holding"
        monkeypatch.setenv("DREAMFLOW_LOCK_TIMEOUT", "0.3")
        with pytest.raises(IndexBusy, match="locked by another Dreamflow process"):
            with IndexDB(ws).session():
                pass
    finally:
        holder.kill()
        holder.wait()
    with IndexDB(ws).session() as con:  # the dead holder's lock is gone with its process
        assert index.stats(con)["files"] == 0


@pytest.mark.e2e
def test_crash_in_the_middle_of_rebuild_then_reconcile_is_consistent(ws):
    for i in range(40):
        write_note(ws, f"daily/2024-02-{1 + i % 28:02d}/n{i}.md", f"n{i}", f"gecko entry {i}")
    with IndexDB(ws).session():
        pass
    for i in range(40, 60):  # more files appear, some change, some go, then a rebuild is killed halfway
        write_note(ws, f"daily/2024-03-01/n{i}.md", f"n{i}", f"gecko entry {i}")
    for i in range(0, 10):
        write_note(ws, f"daily/2024-02-{1 + i % 28:02d}/n{i}.md", f"n{i}", f"gecko rewritten {i}")
    for i in range(10, 15):
        (ws.root / f"daily/2024-02-{1 + i % 28:02d}/n{i}.md").unlink()
    crasher = _run("""
        import os, signal, sys, time
        from storage.files.workspace import Workspace
        from storage.index.db import IndexDB
        from storage.index import indexer as index
        index.BATCH_FILES = 5
        def progress(done, total):
            if done >= 20:
                print("halfway", flush=True)
                time.sleep(60)
        with IndexDB(Workspace(sys.argv[1])).session() as con:
            index.rebuild(con, Workspace(sys.argv[1]), progress=progress)
    """, ws)
    assert crasher.stdout.readline().strip() == "halfway"
    crasher.send_signal(signal.SIGKILL)
    crasher.wait()

    with IndexDB(ws).session() as con:
        counts = index.reconcile(con, ws)
        assert counts["added"] == 20 and counts["modified"] == 10 and counts["deleted"] == 5
        on_disk = sorted(ws.iter_files())
        assert [r[0] for r in rows(con, "SELECT path FROM files ORDER BY path")] == on_disk
        assert rows(con, "SELECT count(*) FROM chunks WHERE path NOT IN (SELECT path FROM files)") == [(0,)]
        assert rows(con, """SELECT count(*) FROM postings
                            WHERE chunk_id NOT IN (SELECT id FROM chunks) AND chunk_id NOT IN
                                  (SELECT id FROM stale_chunks)""") == [(0,)]
        assert len(paths_found(con, "gecko", limit=100)) == 55
        assert len(paths_found(con, "rewritten", limit=100)) == 10
