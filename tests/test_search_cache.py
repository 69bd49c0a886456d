"""The service's in-memory search cache (storage/search/cache.py, storage/search/arrays.py) answers exactly as the SQL path does, on a
real DuckDB file, through writes, deletes, moves, a rolled-back write, compaction, a reindex and a heal."""

import random
from collections import Counter
from contextlib import contextmanager

import duckdb
import pytest

from storage.errors import IndexRebuilt
from storage.files.workspace import Workspace
from storage.index import indexer as index
from storage.index.db import IndexDB
from storage.index.tokenize import term_hash
from storage.memory import Memory
from storage.search import arrays as search_arrays, cache as search_cache
from storage.search.search import bm25, node_search, search, terms, traverse

WORDS = ("lisbon porto ridge trail boots risotto mushroom harbour ferry lighthouse museum tram pastry bakery "
         "market violin concert garden river bridge castle hiking dinner sailing storm winter").split()
QUERIES = ["ridge trail", "lisbon ferry harbour", "violin concert in winter", "castle bridge river garden",
           "storm", "nothing matches zzzq"]
FILTERS = [{}, {"path_prefix": "digest/", "per_file": None}, {"tags": ["travel"], "include_archived": True},
           {"start_date": "2024-03-01"}, {"end_date": "2024-02-15", "strict_dates": True}]


def _body(rng: random.Random, n: int, links: list[str]) -> str:
    """Three sections of n, n+1, n+2 words and a link each: every chunk of the corpus gets its own length, so
    no two chunks tie (the two paths add a chunk's per-term scores in different orders: a tie could flip)."""
    lines = []
    for s in range(3):
        words = " ".join(rng.choice(WORDS) for _ in range(n + s))
        lines += [f"## Part {s}", "", f"{words} see [[{rng.choice(links)}]]", ""]
    return "\n".join(lines)


def _workspace(ws: Workspace, rng: random.Random) -> list[str]:
    """Nodes (tagged), daily notes (dated) and an archived node, written as files (indexed at the first open)."""
    nodes = [f"digest/wiki/n{i}.md" for i in range(12)]
    for i, rel in enumerate(nodes):
        tag = "travel" if i % 3 == 0 else "home"
        ws.write_text(rel, f"---\nname: node {i}\ndescription: notes\ntags: [{tag}]\n---\n" + _body(rng, 10 + 3 * i, nodes))
    for i in range(16):
        ws.write_text(f"daily/2024-0{1 + i % 6}-1{i % 9}/d{i}.md", f"---\nname: day {i}\n---\n" + _body(rng, 50 + 3 * i, nodes))
    ws.write_text("digest/archive/old.md", "---\nname: old node\n---\n" + _body(rng, 100, nodes))
    return nodes


@contextmanager
def _sql_only(con):
    """Answer from SQL for a while (the cache's slot set aside, then put back)."""
    slot = search_cache._slots.pop(id(con))
    try:
        yield
    finally:
        search_cache._slots[id(con)] = slot


def _same(con) -> int:
    """Compare every query and filter through the cache and through SQL; returns the hits compared."""
    cache = search_cache.wait(con, 30)
    assert cache is not None and cache.sync(con)
    compared = 0
    for query in QUERIES:
        for filters in FILTERS:
            held = search(con, query, limit=5, **filters)
            with _sql_only(con):
                sql = search(con, query, limit=5, **filters)
            assert [h.pop("bm25") for h in held] == pytest.approx([h.pop("bm25") for h in sql], rel=1e-12)
            assert held == sql, (query, filters)
            compared += len(held)
        ranked = bm25(con, query, 1000)
        with _sql_only(con):
            assert [c for c, _ in ranked] == [c for c, _ in bm25(con, query, 1000)]
        with _sql_only(con):
            nodes = node_search(con, query)
        assert node_search(con, query) == nodes
    with _sql_only(con):
        walked = traverse(con, ["digest/wiki/n0.md"], depth=2)
    assert traverse(con, ["digest/wiki/n0.md"], depth=2) == walked
    live = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert search_cache.of(con).n_live == live  # the cache answered, over every live chunk
    return compared


def test_the_cache_answers_as_sql_through_writes_deletes_moves_compaction_and_reindex(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "ws")
    nodes = _workspace(ws, random.Random(3))
    db = IndexDB(ws, keep_open=True)
    try:
        mem = Memory(ws.root, db=db)
        with db.session() as con:
            assert _same(con) > 40
            mem.write("daily/2024-06-01/new.md", "ridge trail ridge lisbon [[digest/wiki/n1.md]]", name="fresh ridge")
            mem.edit(nodes[1], "## Part 0", "## Part zero storm storm storm")
            mem.frontmatter_update(nodes[2], {"tags": ["travel"], "description": "harbour ferry notes"})
            mem.delete(nodes[3])  # its inbound links now point at a missing file
            mem.move(nodes[4], "digest/wiki/moved.md")  # links to it are rewritten in other files
            mem.upload_content(b"\x89PNG\r\n\x1a\n\x00", name="photo.png", date="2024-06-01")  # a file without chunks
            assert [h["path"] for h in search(con, "fresh ridge", limit=1)] == ["daily/2024-06-01/new.md"]
            with pytest.raises(RuntimeError):  # a write rolled back leaves the cache as the tables are
                with index._transaction(con):
                    index._delete_paths(con, [nodes[5]])
                    raise RuntimeError("abandoned")
            _same(con)
            index.compact(con, force=True)  # tombstones dropped: the cache finds out by the live count
            mem.delete(nodes[6])
            _same(con)
            patched = search_cache.of(con)
            mem.reindex()  # every chunk replaced: patched in place (a small index) ...
            _same(con)
            assert search_cache.of(con) is patched
            monkeypatch.setattr(search_arrays, "RELOAD_SHARE", 0.0)
            mem.reindex()  # ... or, past RELOAD_SHARE, built again in the background (SQL answers meanwhile)
            assert search(con, "ridge trail", limit=3)
            _same(con)
            assert search_cache.of(con) is not patched
    finally:
        db.close()


def test_filters_over_the_chunk_or_the_clock_are_left_to_sql(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _workspace(ws, random.Random(7))
    db = IndexDB(ws, keep_open=True)
    try:
        with db.session() as con:
            cache = search_cache.wait(con, 30)
            hashes = sorted(term_hash(t) for t in terms("ridge trail"))
            assert cache.bm25(con, hashes, 5, "c.ord = 0", None) is None
            assert cache.bm25(con, hashes, 5, "(f.date IS NULL OR f.date <= current_date)", None) is None
            assert bm25(con, "ridge trail", 5, "(f.date IS NULL OR f.date <= current_date)")  # answered in SQL
            assert cache.bm25(con, hashes, 5, "f.date IS NULL", None) is not None
    finally:
        db.close()


def test_a_one_shot_session_has_no_cache(ws):
    ws.write_text("a.md", "lisbon ridge\n")
    with IndexDB(ws).session() as con:
        assert search_cache.of(con) is None and search_cache.wait(con, 0) is None
        assert [h["path"] for h in search(con, "lisbon")] == ["a.md"]


def test_a_healed_index_gets_a_new_cache(ws):
    _workspace(ws, random.Random(5))
    db = IndexDB(ws, keep_open=True)
    try:
        mem = Memory(ws.root, db=db)
        with db.session() as con:
            assert search_cache.wait(con, 30) is not None
            old = con
        with pytest.raises(IndexRebuilt):
            with db.session():
                raise duckdb.FatalException("simulated damage")
        mem.write("daily/2024-06-02/after.md", "lighthouse lighthouse after the heal", name="after")
        with db.session() as con:
            assert con is not old and search_cache.of(old) is None
            _same(con)  # chunk ids started again at 1: only a new cache can agree with SQL
            assert search(con, "lighthouse after heal", limit=1)[0]["path"] == "daily/2024-06-02/after.md"
    finally:
        db.close()


def test_postings_are_keyed_by_dreamflows_own_term_hash(ws):
    """The index writes, and both search paths look up, storage.index.tokenize.term_hash: a stable value of its own
    (not DuckDB's internal hash(), which may change with DuckDB)."""
    assert term_hash("bm25") == 5979009506379108665  # the index layout depends on it (storage/index/db.py SCHEMA_VERSION)
    ws.write_text("a.md", "Lisbon ridge, lisbon harbour\n")
    with IndexDB(ws).session() as con:
        rows = con.execute("SELECT term, tf FROM postings").fetchall()
    assert sorted(rows) == sorted((term_hash(t), n) for t, n in Counter(terms("Lisbon ridge, lisbon harbour")).items())


def _fact_node(i: int, rng: random.Random) -> str:
    """A node of facts: current ones, and retired ones under History with their windows (some open-ended)."""
    lines = [f"# Node {i}", "", "## Facts", ""]
    history = ["", "## History", ""]
    for k in range(6):
        words = " ".join(rng.choice(WORDS) for _ in range(4 + k + i % 5))
        since = f"2024-0{1 + (i + k) % 6}-1{k}"
        if k % 2:
            history.append(f"- {words} (about:: n{i}) (since:: {since}) (until:: 2024-0{2 + (i + k) % 6}-0{1 + k}) "
                           f"(replaced_by:: [[digest/facts/n{i}.md#^f{k - 1}]]) ^f{k}")
        else:
            lines.append(f"- {words} (about:: n{i}) {'(since:: ' + since + ') ' if k else ''}^f{k}")
    return "\n".join(lines + history) + "\n"


def test_the_cache_filters_facts_by_their_windows_as_sql(tmp_path):
    ws = Workspace(tmp_path / "ws")
    rng = random.Random(11)
    _workspace(ws, rng)
    for i in range(8):
        ws.write_text(f"digest/facts/n{i}.md", _fact_node(i, rng))
    db = IndexDB(ws, keep_open=True)
    try:
        mem = Memory(ws.root, db=db)
        with db.session() as con:
            windows = [{}, {"history": True}, {"as_of": "2024-02-12"}, {"as_of": "2024-04-01"},
                       {"as_of": "2024-07-20", "path_prefix": "digest/"}]

            def same():
                cache = search_cache.wait(con, 30)
                assert cache is not None and cache.sync(con)
                for query in QUERIES:
                    for kw in windows:
                        held = search(con, query, limit=8, per_file=None, **kw)
                        with _sql_only(con):
                            sql = search(con, query, limit=8, per_file=None, **kw)
                        assert [h.pop("bm25") for h in held] == pytest.approx([h.pop("bm25") for h in sql], rel=1e-12)
                        assert held == sql, (query, kw)
                        nodes = node_search(con, query, **{k: v for k, v in kw.items() if k != "path_prefix"})
                        with _sql_only(con):
                            assert nodes == node_search(con, query, **{k: v for k, v in kw.items() if k != "path_prefix"})
                assert search_cache.of(con) is cache  # answered from memory, not left to SQL

            same()
            hits = search(con, "ridge trail lisbon harbour", limit=50, per_file=None, history=True)
            assert {h["status"] for h in hits if h["path"].startswith("digest/facts/") and h["valid_to"]} == {"superseded"}
            text = ws.read_text("digest/facts/n0.md")
            assert "(until:: 2024-03-02)" in text
            mem.write("digest/facts/n0.md", text.replace("(until:: 2024-03-02)", "(until:: 2024-06-30)"))  # caught up
            assert any(h["valid_to"] == "2024-06-30" for h in search(con, "n0", limit=20, per_file=None, history=True))
            same()
    finally:
        db.close()
