"""auto_memory, auto_resource, proactive and the maintenance flows: real Prefect runs, scripted LLM server."""

import json
import logging

import numpy as np
import pytest

from flows.auto_memory import auto_memory
from flows.auto_resource import auto_resource
from flows.maintenance import optimize, reindex
from flows.proactive import proactive
from engine.llm import AnswerRefused
from llm_server import Reply, json_reply, misbehave, tool_reply
from storage import vectors
from storage.db import IndexDB
from engine.llm import LLMError
from storage.errors import InvalidInput
from storage.memory import Memory
from tasks import checkpoints, dialog, usage

CARD = "Summarise the new messages"
RESOURCE = "Distil one resource"
DAY = "2024-05-08"


@pytest.fixture
def memory(ws) -> Memory:
    return Memory(ws.root)


def text(memory: Memory, path: str) -> str:
    return memory.read(path, numbered=False)["content"]


def user_message(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def card_prompt(llm, session: str) -> str:
    """The first card request of `session` among what the scripted server was sent."""
    return next(p for p in map(user_message, llm.requests) if f"\nSession: {session}\n" in p)


def msg(content: str, hour: int, role: str = "user", day: str = DAY) -> dict:
    return {"role": role, "content": content, "timestamp": f"{day}T{hour:02d}:00:00"}


# ---- auto_memory --------------------------------------------------------------------------------------------

def test_auto_memory_writes_then_renames_the_card(prefect_harness, llm, memory, ws):
    llm.on(CARD, json_reply({"name": "Trip planning", "description": "Planning a trip",
                             "content": "# Trip\n\n- Going to Lisbon in June."}))
    first = auto_memory(session_id="s1", workspace=str(ws.root), messages=[
        msg("Let's plan my trip to Lisbon in June", 9), {"role": "tool", "content": "search results"},
        msg("Sure: flights first.", 10, "assistant")])

    card = f"daily/{DAY}/trip-planning.md"
    assert (first["card"], first["created"], first["summarised"]) == (card, True, [0, 2])
    meta = memory.frontmatter_get(card)["frontmatter"]
    assert meta["session_id"] == "s1" and meta["source_conversation"] == "[[session/dialog/s1.jsonl]]"
    assert f"[[{card}|Trip planning]]" in text(memory, f"daily/{DAY}.md")
    records = [json.loads(line) for line in text(memory, "session/dialog/s1.jsonl").splitlines()]
    assert [r["role"] for r in records] == ["user", "assistant"] and records[0]["created_at"].startswith(DAY)
    assert "search results" not in card_prompt(llm, "s1")
    assert checkpoints.load(ws, "sessions/s1")["records"] == 2

    memory.write("digest/wiki/lisbon.md", f"Trip notes in [[{card}]].", name="Lisbon")
    llm.reset()
    llm.on(CARD, json_reply({"name": "Lisbon trip in June", "description": "Flights and hotel",
                             "content": "# Lisbon trip\n\n- Flights booked.\n- Hotel in Alfama."}))
    second = auto_memory(session_id="s1", workspace=str(ws.root), messages=[msg("Booked flights; hotel in Alfama", 11)])

    renamed = f"daily/{DAY}/lisbon-trip-in-june.md"
    assert (second["card"], second["renamed_from"], second["summarised"]) == (renamed, card, [2, 3])
    prompt = card_prompt(llm, "s1")
    assert "Booked flights" in prompt and "Let's plan my trip" not in prompt  # only new messages...
    assert "Going to Lisbon in June" in prompt  # ...plus the current card
    assert f"[[{renamed}]]" in text(memory, "digest/wiki/lisbon.md")  # inbound link retargeted
    assert not ws.exists(card) and "Hotel in Alfama" in text(memory, renamed)
    assert f"[[{renamed}|Lisbon trip in June]]" in text(memory, f"daily/{DAY}.md")


def test_auto_memory_from_session_jsonl_with_checkpoint(prefect_harness, llm, memory, ws):
    # The service appends turns as they happen, then runs auto_memory with the session id only.
    dialog.append_messages(memory, "chat-7", [msg("I adopted a cat named Miso", 8), msg("Lovely!", 8, "assistant")])
    llm.on(CARD, Reply(content="not json"), Reply(content="still not json"))
    state = auto_memory(session_id="chat-7", workspace=str(ws.root), return_state=True)
    assert state.is_failed()
    assert checkpoints.load(ws, "sessions/chat-7") == {}  # a failed run leaves every turn pending

    dialog.append_messages(memory, "chat-7", [msg("Miso is 2 years old", 9)])
    llm.reset()
    llm.on(CARD, json_reply({"name": "Miso the cat", "description": "A new cat", "content": "- Cat Miso, 2 years."}))
    done = auto_memory(session_id="chat-7", workspace=str(ws.root))
    assert done["summarised"] == [0, 3] and done["card"] == f"daily/{DAY}/miso-the-cat.md"
    prompt = card_prompt(llm, "chat-7")
    assert "adopted a cat" in prompt and "2 years old" in prompt
    assert checkpoints.load(ws, "sessions/chat-7")["records"] == 3

    llm.reset()
    assert auto_memory(session_id="chat-7", workspace=str(ws.root))["skipped"] == "no new messages"
    assert llm.requests == []


def test_auto_memory_agent_writes_only_its_card(prefect_harness, llm, memory, ws):
    draft = f"daily/{DAY}/session-s9.md"
    llm.on(CARD,
           tool_reply("write", {"path": "digest/wiki/hack.md", "content": "not allowed"}),
           tool_reply("write", {"path": draft, "content": "- Tool-written card."}),
           json_reply({"name": "Notes from s9", "description": "d", "content": None}))
    out = auto_memory(session_id="s9", workspace=str(ws.root), date=DAY, messages=[{"role": "user", "content": "x"}])
    assert out["card"] == f"daily/{DAY}/notes-from-s9.md"
    assert "Tool-written card" in text(memory, out["card"]) and not ws.exists(draft)
    assert not ws.exists("digest/wiki/hack.md")
    refusal = json.loads(next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")["content"])
    assert "may only write the card" in refusal["error"]


# ---- auto_resource ------------------------------------------------------------------------------------------

def test_auto_resource_create_update_unchanged_delete(prefect_harness, llm, memory, ws):
    res = f"resource/{DAY}/recipe.md"
    ws.write_text(res, "# Pancakes\n\n200 g flour, 2 eggs, 300 ml milk.")
    llm.on(RESOURCE, json_reply({"name": "Pancake recipe", "description": "Pancakes",
                                 "content": f"- 200 g flour, 2 eggs ([[{res}]])"}))
    created = auto_resource(path=res, workspace=str(ws.root))
    card = f"daily/{DAY}/pancake-recipe.md"
    assert (created["action"], created["path"]) == ("created", card)
    assert memory.frontmatter_get(card)["frontmatter"]["source_resource"] == f"[[{res}]]"
    assert "300 ml milk" in user_message(llm.requests[0])

    llm.reset()
    assert auto_resource(path=res, workspace=str(ws.root))["action"] == "unchanged" and llm.requests == []

    ws.write_text(res, "# Pancakes\n\n250 g flour, 3 eggs.")
    llm.on(RESOURCE, json_reply({"name": "Pancake recipe", "description": "Pancakes v2",
                                 "content": "- 250 g flour, 3 eggs"}))
    updated = auto_resource(path=res, workspace=str(ws.root))
    assert (updated["action"], updated["path"]) == ("updated", card)
    assert "250 g flour" in text(memory, card) and "The current card" in user_message(llm.requests[0])

    ws.resolve(res).unlink()
    deleted = auto_resource(path=res, workspace=str(ws.root))
    assert (deleted["action"], deleted["path"]) == ("deleted", card) and not ws.exists(card)
    assert card not in text(memory, f"daily/{DAY}.md")
    assert res not in checkpoints.load(ws, "resources")


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
    ws.write_text(f"resource/{DAY}/x.md", "# X\n")
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


def test_auto_memory_never_takes_a_text_tool_call_for_the_card(prefect_harness, llm, memory, ws):
    """A local server that writes tool calls as text (the 0.5B model's `{"name": "edit", ...}`): the call is not
    read as a card named "edit"; auto mode asks again without tools, and remembers it for the endpoint."""
    llm.on(CARD, json_reply({"name": "edit", "arguments": {"path": f"daily/{DAY}/x.md", "old": "a", "new": "b"}}),
           json_reply({"name": "Lisbon move", "description": "Moving to Lisbon", "content": "- Moving in May."}))
    result = auto_memory(session_id="s9", workspace=str(ws.root), messages=[msg("I move to Lisbon in May", 9)])

    assert result["card"] == f"daily/{DAY}/lisbon-move.md"
    first, second = llm.requests
    assert "tools" in first and "tools" not in second
    assert "Moving in May" in text(memory, result["card"])
    kinds = result["usage"]["kinds"]
    assert kinds["card"]["calls"] == 2 and kinds["card"]["first_try"] == 1
    entry = usage.recent(str(ws.root))[0]
    assert entry["job"] == "auto-memory" and entry["calls"] == 2 and entry["run_id"]


# ---- quality gates: what a small model copies is never written ------------------------------------------------

@pytest.mark.parametrize("copied", [None, "card"])
def test_auto_memory_never_writes_the_repair_turns_example(prefect_harness, llm, memory, ws, copied):
    """Prose first, then the example copied (what the repair turn shows now, or the former example): the card
    is refused, nothing is written, the run fails with exit 9 and the next run summarises the same turns."""
    misbehave(llm, CARD, copied)
    messages = [msg("My sister Ana moved from Lisbon to Porto", 9), msg("Is she still at the bakery?", 9, "assistant")]
    state = auto_memory(session_id="s1", workspace=str(ws.root), messages=messages, return_state=True)

    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, AnswerRefused) and error.exit_code == 9 and "rule `" in str(error)
    assert not ws.exists(f"daily/{DAY}") or memory.list(f"daily/{DAY}")["entries"] == []
    assert checkpoints.load(ws, "sessions/s1") == {}
    logged = usage.recent(str(ws.root))[0]
    assert logged["job"] == "auto-memory" and sum(logged["gates"].values()) >= 1
    assert "Content checks" in read_artifact("auto-memory-usage")

    llm.reset()
    llm.on(CARD, json_reply({"name": "Ana moved to Porto", "description": "Ana's move",
                             "content": "- Ana moved from Lisbon to Porto."}))
    done = auto_memory(session_id="s1", workspace=str(ws.root))
    assert done["summarised"] == [0, 2] and "Porto" in text(memory, done["card"])
    assert done["usage"]["gates"] == {}


@pytest.mark.parametrize("copied", [None, "card"])
def test_auto_resource_never_writes_the_repair_turns_example(prefect_harness, llm, memory, ws, copied):
    res = f"resource/{DAY}/recipe.md"
    ws.write_text(res, "# Pancakes\n\n200 g flour, 2 eggs, 300 ml milk.")
    misbehave(llm, RESOURCE, copied)
    state = auto_resource(path=res, workspace=str(ws.root), return_state=True)

    assert state.is_failed() and state.result(raise_on_failure=False).exit_code == 9
    assert not ws.exists(f"daily/{DAY}") or memory.list(f"daily/{DAY}")["entries"] == []
    assert res not in checkpoints.load(ws, "resources")

    llm.reset()
    llm.on(RESOURCE, json_reply({"name": "Pancake recipe", "description": "Pancakes", "content": "- 200 g flour"}))
    assert auto_resource(path=res, workspace=str(ws.root))["action"] == "created"


def test_a_tool_written_card_that_is_refused_is_undone(prefect_harness, llm, memory, ws):
    draft = f"daily/{DAY}/session-s5.md"
    llm.on(CARD, tool_reply("write", {"path": draft, "content": "{{daily_list(date=2024-05-08)}}"}),
           json_reply({"name": "daily_list", "description": "d", "content": None}),
           json_reply({"name": "daily_list", "description": "d", "content": None}))
    state = auto_memory(session_id="s5", workspace=str(ws.root), messages=[msg("Ana moved to Porto", 9)],
                        return_state=True)
    assert state.is_failed() and not ws.exists(draft)
    assert "rule `tool`" in llm.requests[-1]["messages"][-1]["content"]


def read_artifact(key: str) -> str:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return next(a.data for a in client.read_latest_artifacts() if a.key == key)
