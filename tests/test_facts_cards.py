"""Cards as facts: auto_memory and auto_resource ask for small facts and code writes the card (real Prefect runs,
the scripted OpenAI-compatible server, a real workspace)."""

import json

import pytest

from flows.auto_memory import auto_memory
from flows.auto_resource import auto_resource
from llm_server import Reply, json_reply
from storage import facts
from storage.memory import Memory
from tasks import checkpoints

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


def fact(text, about="user", kind="fact", source=(1,), when=None) -> dict:
    return {"text": text, "about": about, "kind": kind, "when": when, "source": list(source)}


def card_of(memory: Memory, result: dict) -> tuple[str, list[facts.Fact]]:
    text = memory.read(result["card"], numbered=False)["content"]
    return text, facts.parse(text)


def test_a_card_is_the_checked_facts_each_citing_its_message(prefect_harness, llm, memory, ws):
    llm.on(FACTS, json_reply({"title": "Moving to Porto and family", "facts": [
        fact("The user moved to Porto yesterday.", kind="event", source=[1]),
        fact("Ana, the user's sister, works at a bakery in Alfama.", about="Ana", source=[4]),  # wrong number: 3
        fact("The user prefers green tea over coffee.", kind="preference", source=[5]),
    ]}))
    out = auto_memory(session_id="s1", workspace=str(ws.root), messages=STORY)

    assert out["card"] == f"daily/{DAY}/moving-to-porto-and-family.md" and out["facts"] == 3
    text, found = card_of(memory, out)
    by_text = {f.text: f for f in found}
    moved = by_text["The user moved to Porto on 2026-11-04."]  # the relative time resolved by code
    assert moved.kind == "event" and moved.date == "2026-11-04" and moved.id
    assert moved.sources == ("session/dialog/s1.jsonl#L1",) and moved.labels == ("2026-11-05 18:00",)
    ana = by_text["Ana, the user's sister, works at a bakery in Alfama."]
    assert ana.sources == ("session/dialog/s1.jsonl#L3",) and ana.about == "Ana"  # re-cited to the right message
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
    prompt = llm.requests[0]["messages"][1]["content"]
    assert "[1] user, 2026-11-05 18:00: Hi! Big news" in prompt and "[2] assistant" in prompt
    assert llm.requests[0]["response_format"]["type"] == "json_schema"


def test_a_half_bad_answer_keeps_the_good_facts_and_reports_the_rest(prefect_harness, llm, memory, ws):
    llm.on(FACTS, json_reply({"title": "Ana", "facts": [
        fact("Ana works at a bakery in Alfama.", about="Ana", source=[3]),
        fact("Ana is a famous pianist in Vienna.", about="Ana", source=[3]),          # not in any message
        fact("<string>", source=[1]),                                                  # a placeholder
        fact("Call daily_list(date=2026-11-05) for more.", source=[1]),               # a tool call
        fact("Ana works at a bakery in Alfama.", about="Ana", source=[3]),              # said twice
    ]}))
    out = auto_memory(session_id="s2", workspace=str(ws.root), messages=STORY)

    _, found = card_of(memory, out)
    assert [f.text for f in found] == ["Ana works at a bakery in Alfama."]
    rules = sorted(d["rule"] for d in out["dropped"])
    assert rules == ["duplicate", "markup", "tool", "ungrounded"]
    assert out["usage"]["gates"] == {"duplicate": 1, "markup": 1, "tool": 1, "ungrounded": 1}


def test_nothing_usable_fails_the_run_and_keeps_the_messages(prefect_harness, llm, memory, ws):
    invented = json_reply({"title": "x", "facts": [fact("The user owns a yacht in Monaco.", source=[1])]})
    llm.on(FACTS, invented, invented)
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
    llm.on(FACTS, json_reply({"title": "Tea", "facts": [fact("The user prefers green tea over coffee.",
                                                              kind="preference", source=[5])]}))
    first = auto_memory(session_id="s5", workspace=str(ws.root), messages=STORY)
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
    assert plan.sources == ("session/dialog/s5.jsonl#L6",)
    assert "Something else" not in memory.read(first["card"], numbered=False)["content"]  # the name stays


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
