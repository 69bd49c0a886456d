"""`retract`: a wrong node fact retracted everywhere it came from (storage/files/retraction.py), on every surface."""

import datetime as dt
import json
import subprocess
import sys

import pytest

from storage.errors import Conflict, InvalidInput, NotFound
from storage.files import journal, retraction
from storage.memory import Memory, recover
from storage.text import facts
from storage.text.markdown import split_frontmatter

DAY = "2026-11-02"
CARD = f"daily/{DAY}/new-flat.md"
NODE = "digest/personal/user.md"


def build(root) -> Memory:
    """A conversation, its card and the node the dream made of it (the user lives in Porto: wrong)."""
    mem = Memory(root)
    mem.ws.write_text("session/dialog/s1.jsonl", "\n".join(json.dumps(r) for r in (
        {"role": "user", "content": "hello there", "created_at": f"{DAY}T18:00:00"},
        {"role": "assistant", "content": "Hi!", "created_at": f"{DAY}T18:00:05"},
        {"role": "user", "content": "I moved to Porto with my cat Zorba", "created_at": f"{DAY}T18:01:00"},
    )) + "\n")
    card = "# New flat\n"
    card = facts.add(card, facts.Fact("The user lives in Porto.", id="f1", about="user",
                                      sources=("session/dialog/s1.jsonl#L3",), labels=(f"{DAY} 18:01",)))
    card = facts.add(card, facts.Fact("The user has a cat named Zorba.", id="f2", about="user",
                                      sources=("session/dialog/s1.jsonl#L3",), labels=(f"{DAY} 18:01",)))
    mem.write(CARD, card, name="New flat", description=facts.describe(card), metadata={"session_id": "s1"})
    node = "# The user\n"
    node = facts.add(node, facts.Fact("The user lives in Porto.", id="f1", since=DAY, sources=(f"{CARD}#^f1",),
                                      labels=(DAY,)))
    node = facts.add(node, facts.Fact("The user has a cat named Zorba.", id="f2", since=DAY,
                                      sources=(f"{CARD}#^f2",), labels=(DAY,)))
    mem.write(NODE, node, name="The user", description=facts.describe(node), metadata={"status": "current"})
    mem.write("digest/wiki/porto.md", facts.add("# Porto\n", facts.Fact(
        "The user lives in Porto near the river.", id="f1", since=DAY, sources=(f"{CARD}#^f1",))),
        name="Porto", description="a city")
    return mem


@pytest.fixture
def mem(tmp_path) -> Memory:
    return build(tmp_path / "ws")


@pytest.fixture
def today() -> str:
    """The day a retraction made now is dated (the machine's date, read when the test starts, not at collection:
    a suite running over midnight)."""
    return dt.date.today().isoformat()


def text(mem: Memory, path: str) -> str:
    return mem.ws.read_text(path)


def test_retract_moves_the_node_fact_to_history_and_marks_its_card_fact(mem, today):
    result = mem.retract(NODE, "f1", reason="I never lived there")
    node = facts.by_id(text(mem, NODE))
    wrong = node["f1"]
    assert not wrong.current and wrong.until == today and wrong.retracted == today
    assert wrong.reason == "I never lived there" and wrong.replaced_by is None
    assert "## History" in text(mem, NODE) and node["f2"].current
    card = facts.by_id(text(mem, CARD))
    assert card["f1"].retracted == today and not card["f1"].current and card["f2"].current
    assert result["cards"] == [f"{CARD}#^f1"] and result["lines"] == ["session/dialog/s1.jsonl#L3"]
    assert result["review"] == [{"path": "digest/wiki/porto.md", "fact": "f1", "line": result["review"][0]["line"],
                                 "text": "The user lives in Porto near the river.", "current": True}]
    assert "Porto" not in split_frontmatter(text(mem, NODE)).meta["description"]
    assert "Porto" not in split_frontmatter(text(mem, CARD)).meta["description"]
    assert text(mem, "session/dialog/s1.jsonl").count("Porto") == 1  # the record stays as it was said
    assert journal.entries(mem.ws) == []


def test_after_retract_search_and_recall_leave_it_out_and_as_of_the_day_before_still_shows_it(mem, today):
    assert any("Porto" in h["text"] for h in mem.search("Porto lives")
               if h["path"] in (NODE, CARD))
    mem.retract(NODE, "f1")
    hits = mem.search("user lives Porto")
    assert not [h for h in hits if h["path"] in (NODE, CARD, "session/dialog/s1.jsonl") and "lives in Porto" in h["text"]]
    assert "lives in Porto." not in mem.recall("where does the user live Porto")["text"]
    yesterday = (dt.date.fromisoformat(today) - dt.timedelta(days=1)).isoformat()
    before = mem.search("user lives Porto", as_of=yesterday)
    assert any(h["path"] == NODE and "lives in Porto" in h["text"] for h in before)


def test_retract_with_a_correction_writes_the_persons_fact_from_today(mem, today):
    result = mem.retract(NODE, "^f1", reason="wrong city", correct="The user lives in Braga.")
    node = facts.by_id(text(mem, NODE))
    fixed = node[result["correction"]["fact"]]
    assert fixed.current and fixed.since == today and fixed.extra == {"source": f"person {today}"}
    assert fixed.text == "The user lives in Braga." and fixed.sources == ()
    assert node["f1"].replaced_by == f"digest/personal/user#^{fixed.id}"
    hits = mem.search("where does the user live Braga")
    assert hits[0]["path"] == NODE and "Braga" in hits[0]["text"]


def test_retract_errors(mem):
    with pytest.raises(NotFound):
        mem.retract("digest/personal/nobody.md", "f1")
    with pytest.raises(NotFound):
        mem.retract(NODE, "f9")
    with pytest.raises(InvalidInput):
        mem.retract(CARD, "f1")
    mem.retract(NODE, "f1")
    before = text(mem, NODE)
    with pytest.raises(Conflict) as exc:
        mem.retract(NODE, "f1")
    assert exc.value.exit_code == 4 and "already" in str(exc.value) and text(mem, NODE) == before


def test_a_crash_between_the_node_and_the_card_is_finished_by_the_next_process(mem, today):
    texts = {NODE: text(mem, NODE), CARD: text(mem, CARD)}
    new_node, wrong, _ = retraction.node_text(texts[NODE], NODE, "f1", today, "wrong", None)
    plan = retraction.plan(NODE, texts, {NODE: new_node, CARD: retraction.card_text(texts[CARD], "f1", today)})
    journal.begin(mem.ws, "retract", plan)  # the entry written, then the node: the process dies there
    mem.ws.write_text(NODE, new_node)
    assert facts.by_id(text(mem, CARD))["f1"].retracted is None
    done = recover(Memory(mem.ws.root))
    assert done["operations"][0]["kind"] == "retract" and "replayed (1 files" in done["operations"][0]["outcome"]
    assert facts.by_id(text(mem, CARD))["f1"].retracted == today
    assert facts.by_id(text(mem, NODE))["f1"].retracted == today and journal.entries(mem.ws) == []
    assert not [h for h in mem.search("user lives Porto") if "lives in Porto." in h["text"]]


# ---- the surfaces: CLI, HTTP, MCP (the same operation, the same answer and errors) -----------------------------

@pytest.mark.e2e
def test_cli_retracts_with_reason_and_correction_and_says_errors_with_exit_codes(mem, today):
    from service_harness import DREAMFLOW

    def cli(*args):
        return subprocess.run([DREAMFLOW, "--workspace", str(mem.ws.root), "retract", *args, "--json"],
                              capture_output=True, text=True, timeout=120, input="")

    done = cli(NODE, "f1", "--reason", "wrong city", "--correct", "The user lives in Braga.")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["retracted"] == today and answer["correction"]["text"] == "The user lives in Braga."
    assert facts.by_id(text(mem, CARD))["f1"].retracted == today
    again = cli(NODE, "f1")
    assert again.returncode == 4 and json.loads(again.stdout)["error"]["type"] == "Conflict"
    assert cli(NODE, "f77").returncode == 3 and cli(CARD, "f1").returncode == 2


def test_http_retract_is_the_same_operation(mem, today):
    from test_api import ApiServer

    from engine.access.client import RemoteMemory

    server = ApiServer(mem)
    try:
        status, answer = server.raw("POST", "/ops/retract", {"path": NODE, "fact": "f1", "reason": "never"})
        assert status == 200 and answer["cards"] == [f"{CARD}#^f1"] and answer["reason"] == "never"
        with pytest.raises(Conflict):
            RemoteMemory(server.url).retract(NODE, "f1")
        status, error = server.raw("POST", "/ops/retract", {"path": NODE, "fact": "f9"})
        assert status == 404 and error["error"]["exit_code"] == 3
    finally:
        server.stop()
    assert facts.by_id(text(mem, NODE))["f1"].retracted == today


@pytest.mark.e2e
def test_mcp_retract_tool(mem, today):
    import anyio

    from test_mcp import call, stdio

    async def run():
        async with stdio(mem.ws.root) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["retract"].annotations.destructive_hint
            done = await call(client, "retract", path=NODE, fact="f1", reason="not true")
            again = await call(client, "retract", path=NODE, fact="f1")
            return done, again

    done, again = anyio.run(run)
    assert not done.is_error and done.structured_content["retracted"] == today
    assert again.is_error and "already" in again.content[0].text
    assert facts.by_id(text(mem, CARD))["f1"].retracted == today
