"""`recall` (evidence packed into a token budget, per-session memory of what was given) and the paging of
bounded answers on the CLI and HTTP surfaces (MCP: tests/test_mcp.py)."""

import json

import pytest
from click.testing import CliRunner
from test_api import ApiServer

from dreamflow.cli import cli
from engine.access.client import RemoteMemory
from storage.errors import InvalidInput
from storage.files.text_view import read_all
from storage.memory import Memory
from storage.search import recall as recall_module
from storage.search.recall import tokens
from storage.text.instructions import FRAME


@pytest.fixture
def mem(ws) -> Memory:
    memory = Memory(ws.root)
    for n in range(12):  # twelve days, each a long note with one line about the ferry among many others
        body = "\n\n".join([f"# Day {n}", *(f"Line {i} of day {n}: we walked, ate and talked about the weather."
                                             for i in range(40))])
        body += f"\n\nThe ferry to Naxos left at {7 + n % 5}:30 on day {n}.\n"
        ws.write_text(f"daily/2024-06-{n + 1:02d}/day.md", f"---\nname: Day {n}\ndescription: a day\n---\n{body}")
    memory.reconcile()
    return memory


def cited_lines(mem, item):
    page = mem.read(item["path"], start_line=item["start_line"], end_line=item["end_line"], numbered=False)
    return page["content"].rstrip("\n")


def test_recall_packs_distinct_cited_evidence_within_the_budget(mem):
    answer = mem.recall("when did the ferry to Naxos leave", budget=300)
    assert answer["tokens"] == tokens(answer["text"]) <= 300
    paths = [item["path"] for item in answer["items"]]
    assert len(paths) == len(set(paths)) >= 6  # many sources, not two whole passages
    for item in answer["items"]:
        head = f"[{item['path']}:{item['start_line']}" + (
            f"-{item['end_line']}]" if item["end_line"] != item["start_line"] else "]")
        block = answer["text"].split(head, 1)[1].split("\n\n[", 1)[0]
        assert block.split("\n", 1)[1] == cited_lines(mem, item)  # the citation is the lines `read` shows
        assert "ferry to Naxos" in block and item["date"] in block
    whole = mem.search("when did the ferry to Naxos leave", limit=20, expand=0)
    cut, used = [], 0  # search top-k cut to the same budget holds far fewer sources
    for hit in whole:
        used += tokens(hit["text"])
        if used > 300:
            break
        cut.append(hit["path"])
    assert len(set(paths)) > 2 * len(cut)


def test_a_session_is_never_given_the_same_lines_twice_and_another_session_gets_them(mem, monkeypatch):
    query = "when did the ferry to Naxos leave"
    first = mem.recall(query, budget=120, session="chat-1")
    second = mem.recall(query, budget=120, session="chat-1")
    cited = lambda a: {(i["path"], i["start_line"], i["end_line"]) for i in a["items"]}  # noqa: E731
    assert first["items"] and second["items"] and not cited(first) & cited(second)
    assert second["withheld"] >= len(first["items"])
    assert second["text"].startswith(FRAME + "\n\n[")  # quoted memory, its frame counted in the budget
    assert all("ferry" in block for block in second["text"].removeprefix(FRAME).split("\n\n[")[1:])  # new evidence
    other = mem.recall(query, budget=120, session="chat-2")
    assert cited(other) == cited(first) and other["withheld"] == 0
    assert cited(mem.recall(query, budget=120)) == cited(first)  # no session: nothing remembered
    for _ in range(6):  # the session runs out of ferry lines: nothing is repeated, nothing made up
        last = mem.recall(query, budget=120, session="chat-1")
    assert last["items"] == [] and last["text"] == "" and last["tokens"] == 0
    stored = json.loads((mem.ws.root / "metadata/recall/chat-1.json").read_text())
    assert len(stored["given"]) == 12
    logged = recall_module.log(mem.ws, "chat-1")  # each time it was given something, newest first
    assert [e["kind"] for e in logged] == ["recall"] * len(logged) and logged[-1]["query"] == query
    assert [(i["path"], i["start_line"], i["end_line"]) for i in logged[-1]["items"]] == [
        (i["path"], i["start_line"], i["end_line"]) for i in first["items"]]
    sessions = {s["session"]: s for s in recall_module.sessions(mem.ws)}
    assert set(sessions) == {"chat-1", "chat-2"} and sessions["chat-1"]["lines"] == 12
    assert sessions["chat-1"]["times"] == len(logged) and sessions["chat-1"]["at"] == logged[0]["at"]

    monkeypatch.setattr(recall_module, "MAX_GIVEN", 3)
    monkeypatch.setattr(recall_module, "MAX_SESSIONS", 2)
    mem.recall(query, budget=400, session="chat-3")
    assert len(json.loads((mem.ws.root / "metadata/recall/chat-3.json").read_text())["given"]) == 3
    # the least recently given session (chat-2) went
    assert sorted(p.name for p in (mem.ws.root / "metadata/recall").iterdir()) == ["chat-1.json", "chat-3.json"]


@pytest.mark.parametrize("kwargs", [{"budget": 10}, {"budget": 10**7}, {"session": "../escape"}, {"query": " "}])
def test_recall_refuses_bad_budgets_sessions_and_queries(ws, kwargs):
    with pytest.raises(InvalidInput):
        Memory(ws.root).recall(**{"query": "ferry", **kwargs})


def test_recall_and_paging_on_the_cli_http_and_agent_tools(mem):
    root = str(mem.ws.root)
    runner = CliRunner()
    out = runner.invoke(cli, ["-w", root, "recall", "ferry to Naxos", "--budget", "100", "--session", "cli",
                              "--json"])
    assert out.exit_code == 0, out.output
    answer = json.loads(out.output)
    assert answer["tokens"] <= 100 and answer["items"] and answer["session"] == "cli"
    page = json.loads(runner.invoke(cli, ["-w", root, "list", "daily", "--limit", "5", "--json"]).output)
    rest = json.loads(runner.invoke(cli, ["-w", root, "list", "daily", "--limit", "100", "--offset",
                                          str(page["next_offset"]), "--json"]).output)
    assert page["truncated"] and len(page["entries"] + rest["entries"]) == 12 and not rest["truncated"]
    shown = runner.invoke(cli, ["-w", root, "read", "daily/2024-06-01/day.md", "--max-chars", "300"])
    assert shown.exit_code == 0 and "continue at --start-line" in shown.output

    server = ApiServer(mem)
    try:
        remote = RemoteMemory(server.url)
        assert remote.recall("ferry to Naxos", budget=100, session="cli")["items"] != answer["items"]  # same record
        first = remote.list("daily", limit=5)
        second = remote.list("daily", limit=5, offset=first["next_offset"])
        assert [e["path"] for e in first["entries"] + second["entries"]] == [
            e["path"] for e in mem.list("daily", limit=10)["entries"]]
        read = remote.read("daily/2024-06-01/day.md", max_chars=500)
        assert read["truncated"] and len(read["content"]) <= 500
        assert read_all(remote, "daily/2024-06-01/day.md") == read_all(mem, "daily/2024-06-01/day.md")
    finally:
        server.stop()


def test_recall_thresholds_mean_the_same_on_a_two_note_memory_on_every_surface(ws):
    """min_score 4, min_relevance 0.5, min_words 2 (the hook's defaults) on two notes: BM25 over 2 chunks weighed a
    word in one of them 0.69, so nothing ever reached 4; recall weighs words as over at least 50 chunks."""
    memory = Memory(ws.root)
    memory.write("digest/personal/allergy.md", "The user is allergic to peanuts since March 2025; avoid peanut butter "
                 "in any recipe.\n", name="Peanut allergy", description="Food the user must avoid")
    memory.write("digest/wiki/lisbon.md", "Thanks to Bo: tram line 28E goes up to Alfama.\n", name="Lisbon",
                 description="City notes")
    snack, thanks = "Can you suggest a snack recipe with peanut butter for me?", "thanks!"
    gate = {"min_score": 4, "min_relevance": 0.5, "min_words": 2}
    flags = ["--min-score", "4", "--min-relevance", "0.5", "--min-words", "2", "--json"]

    def paths(answer: dict) -> list[str]:
        return [item["path"] for item in answer["items"]]

    assert paths(memory.recall(snack, budget=200, min_score=4, min_relevance=0.5)) == ["digest/personal/allergy.md"]
    assert paths(memory.recall(snack, budget=200, **gate)) == ["digest/personal/allergy.md"]
    assert paths(memory.recall(thanks, budget=200, **gate)) == []  # one shared word
    assert paths(memory.recall(thanks, budget=200, min_words=1)) == ["digest/wiki/lisbon.md"]
    with pytest.raises(InvalidInput):
        memory.recall(snack, budget=200, min_words=-1)

    runner = CliRunner()
    for query, expected in ((snack, ["digest/personal/allergy.md"]), (thanks, [])):
        out = runner.invoke(cli, ["-w", str(ws.root), "recall", query, "--budget", "200", *flags])
        assert out.exit_code == 0, out.output
        assert paths(json.loads(out.output)) == expected

    server = ApiServer(memory)
    try:
        remote = RemoteMemory(server.url)
        assert paths(remote.recall(snack, budget=200, **gate)) == ["digest/personal/allergy.md"]
        assert paths(remote.recall(thanks, budget=200, **gate)) == []
        asked = {"event": "UserPromptSubmit", "session": None, "budget": 200, **gate}  # the hook through the service
        assert "avoid peanut butter" in remote.request("POST", "/inject", {**asked, "prompt": snack})["text"]
        assert remote.request("POST", "/inject", {**asked, "prompt": thanks})["text"] is None
    finally:
        server.stop()


def test_a_question_of_one_word_needs_that_word_and_small_talk_asks_nothing(ws):
    """`Who is my landlord?` asks one word: with the hook's gate (min_words 2) it finds the landlord note once the
    word is rare; `thanks!` and `ok` ask nothing, however rare their word is."""
    for n in range(90):  # on disk before the index exists: its first open indexes them in one go
        ws.write_text(f"digest/wiki/street-{n}.md", f"Street {n} has a bakery number {n} and a tram stop.\n")
    memory = Memory(ws.root)
    memory.write("digest/personal/home.md", "My landlord is Ms. Costa, she fixes things fast.\n")
    memory.write("digest/wiki/visit.md", "Okay, thanks a lot for the visit tips.\n")
    gate = {"min_score": 4, "min_relevance": 0.5, "min_words": 2}

    def paths(query: str) -> list[str]:
        return [item["path"] for item in memory.recall(query, budget=200, **gate)["items"]]

    assert paths("Who is my landlord?") == ["digest/personal/home.md"]
    assert paths("thanks!") == [] and paths("ok thanks") == []
    assert paths("Who is my landlord in Lisbon now?") == []  # two words asked, one held


def test_a_chain_counts_once_in_how_rare_a_word_is(ws):
    """A card fact and the node fact it became are one thing remembered: `landlord`, said once, is as rare as one
    chunk, so `Who is my landlord?` passes the hook's gate where counting both layers would have kept it out."""
    for n in range(53):  # on disk before the index exists: its first open indexes them in one go
        ws.write_text(f"digest/wiki/street-{n}.md", f"Street {n} has a bakery number {n} and a tram stop.\n")
    memory = Memory(ws.root)
    memory.write("daily/2026-11-04/home.md", "# Home\n\n- My landlord is Ms. Costa. (about:: user) "
                 "(source:: [[session/dialog/s.jsonl#L1|2026-11-04 18:00]]) ^f1\n")
    gate = {"min_score": 4, "min_relevance": 0.5, "min_words": 2}
    items = memory.recall("Who is my landlord?", budget=200, **gate)["items"]
    assert [item["path"] for item in items] == ["daily/2026-11-04/home.md"]  # a card: 1 chunk in 54
    memory.write("digest/personal/user.md", "# The user\n\n- My landlord is Ms. Costa. (since:: 2026-11-04) "
                 "(source:: [[daily/2026-11-04/home.md#^f1|2026-11-04]]) ^f1\n")
    items = memory.recall("Who is my landlord?", budget=200, **gate)["items"]
    assert [item["path"] for item in items] == ["digest/personal/user.md"]  # the chain, once (2 chunks in 55 else)
