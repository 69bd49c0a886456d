"""The memory jobs' plain logic, without Prefect or an LLM: message filtering, checkpoints, naming, facts and
their checks, relative times, the dream's scanning, grouping and node edits, the link-drop guard, topic dedup."""

import datetime as dt
import json

import pytest

from engine.access.toolbox import predict
from engine.memory import extraction, relative_dates
from engine.memory import interests
from engine.memory.cards import add_facts, find_card, slugify, unique_path
from engine.memory.consolidation import since
from engine.memory.gathering import changed_files, group, subject, window
from engine.memory.objects import CardFact, Unit
from storage.errors import InvalidInput, WriteRejected
from storage.files import checkpoints, dialog
from storage.memory import Memory
from storage.text import facts
from tasks.governance import link_guard


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
    assert out == {"path": "session/dialog/s1.jsonl", "appended": 2, "dropped": 1, "redacted": {}, "private": 0}
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


def test_unique_path_skips_taken_names(memory):
    memory.write("daily/2024-05-08/notes.md", "a")
    assert unique_path(memory, "daily/2024-05-08", "notes") == "daily/2024-05-08/notes-2.md"
    assert unique_path(memory, "daily/2024-05-08", "notes", keep="daily/2024-05-08/notes.md").endswith("/notes.md")
    memory.write("daily/2024-05-08/notes.md", "a", metadata={"session_id": "s1"})
    assert find_card(memory, "daily/2024-05-08", "session_id", "s1") == "daily/2024-05-08/notes.md"


# ---- facts --------------------------------------------------------------------------------------------------

def test_a_fact_line_round_trips_and_edits_keep_everything_else():
    line = ("- Ana works at a bakery (in Alfama). (about:: Ana) (date:: 2026-11-04) (mood:: happy) "
            "(source:: [[session/dialog/s.jsonl#L3|18:02]], [[session/dialog/s.jsonl#L5]]) ^f2")
    fact = facts.parse_line(line)
    assert (fact.text, fact.about, fact.date, fact.id) == ("Ana works at a bakery (in Alfama).", "Ana", "2026-11-04", "f2")
    assert fact.sources == ("session/dialog/s.jsonl#L3", "session/dialog/s.jsonl#L5") and fact.labels == ("18:02", "")
    assert fact.extra == {"mood": "happy"} and facts.parse_line(fact.render()) == fact
    assert facts.parse_line("- plain item") is None and facts.parse_line("text ^f1") is None
    body = "# Ana\n\nA note a person wrote.\n\n## Facts\n\n" + line + "\n\n## Sources\n\n- [[daily/d/c.md]]\n"
    edited = facts.retire(facts.add(body, facts.Fact("Ana works at a cafe.", id="f3", since="2026-11-06")),
                          "f2", "2026-11-06", "digest/personal/ana.md#^f3")
    assert "A note a person wrote." in edited and edited.index("## History") < edited.index("## Sources")
    by_id = facts.by_id(edited)
    assert by_id["f3"].current and not by_id["f2"].current and by_id["f2"].until == "2026-11-06"
    assert by_id["f2"].holds_on("2026-11-05") and not by_id["f2"].holds_on("2026-11-06")
    assert facts.next_id(edited) == "f4" and facts.next_id(edited, used=9) == "f10"


def items(*texts, said=dt.date(2026, 11, 5)):
    """Numbered messages; one starting `Assistant: ` is the assistant's."""
    return [extraction.Item(n, t.removeprefix("Assistant: "), f"session/dialog/s.jsonl#L{n}", said=said,
                            speaker="assistant" if t.startswith("Assistant: ") else "user")
            for n, t in enumerate(texts, 1)]


def screen(*answers, material=("I moved to Porto yesterday.", "Ana works at a bakery in Alfama.")):
    answer = extraction.FactList(facts=[extraction.ExtractedFact(text=t, about=a, source=src) for t, a, src in answers])
    return extraction.screen(answer, items(*material), "You keep a person's long-term memory.")


def test_screening_keeps_grounded_facts_recites_and_resolves_dates():
    out = screen(("The user moved to Porto yesterday.", "user", [1]), ("Ana works at a bakery.", "Ana", [1]))
    assert [(f.text, f.date, f.sources) for f in out.kept] == [
        ("The user moved to Porto on 2026-11-04.", "2026-11-04", ("session/dialog/s.jsonl#L1",)),
        ("Ana works at a bakery.", None, ("session/dialog/s.jsonl#L2",))]  # its words are in message 2
    assert out.recited == 1 and out.dropped == []
    worked_out = screen(("The user moved to Porto on 2026-11-03.", "user", [1]))  # a date the model computed
    assert worked_out.kept[0].text == "The user moved to Porto on 2026-11-04."


def test_screening_drops_each_bad_fact_with_its_rule():
    out = screen(("Ana is a famous pianist.", "Ana", [2]), ("<string>", "user", [1]), ("Thanks a lot.", "user", [1]),
                 ("Use daily_list for that day.", "user", [1]), ("Ana works at a bakery in Alfama.", "Ana", [2]),
                 ("Ana works at the bakery in Alfama!", "Ana", [2]), ("word " * 50, "user", [1]),
                 ("**2026-11-05T18:02:00**: User: Ana works at a bakery in Alfama.", "Ana", [2]),
                 ("[18:02] Ana works at a bakery in Alfama.", "Ana", [2]),
                 material=("Thanks a lot.", "Ana works at a bakery in Alfama.", "word " * 50))
    assert [f.text for f in out.kept] == ["Ana works at a bakery in Alfama."]
    assert [d["rule"] for d in out.dropped] == ["markup", "thin", "tool", "duplicate", "long", "ungrounded", "copy",
                                                "copy"]  # the last three: their message's sentence is kept already
    assert "pianist" in out.dropped[5]["why"] and "famous" in out.dropped[5]["why"]


def test_a_reporting_verb_is_framing_not_a_word_to_ground():
    """The 1.5B model wrote "The user stated that ...": how it was said is no fact of its own."""
    out = screen(("The user stated that Ana works at a bakery in Alfama.", "Ana", [2]))
    assert [f.text for f in out.kept] == ["The user stated that Ana works at a bakery in Alfama."]


def test_a_day_written_another_way_is_grounded():
    """The 1.5B model wrote `December 22, 2026` for the message's `2026-12-22`: the same day, not a new word."""
    out = screen(("The Atlas deadline is now December 22, 2026.", "Atlas", [1]),
                 ("The Atlas deadline is 23 December.", "Atlas", [1]),
                 ("Ana starts on 2026-12-01.", "Ana", [2]),
                 material=("The Atlas project deadline moved to 2026-12-22.", "Ana starts on the 1st of December."))
    assert [f.text for f in out.kept] == ["The Atlas deadline is now December 22, 2026.", "Ana starts on 2026-12-01."]
    assert out.kept[0].date == "2026-12-22" and [d["rule"] for d in out.dropped] == ["ungrounded"]  # the 23rd


def test_a_fact_in_its_own_words_is_kept_in_the_words_of_the_sentence_it_cites():
    """The 0.5B model wrote `A young girl goes to Oak Primary.` for `My daughter goes to Oak Primary.`: the message
    says what is worth keeping. Not when the sentence shares no word, is the assistant's, or is kept already."""
    material = ("We moved last year. My daughter goes to Oak Primary.", "The Atlas deadline moved to 2026-12-22.",
                "Assistant: Your daughter must love the new school!", "Ana works at a bakery in Alfama.",
                "My landlord is Mr. Silva.", "I'm taking a Spanish course on Tuesdays.")
    out = screen(("A young girl goes to Oak Primary.", "daughter", [1]),
                 ("What is the purpose of this course?", "user", [6]),  # a statement turned into a question
                 ("Mr. Silva is a person who lives in a city called New York City.", "Mr. Silva", [5]),
                 ("The Atlas deadline has been updated from 2026-11-05 to 2026-12-22.", "Atlas", [2]),
                 ("The Atlas deadline is 2026-12-22.", "Atlas", [2]),
                 ("The daughter adores her new school.", "daughter", [3]),
                 ("The user adores Kyoto.", "user", [4]), material=material)
    assert [(f.text, f.sources, f.date) for f in out.kept] == [
        ("The Atlas deadline is 2026-12-22.", ("session/dialog/s.jsonl#L2",), "2026-12-22"),
        ("My daughter goes to Oak Primary.", ("session/dialog/s.jsonl#L1",), None),
        ("I'm taking a Spanish course on Tuesdays.", ("session/dialog/s.jsonl#L6",), None),
        ("My landlord is Mr. Silva.", ("session/dialog/s.jsonl#L5",), None)]
    assert out.restated == 3 and [d["rule"] for d in out.dropped] == ["ungrounded"] * 3
    assert [d["text"][:9] for d in out.dropped] == ["The daugh", "The user ", "The Atlas"]


def test_a_question_of_the_conversation_is_not_a_fact_unless_filed_as_one():
    """A small model listed each message as a fact, questions too (`Is she settling in`, without its `?`)."""
    material = ("Assistant: That's big news. Is she settling in?", "Assistant: Do you plan to visit her?",
                "Where does Ana work now?",
                "When I moved to Porto, Ana stayed in Lisbon.", "How to feed a starter: every 12 hours.")
    answer = extraction.FactList(facts=[
        extraction.ExtractedFact(text="That's big news. Is she settling in", about="Ana", source=[1]),
        extraction.ExtractedFact(text="Do you plan to visit her", about="user", source=[2]),
        extraction.ExtractedFact(text="Where does Ana work now?", about="Ana", kind="open question", source=[3]),
        extraction.ExtractedFact(text="When I moved to Porto, Ana stayed in Lisbon.", about="Ana", source=[4]),
        extraction.ExtractedFact(text="How to feed a starter: every 12 hours.", kind="how-to", source=[5])])
    out = extraction.screen(answer, items(*material), "You keep a person's long-term memory.")
    assert [d["rule"] for d in out.dropped] == ["question", "question"]
    assert [f.kind for f in out.kept] == ["question", "fact", "procedure"]


def test_relative_times_count_from_the_day_said():
    said = dt.date(2026, 11, 5)  # a Thursday
    assert relative_dates.resolve("I moved to Porto yesterday.", said) == ("I moved to Porto on 2026-11-04.",
                                                                            dt.date(2026, 11, 4))
    assert relative_dates.resolve("The deadline moved to next Friday.", said)[0] == \
        "The deadline moved to Friday 2026-11-06."
    assert relative_dates.resolve("Today was my first day.", said)[0] == "2026-11-05 was my first day."
    assert relative_dates.resolve("We met 3 days ago", said)[1] == dt.date(2026, 11, 2)
    assert relative_dates.resolve("next month I start", said)[0] == "In December 2026 I start"
    assert relative_dates.resolve("last Thursday", said)[1] == dt.date(2026, 10, 29)
    assert relative_dates.resolve("no time here", said) == ("no time here", None)
    assert relative_dates.date_of("4 November", said) == dt.date(2026, 11, 4)
    assert relative_dates.date_of("soon", said) is None


def test_a_card_gains_only_the_facts_it_lacks_with_fresh_ids():
    body, added = add_facts("# Tea\n", [facts.Fact("The user likes green tea.", kind="preference")])
    body, again = add_facts(body, [facts.Fact("The user likes green tea!", kind="preference"),
                                   facts.Fact("The user drinks it at 80 degrees.")], used=4)
    assert [f.id for f in added] == ["f1"] and [f.id for f in again] == ["f5"]
    assert [f.text for f in facts.parse(body)] == ["The user drinks it at 80 degrees.", "The user likes green tea."]


# ---- dream --------------------------------------------------------------------------------------------------

def test_window_and_changed_files():
    assert window("2024-03-01", 2) == ["2024-02-29", "2024-03-01"]
    done = {"daily/a.md": checkpoints.content_hash("same")}
    assert list(changed_files({"daily/a.md": "same", "daily/b.md": "new"}, done)) == ["daily/b.md"]


def test_subjects_group_facts_and_the_user_is_one():
    assert subject("the user") == subject("Me") == subject("I") == subject(None) == ("user", "The user")
    assert subject("The Atlas project") == ("atlas-project", "The Atlas project")
    refs = [CardFact(card="daily/d/a.md", text=t, about=a, kind=k, resource=False) for t, a, k in (
        ("The user lives in Lisbon.", "user", "fact"), ("Ana bakes.", "Ana", "fact"),
        ("The user likes tea.", "me", "preference"), ("Feed the starter twice a day.", "sourdough", "procedure"))]
    units = group(refs, hint="starter")
    assert [(u.key, len(u.facts), u.bucket) for u in units] == [
        ("sourdough", 1, "procedure"), ("user", 2, "personal"), ("ana", 1, "personal")]


def test_a_fact_holds_from_its_own_date_unless_that_is_a_plan():
    assert since(day="2026-11-05", date="2026-11-04") == "2026-11-04"
    assert since(day="2026-11-05", date="2026-12-24") == "2026-11-05"  # a plan's date, not its start
    assert since(day="2026-11-05", date=None) == "2026-11-05"


def test_link_guard():
    before = "A [[digest/wiki/x.md]] and [[daily/2024-05-08/a.md#L2]]."
    link_guard("n.md", before, before + " more [[digest/wiki/y.md]]")
    link_guard("n.md", before, "[[daily/2024-05-08/a.md#L3-L9]] [[digest/wiki/x.md]]")  # anchors may change
    with pytest.raises(WriteRejected, match="daily/2024-05-08/a.md"):
        link_guard("n.md", before, "A [[digest/wiki/x.md]].")


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


def test_the_dream_finds_a_subjects_node_in_a_digest_folder_of_your_own(memory):
    from engine.memory.consolidation import node_for

    memory.write("digest/project/vite.md", "# Vite\n\nThe dev server proxies /api.\n")  # yours, by hand
    unit = Unit(key="vite", about="Vite", bucket="wiki")
    assert node_for(memory, unit) == "digest/project/vite.md"  # not a second node in digest/wiki/
    assert node_for(memory, Unit(key="vitest", about="Vitest", bucket="wiki")) == "digest/wiki/vitest.md"
    memory.write("digest/archive/project/old.md", "# Old\n")
    assert node_for(memory, Unit(key="old", about="Old", bucket="wiki")) == "digest/wiki/old.md"
