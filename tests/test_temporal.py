"""Memory that stays true: validity windows of whole nodes (a node superseded before facts carried their own
validity, or an `expires` a person set), search now and as of a day on every surface, and doctor's chain
checks. Facts' own validity: tests/test_fact_level.py (search, recall, doctor) and tests/test_flows_dream.py
(the dream)."""

import pytest

from storage.memory import Memory

OLD_DAY, NEW_DAY = "2024-05-08", "2024-06-20"
NODE = "digest/personal/ana-s-city.md"


def test_a_superseded_node_answers_only_as_of_its_window(ws):
    memory = Memory(ws.root)
    old, new = superseded_pair(memory)
    now = [h["path"] for h in memory.search("where does Ana live Lisbon Porto", limit=10)]
    assert new in now and old not in now
    hit = next(h for h in memory.search("Ana city", limit=10) if h["path"] == new)
    assert (hit["status"], hit["valid_from"], hit["valid_to"]) == ("current", "2024-06-18", None)
    then = memory.search("where does Ana live Lisbon Porto", as_of="2024-06-01", limit=10)
    assert old in [h["path"] for h in then] and new not in [h["path"] for h in then]
    old_hit = next(h for h in memory.search("Ana Lisbon", history=True, limit=10) if h["path"] == old)
    assert (old_hit["status"], old_hit["valid_to"]) == ("superseded", "2024-06-18")
    assert [r["path"] for r in memory.node_search("Ana city")] == [new]
    assert {r["path"] for r in memory.node_search("Ana city", history=True)} == {new, old}
    recalled = memory.recall("Where does Ana live?", budget=300, as_of="2024-06-01")["text"]
    assert f"[{old}:" in recalled and new not in recalled
    assert memory.doctor()["supersession"] == []


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


@pytest.mark.e2e
def test_time_on_every_surface_http_cli_mcp(ws):
    import anyio
    from test_api import ApiServer
    from test_mcp import call, cli_json, stdio

    from engine.access.client import RemoteMemory

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
    from storage.files import dialog
    from storage.errors import InvalidInput

    said = [{"role": "user", "content": "Ana moved to Porto.", "created_at": "2024-06-20T09:00:00"}]
    with pytest.raises(InvalidInput, match="outside its messages' days 2024-06-20..2024-06-20"):
        auto_memory(session_id="s1", messages=said, date="2024-05-01", workspace=str(ws.root))
    assert llm.requests == []  # refused before any call; the messages stay to be summarised
    assert not dialog.outside_span("2024-06-21", ["2024-06-20"]) and dialog.outside_span("2024-06-22", ["2024-06-20"])
    assert not dialog.outside_span("2024-05-01", [])  # undated messages: the caller's day
