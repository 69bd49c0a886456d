"""Memory that stays true: supersession in the dream, History lines, validity windows, search now and as of a
day, and doctor's chain checks (real Prefect flow runs, the scripted LLM server, a real workspace)."""

import pytest

from flows.auto_dream import auto_dream
from llm_server import json_reply
from storage.memory import Memory
from tasks import history

EXTRACT = "You consolidate a person's memory"
OLD_DAY, NEW_DAY = "2024-05-08", "2024-06-20"
LISBON, PORTO = f"daily/{OLD_DAY}/call-with-ana.md", f"daily/{NEW_DAY}/ana-moves.md"
NODE = "digest/personal/ana-s-city.md"


def unit(name, summary, paths, date=None):
    return {"name": name, "bucket": "personal", "summary": summary, "paths": paths, **({"date": date} if date else {})}


@pytest.fixture
def memory(ws) -> Memory:
    m = Memory(ws.root)
    m.write(LISBON, "- Ana, my sister, lives in Lisbon and works at a bakery.", name="Call with Ana",
            description="Ana's news")
    return m


def dream(llm, ws, day, units, decision):
    llm.on(EXTRACT, json_reply({"units": units, "topics": []}))
    llm.on(f"Unit: {units[0]['name']}\n", json_reply(decision))
    return auto_dream(date=day, scan_days=1, workspace=str(ws.root))


def first_city(prefect_harness, llm, memory, ws):
    dream(llm, ws, OLD_DAY, [unit("Ana's city", "Ana lives in Lisbon.", [LISBON])],
          {"action": "CREATE", "target": None, "name": "Ana's city", "description": "Where my sister Ana lives",
           "content": f"Ana, my sister, lives in Lisbon.\n\n## Sources\n\n- {OLD_DAY}: the call ([[{LISBON}]]).\n"})


def move_to_porto(llm, memory, ws):
    memory.write(PORTO, "- Ana moved from Lisbon to Porto on 2024-06-18.", name="Ana moves", description="Move")
    return dream(llm, ws, NEW_DAY, [unit("Ana moved to Porto", "Ana moved to Porto.", [PORTO], "2024-06-18")],
                 {"action": "SUPERSEDE", "target": NODE, "name": "Ana's city", "description": "Where Ana lives",
                  "content": "Ana, my sister, lives in Porto."})


def meta(memory, path):
    return memory.frontmatter_get(path)["frontmatter"]


def test_a_created_node_is_current_from_its_sources_day(prefect_harness, llm, memory, ws):
    first_city(prefect_harness, llm, memory, ws)
    assert meta(memory, NODE)["valid_from"] == OLD_DAY and meta(memory, NODE)["status"] == "current"


def test_supersede_keeps_and_closes_the_old_node_and_links_both_ways(prefect_harness, llm, memory, ws):
    first_city(prefect_harness, llm, memory, ws)
    summary = move_to_porto(llm, memory, ws)

    new = "digest/personal/ana-s-city-2024-06-18.md"
    assert summary["actions"][0] == {"unit": "u1", "name": "Ana moved to Porto", "action": "SUPERSEDE",
                                     "target": new, "superseded": NODE}
    old_meta, new_meta = meta(memory, NODE), meta(memory, new)
    assert old_meta["status"] == "superseded" and str(old_meta["valid_to"]) == "2024-06-18"
    assert old_meta["superseded_by"] == f"[[{new}]]" and new_meta["supersedes"] == f"[[{NODE}]]"
    assert new_meta["status"] == "current" and str(new_meta["valid_from"]) == "2024-06-18"
    old_text = memory.read(NODE, numbered=False)["content"]
    assert "lives in Lisbon" in old_text and f"[[{LISBON}]]" in old_text  # its fact and evidence stay
    assert f"- 2024-06-18: superseded by [[{new}]] ([[{PORTO}]])" in old_text
    new_text = memory.read(new, numbered=False)["content"]
    assert f"replaces [[{NODE}]]" in new_text and f"[[{PORTO}]]" in new_text
    assert new_text.index("## History") < new_text.index("## Sources")

    # search now: the current node, never the superseded one; as of a day before the move: the old one
    now = [h["path"] for h in memory.search("where does Ana live Lisbon Porto", limit=10)]
    assert new in now and NODE not in now
    hit = next(h for h in memory.search("Ana city", limit=10) if h["path"] == new)
    assert (hit["status"], hit["valid_from"], hit["valid_to"]) == ("current", "2024-06-18", None)
    then = memory.search("where does Ana live Lisbon Porto", as_of="2024-06-01", limit=10)
    assert NODE in [h["path"] for h in then] and new not in [h["path"] for h in then]
    assert PORTO not in [h["path"] for h in then]  # a card of a later day is not what was known then
    old_hit = next(h for h in memory.search("Ana Lisbon", history=True, limit=10) if h["path"] == NODE)
    assert (old_hit["status"], old_hit["valid_to"]) == ("superseded", "2024-06-18")
    assert [r["path"] for r in memory.node_search("Ana city")] == [new]
    assert {r["path"] for r in memory.node_search("Ana city", history=True)} == {new, NODE}
    recalled = memory.recall("Where does Ana live?", budget=300, as_of="2024-06-01")["text"]
    assert f"[{NODE}:" in recalled and "current since 2024-05-08..2024-06-18" not in recalled
    assert memory.doctor()["supersession"] == []


def test_a_create_naming_a_superseded_node_updates_its_successor(prefect_harness, llm, memory, ws):
    first_city(prefect_harness, llm, memory, ws)
    move_to_porto(llm, memory, ws)
    later = f"daily/2024-07-01/ana.md"
    memory.write(later, "- Ana's bakery in Porto opens at 7.", name="Ana's bakery", description="Opening hours")
    summary = dream(llm, ws, "2024-07-01", [unit("Ana's city", "Ana's bakery in Porto opens at 7.", [later])],
                    {"action": "CREATE", "target": None, "name": "Ana's city", "description": "Where Ana lives",
                     "content": "Ana, my sister, lives in Porto; her bakery opens at 7.\n\n## Sources\n\n"
                                f"- Ana moved ([[{PORTO}]]).\n"})
    successor = "digest/personal/ana-s-city-2024-06-18.md"
    assert (summary["actions"][0]["action"], summary["actions"][0]["target"]) == ("REFINE", successor)
    text = memory.read(successor, numbered=False)["content"]
    assert "opens at 7" in text and f"replaces [[{NODE}]]" in text  # the system's History line stays
    assert f"- 2024-07-01: refined: Ana's bakery in Porto opens at 7 ([[{later}]])" in text
    assert history.current_of(memory, NODE) == successor


def test_event_dates_come_from_the_sources_not_the_dream():
    assert history.event_date(None, [LISBON, PORTO], "2030-01-01") == OLD_DAY
    assert history.event_date(None, [LISBON, PORTO], "2030-01-01", latest=True) == NEW_DAY
    assert history.event_date("2024-06-18", [PORTO], "2030-01-01") == "2024-06-18"
    assert history.event_date("2029-01-01", [PORTO], "2030-01-01") == NEW_DAY  # after its sources: not believed
    assert history.event_date("next week", [PORTO], "2030-01-01") == NEW_DAY
    assert history.event_date(None, ["resource/a.md"], "2030-01-01") == "2030-01-01"


def test_history_lines_survive_an_update_that_drops_them():
    before = "Ana lives in Porto.\n\n## History\n\n- 2024-06-18: replaces [[a.md]]\n\n## Sources\n\n- x ([[b.md]])\n"
    after = history.with_history("Ana lives in Porto; bakery.\n\n## Sources\n\n- x ([[b.md]])\n", before,
                                 "- 2024-07-01: refined\n")
    assert after == ("Ana lives in Porto; bakery.\n\n## History\n\n- 2024-06-18: replaces [[a.md]]\n"
                     "- 2024-07-01: refined\n\n## Sources\n\n- x ([[b.md]])\n")


def test_expired_nodes_leave_search_now_but_answer_as_of(ws):
    memory = Memory(ws.root)
    memory.write("digest/personal/deadline.md", "The grant report is due 2024-06-30.", name="Grant deadline",
                 metadata={"valid_from": "2024-05-01", "expires": "2024-07-01", "status": "current"})
    assert memory.search("grant report due") == []
    assert [h["path"] for h in memory.search("grant report due", as_of="2024-06-15")] == ["digest/personal/deadline.md"]
    assert memory.search("grant report due", history=True)[0]["status"] == "expired"
    findings = memory.doctor()["supersession"]
    assert findings == [{"path": "digest/personal/deadline.md", "problem": "expired",
                         "detail": "expired on 2024-07-01 but still marked current"}]
