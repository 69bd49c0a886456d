"""auto_memory, auto_resource, proactive and the maintenance flows: real Prefect runs, scripted LLM server.

Cards are facts: the model lists small facts, code checks each one and writes the card."""

import json
import logging

import numpy as np
import pytest

from engine.models import usage_log
from engine.models.llm import AnswerRefused, LLMError
from flows.auto_memory import auto_memory
from flows.auto_resource import auto_resource
from flows.maintenance import optimize, reindex
from flows.proactive import proactive
from llm_server import Reply, answer_by_message, fact, json_reply, misbehave
from storage.errors import InvalidInput
from storage.files import checkpoints
from storage.index import vectors
from storage.index.db import IndexDB
from storage.memory import Memory
from storage.text import facts

FACTS = "list the facts worth remembering"
DAY = "2026-11-05"


@pytest.fixture
def memory(ws) -> Memory:
    return Memory(ws.root)


def msg(content: str, minute: int, role: str = "user", day: str = DAY) -> dict:
    return {"role": role, "content": content, "created_at": f"{day}T18:{minute:02d}:00"}


STORY = [msg("Hi! Big news: I moved to Porto yesterday.", 0), msg("Congratulations!", 1, "assistant"),
         msg("My sister Ana works at a bakery in Alfama.", 2), msg("Nice.", 3, "assistant"),
         msg("I prefer green tea over coffee these days.", 4)]


def card_of(memory: Memory, result: dict) -> tuple[str, list[facts.Fact]]:
    text = memory.read(result["card"], numbered=False)["content"]
    return text, facts.parse(text)


def test_a_card_is_the_checked_facts_each_citing_its_message(prefect_harness, llm, memory, ws):
    answer_by_message(llm, "Moving to Porto and family",
                      ("moved to Porto", fact("The user moved to Porto yesterday.", kind="event")),
                      ("sister Ana", fact("Ana, the user's sister, works at a bakery in Alfama.", about="Ana"), -1),
                      ("green tea", fact("The user prefers green tea over coffee.", kind="preference")))
    out = auto_memory(session_id="s1", workspace=str(ws.root), messages=STORY)

    assert out["card"] == f"daily/{DAY}/moving-to-porto-and-family.md" and out["facts"] == 3
    text, found = card_of(memory, out)
    by_text = {f.text: f for f in found}
    moved = by_text["The user moved to Porto on 2026-11-04."]  # the relative time resolved by code
    assert moved.kind == "event" and moved.date == "2026-11-04" and moved.id
    assert moved.sources == ("session/dialog/s1.jsonl#L1",) and moved.labels == ("2026-11-05 18:00",)
    ana = by_text["Ana, the user's sister, works at a bakery in Alfama."]
    assert ana.sources == ("session/dialog/s1.jsonl#L3",) and ana.about == "Ana"  # re-cited to the right message
    assert out["recited"] == 1
    assert by_text["The user prefers green tea over coffee."].kind == "preference"
    assert text.index("## Facts") < text.index("## Preferences") < text.index("## Events")
    # the citation opens the message it names
    line = int(moved.sources[0].rsplit("#L", 1)[1])
    record = json.loads(memory.read("session/dialog/s1.jsonl", start_line=line, end_line=line,
                                    numbered=False)["content"])
    assert "moved to Porto yesterday" in record["content"]
    meta = memory.frontmatter_get(out["card"])["frontmatter"]
    assert meta["name"] == "Moving to Porto and family" and "Porto" in meta["description"]
    assert meta["session_id"] == "s1" and meta["source_conversation"] == "[[session/dialog/s1.jsonl]]"
    assert checkpoints.load(ws, "sessions/s1")["records"] == 5
    turns = [r["messages"][1]["content"] for r in llm.requests]  # one call a turn: a user message, what came before
    assert len(turns) == 3 and "[1] user, 2026-11-05 18:00: Hi! Big news" in turns[0]
    assert "[1] assistant, 2026-11-05 18:01: Congratulations!" in turns[1] and "[2] user" in turns[1]
    assert llm.requests[0]["response_format"]["type"] == "json_schema"


def test_a_half_bad_answer_keeps_the_good_facts_and_reports_the_rest(prefect_harness, llm, memory, ws):
    answer_by_message(llm, "Ana", *(("sister Ana", f) for f in (
        fact("Ana works at a bakery in Alfama.", about="Ana"),
        fact("Ana is a famous pianist in Vienna.", about="Ana"),          # not in any message
        fact("<string>"),                                                  # a placeholder
        fact("Call daily_list(date=2026-11-05) for more."),               # a tool call
        fact("Ana works at a bakery in Alfama.", about="Ana"))))           # said twice
    out = auto_memory(session_id="s2", workspace=str(ws.root), messages=STORY)

    _, found = card_of(memory, out)
    assert [f.text for f in found] == ["Ana works at a bakery in Alfama.", "Big news: I moved to Porto on 2026-11-04."]
    assert out["unsaid"] == 1  # the move no fact cited: kept in the user's words
    rules = sorted(d["rule"] for d in out["dropped"])
    assert rules == ["duplicate", "markup", "tool", "ungrounded"]
    assert out["usage"]["gates"] == {"duplicate": 1, "markup": 1, "tool": 1, "ungrounded": 1}


def test_nothing_usable_fails_the_run_and_keeps_the_messages(prefect_harness, llm, memory, ws):
    llm.responder = lambda body: json_reply({"title": "x", "facts": [fact("The user owns a yacht in Monaco.")]})
    state = auto_memory(session_id="s3", workspace=str(ws.root), messages=STORY, return_state=True)
    assert state.is_failed()
    assert "ungrounded" in str(state.result(raise_on_failure=False))
    assert checkpoints.load(ws, "sessions/s3") == {} and not ws.exists(f"daily/{DAY}")
    repair = llm.requests[1]["messages"][-1]["content"]
    assert "could not be used" in repair and "ungrounded" in repair

    llm.reset()
    llm.on(FACTS, Reply(content="I think the user moved."), Reply(content="still no json"))
    state = auto_memory(session_id="s3", workspace=str(ws.root), return_state=True)
    assert state.is_failed() and checkpoints.load(ws, "sessions/s3") == {}


def test_small_talk_writes_no_card_and_moves_on(prefect_harness, llm, memory, ws):
    llm.on(FACTS, json_reply({"title": "Greetings", "facts": []}))
    out = auto_memory(session_id="s4", workspace=str(ws.root), messages=[msg("hi", 0), msg("hello!", 1, "assistant")])
    assert out["card"] is None and out["facts"] == 0 and not ws.exists(f"daily/{DAY}")
    assert checkpoints.load(ws, "sessions/s4")["records"] == 2


def test_new_messages_add_facts_to_the_same_card(prefect_harness, llm, memory, ws):
    answer_by_message(llm, "Tea", ("green tea", fact("The user prefers green tea over coffee.", kind="preference")))
    first = auto_memory(session_id="s5", workspace=str(ws.root), messages=STORY[3:])
    llm.reset()
    llm.on(FACTS, json_reply({"title": "Something else", "facts": [
        fact("The user prefers green tea over coffee.", kind="preference", source=[1]),
        fact("The user starts a pottery class next Tuesday.", kind="plan", source=[1])]}))
    second = auto_memory(session_id="s5", workspace=str(ws.root),
                         messages=[msg("I prefer green tea over coffee. I start a pottery class next Tuesday.", 9)])
    assert second["card"] == first["card"] and second["facts"] == 1
    _, found = card_of(memory, second)
    assert [(f.id, f.kind) for f in found] == [("f1", "preference"), ("f2", "plan")]
    plan = found[1]
    assert plan.text == "The user starts a pottery class on Tuesday 2026-11-10." and plan.date == "2026-11-10"
    assert plan.sources == ("session/dialog/s5.jsonl#L3",)
    assert "Something else" not in memory.read(first["card"], numbered=False)["content"]  # the name stays

def test_auto_memory_from_session_jsonl_with_checkpoint(prefect_harness, llm, memory, ws):
    # The service appends turns as they happen, then runs auto_memory with the session id only.
    from storage.files import dialog

    dialog.append_messages(memory, "chat-7", [msg("I adopted a cat named Miso", 8), msg("Lovely!", 9, "assistant")])
    llm.on(FACTS, Reply(content="not json"), Reply(content="still not json"))
    state = auto_memory(session_id="chat-7", workspace=str(ws.root), return_state=True)
    assert state.is_failed()
    assert checkpoints.load(ws, "sessions/chat-7") == {}  # a failed run leaves every turn pending

    dialog.append_messages(memory, "chat-7", [msg("Miso is 2 years old", 10)])
    llm.reset()
    answer_by_message(llm, "Miso the cat", ("adopted a cat", fact("The user adopted a cat named Miso.")),
                      ("2 years old", fact("Miso is 2 years old.", "Miso")))
    done = auto_memory(session_id="chat-7", workspace=str(ws.root))
    assert done["summarised"] == [0, 3] and done["card"] == f"daily/{DAY}/miso-the-cat.md" and done["facts"] == 2
    prompts = "".join(r["messages"][1]["content"] for r in llm.requests)
    assert "adopted a cat" in prompts and "2 years old" in prompts
    assert checkpoints.load(ws, "sessions/chat-7")["records"] == 3

    llm.reset()
    assert auto_memory(session_id="chat-7", workspace=str(ws.root))["skipped"] == "no new messages"
    assert llm.requests == []


def test_a_long_conversation_is_read_in_runs_a_small_model_takes(prefect_harness, llm, memory, ws, monkeypatch):
    from storage.files import dialog

    monkeypatch.setattr(dialog, "MAX_PROMPT_CHARS", 300)
    messages = [msg(f"Fact number {n}: the user owns {n} plants of kind {n}.", n) for n in range(1, 9)]
    llm.responder = lambda body: json_reply({"title": "Plants", "facts": [
        fact(line.split(": ", 2)[2], source=[int(line[1:line.index("]")])])
        for line in body["messages"][1]["content"].splitlines() if line.startswith("[")]})
    out = auto_memory(session_id="s6", workspace=str(ws.root), messages=messages)
    assert len(llm.requests) > 1 and out["facts"] == 8 and out["summarised"] == [0, 8]
    _, found = card_of(memory, out)
    assert [f.sources[0] for f in found] == [f"session/dialog/s6.jsonl#L{n}" for n in range(1, 9)]


def test_auto_resource_create_update_unchanged_delete(prefect_harness, llm, memory, ws):
    res = f"resource/{DAY}/recipe.md"
    ws.write_text(res, "# Pancakes\n\n200 g flour, 2 eggs, 300 ml milk.\n")
    llm.on(FACTS, json_reply({"title": "Pancake recipe", "facts": [
        fact("Pancakes take 200 g flour, 2 eggs and 300 ml milk.", "pancakes", "procedure")]}))
    created = auto_resource(path=res, workspace=str(ws.root))
    card = f"daily/{DAY}/pancake-recipe.md"
    assert (created["action"], created["path"]) == ("created", card)
    assert memory.frontmatter_get(card)["frontmatter"]["source_resource"] == f"[[{res}]]"
    assert "300 ml milk" in llm.requests[0]["messages"][1]["content"]

    llm.reset()
    assert auto_resource(path=res, workspace=str(ws.root))["action"] == "unchanged" and llm.requests == []

    ws.write_text(res, "# Pancakes\n\n250 g flour, 3 eggs.\n\nServe with lemon.\n")
    llm.on(FACTS, json_reply({"title": "Pancakes v2", "facts": [
        fact("Pancakes take 250 g flour and 3 eggs.", "pancakes", "procedure"),
        fact("Serve the pancakes with lemon.", "pancakes", "procedure", source=[2])]}))
    updated = auto_resource(path=res, workspace=str(ws.root))
    assert (updated["action"], updated["path"]) == ("updated", card)
    found = facts.parse(memory.read(card, numbered=False)["content"])
    assert [(f.id, f.text) for f in found] == [("f2", "Pancakes take 250 g flour and 3 eggs."),
                                               ("f3", "Serve the pancakes with lemon.")]  # ids never reused

    ws.resolve(res).unlink()
    deleted = auto_resource(path=res, workspace=str(ws.root))
    assert (deleted["action"], deleted["path"]) == ("deleted", card) and not ws.exists(card)
    assert card not in memory.read(f"daily/{DAY}.md", numbered=False)["content"]
    assert res not in checkpoints.load(ws, "resources")


def test_a_resource_card_cites_the_resource_lines(prefect_harness, llm, memory, ws):
    memory.upload_content(b"# Sourdough\n\nFeed the starter every 12 hours.\nUse equal weights of flour and water.\n\n"
                          b"Bake at 250 degrees for 40 minutes.\n", "sourdough.md", date="2026-11-05")
    llm.on(FACTS, json_reply({"title": "Sourdough basics", "facts": [
        fact("Feed the starter every 12 hours with equal weights of flour and water.", about="sourdough",
             kind="procedure", source=[1]),
        fact("Bake at 250 degrees for 40 minutes.", about="sourdough", kind="procedure", source=[2])]}))
    out = auto_resource(path="resource/2026-11-05/sourdough.md", workspace=str(ws.root))
    text = memory.read(out["path"], numbered=False)["content"]
    found = facts.parse(text)
    assert [f.sources for f in found] == [("resource/2026-11-05/sourdough.md#L3-L4",),
                                          ("resource/2026-11-05/sourdough.md#L6",)]
    assert "## How-to" in text and memory.frontmatter_get(out["path"])["frontmatter"]["source_resource"]


def test_auto_resource_skips_binary_and_refuses_other_folders(prefect_harness, llm, ws):
    ws.write_bytes("resource/photo.jpg", b"\xff\xd8\xff")
    assert "not a text resource" in auto_resource(path="resource/photo.jpg", workspace=str(ws.root))["skipped"]
    with pytest.raises(InvalidInput, match="not a resource"):
        auto_resource(path="daily/x.md", workspace=str(ws.root))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record):
        self.lines.append(self.format(record))


def test_an_unreachable_llm_fails_the_run_with_a_short_message_naming_the_endpoint(prefect_harness, llm, ws,
                                                                                    monkeypatch):
    from service_harness import free_port

    dead = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("DREAMFLOW_LLM_BASE_URL", dead)
    ws.write_text(f"resource/{DAY}/x.md", "# X\n\nAna moved to Porto.\n")
    records = _Records()
    loggers = [logging.getLogger(name) for name in ("prefect.flow_runs", "prefect.task_runs")]
    for logger in loggers:
        logger.addHandler(records)
    try:
        state = auto_resource(path=f"resource/{DAY}/x.md", workspace=str(ws.root), return_state=True)
        try:
            raise KeyError("a bug")
        except KeyError:  # an unexpected error keeps its traceback
            loggers[1].error("Task run failed with exception: KeyError('a bug')", exc_info=True)
    finally:
        for logger in loggers:
            logger.removeHandler(records)
    error = state.result(raise_on_failure=False)
    assert state.is_failed() and isinstance(error, LLMError)
    assert dead in str(error) and "DREAMFLOW_LLM_BASE_URL" in str(error) and llm.model in str(error)
    text = "\n".join(records.lines)
    expected, unexpected = text.split("KeyError('a bug')", 1)
    assert "Task run failed" in expected and dead in expected and "Traceback" not in expected, expected
    assert "Traceback" in unexpected and "a bug" in unexpected


# ---- proactive and maintenance ------------------------------------------------------------------------------

def test_proactive(prefect_harness, memory, ws):
    assert proactive(date=DAY, workspace=str(ws.root))["skipped"] == f"no daily/{DAY}/interests.yaml"
    memory.write(f"daily/{DAY}/note.md", "Lisbon flat hunting")
    memory.write(f"daily/{DAY}/interests.yaml", "date: 2024-05-08\ntopics:\n  - title: Flats\n    reason: moving\n"
                 f"    paths: [daily/{DAY}/note.md]\n")
    out = proactive(date=DAY, include_content=True, workspace=str(ws.root))
    assert out["topics"][0]["title"] == "Flats" and "flat hunting" in out["topics"][0]["content"][f"daily/{DAY}/note.md"]
    memory.write(f"daily/{DAY}/interests.yaml", "topics: [oops")
    state = proactive(date=DAY, workspace=str(ws.root), return_state=True)
    assert state.is_failed() and "not readable YAML" in str(state.result(raise_on_failure=False))


def test_maintenance_flows(prefect_harness, memory, ws):
    memory.write("digest/wiki/a.md", "Alpha beta.")
    out = reindex(workspace=str(ws.root))
    assert out["rebuilt"] and out["stats"]["files"] >= 1
    ws.write_text("digest/wiki/b.md", "Gamma written behind Dreamflow's back.")
    with IndexDB(ws).session() as con:  # vectors of a text no chunk has any more (an edited-away version)
        vectors.use_model(con, "test-model", 2)
        vectors.store(con, "test-model", [("gone-text-hash", np.ones((1, 2), dtype=np.float32))])
    out = optimize(workspace=str(ws.root))
    assert out["reconciled"]["added"] == 1 and out["compacted"] is True and out["vectors_pruned"] == 1
    assert memory.search("gamma")[0]["path"] == "digest/wiki/b.md"


def test_a_tool_call_written_as_text_is_not_a_card(prefect_harness, llm, memory, ws):
    """A local server that writes a tool call as text (the 0.5B model's `{"name": "edit", ...}`) gets the repair
    turn; its next answer is the card."""
    llm.on(FACTS, json_reply({"name": "edit", "arguments": {"path": f"daily/{DAY}/x.md", "old": "a", "new": "b"}}),
           json_reply({"title": "Lisbon move", "facts": [fact("The user moves to Lisbon in May.", kind="plan")]}))
    result = auto_memory(session_id="s9", workspace=str(ws.root), messages=[msg("I move to Lisbon in May", 9)])

    assert result["card"] == f"daily/{DAY}/lisbon-move.md"
    assert "written a call of the tool" in llm.requests[1]["messages"][-1]["content"] or \
        "call of the tool" in llm.requests[1]["messages"][-1]["content"]
    kinds = result["usage"]["kinds"]
    assert kinds["card"]["answers"] == 1 and kinds["card"]["first_try"] == 0 and kinds["card"]["repairs"] == 1
    entry = usage_log.recent(str(ws.root))[0]
    assert entry["job"] == "auto-memory" and entry["calls"] == 2 and entry["run_id"]


# ---- quality gates: what a small model copies is never written ------------------------------------------------

@pytest.mark.parametrize("flow", ["auto-memory", "auto-resource"])
def test_the_repair_turns_shape_copied_is_never_written(prefect_harness, llm, memory, ws, flow):
    """Prose first, then the shape the repair turn shows copied (placeholders): every fact is refused, nothing
    is written, the run fails with exit 9 and the next run reads the same material."""
    misbehave(llm, FACTS)
    res = f"resource/{DAY}/recipe.md"
    if flow == "auto-memory":
        state = auto_memory(session_id="s1", workspace=str(ws.root), return_state=True,
                            messages=[msg("My sister Ana moved from Lisbon to Porto", 9)])
    else:
        ws.write_text(res, "# Pancakes\n\n200 g flour, 2 eggs, 300 ml milk.\n")
        state = auto_resource(path=res, workspace=str(ws.root), return_state=True)

    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, AnswerRefused) and error.exit_code == 9 and "rule `markup`" in str(error)
    assert not ws.exists(f"daily/{DAY}") or memory.list(f"daily/{DAY}")["entries"] == []
    assert checkpoints.load(ws, "sessions/s1") == {} and res not in checkpoints.load(ws, "resources")
    logged = usage_log.recent(str(ws.root))[0]
    assert logged["job"] == flow and logged["gates"]["markup"] >= 1
    assert "Content checks" in read_artifact(f"{flow}-usage")

    llm.reset()
    llm.responder = None
    llm.on(FACTS, json_reply({"title": "Ana moved", "facts": [fact("Ana moved from Lisbon to Porto.", "Ana")]
                              if flow == "auto-memory" else
                              [fact("Pancakes take 200 g flour, 2 eggs and 300 ml milk.", "pancakes")]}))
    done = auto_memory(session_id="s1", workspace=str(ws.root)) if flow == "auto-memory" else \
        auto_resource(path=res, workspace=str(ws.root))
    assert (done.get("summarised") == [0, 1]) if flow == "auto-memory" else done["action"] == "created"
    assert done["usage"]["gates"] == {}


def read_artifact(key: str) -> str:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return next(a.data for a in client.read_latest_artifacts() if a.key == key)


def test_a_turn_whose_facts_are_all_refused_leaves_the_others_standing(prefect_harness, llm, memory, ws):
    def respond(body):
        if "sister Ana" in body["messages"][1]["content"]:
            return json_reply({"title": "Ana", "facts": [fact("Ana's bakery has been renamed.", "Ana")]})
        return json_reply({"title": "Porto", "facts": [fact("The user moved to Porto yesterday.")]
                           if "moved to Porto" in body["messages"][1]["content"] else []})

    llm.responder = respond
    out = auto_memory(session_id="s7", workspace=str(ws.root), messages=STORY)
    _, found = card_of(memory, out)
    assert [f.text for f in found] == ["The user moved to Porto on 2026-11-04.", "My sister Ana works at a bakery in Alfama."]
    assert [d["rule"] for d in out["dropped"]] == ["ungrounded"]  # as the repaired answer stated it
    assert found[1].sources == ("session/dialog/s7.jsonl#L3",) and out["unsaid"] == 1  # the user's own words
    assert checkpoints.load(ws, "sessions/s7")["records"] == 5


def test_an_assistants_echo_is_filed_in_the_users_words_citing_the_user(prefect_harness, llm, memory, ws):
    """A turn shows the model the assistant's acknowledgement without the user's line it echoes."""
    answer_by_message(llm, "Car and flat", ("A green Fabia now", fact("A green Fabia now, noted.")),
                      ("Ms. Varga is your landlord now", fact("Ms. Varga is your landlord now.")))
    out = auto_memory(session_id="s1", workspace=str(ws.root), messages=[
        msg("I sold the Corolla and bought a green Škoda Fabia.", 0), msg("A green Fabia now, noted.", 1, "assistant"),
        msg("My new landlord is Ms. Varga.", 2), msg("Ms. Varga is your landlord now.", 3, "assistant")])

    _, found = card_of(memory, out)
    assert [(f.text, f.sources) for f in found] == [
        ("I sold the Corolla and bought a green Škoda Fabia.", ("session/dialog/s1.jsonl#L1",)),
        ("My new landlord is Ms. Varga.", ("session/dialog/s1.jsonl#L3",))]
    assert out["usage"]["gates"]["echo"] == 2 and out["echoes"] == 2  # docs/jobs.md: the result's `echoes`
