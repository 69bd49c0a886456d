"""What an agent gets is what holds now: a provenance chain (dialog line -> card fact -> node fact) is one thing
remembered. Search shows it once, as its node fact, and drops a card fact whose node fact was replaced; a fact
is found by the words of the fact it replaced; conversations are indexed as what was said; generated pages
take no budget. Real files, the real Memory, a real DuckDB index (and the service's search cache)."""

import json

import pytest

from storage.index.db import IndexDB
from storage.memory import Memory
from storage.search import cache as search_cache
from storage.search.search import search
from storage.text import facts

NODE = "digest/personal/user.md"
OLD_CARD, NEW_CARD, FRESH_CARD = ("daily/2026-11-02/gym.md", "daily/2026-11-05/schedule.md",
                                  "daily/2026-11-06/coffee.md")
DIALOG = "session/dialog/s1.jsonl"


def records() -> str:
    lines = [
        {"role": "user", "content": "I'll go to the gym on Mondays and Thursdays before work.",
         "created_at": "2026-11-02T08:00:00"},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted, gym on Mondays and Thursdays."},
                                          {"type": "tool_use", "name": "TodoWrite",
                                           "input": {"todos": [{"content": "gym plan", "status": "pending"}]}}]},
        {"role": "user", "content": "I switched to Wednesdays and Saturdays, mornings got too busy.",
         "created_at": "2026-11-05T08:00:00"},
        {"role": "user", "content": "The tram app interface is slow.", "created_at": "2026-11-05T09:00:00"},
    ]
    return "\n".join(json.dumps(r) for r in lines) + "\n"


def write_story(mem: Memory, dreamt: bool = True) -> None:
    mem.ws.write_text(DIALOG, records())
    mem.write(OLD_CARD, f"# Gym plan\n\n## Plans\n\n- I'll go to the gym on Mondays and Thursdays before work. "
                        f"(about:: user) (source:: [[{DIALOG}#L1]]) ^f1\n", name="Gym plan")
    mem.write(NEW_CARD, f"# Busy mornings\n\n## Facts\n\n- I switched to Wednesdays and Saturdays, mornings got too "
                        f"busy. (about:: user) (source:: [[{DIALOG}#L3]]) ^f1\n", name="Busy mornings")
    mem.write(FRESH_CARD, "# Coffee\n\n## Preferences\n\n- My coffee place is Fennel & Bean. (about:: user) ^f1\n",
              name="Coffee")
    if dreamt:
        mem.write(NODE, node(), name="User", description="the user")


def node(history: str = "") -> str:
    return f"""# User

## Plans

- I switched to Wednesdays and Saturdays, mornings got too busy. (about:: user) (since:: 2026-11-05) (source:: [[{NEW_CARD}#^f1|2026-11-05]]) ^f2

## History

- I'll go to the gym on Mondays and Thursdays before work. (about:: user) (since:: 2026-11-02) (until:: 2026-11-05) (replaced_by:: [[{NODE}#^f2]]) (source:: [[{OLD_CARD}#^f1|2026-11-02]]) ^f1
{history}
## Sources

- [[{OLD_CARD}]]
- [[{NEW_CARD}]]
"""


def line(mem: Memory, block: str) -> int:
    return facts.by_id(mem.ws.read_text(NODE))[block].line


def card_line(mem: Memory, card: str) -> int:
    return facts.parse(mem.ws.read_text(card))[0].line


@pytest.fixture
def mem(ws) -> Memory:
    m = Memory(ws.root)
    write_story(m)
    return m


def where(hits: list[dict]) -> list[tuple[str, int]]:
    return [(h["path"], h["start_line"]) for h in hits]


def test_the_first_hit_is_what_holds_now_and_the_replaced_card_fact_is_gone(mem):
    hits = mem.search("Which days do I go to the gym?")
    assert where(hits)[0] == (NODE, line(mem, "f2"))  # the current fact, found by the words of the one it replaced
    assert hits[0]["status"] == "current" and "Wednesdays and Saturdays" in hits[0]["text"]
    assert all("Mondays and Thursdays" not in h["text"] for h in hits)  # neither the card nor the node's history
    assert all(h["path"] != OLD_CARD for h in mem.search("Mondays Thursdays gym before work", per_file=0))


def test_a_chain_is_one_hit_its_card_facts_the_evidence(mem):
    hits = mem.search("mornings got too busy", per_file=0)
    top = hits[0]
    assert (top["path"], top["start_line"]) == (NODE, line(mem, "f2"))
    at = card_line(mem, NEW_CARD)
    assert top["evidence"] == [{"path": NEW_CARD, "start_line": at, "end_line": at}]  # the card fact, openable
    assert NEW_CARD not in [h["path"] for h in hits]  # not a second hit saying the same thing
    fresh = mem.search("coffee place")[0]  # no dream consumed it yet: the newest thing known, a hit of its own
    assert fresh["path"] == FRESH_CARD and fresh["evidence"] == []


def test_as_of_and_history_follow_the_node_fact_the_card_became(mem):
    before = mem.search("gym Mondays Thursdays", as_of="2026-11-04")
    assert where(before)[0] == (NODE, line(mem, "f1"))  # what held then, once: the node fact, the card its evidence
    at = card_line(mem, OLD_CARD)
    assert before[0]["evidence"] == [{"path": OLD_CARD, "start_line": at, "end_line": at}]
    assert before[0]["status"] == "superseded" and before[0]["valid_to"] == "2026-11-05"
    everything = mem.search("gym Mondays Thursdays", history=True, per_file=0)
    old = next(h for h in everything if (h["path"], h["start_line"]) == (NODE, line(mem, "f1")))
    assert old["replaced_by"] == f"{NODE}#^f2"  # it points to what holds now
    assert OLD_CARD not in [h["path"] for h in everything]
    within_cards = mem.search("gym Mondays Thursdays", path_prefix="daily/")  # a filter leaving the node out
    assert OLD_CARD not in [h["path"] for h in within_cards]  # still not presented as holding
    then = mem.search("gym Mondays Thursdays", path_prefix="daily/", as_of="2026-11-04")
    assert where(then)[0] == (OLD_CARD, at) and then[0]["valid_to"] == "2026-11-05"


def test_recall_leads_with_what_holds_and_never_the_replaced_value(mem):
    pack = mem.recall("Which days do I go to the gym?", budget=400)
    assert pack["items"][0]["path"] == NODE and "Wednesdays and Saturdays" in pack["text"]
    assert "Mondays and Thursdays" not in pack["text"]  # not the card, the node's history or the dialog line


def test_the_chain_holds_after_a_rebuild_and_lets_go_when_the_node_goes(mem):
    mem.reindex()
    assert where(mem.search("gym days"))[0] == (NODE, line(mem, "f2"))
    assert OLD_CARD not in [h["path"] for h in mem.search("gym Mondays Thursdays", per_file=0)]
    mem.delete(NODE)  # no node consumes the cards any more: their facts are first-class again
    assert OLD_CARD in [h["path"] for h in mem.search("gym Mondays Thursdays", per_file=0)]


def test_cards_written_before_or_after_their_node_get_the_same_chain(ws):
    later = Memory(ws.root)
    later.ws.write_text(NODE, "---\nname: User\n---\n" + node())  # the node on disk first, the cards after
    write_story(later, dreamt=False)
    assert OLD_CARD not in [h["path"] for h in later.search("gym Mondays Thursdays", per_file=0)]
    assert where(later.search("gym days"))[0] == (NODE, line(later, "f2"))


def test_a_conversation_is_indexed_as_what_was_said(mem):
    hits = mem.search("user", per_file=0)
    assert all(h["path"] != DIALOG for h in hits)  # "user" is a role, not something said
    assert all(h["path"] != DIALOG for h in mem.search("TodoWrite pending todos", per_file=0))  # a tool call's input
    said = mem.search("tram app interface", path_prefix="session/")[0]
    assert said["path"] == DIALOG and "user: The tram app interface is slow." in said["text"]
    assert "role:" not in said["text"] and "created_at" not in said["text"]
    assert said["date"] == "2026-11-05"  # a chunk holds one day's records: the day they were said
    assert "Wednesdays" not in said["text"]  # the day's record a card fact cites: the fact shows it, not this hit
    assert mem.search("tram app interface", path_prefix="session/", as_of="2026-11-04") == []  # not said yet


def test_recall_gives_a_conversation_as_what_was_said_where_no_fact_says_it(mem):
    pack = mem.recall("tram app interface slow", budget=200, path_prefix="session/")
    assert pack["text"].endswith(f"\n\n[{DIALOG}:4] 2026-11-05\nuser: The tram app interface is slow.")  # its day
    cited = mem.recall("Wednesdays Saturdays mornings busy", budget=400, path_prefix="session/")
    assert "Wednesdays" not in cited["text"]  # line 3 is a card fact's source: the fact is what is given


def test_what_was_said_before_a_later_fact_answering_the_same_words_is_left_to_read_and_as_of(ws):
    """A statement no card kept ("Biscuit sees Dr. Haines") is given only while no later fact answers the words
    it answers: after "We took Biscuit to a new vet, Dr. Moreau", recall, and so the hook, give the fact alone;
    a line the later fact does not answer ("Biscuit is allergic to chicken") and the day before stay given."""
    m = Memory(ws.root)
    said = [("Biscuit, our beagle, sees Dr. Haines at the Northgate vet clinic.", "2026-11-16T18:00:00"),
            ("Biscuit is allergic to chicken, the vet said.", "2026-11-16T18:02:00"),
            ("We took Biscuit to a new vet today, Dr. Moreau on Elm Street.", "2026-11-22T18:00:00")]
    m.ws.write_text("session/dialog/day.jsonl", "".join(
        json.dumps({"role": "user", "content": text, "created_at": at}) + "\n" for text, at in said))
    m.write("daily/2026-11-22/vet.md", "# Vet\n\n## Events\n\n- We took Biscuit to a new vet today, Dr. Moreau on "
            "Elm Street. (about:: user) (source:: [[session/dialog/day.jsonl#L3]]) ^f1\n", name="Vet")
    now = m.recall("Who is Biscuit's vet?", budget=400)["text"]
    assert "Dr. Moreau" in now and "Dr. Haines" not in now
    assert "allergic to chicken" in m.recall("Is Biscuit allergic to chicken?", budget=400)["text"]
    assert "Dr. Haines" in m.recall("Who is Biscuit's vet?", budget=400, as_of="2026-11-20")["text"]
    assert "Dr. Haines" in m.recall("Who is Biscuit's vet?", budget=400, history=True)["text"]
    assert "Dr. Haines" in m.recall("Who is Biscuit's vet?", budget=400, path_prefix="session/")["text"]


def test_generated_pages_take_no_budget(mem):
    mem.daily_reindex("2026-11-02")
    mem.ws.write_text("daily/2026-11-02/interests.yaml", "- title: Gym plan\n  keywords: [gym, Mondays]\n")
    mem.reconcile()
    paths = [h["path"] for h in mem.search("gym plan Mondays", per_file=0, limit=20)]
    assert "daily/2026-11-02.md" not in paths and "daily/2026-11-02/interests.yaml" not in paths
    index_words = [h["path"] for h in mem.search("name description index of the cards", per_file=0, limit=20)]
    assert "daily/2026-11-02.md" not in index_words  # its generated frontmatter is not what a person wrote either
    mem.edit("daily/2026-11-02.md", old="# 2026-11-02", new="# 2026-11-02\n\nRainy day, skipped the gym plan.")
    assert "daily/2026-11-02.md" in [h["path"] for h in mem.search("rainy skipped", per_file=0)]  # a person's words


def test_every_fact_line_is_a_hit_of_its_own_and_a_document_stays_capped(ws):
    """One node holds every fact about the user: one hit per file would answer a question with its best-scoring
    fact and put the answer in `more` (the real 1.5B: "remind me to get him something" for Tomasz's birthday).
    A document's passages stay one hit per file. The same through the service's cache."""
    from test_search_cache import _sql_only

    mem = Memory(ws.root)
    mem.write(NODE, "# User\n\n## Facts\n\n"
              "- Remind me to get Tomasz something for his birthday. (about:: user) (since:: 2026-11-17) ^f1\n"
              "- My brother Tomasz's birthday is on March 24. (about:: user) (since:: 2026-11-20) ^f2\n"
              "- Tomasz lives in Krakow. (about:: Tomasz) (since:: 2026-11-17) ^f3\n", name="User")
    mem.write("notes/family.md", "# Family\n\n" + "\n\n".join(
        f"## Visit {n}\n\n" + f"Tomasz came over for a birthday lunch number {n}. " * 40 for n in range(3)))
    expect = {(NODE, line(mem, f)) for f in ("f1", "f2", "f3")}
    hits = mem.search("Tomasz birthday")
    assert expect <= set(where(hits))
    notes = [h for h in hits if h["path"] == "notes/family.md"]
    assert len(notes) == 1 and notes[0]["more"]  # its other passages, by line range
    db = IndexDB(ws, keep_open=True)
    try:
        with db.session() as con:
            assert search_cache.wait(con, 30) is not None
            held = search(con, "Tomasz birthday", limit=10)
            with _sql_only(con):
                sql = search(con, "Tomasz birthday", limit=10)
            assert where(held) == where(sql) and expect <= set(where(held))
    finally:
        db.close()


def test_the_service_cache_answers_chains_as_sql(ws):
    from test_search_cache import _sql_only

    write_story(Memory(ws.root))
    db = IndexDB(ws, keep_open=True)
    try:
        mem = Memory(ws.root, db=db)
        with db.session() as con:
            cache = search_cache.wait(con, 30)
            assert cache is not None

            def same():
                for query in ("gym days", "Mondays Thursdays", "coffee place", "mornings busy"):
                    for kw in ({}, {"history": True}, {"as_of": "2026-11-04"}, {"path_prefix": "daily/"}):
                        held = search(con, query, limit=5, per_file=None, **kw)
                        with _sql_only(con):
                            sql = search(con, query, limit=5, per_file=None, **kw)
                        for h in held + sql:
                            h.pop("bm25")
                        assert held == sql, (query, kw)

            same()
            mem.write(NODE, node(history=f"- My coffee place is Fennel & Bean. (about:: user) (since:: 2026-11-06) "
                                         f"(until:: 2026-11-07) (source:: [[{FRESH_CARD}#^f1]]) ^f3\n"))
            assert FRESH_CARD not in [h["path"] for h in search(con, "coffee place", limit=5)]  # consumed, ended
            same()
            assert search_cache.of(con) is cache
    finally:
        db.close()


@pytest.mark.e2e
def test_both_hooks_give_what_holds_now(tmp_path):
    from test_hooks_inject import ANY_MATCH, hook, injected, prompt, start

    memory = Memory(tmp_path / "ws")
    write_story(memory)
    memory.daily_reindex("2026-11-02")
    asked = injected(hook(prompt("Which days do I go to the gym again?"), memory.ws.root, env=ANY_MATCH),
                     "UserPromptSubmit")
    assert "Wednesdays and Saturdays" in asked and "Mondays and Thursdays" not in asked
    assert "TodoWrite" not in asked and "daily/2026-11-02.md" not in asked
    started = injected(hook(start(), memory.ws.root), "SessionStart")
    assert "Wednesdays and Saturdays" in started and "Mondays and Thursdays" not in started
    assert "Fennel & Bean" in started  # a card fact no dream consumed: the newest thing known


@pytest.mark.parametrize("reply, echo", [
    ("Noted, gym on Mondays and Thursdays.", True),
    ("Mondays and Thursdays at the gym, I'll keep it in mind.", True),
    ("Nice, the gym is a good habit.", True),
    ("For a Monday and Thursday gym plan, start with compound lifts, keep sessions under an hour and rest "
     "on the days between.", False),  # what the assistant adds is its own
    ("What time do you usually wake up?", False),  # shares no word
    ("Mondays and Thursdays, plenty of time to recover in between.", True),  # says the value back, then remarks
])
def test_a_reply_that_only_echoes_a_cited_line_is_covered_by_its_fact(reply, echo):
    from storage.index.chunking import echoes

    records = [(1, "user", "I'll go to the gym on Mondays and Thursdays before work."), (2, "assistant", reply)]
    assert (2 in echoes(records, {1})) is echo
    assert echoes(records, set()) == set()  # the user's line cited by no fact: nothing covers the reply
