"""Vectors: content-hash keyed embeddings in the real DuckDB index, backfill, exact in-memory search."""

import json
import time

import numpy as np
import pytest

from engine.access.client import local_memory
from engine.models import semantic
from engine.models.embedders import EmbedderError, LocalEmbedder, OpenAIEmbedder
from storage.index import indexer as index, vectors
from storage.index.db import IndexDB
from storage.index.vectors import Backfiller, VectorIndex, backfill, pieces
from storage.search.search import node_search, search

from test_cli import invoke
from test_embeddings import word_vectors


class Counting:
    """The real local model, recording every text it is asked to embed."""

    def __init__(self, inner=None):
        self.inner = inner or LocalEmbedder()
        self.model_id = self.inner.model_id
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts.extend(texts)
        return self.inner.embed(texts)


@pytest.fixture
def db(ws):
    return IndexDB(ws)


def put(ws, db, rel, text):
    ws.write_text(rel, text)
    with db.session() as con:
        index.index_file(con, ws, rel, force=True)


def query_fn(embedder):
    return lambda q: embedder.embed([q])[0]


NOTES = {
    "daily/2024-05-01/adoption.md": "# Adoption\n\nCaroline has been applying to adoption agencies; she hopes to "
                                    "give a child a loving home.\n",
    "daily/2024-05-02/garage.md": "# Garage\n\nThe car needs a new gearbox and the brake pads are worn out.\n",
    "digest/wiki/bread.md": "# Bread\n\nSourdough needs a lively starter, a long cold proof and a very hot oven.\n",
    "digest/personal/family.md": "# Family\n\nMelanie wants to grow her family by welcoming a foster kid.\n",
}


@pytest.fixture
def notes(ws, db):
    for rel, text in NOTES.items():
        put(ws, db, rel, text)
    return ws


# ---- pieces ----------------------------------------------------------------------------------------------


def test_short_text_is_one_piece():
    assert pieces("# Title\n\nOne short line.\n") == ["# Title\nOne short line."]
    assert pieces("   \n") == []


def test_long_text_becomes_windows_of_whole_lines(monkeypatch):
    lines = [f"Line {i}: " + "word " * 12 for i in range(40)]
    out = pieces("\n".join(lines), budget=200)
    assert len(out) > 4 and all(len(p) <= 200 for p in out)
    covered = [line for p in out for line in p.splitlines()]
    assert covered == [line.strip() for line in lines]  # OVERLAP 0: every line once, in order
    monkeypatch.setattr(vectors, "OVERLAP", 0.5)
    out = pieces("\n".join(lines), budget=200)
    assert {line.strip() for line in lines} == {line for p in out for line in p.splitlines()}
    for a, b in zip(out, out[1:]):  # each window starts inside the previous one
        assert b.splitlines()[0] in a.splitlines()


def test_an_overlong_line_is_cut_even_without_spaces():
    out = pieces("字" * 1000, budget=300)
    assert "".join(out) == "字" * 1000 and all(len(p) <= 300 for p in out)
    out = pieces(" ".join(["word"] * 300), budget=100)
    assert all(len(p) <= 100 for p in out) and sum(p.count("word") for p in out) == 300


# ---- storing and backfill ----------------------------------------------------------------------------------


def test_backfill_embeds_only_new_or_changed_text(ws, db, notes):
    emb = Counting()
    with db.session() as con:
        assert vectors.status(con)["pending"] == 4
    result = backfill(db, emb)
    assert result == {"embedded": 4, "pending": 0, "model": emb.model_id}
    with db.session() as con:
        st = vectors.status(con)
    assert st["pending"] == 0 and st["embedded"] == 4 and st["dim"] == 384 and st["model"] == emb.model_id
    first = len(emb.texts)

    # a moved file and a re-indexed file cost nothing; a copy of the same text costs nothing either
    (ws.root / "daily/2024-05-03").mkdir(parents=True)
    (ws.root / "daily/2024-05-02/garage.md").rename(ws.root / "daily/2024-05-03/garage.md")
    put(ws, db, "digest/wiki/bread-copy.md", NOTES["digest/wiki/bread.md"])
    with db.session() as con:
        index.reconcile(con, ws)
        index.rebuild(con, ws)
        assert vectors.status(con)["pending"] == 0
    assert backfill(db, emb)["embedded"] == 0 and len(emb.texts) == first

    # an edit re-embeds exactly the changed text
    put(ws, db, "digest/wiki/bread.md", NOTES["digest/wiki/bread.md"] + "Rye bread is denser.\n")
    assert backfill(db, emb)["embedded"] == 1
    assert len(emb.texts) == first + 1 and "Rye bread" in emb.texts[-1]


def test_changing_the_model_re_embeds_everything(db, notes, llm_server):
    backfill(db, LocalEmbedder())
    llm_server.reset()
    llm_server.embedder = word_vectors
    other = Counting(OpenAIEmbedder(llm_server.base_url, "tiny-embed"))
    with db.session() as con:
        assert vectors.status(con, model_id=other.model_id)["pending"] == 4
    assert backfill(db, other)["embedded"] == 4
    with db.session() as con:
        st = vectors.status(con)
        assert (st["model"], st["dim"], st["pending"]) == (other.model_id, 8, 0)
        # an index built for the old model offers nothing rather than comparing apples with pears
        stale = VectorIndex(LocalEmbedder.model_id, query_fn(LocalEmbedder()))
        assert stale.candidates(con, "adoption", 3) == []
    llm_server.reset()


def test_prune_drops_vectors_no_chunk_uses(ws, db, notes):
    backfill(db, LocalEmbedder())
    (ws.root / "digest/wiki/bread.md").unlink()
    with db.session() as con:
        index.reconcile(con, ws)
        assert vectors.prune(con, min_share=0.5) == 0  # 1 orphan of 4 rows: kept as a cache
        assert vectors.prune(con, min_share=0.1) == 1
        assert vectors.status(con)["embedded"] == 3
        assert vectors.prune(con) == 0


def test_a_failing_embedder_stores_nothing_and_later_catches_up(db, notes, llm_server):
    llm_server.reset()  # no embedder scripted: the endpoint answers HTTP 500
    emb = OpenAIEmbedder(llm_server.base_url, "tiny-embed", max_retries=0)
    with pytest.raises(EmbedderError):
        backfill(db, emb)
    with db.session() as con:
        assert vectors.status(con)["embedded"] == 0
    llm_server.embedder = word_vectors
    assert backfill(db, emb)["pending"] == 0
    llm_server.reset()


def test_backfiller_thread_retries_until_the_endpoint_works(ws, db, notes, llm_server):
    llm_server.reset()
    emb = OpenAIEmbedder(llm_server.base_url, "tiny-embed", max_retries=0)
    idx = VectorIndex(emb.model_id, query_fn(emb))
    worker = Backfiller(db, emb, index=idx, retry_after=0.2).start()
    try:
        assert not worker.wait_idle(1.0)
        assert "failed" in (worker.last_error or "")
        llm_server.embedder = word_vectors
        assert worker.wait_idle(20)
        assert worker.last_error is None
        put(ws, db, "daily/2024-05-04/new.md", "# New\n\nsomething entirely new\n")
        worker.notify()
        assert worker.wait_idle(20)
        with db.session() as con:
            assert vectors.status(con)["pending"] == 0
            hits = idx.candidates(con, "# New something entirely new", 1)
            assert chunk_paths(con, hits) == ["daily/2024-05-04/new.md"] and hits[0][1] == pytest.approx(1.0)
            assert len(idx) == 5
    finally:
        worker.stop()
        llm_server.reset()


# ---- searching ------------------------------------------------------------------------------------------


def chunk_paths(con, hits):
    ids = [cid for cid, _ in hits]
    rows = dict(con.execute("SELECT id, path FROM chunks WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids]).fetchall())
    return [rows[cid] for cid in ids]


def test_no_vectors_means_no_candidates_and_no_model_call(db, notes):
    def never(_):
        raise AssertionError("the query must not be embedded when there are no vectors")

    with db.session() as con:
        assert VectorIndex(LocalEmbedder.model_id, never).candidates(con, "adoption", 5) == []


def test_candidates_find_a_paraphrase_and_respect_the_path_prefix(db, notes):
    emb = LocalEmbedder()
    backfill(db, emb)
    idx = VectorIndex(emb.model_id, query_fn(emb))
    with db.session() as con:
        hits = idx.candidates(con, "Who wants to adopt a kid?", 4)
        paths = chunk_paths(con, hits)
        assert paths[0] == "daily/2024-05-01/adoption.md"
        assert set(paths[:2]) == {"daily/2024-05-01/adoption.md", "digest/personal/family.md"}
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        assert chunk_paths(con, idx.candidates(con, "Who wants to adopt a kid?", 4, path_prefix="digest/")) == [
            "digest/personal/family.md", "digest/wiki/bread.md"]
        assert idx.candidates(con, "anything", 4, path_prefix="nowhere/") == []


def test_candidates_are_exact(db, notes, ws):
    emb = LocalEmbedder()
    fillers = [f"resource/filler-{i}.md" for i in range(30)]
    for i, rel in enumerate(fillers):
        ws.write_text(rel, f"# Filler {i}\n\nNote number {i} about topic {i % 7} and more.\n")
    with db.session() as con:  # put's indexing, in one session
        for rel in fillers:
            index.index_file(con, ws, rel, force=True)
    backfill(db, emb)
    idx = VectorIndex(emb.model_id, query_fn(emb))
    q = emb.embed(["a loving home for a child"])[0]
    with db.session() as con:
        rows = con.execute("SELECT c.id, e.dim, e.vector FROM chunks c JOIN embeddings e USING (text_hash)").fetchall()
        brute = sorted(((float(np.max(np.asarray(v, np.float32).reshape(-1, d) @ q)), cid) for cid, d, v in rows),
                       reverse=True)
        hits = idx.candidates(con, "a loving home for a child", 10)
    assert [cid for cid, _ in hits] == [cid for _, cid in brute[:10]]
    assert np.allclose([s for _, s in hits], [s for s, _ in brute[:10]], atol=1e-5)


def test_index_follows_its_own_writes_without_reload_and_reloads_for_others(ws, db, notes, monkeypatch):
    emb = LocalEmbedder()
    idx = VectorIndex(emb.model_id, query_fn(emb))
    backfill(db, emb, index=idx)
    put(ws, db, "daily/2024-05-06/tea.md", "# Tea\n\nGreen tea steeps for two minutes at 80 degrees.\n")
    with db.session() as con:
        idx.refresh(con)
    with monkeypatch.context() as patch:
        patch.setattr(vectors, "_load", lambda con: pytest.fail("the index reloaded what it had just stored"))
        backfill(db, emb, index=idx)
        with db.session() as con:
            assert idx._version == vectors.version(con)  # took the vectors as they were stored
            assert chunk_paths(con, idx.candidates(con, "brewing green tea", 1)) == ["daily/2024-05-06/tea.md"]
            assert chunk_paths(con, idx.candidates(con, "gearbox repair", 1)) == ["daily/2024-05-02/garage.md"]
    put(ws, db, "daily/2024-05-05/boat.md", "# Boat\n\nWe sailed the small boat across the lake at dawn.\n")
    backfill(db, emb)  # another writer: the index is not told
    with db.session() as con:
        assert chunk_paths(con, idx.candidates(con, "sailing on a lake", 1)) == ["daily/2024-05-05/boat.md"]
        assert len(idx) == 6


# ---- fused with keyword search ------------------------------------------------------------------------------

PARAPHRASE = "raising a youngster in a caring household"  # shares no keyword with any note


@pytest.fixture
def hybrid(db, notes):
    emb = LocalEmbedder()
    backfill(db, emb)
    return VectorIndex(emb.model_id, query_fn(emb))


def test_search_finds_a_paraphrase_only_with_vectors(db, hybrid):
    with db.session() as con:
        assert search(con, PARAPHRASE) == []
        hits = search(con, PARAPHRASE, limit=2, vectors=hybrid)
    assert {h["path"] for h in hits} == {"daily/2024-05-01/adoption.md", "digest/personal/family.md"}
    assert all(h["bm25_rank"] is None and h["vector_rank"] for h in hits)


def test_search_fuses_both_lists_and_honours_filters(db, hybrid):
    with db.session() as con:
        keyword = search(con, "gearbox", expand=0)
        fused = search(con, "gearbox", expand=0, vectors=hybrid)
        assert keyword[0]["path"] == fused[0]["path"] == "daily/2024-05-02/garage.md"
        assert fused[0]["bm25_rank"] == 1 and fused[0]["vector_rank"] == 1 and fused[0]["score"] == 1.0
        dated = search(con, PARAPHRASE, vectors=hybrid, start_date="2024-05-02", end_date="2024-05-02",
                       strict_dates=True)
        assert [h["path"] for h in dated] == ["daily/2024-05-02/garage.md"]


def test_a_failing_query_embedder_leaves_keyword_results(db, notes):
    backfill(db, LocalEmbedder())

    def broken(_):
        raise EmbedderError("model gone")

    with db.session() as con:
        with_broken = search(con, "sourdough starter", expand=0, vectors=VectorIndex(LocalEmbedder.model_id, broken))
        assert [h["path"] for h in with_broken] == [h["path"] for h in search(con, "sourdough starter", expand=0)]


def test_node_search_fuses_at_node_level(db, hybrid):
    with db.session() as con:
        assert node_search(con, PARAPHRASE) == []
        nodes = node_search(con, PARAPHRASE, vectors=hybrid)
    assert nodes[0]["path"] == "digest/personal/family.md"
    assert all(n["path"].startswith("digest/") for n in nodes)


# ---- processes: the service's memory and the CLI ------------------------------------------------------------


def test_long_running_memory_fills_vectors_in_the_background(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "local")
    memory = local_memory(tmp_path / "ws", keep_open=True)
    worker = semantic.attach(memory, long_running=True)
    try:
        memory.write("daily/2024-05-01/adoption.md", NOTES["daily/2024-05-01/adoption.md"])
        memory.write("daily/2024-05-02/garage.md", NOTES["daily/2024-05-02/garage.md"])
        worker.notify()
        assert worker.wait_idle(40), worker.last_error
        assert semantic.status(memory)["pending"] == 0
        hits = memory.search(PARAPHRASE, limit=1)
        assert hits[0]["path"] == "daily/2024-05-01/adoption.md" and hits[0]["vector_rank"] == 1
    finally:
        worker.stop()
        memory.db.close()


def test_the_service_loads_the_local_model_as_it_starts_not_on_the_first_prompt(tmp_path, monkeypatch):
    """The hook waits 3 s for the service: a first prompt that had to load the model got nothing."""
    from engine.models import embedders

    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "local")
    monkeypatch.setattr(embedders, "_local_model", None)  # as in a service that just started
    memory = local_memory(tmp_path / "ws", keep_open=True)
    worker = semantic.attach(memory, long_running=True)  # nothing to embed: the backfiller loads nothing
    try:
        deadline = time.monotonic() + 60
        while embedders._local_model is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert embedders._local_model is not None  # loaded with no query and no text to embed
    finally:
        worker.stop()
        memory.db.close()


def cli(ws, *args, **env):
    """A CLI command in this process (test_cli.invoke: the loaded model is reused, not loaded per command)."""
    proc = invoke(["--workspace", ws, *args], env={"DREAMFLOW_EMBEDDER": "local", "DREAMFLOW_CLI_VECTORS": None, **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_embed_command_counts_and_fills_and_cli_search_uses_vectors_only_when_asked(tmp_path):
    ws = tmp_path / "ws"
    cli(ws, "write", "daily/2024-05-01/adoption.md", "--content", NOTES["daily/2024-05-01/adoption.md"])
    before = json.loads(cli(ws, "embed", "--status", "--json"))
    assert (before["pending"], before["embedded"], before["configured"]) == (1, 0, LocalEmbedder.model_id)
    done = json.loads(cli(ws, "embed", "--json"))
    assert (done["embedded"], done["pending"]) == (1, 0)
    assert json.loads(cli(ws, "embed", "--status", "--json"))["pending"] == 0
    assert json.loads(cli(ws, "search", PARAPHRASE, "--json")) == []  # fast path: keyword only
    hits = json.loads(cli(ws, "search", PARAPHRASE, "--json", DREAMFLOW_CLI_VECTORS="1"))
    assert hits[0]["path"] == "daily/2024-05-01/adoption.md" and hits[0]["vector_rank"] == 1


# ---- the hook's gate: meaning for the word a fact does not use -------------------------------------------------

GATE = {"min_score": 4, "min_relevance": 0.5, "min_words": 2}  # the hook's defaults (engine/config/settings.py)
MOVED = "digest/personal/home.md"


def test_a_fact_without_the_question_s_word_passes_the_gate_by_meaning(ws, db, notes):
    from storage.search.recall import recall

    put(ws, db, MOVED, "# Home\n\n- I live in Porto now, I moved there from Lisbon in May.\n")
    emb = LocalEmbedder()
    backfill(db, emb)
    close = VectorIndex(emb.model_id, query_fn(emb))
    with db.session() as con:
        asked = "Which city do I live in?"  # "city": in no note; "live" alone is no rare two-word match
        assert recall(con, ws, asked, 600, **GATE)[0]["items"] == []  # keyword only: nothing
        assert [i["path"] for i in recall(con, ws, asked, 600, vectors=close, **GATE)[0]["items"]][:1] == [MOVED]
        for unrelated in ("Is the live stream working again?", "thanks!", "Which city hosts the next Olympics?"):
            assert recall(con, ws, unrelated, 600, vectors=close, **GATE)[0]["items"] == [], unrelated
        cid = search(con, "Porto Lisbon", expand=0)[0]["chunk_id"]
        near = close.closeness(con, asked, [cid, 10**9])  # an id no chunk has is left out
        hashes, best = close.scores(con, asked)
        text_hash = con.execute("SELECT text_hash FROM chunks WHERE id = ?", [cid]).fetchone()[0]
        assert list(near) == [cid] and near[cid] == pytest.approx(float(best[hashes.index(text_hash)]), abs=1e-6)
        assert near[cid] >= close.close > close.closeness(con, "Is the live stream working again?", [cid])[cid]
    for n in range(40):  # "live" in most notes: a common word, however close the fact is, is no match by meaning
        ws.write_text(f"daily/2024-06-{n % 28 + 1:02d}/gig-{n}.md", f"# Gig {n}\n\nWent to live gig number {n}.\n")
    with db.session() as con:
        index.reconcile(con, ws)
    backfill(db, emb)
    with db.session() as con:
        assert recall(con, ws, asked, 600, vectors=close, **GATE)[0]["items"] == []
