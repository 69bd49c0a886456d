"""The memory jobs' plain logic, without Prefect or an LLM: message filtering, checkpoints, naming, the
dream's scanning, link-drop guard and sources, topic dedup, and the toolbox's write restrictions."""

import json

import pytest

from engine.toolbox import Toolbox, WriteRejected, predict
from storage.errors import InvalidInput
from storage.memory import Memory
from tasks import checkpoints, dialog, interests
from tasks.cards import CardDraft, find_card, save_card, slugify, unique_path
from tasks.dream import (
    Decision, Extraction, apply_decision, changed_files, clean_units, ensure_sources, link_guard, window,
)


@pytest.fixture
def memory(ws) -> Memory:
    return Memory(ws.root)


# ---- conversation records ---------------------------------------------------------------------------------

def test_clean_message_drops_tool_results_and_base64_keeps_time():
    assert dialog.clean_message({"role": "tool", "content": "42"}) is None
    image = {"type": "image", "source": {"type": "base64", "data": "iVBORw0KGgo="}}
    record = dialog.clean_message({
        "role": "user",
        "content": [{"type": "text", "text": "look data:image/png;base64,AAAA== here"}, image,
                    {"type": "tool_result", "content": "secret output"}],
        "metadata": {"createdAt": 1715162400000},
    })
    assert record["content"] == [{"type": "text", "text": "look [base64 omitted] here"}]
    assert record["created_at"].startswith("2024-05-08T10:00:00")
    assert dialog.clean_message({"role": "assistant", "content": [image]}) is None


@pytest.mark.parametrize("key", dialog.TIME_KEYS)
def test_message_time_keys(key):
    assert dialog.message_time({key: "2024-05-08T09:30:00Z"}) == "2024-05-08T09:30:00+00:00"


def test_pending_follows_the_checkpoint(memory, ws):
    out = dialog.append_messages(memory, "s1", [
        {"role": "user", "content": "hi", "timestamp": "2024-05-07T10:00:00"},
        {"role": "tool", "content": "dropped"},
        {"role": "assistant", "content": "hello", "timestamp": "2024-05-08T10:00:00"},
    ])
    assert out == {"path": "session/dialog/s1.jsonl", "appended": 2, "dropped": 1}
    todo = dialog.pending(memory, ws, "s1")
    assert (todo.start, todo.end, todo.latest_date) == (0, 2, "2024-05-08")
    dialog.mark_summarised(ws, "s1", todo.end, "daily/2024-05-08/x.md")
    assert dialog.pending(memory, ws, "s1").records == []
    dialog.append_messages(memory, "s1", [{"role": "user", "content": "more"}])
    todo = dialog.pending(memory, ws, "s1")
    assert (todo.start, todo.end, [r["content"] for r in todo.records]) == (2, 3, ["more"])
    assert checkpoints.load(ws, "sessions/s1")["card"] == "daily/2024-05-08/x.md"


def test_pending_respects_the_prompt_budget(memory, ws):
    dialog.append_messages(memory, "s2", [{"role": "user", "content": "x" * 100} for _ in range(5)])
    todo = dialog.pending(memory, ws, "s2", max_chars=300)  # ~135 characters per record
    assert (todo.start, todo.end) == (0, 2)


def test_bad_session_id_is_refused(memory):
    with pytest.raises(InvalidInput):
        dialog.append_messages(memory, "../escape", [{"role": "user", "content": "x"}])


def test_checkpoint_damage_reads_empty(ws):
    ws.write_text("metadata/checkpoints/dream.json", "{not json")
    assert checkpoints.load(ws, "dream") == {}
    with checkpoints.update(ws, "dream") as data:
        data["files"] = {"a": "1"}
    assert json.loads(ws.read_text("metadata/checkpoints/dream.json")) == {"files": {"a": "1"}}


# ---- cards --------------------------------------------------------------------------------------------------

def test_slugify_keeps_any_script():
    assert slugify("Trip to Lisbon!  (May)") == "trip-to-lisbon-may"
    assert slugify("东京 旅行") == "东京-旅行"
    assert slugify("../../etc") == "etc"
    assert slugify("!!!") == "card"
    with pytest.raises(ValueError):
        CardDraft(name="???")


def test_save_card_renames_and_retargets_links(memory):
    first = save_card(memory, "daily/2024-05-08", None, "daily/2024-05-08/session-s1.md",
                      CardDraft(name="Trip planning", description="d", content="Plan a trip."),
                      {"session_id": "s1"}, wrote_with_tools=False)
    assert first == {"path": "daily/2024-05-08/trip-planning.md", "created": True, "renamed_from": None}
    memory.write("digest/wiki/trips.md", "See [[daily/2024-05-08/trip-planning.md]].")
    assert find_card(memory, "daily/2024-05-08", "session_id", "s1") == first["path"]
    second = save_card(memory, "daily/2024-05-08", first["path"], first["path"],
                       CardDraft(name="Lisbon trip plan", description="d2", content="---\nx: 1\n---\nLisbon."),
                       {"session_id": "s1"}, wrote_with_tools=False)
    assert second["renamed_from"] == first["path"]
    assert "[[daily/2024-05-08/lisbon-trip-plan.md]]" in memory.read("digest/wiki/trips.md", numbered=False)["content"]
    meta = memory.frontmatter_get(second["path"])["frontmatter"]
    assert meta == {"name": "Lisbon trip plan", "description": "d2", "session_id": "s1"}


def test_unique_path_skips_taken_names(memory):
    memory.write("daily/2024-05-08/notes.md", "a")
    assert unique_path(memory, "daily/2024-05-08", "notes") == "daily/2024-05-08/notes-2.md"
    assert unique_path(memory, "daily/2024-05-08", "notes", keep="daily/2024-05-08/notes.md").endswith("/notes.md")


# ---- dream --------------------------------------------------------------------------------------------------

def test_window_and_changed_files():
    assert window("2024-03-01", 2) == ["2024-02-29", "2024-03-01"]
    done = {"daily/a.md": checkpoints.content_hash("same")}
    assert list(changed_files({"daily/a.md": "same", "daily/b.md": "new"}, done)) == ["daily/b.md"]


def test_unknown_bucket_is_wiki_and_units_are_capped():
    extraction = Extraction.model_validate({"units": [
        {"name": "a", "bucket": "Recipes", "summary": "s", "paths": ["daily/x.md", "daily/unsent.md"]},
        {"name": "b", "bucket": "personal", "summary": "s", "paths": ["daily/nope.md"]},
        {"name": "c", "bucket": "procedure", "summary": "s", "paths": ["daily/y.md"]},
        {"name": "d", "bucket": "procedure", "summary": "s", "paths": ["daily/z.md", "daily/x.md"]},
    ]})
    units, deferred = clean_units(extraction, ["daily/x.md", "daily/y.md", "daily/z.md"], max_units=2)
    assert [(u.name, u.bucket, u.paths) for u in units] == [("a", "wiki", ["daily/x.md"]),
                                                             ("c", "procedure", ["daily/y.md"])]
    assert deferred == ["daily/z.md"]


def test_link_guard():
    before = "A [[digest/wiki/x.md]] and [[daily/2024-05-08/a.md#L2]]."
    link_guard("n.md", before, before + " more [[digest/wiki/y.md]]")
    link_guard("n.md", before, "[[daily/2024-05-08/a.md#L3-L9]] [[digest/wiki/x.md]]")  # anchors may change
    with pytest.raises(WriteRejected, match="daily/2024-05-08/a.md"):
        link_guard("n.md", before, "A [[digest/wiki/x.md]].")


def test_ensure_sources_adds_missing_sentences_only():
    body = "# Lisbon\n\nText.\n\n## Sources\n\n- 2024-05-07: met ([[daily/a.md]]).\n\n## Notes\n\nn\n"
    out = ensure_sources(body, ["daily/a.md", "daily/b.md"], "Ana moved. Then more.", "2024-05-08")
    assert "- 2024-05-08: Ana moved ([[daily/b.md]]).\n\n## Notes" in out
    assert out.count("[[daily/a.md]]") == 1
    assert ensure_sources(out, ["daily/a.md", "daily/b.md"], "x", "d") == out
    fresh = ensure_sources("Just text.", ["daily/c.md"], "Fact", "2024-05-08")
    assert fresh.endswith("## Sources\n\n- 2024-05-08: Fact ([[daily/c.md]]).\n")


def test_apply_decision_rejects_dropped_links(memory):
    memory.write("digest/wiki/lisbon.md", "Lisbon. See [[digest/wiki/portugal.md]].\n\n## Sources\n\n"
                 "- 2024-05-07: x ([[daily/2024-05-07/a.md]]).\n", name="Lisbon")
    unit = {"name": "Lisbon", "bucket": "wiki", "summary": "Ana lives in Lisbon.", "paths": ["daily/2024-05-08/b.md"]}
    bad = Decision(action="REFINE", target="digest/wiki/lisbon.md", content="Lisbon, rewritten without links.")
    before = memory.read("digest/wiki/lisbon.md", numbered=False)["content"]
    with pytest.raises(WriteRejected, match="portugal"):
        apply_decision(memory, unit, bad, "2024-05-08", wrote=[])
    assert memory.read("digest/wiki/lisbon.md", numbered=False)["content"] == before
    ok = apply_decision(memory, unit, Decision(action="corroborate", target="[[digest/wiki/lisbon.md]]"),
                        "2024-05-08", wrote=[])
    assert ok == {"action": "CORROBORATE", "target": "digest/wiki/lisbon.md"}
    text = memory.read("digest/wiki/lisbon.md", numbered=False)["content"]
    assert "[[daily/2024-05-08/b.md]]" in text and "[[digest/wiki/portugal.md]]" in text


def test_apply_decision_create_picks_a_digest_path(memory):
    unit = {"name": "Sourdough", "bucket": "procedure", "summary": "How to feed a starter.", "paths": ["daily/d/a.md"]}
    out = apply_decision(memory, unit, Decision(action="CREATE", target="notes/elsewhere.md", name="Sourdough",
                                                content="Feed daily."), "2024-05-08", wrote=[])
    assert out["target"] == "digest/procedure/sourdough.md"
    with pytest.raises(Exception, match="does not exist"):
        apply_decision(memory, unit, Decision(action="REFINE", target="digest/wiki/none.md", content="x"), "d", [])


# ---- toolbox ------------------------------------------------------------------------------------------------

def test_toolbox_restricts_writes_and_guards_links(memory, ws):
    memory.write("digest/wiki/a.md", "A links [[digest/wiki/b.md]].")
    box = Toolbox(memory, ws, can_write=lambda p: p.startswith("digest/"), write_scope="under digest/",
                  guard=link_guard)
    assert {s["function"]["name"] for s in box.schemas()} >= {"read", "search", "write", "edit"}
    assert "delete" not in {s["function"]["name"] for s in box.schemas()}
    refused = box.call("write", json.dumps({"path": "daily/2024-05-08/x.md", "content": "no"}))
    assert "only write under digest/" in refused["error"]
    assert box.call("delete", {"path": "digest/wiki/a.md"})["error"].startswith("unknown tool")
    assert "error" in box.call("read", {"path": "../outside.md"})
    assert box.call("append", {"path": "digest/wiki/a.md", "content": "More."})["path"] == "digest/wiki/a.md"
    with pytest.raises(WriteRejected):
        box.call("edit", {"path": "digest/wiki/a.md", "old": " links [[digest/wiki/b.md]]", "new": ""})
    assert "[[digest/wiki/b.md]]" in memory.read("digest/wiki/a.md", numbered=False)["content"]
    assert box.written == ["digest/wiki/a.md"]


def test_predict_matches_memory_write(memory):
    memory.write("digest/wiki/p.md", "---\nname: P\nkeep: 1\n---\nOld [[x.md]].\n")
    before = memory.read("digest/wiki/p.md", numbered=False)["content"]
    args = {"content": "---\nnew: 2\n---\nNew body.\n", "description": "d"}
    expected = predict("write", before, args)
    memory.write("digest/wiki/p.md", **args)
    assert memory.read("digest/wiki/p.md", numbered=False)["content"] == expected


# ---- topics -------------------------------------------------------------------------------------------------

def test_topic_dedup():
    assert interests.near_duplicate("Learning Portuguese", "learn portuguese")
    assert not interests.near_duplicate("Learning Portuguese", "Lisbon apartment search")
    topics = [interests.Topic(title=t, reason="r") for t in ("Portuguese lessons", "portuguese lesson", "Rent")]
    assert [t.title for t in interests.fresh(topics, avoid=["rent"])] == ["Portuguese lessons"]


def test_interests_read_errors(memory):
    assert interests.load(memory, "2024-05-08") is None
    memory.write("daily/2024-05-08/interests.yaml", "topics: [unclosed")
    with pytest.raises(InvalidInput, match="not readable YAML"):
        interests.load(memory, "2024-05-08")
    memory.write("daily/2024-05-08/interests.yaml", "topics:\n  - title: T\n")
    with pytest.raises(InvalidInput, match="reason"):
        interests.load(memory, "2024-05-08")
