"""Search over a real index: BM25 ranking, filters, RRF with a vector list, link expansion, nodes, graph."""

import math
from collections import Counter

import pytest

from storage.index import indexer as index
from storage.index.db import IndexDB
from storage.search.search import fuse, node_search, search, traverse


def note(name, body, desc=None, **meta):
    head = [f"name: {name}"] + ([f"description: {desc}"] if desc else []) + [f"{k}: {v}" for k, v in meta.items()]
    return "---\n" + "\n".join(head) + "\n---\n" + body + "\n"


@pytest.fixture
def con(ws):
    files = {
        "daily/2024-05-01/hiking.md": note("Hiking trip", "# Hike\n\nWe hiked the ridge trail at dawn. "
                                           "See [[digest/wiki/trails.md#L3|trails]].", tags="[outdoors]"),
        "daily/2024-05-20/cooking.md": note("Cooking", "# Dinner\n\nCooked a mushroom risotto for the hikers.",
                                            tags="[food, home]"),
        "resource/2024-06-02/article.md": note("Article", "An article about hiking boots and trail shoes."),
        "digest/wiki/trails.md": note("Trails", "# Trails\n\nRidge trail: steep.\nuses:: [[digest/wiki/boots.md]]\n"
                                      "part-of:: [[digest/wiki/outdoors.md]]", desc="known hiking trails"),
        "digest/wiki/boots.md": note("Boots", "Boots for the trail.", desc="footwear notes"),
        "digest/wiki/orphan.md": note("Orphan", "Links to [[digest/wiki/missing.md]] only."),
        "digest/personal/dated.md": note("Dated", "A hiking memory with a date.", date="2023-12-24"),
        "daily/2024-05-02/chinese.md": note("中文", "我们在北京吃了烤鸭，然后去爬长城。"),
    }
    for rel, text in files.items():
        ws.write_text(rel, text)
    with IndexDB(ws).session() as connection:
        yield connection


def paths(hits):
    return [h["path"] for h in hits]


def test_bm25_ranks_and_returns_hit_fields(con):
    hits = search(con, "ridge trail", expand=0)
    assert hits[0]["path"] in ("daily/2024-05-01/hiking.md", "digest/wiki/trails.md")
    assert {"daily/2024-05-01/hiking.md", "digest/wiki/trails.md"} <= set(paths(hits[:2]))
    hit = hits[0]
    assert set(hit) >= {"path", "start_line", "end_line", "score", "bm25", "bm25_rank", "headings", "text",
                        "name", "description", "date", "neighbors"}
    assert hit["score"] == 1.0 and hit["bm25_rank"] == 1 and hit["bm25"] > hits[-1]["bm25"]
    assert 1 <= hit["start_line"] <= hit["end_line"] and "ridge" in hit["text"].lower()
    assert search(con, "zzzunknownword") == []
    assert search(con, "the and of") == []


def test_stemming_matches_across_word_forms(con):
    assert "daily/2024-05-20/cooking.md" in paths(search(con, "cook hiker", expand=0))


def test_date_filters_use_daily_path_and_frontmatter_date(con):
    hits = search(con, "hiking", start_date="2024-05-01", end_date="2024-05-31", expand=0, strict_dates=True)
    assert paths(hits) == ["daily/2024-05-01/hiking.md"]
    assert paths(search(con, "hiking", end_date="2023-12-31", expand=0, strict_dates=True)) == ["digest/personal/dated.md"]
    assert "resource/2024-06-02/article.md" in paths(search(con, "hiking", start_date="2024-06-01", expand=0))
    kept = paths(search(con, "hiking", start_date="2024-05-01", end_date="2024-05-31", expand=0))
    assert set(kept) == {"daily/2024-05-01/hiking.md", "digest/wiki/trails.md"}  # undated knowledge stays
    hit = search(con, "hiking", start_date="2024-05-01", end_date="2024-05-01", expand=0, strict_dates=True)[0]
    assert hit["date"] == "2024-05-01"


def test_tag_path_prefix_and_min_score_filters(con):
    assert paths(search(con, "hikers trail", tags=["food", "nope"], expand=0)) == ["daily/2024-05-20/cooking.md"]
    assert set(paths(search(con, "trail", path_prefix="digest/", expand=0))) == {
        "digest/wiki/trails.md", "digest/wiki/boots.md"}
    everything = search(con, "trail", expand=0)
    floor = everything[1]["bm25"]
    assert paths(search(con, "trail", min_score=floor, expand=0)) == paths(everything[:2])


def test_chinese_query_finds_chinese_text(con):
    assert paths(search(con, "北京烤鸭", expand=0)) == ["daily/2024-05-02/chinese.md"]
    assert paths(search(con, "长城", expand=0)) == ["daily/2024-05-02/chinese.md"]


class TrigramVectors:
    """A small real vector index: cosine similarity of character-trigram counts of the chunk texts that pass
    search's filters (the `Vectors` contract)."""

    def __init__(self, weight=None):
        if weight is not None:
            self.weight = weight
        self.calls = []

    @staticmethod
    def _vec(text):
        text = f"  {text.lower()}  "
        return Counter(text[i:i + 3] for i in range(len(text) - 2))

    def candidates(self, con, query, k, path_prefix=None, filters="TRUE", params=None):
        self.calls.append((query, k, path_prefix))
        q = self._vec(query)
        scored = []
        prefix = f"starts_with(c.path, '{path_prefix}')" if path_prefix else "TRUE"
        rows = con.execute(f"SELECT c.id, c.text FROM chunks c JOIN files f ON f.path = c.path "
                           f"WHERE {prefix} AND {filters}", params or None)
        for cid, text in rows.fetchall():
            d = self._vec(text)
            dot = sum(q[g] * d[g] for g in q)
            norm = math.sqrt(sum(v * v for v in q.values()) * sum(v * v for v in d.values()))
            if dot:
                scored.append((cid, dot / norm))
        return sorted(scored, key=lambda x: -x[1])[:k]


def test_rrf_fuses_keyword_and_vector_lists(con):
    keyword_only = search(con, "risotto", expand=0)
    assert paths(keyword_only) == ["daily/2024-05-20/cooking.md"]
    vectors = TrigramVectors()
    hits = search(con, "risotto", expand=0, vectors=vectors, limit=5)
    assert vectors.calls and vectors.calls[0][0] == "risotto"
    top = hits[0]
    assert top["path"] == "daily/2024-05-20/cooking.md"
    assert top["bm25_rank"] == 1 and top["vector_rank"] is not None
    # chunks only the vector list found come after, with no BM25 rank and a smaller fused score
    vector_only = [h for h in hits if h["bm25_rank"] is None]
    assert vector_only and all(h["vector_rank"] and h["score"] < top["score"] for h in vector_only)
    assert top["score"] == pytest.approx((1 / 61 + 1 / (60 + top["vector_rank"])) / (2 / 61), abs=1e-6)
    # weights: a zero keyword weight ranks by the vector list alone
    by_vector = search(con, "risotto", expand=0, vectors=vectors, weights=(0.0, 1.0), limit=5)
    assert [h["vector_rank"] for h in by_vector] == sorted(h["vector_rank"] for h in by_vector)


def test_each_hit_names_the_signals_that_found_it(con):
    assert search(con, "risotto", expand=0)[0]["signals"] == ["keyword"]
    hits = search(con, "risotto", expand=0, vectors=TrigramVectors(), limit=5)
    assert hits[0]["signals"] == ["keyword", "vector"]  # rank 1 in both: the keyword list weighs as much
    assert all(h["signals"] == ["vector"] for h in hits if h["bm25_rank"] is None)
    # the list that added more to the fused score comes first; a list weighted 0 found nothing
    by_vector = search(con, "risotto", expand=0, vectors=TrigramVectors(), weights=(0.1, 1.0), limit=5)
    assert by_vector[0]["signals"][0] == "vector"
    assert all("vector" not in h["signals"] for h in search(con, "risotto", expand=0, vectors=TrigramVectors(),
                                                             weights=(1.0, 0.0)))


def test_a_date_the_query_names_ranks_notes_dated_then_first(ws):
    # the same words in three notes: the one dated in (or within DATE_AFTER days after) the period named wins
    for day in ("2023-05-08", "2023-06-09", "2023-08-20"):
        ws.write_text(f"daily/{day}/camping.md", note("Camping", "We went camping by the lake with the kids."))
    with IndexDB(ws).session() as con:
        plain = search(con, "camping lake", expand=0, limit=3)
        assert all(h["signals"] == ["keyword"] for h in plain)
        for query, day in (("camping by the lake in June 2023", "2023-06-09"),
                           ("camping lake on 2 June, 2023", "2023-06-09"),  # a note tells of the week before it
                           ("camping lake August 2023", "2023-08-20")):
            hits = search(con, query, expand=0, limit=3)
            assert hits[0]["date"] == day and hits[0]["signals"] == ["keyword", "date"], query
            assert [h["signals"] for h in hits[1:]] == [["keyword"], ["keyword"]]
            assert hits[0]["bm25"] == pytest.approx(hits[1]["bm25"])  # reported unchanged, only re-ranked
        assert [h["date"] for h in search(con, "camping lake in 2023", expand=0, limit=3)] == [
            h["date"] for h in plain]  # every note is in 2023: the order stays
        many = " ".join(f"{d} January 2023" for d in range(1, 9)) + " 20 August 2023 camping lake"
        hits = search(con, many, expand=0, limit=3)  # only the first DATE_SPANS periods are looked up
        assert hits[0]["date"] == plain[0]["date"] and all("date" not in h["signals"] for h in hits)


def test_vector_candidates_respect_filters(con):
    hits = search(con, "trail", expand=0, vectors=TrigramVectors(), path_prefix="digest/wiki/", limit=10)
    assert hits and all(h["path"].startswith("digest/wiki/") for h in hits)
    hits = search(con, "trail", expand=0, vectors=TrigramVectors(), tags=["outdoors"], limit=10)
    assert paths(hits) == ["daily/2024-05-01/hiking.md"]


def test_fuse_is_reciprocal_rank_fusion():
    fused = dict(fuse([["a", "b"], ["b", "c"]], (1.0, 1.0), k=60))
    best = 2 / 61
    assert fused["b"] == pytest.approx((1 / 62 + 1 / 61) / best)
    assert fused["a"] == pytest.approx((1 / 61) / best)
    assert fused["c"] == pytest.approx((1 / 62) / best)


def test_link_expansion_gives_bounded_neighbours_both_ways(con):
    hit = next(h for h in search(con, "ridge steep", expand=3) if h["path"] == "digest/wiki/trails.md")
    by_dir = {(n["direction"], n["path"]): n for n in hit["neighbors"]}
    assert by_dir[("in", "daily/2024-05-01/hiking.md")]["anchor"] == "L3"
    assert by_dir[("in", "daily/2024-05-01/hiking.md")]["name"] == "Hiking trip"
    boots = by_dir[("out", "digest/wiki/boots.md")]
    assert boots["predicate"] == "uses" and boots["description"] == "footwear notes" and boots["exists"]
    outdoors = by_dir[("out", "digest/wiki/outdoors.md")]
    assert outdoors["exists"] is False and outdoors["name"] is None
    one = next(h for h in search(con, "ridge steep", expand=1) if h["path"] == "digest/wiki/trails.md")
    assert sorted(n["direction"] for n in one["neighbors"]) == ["in", "out"]
    assert all(h["neighbors"] == [] for h in search(con, "ridge steep", expand=0))


def test_node_search_is_digest_only_one_row_per_node(con, ws):
    ws.write_text("digest/wiki/long.md", note("Long", "\n\n".join(f"## Part {i}\n\n" + "trail words " * 120
                                                                   for i in range(4)), desc="a long node"))
    index.index_file(con, ws, "digest/wiki/long.md")
    assert con.execute("SELECT count(*) FROM chunks WHERE path = 'digest/wiki/long.md'").fetchone()[0] > 1
    rows = node_search(con, "trail")
    assert [r["path"] for r in rows].count("digest/wiki/long.md") == 1
    assert all(r["path"].startswith("digest/") for r in rows)
    assert set(rows[0]) == {"path", "name", "description", "score", "status", "valid_from", "valid_to"}
    assert {"digest/wiki/trails.md", "digest/wiki/boots.md"} <= {r["path"] for r in rows}
    assert node_search(con, "footwear")[0] == {"path": "digest/wiki/boots.md", "name": "Boots",
                                               "description": "footwear notes", "score": 1.0,
                                               "status": "current", "valid_from": None, "valid_to": None}


def test_archived_nodes_only_when_asked(con, ws):
    ws.write_text("digest/archive/old.md", note("Old", "an archived trail"))
    index.index_file(con, ws, "digest/archive/old.md")
    assert "digest/archive/old.md" not in paths(search(con, "archived trail", expand=0))
    assert "digest/archive/old.md" in paths(search(con, "archived trail", expand=0, include_archived=True))


def test_traverse_directions_depth_predicate_and_limit(con):
    start = ["digest/wiki/trails.md"]
    fwd = traverse(con, start, depth=1, direction="forward")
    assert {(e["source"], e["target"]) for e in fwd["edges"]} == {
        ("digest/wiki/trails.md", "digest/wiki/boots.md"), ("digest/wiki/trails.md", "digest/wiki/outdoors.md")}
    nodes = {n["path"]: n for n in fwd["nodes"]}
    assert nodes["digest/wiki/boots.md"]["name"] == "Boots" and nodes["digest/wiki/boots.md"]["exists"]
    assert nodes["digest/wiki/outdoors.md"]["exists"] is False

    back = traverse(con, start, direction="backward")
    assert [(e["source"], e["target"], e["anchor"]) for e in back["edges"]] == [
        ("daily/2024-05-01/hiking.md", "digest/wiki/trails.md", "L3")]

    both = traverse(con, start, direction="both")
    assert len(both["edges"]) == 3 and not both["truncated"]

    uses = traverse(con, start, direction="both", predicate="uses")
    assert [(e["target"], e["predicate"]) for e in uses["edges"]] == [("digest/wiki/boots.md", "uses")]

    two = traverse(con, ["daily/2024-05-01/hiking.md"], depth=2, direction="forward")
    assert {n["path"]: n["depth"] for n in two["nodes"]} == {
        "daily/2024-05-01/hiking.md": 0, "digest/wiki/trails.md": 1, "digest/wiki/boots.md": 2,
        "digest/wiki/outdoors.md": 2}
    small = traverse(con, ["daily/2024-05-01/hiking.md"], depth=2, direction="forward", limit=2)
    assert len(small["nodes"]) == 2 and small["truncated"]
    assert all(e["source"] in {n["path"] for n in small["nodes"]} for e in small["edges"])
    with pytest.raises(ValueError):
        traverse(con, start, direction="sideways")


def test_per_file_caps_hits_of_one_file_and_lists_its_other_matches(con, ws):
    filler = " ".join(f"word{i}" for i in range(180))
    body = "\n\n".join(f"## Trip {n}\n\nKayak trip number {n} on the lake. {filler}" for n in range(1, 5))
    ws.write_text("daily/2024-07-01/kayak.md", note("Kayak log", "# Kayaking\n\n" + body))
    ws.write_text("daily/2024-07-02/shop.md", note("Shop", "Bought a paddle; the kayak shop was closed."))
    with IndexDB(ws).session() as c:
        index.reconcile(c, ws)
        uncapped = search(c, "kayak lake", expand=0, per_file=None)
        capped = search(c, "kayak lake", expand=0)
        two = search(c, "kayak lake", expand=0, per_file=2)
    log = "daily/2024-07-01/kayak.md"
    log_chunks = [h for h in uncapped if h["path"] == log]
    assert len(log_chunks) == 4 and uncapped[:4] == log_chunks  # without a cap the log fills the top 4
    assert Counter(paths(capped)) == Counter([log, "daily/2024-07-02/shop.md"])
    assert capped[0]["chunk_id"] == log_chunks[0]["chunk_id"]  # the file's best chunk stands for it
    assert capped[0]["more"] == [[h["start_line"], h["end_line"]] for h in log_chunks[1:]]
    assert capped[1]["more"] == [] and capped[1]["path"] == "daily/2024-07-02/shop.md"
    assert [h["chunk_id"] for h in two if h["path"] == log] == [h["chunk_id"] for h in log_chunks[:2]]
    assert two[1]["more"] == [[h["start_line"], h["end_line"]] for h in log_chunks[2:]] and two[0]["more"] == []


def test_limit_means_that_many_distinct_files_when_one_large_file_holds_all_top_candidates(con, ws):
    from storage.search.search import CANDIDATES

    # 400 chunks that each say "ferry schedule" three times outrank every other file's single mention
    sections = "\n\n".join(f"## Day {n}\n\nFerry schedule, ferry schedule, ferry schedule {n}." + " pad" * 300
                           for n in range(4 * CANDIDATES * 2))
    ws.write_text("resource/ferry-log.md", note("Ferry log", sections))
    for n in range(12):
        ws.write_text(f"daily/2024-08-{n + 1:02d}/trip.md", note(f"Trip {n}", f"Took the ferry; the schedule {n} "
                                                                 "was posted late." + " words" * 170))
    with IndexDB(ws).session() as c:
        index.reconcile(c, ws)
        log_chunks = c.execute("SELECT count(*) FROM chunks WHERE path = 'resource/ferry-log.md'").fetchone()[0]
        assert log_chunks > 3 * CANDIDATES
        hits = search(c, "ferry schedule", limit=10, expand=0)
    assert len(hits) == 10 and len(set(paths(hits))) == 10
    assert hits[0]["path"] == "resource/ferry-log.md" and len(hits[0]["more"]) == 10  # bounded (MORE_RANGES)


def test_node_search_finds_limit_nodes_when_one_long_node_holds_all_top_candidates(con, ws):
    from storage.search.search import CANDIDATES

    sections = "\n\n".join(f"## Part {n}\n\nLighthouse keeper, lighthouse keeper {n}." + " pad" * 300
                           for n in range(6 * CANDIDATES))
    ws.write_text("digest/wiki/lighthouse-log.md", note("Lighthouse log", sections))
    for n in range(6):
        ws.write_text(f"digest/wiki/keeper-{n}.md", note(f"Keeper {n}", "A lighthouse keeper." + " words" * 170))
    with IndexDB(ws).session() as c:
        index.reconcile(c, ws)
        nodes = node_search(c, "lighthouse keeper", limit=5)
    assert len(nodes) == 5 and nodes[0]["path"] == "digest/wiki/lighthouse-log.md"


def test_node_search_keeps_one_bucket_your_own_folders_too(tmp_path):
    import json as _json

    from click.testing import CliRunner

    from dreamflow.cli import cli
    from storage.errors import InvalidInput
    from storage.memory import Memory

    mem = Memory(tmp_path / "ws")
    mem.write("digest/project/build.md", "# Build\n\nThe Vite build writes dist/.\n")
    mem.write("digest/wiki/vite.md", "# Vite\n\nA build tool.\n", name="Vite")
    assert {h["path"] for h in mem.node_search("build")} == {"digest/project/build.md", "digest/wiki/vite.md"}
    assert [h["path"] for h in mem.node_search("build", bucket="project")] == ["digest/project/build.md"]
    assert [h["path"] for h in mem.node_search("build", bucket="digest/wiki/")] == ["digest/wiki/vite.md"]
    assert mem.node_search("build", bucket="nowhere") == []
    for bad, said in (("archive", "archived nodes"), ("project/sub", "one folder"), ("a:b", "not allowed")):
        with pytest.raises(InvalidInput, match=said):
            mem.node_search("build", bucket=bad)
    result = CliRunner().invoke(cli, ["-w", str(mem.ws.root), "node-search", "build", "--bucket", "project",
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert [h["path"] for h in _json.loads(result.output)] == ["digest/project/build.md"]


@pytest.mark.e2e
def test_search_from_the_cli_leaves_the_markdown_parser_unloaded(ws):
    """`dreamflow search` reads the index: the chunker and its Markdown parser (marko) are the writes' alone."""
    import json
    import subprocess
    import sys

    from cli_probe import ENTRY_PROBE

    from storage.memory import Memory

    Memory(ws.root).write("notes/fast.md", "quick brown fox")  # indexed here: the CLI's search only reads
    proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE, "--workspace", str(ws.root), "search", "fox", "--json"],
                          capture_output=True, text=True, input="", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "fast.md" in proc.stdout  # the search really ran
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert not [m for m in modules if m.split(".")[0] == "marko" or m in ("storage.index.chunking", "storage.text.outline")]
