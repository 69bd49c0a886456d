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
    later = "daily/2024-07-01/ana.md"
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


def superseded_pair(memory):
    """Ana's city in Lisbon until 2024-06-18, then in Porto, written by hand as the dream writes them."""
    old, new = NODE, "digest/personal/ana-s-city-2024-06-18.md"
    memory.write(old, "Ana, my sister, lives in Lisbon.", name="Ana's city", metadata={
        "valid_from": OLD_DAY, "valid_to": "2024-06-18", "status": "superseded", "superseded_by": f"[[{new}]]"})
    memory.write(new, "Ana, my sister, lives in Porto.", name="Ana's city", metadata={
        "valid_from": "2024-06-18", "status": "current", "supersedes": f"[[{old}]]"})
    return old, new


def test_time_on_every_surface_http_cli_mcp(ws):
    import anyio
    from test_api import ApiServer
    from test_mcp import call, cli_json, stdio

    from engine.client import RemoteMemory

    memory = Memory(ws.root)
    old, new = superseded_pair(memory)
    server = ApiServer(memory)
    try:
        remote = RemoteMemory(server.url)
        assert [h["path"] for h in remote.search("Ana sister lives")] == [new]
        then = remote.search("Ana sister lives", as_of="2024-06-01")
        assert [(h["path"], h["status"], h["valid_to"]) for h in then] == [(old, "superseded", "2024-06-18")]
        assert {h["path"] for h in remote.node_search("Ana sister", history=True)} == {old, new}
    finally:
        server.stop()
    assert [h["path"] for h in cli_json(ws.root, "search", "Ana sister lives", "--as-of", "2024-06-01")] == [old]
    assert {h["path"] for h in cli_json(ws.root, "search", "Ana sister lives", "--history")} == {old, new}

    async def session():
        async with stdio(ws.root) as client:
            now = await call(client, "search", query="Ana sister lives")
            then = await call(client, "search", query="Ana sister lives", as_of="2024-06-01")
            return now, then

    now, then = anyio.run(session)
    assert [h["path"] for h in now.structured_content] == [new]
    assert "(current since 2024-06-18)" in now.content[0].text
    assert then.content[0].text.startswith(f"{old}:") and "(superseded 2024-05-08..2024-06-18)" in then.content[0].text


def test_doctor_reports_broken_chains(ws):
    memory = Memory(ws.root)
    old, new = superseded_pair(memory)
    clean = memory.doctor()
    assert clean["supersession"] == [] and clean["near_duplicates"] == []  # one name, two times: not a merge
    memory.frontmatter_update(new, {"superseded_by": f"[[{old}]]", "supersedes": f"[[{old}]]"})  # a loop
    memory.write("digest/personal/gone.md", "Gone.", metadata={"status": "superseded",
                                                               "superseded_by": "[[digest/personal/nowhere.md]]"})
    memory.write("digest/personal/bent.md", "Bent.", metadata={"valid_from": "2024-06-01", "valid_to": "2024-05-01"})
    memory.write("digest/personal/orphaned.md", "Nobody.", metadata={"status": "superseded"})
    problems = {(r["path"], r["problem"]) for r in memory.doctor()["supersession"]}
    assert problems == {(old, "cycle"), (new, "cycle"), (new, "one_way"),  # the old node does not name it back
                        ("digest/personal/gone.md", "successor_missing"), ("digest/personal/bent.md", "window"),
                        ("digest/personal/orphaned.md", "no_successor")}
    report = memory.doctor()
    assert report["ok"] is False and report["counts"]["supersession"] == 6


def test_a_card_day_outside_its_messages_days_is_refused(prefect_harness, llm, ws):
    from flows.auto_memory import auto_memory
    from storage.errors import InvalidInput
    from tasks import dialog

    said = [{"role": "user", "content": "Ana moved to Porto.", "created_at": "2024-06-20T09:00:00"}]
    with pytest.raises(InvalidInput, match="outside its messages' days 2024-06-20..2024-06-20"):
        auto_memory(session_id="s1", messages=said, date="2024-05-01", workspace=str(ws.root))
    assert llm.requests == []  # refused before any call; the messages stay to be summarised
    assert not dialog.outside_span("2024-06-21", ["2024-06-20"]) and dialog.outside_span("2024-06-22", ["2024-06-20"])
    assert not dialog.outside_span("2024-05-01", [])  # undated messages: the caller's day
