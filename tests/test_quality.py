"""The content checks (tasks/quality.py), one test per rule, and the repair turn they drive (scripted server)."""

import pytest
from pydantic import BaseModel

from engine.llm import LLM, AnswerRefused, shape_of, response_schema
from engine.settings import Settings
from llm_server import copy_shown
from storage.errors import JobFailed
from tasks import quality
from tasks.quality import Material, check

DIALOG = ("[2024-05-08T09:00:00] user: My sister Ana moved from Lisbon to Porto last week.\n"
          "[2024-05-08T09:01:00] assistant: Nice! Does she still work at the bakery?\n"
          "[2024-05-08T09:02:00] user: Yes, she opened her own bakery near the river in Porto.")
CARD = Material(sources=DIALOG, instructions="Summarise the new messages of one conversation into the day's card "
                "for that conversation. Keep what will still matter later: facts about people, decisions.",
                dialog=DIALOG)
GOOD = "# Ana in Porto\n\n- Ana (my sister) moved from Lisbon to Porto.\n- She opened her own bakery by the river."


def test_a_good_card_passes():
    assert check("Ana moves to Porto", GOOD, CARD) is None


def test_empty_body():
    assert check("Ana", "# Ana\n\n## Sources\n\n- [[daily/x.md]]\n", CARD)[0] == "empty"
    assert check("Ana", "", CARD)[0] == "empty"


def test_a_body_of_file_links_under_any_sources_heading_is_empty():
    """What Qwen2.5-Coder-1.5B wrote as a REFINE of a node: its fact gone, a link list under `# Sources`."""
    written = ("# Sources\n- [daily/2024-05-08/ana.md](daily/2024-05-08/ana.md)\n\n## Sources\n\n"
               "- 2024-05-08: Ana moved to Porto ([[daily/2024-05-08/ana.md]]).\n")
    assert check("Ana", written, CARD)[0] == "empty"
    assert check("Ana", "See [the call](daily/2024-05-08/ana.md): Ana moved to Porto.\n", CARD) is None


def test_markup_and_placeholders():
    wrapped = '<file path="daily/2024-05-08/ana.md">\nAna moved to Porto.\n</file>'
    assert check("Ana", wrapped, CARD)[0] == "markup"
    assert check("<string>", GOOD, CARD)[0] == "markup"  # the repair turn's shape copied
    assert check("Ana", "<string or null>", CARD)[0] == "markup"
    assert check("Ana", "Ana moved to Porto.<br>She runs a bakery.", CARD) is None  # ordinary HTML is content
    laid_out = "<div><h2>Date: 2024-05-08</h2><p>Ana moved to Porto. She runs a bakery.</p></div>"  # a real 1.5B card
    assert check("Ana", laid_out, CARD)[0] == "markup"
    assert quality.markup("Ana moved to Porto. Her site uses `<div class=menu>`.") is None  # code is content


def test_pasted_frontmatter():
    pasted = "Ana moved to Porto.\n\n---\nname: Call with Ana\nsession_id: s1\n---\nShe runs a bakery."
    assert check("Ana", pasted, CARD)[0] == "frontmatter"
    leading = "---\nname: Ana\n---\nAna moved to Porto."  # a leading block is the system's to strip
    assert check("Ana", leading, CARD) is None
    assert check("Ana", "Ana moved to Porto.\n\n---\n\nShe runs a bakery.", CARD) is None  # a rule, not a block


def test_template_and_tool_names():
    assert check("Ana", "{{daily_list(date=2024-05-08)}}", CARD)[0] == "template"
    assert check("Daily list", GOOD, CARD)[0] == "tool"  # a tool's name, spelt as a title
    assert check("daily_list", GOOD, CARD)[0] == "tool"
    assert check("Node search", "Ana moved to Porto; node_search finds her.", CARD)[0] == "tool"
    assert check("Ana", '{"name": "edit", "arguments": {"path": "x.md"}}', CARD)[0] == "tool"
    assert check("Ana", "Ana will read (and write) about Porto's bakery scene.", CARD) is None


def test_instructions_echoed():
    echo = "Keep what will still matter later: facts about people, decisions."
    assert check("Ana", echo, CARD)[0] == "instructions"


def test_verbatim_copy_of_the_dialog():
    assert check("Ana", DIALOG, CARD)[0] == "copy"
    quoted = "- Ana moved from Lisbon to Porto in the week before 2024-05-08.\n- She opened a bakery."  # one line quoted: fine
    assert check("Ana", quoted, CARD) is None
    assert check("Ana", DIALOG, Material(sources=DIALOG)) is None  # a resource card may quote its resource
    kept = Material(sources=DIALOG, kept=DIALOG, dialog=DIALOG)  # the card it updates may stay as it was
    assert check("Ana", DIALOG, kept) is None


def test_ungrounded_sentences_and_names():
    example = "# Piano lessons\n\n- Sam has lessons on Tuesdays."  # the former repair example, copied
    assert check("Ana", example, CARD)[0] == "ungrounded"
    assert check("Piano lessons for Sam", GOOD, CARD)[0] == "ungrounded"
    world = GOOD + "\n\nThe Eiffel Tower stands in Paris, France."
    finding = check("Ana", world, CARD)
    assert finding[0] == "ungrounded" and "Eiffel" in finding[1]
    short = GOOD + "\n\nAll good."  # fewer than MIN_TERMS terms: not judged
    assert check("Ana", short, CARD) is None
    linked = "Ana runs a bakery, see [[digest/wiki/piano-lessons-for-sam.md|bakery]]."  # a link's path is no content
    assert check("Ana", linked, CARD) is None


def test_duplicate_source_lines():
    body = ("Ana moved to Porto.\n\n## Sources\n\n- 2024-05-08: Ana's news ([[daily/2024-05-08/ana.md]]).\n"
            "- 2024-05-08: Ana's news ([[daily/2024-05-08/ana.md]]).\n")
    assert check("Ana", body, CARD)[0] == "duplicate_sources"
    assert check("Ana", body.rsplit("- 2024", 1)[0], CARD) is None


def test_relative_time_in_a_card_needs_its_date():
    assert check("Ana", "- Ana moves to Porto next Friday.", CARD)[0] == "relative_time"
    assert check("Ana", "- We talk again in two weeks.", CARD)[0] == "relative_time"
    assert check("Ana", "- Ana moves to Porto next Friday (2024-05-10).", CARD) is None
    assert check("Ana", "- Ana moved to Porto around May 1.", CARD) is None
    assert check("Ana", "- Next steps: find a flat in Porto.", CARD) is None  # "next" alone is not a time
    kept = Material(DIALOG, kept="- Ana moves next Friday.", dialog=DIALOG)  # the card it updates may keep it
    assert check("Ana", "- Ana moves next Friday.\n- She opened her own bakery.", kept) is None
    node = Material(DIALOG)  # a node is judged by its sources' dates, not this rule
    assert check("Ana", "Ana moves to Porto next Friday.", node) is None


def test_a_node_that_pastes_a_source_whole():
    card = ("# Call with Ana\n\n- Ana moved from Lisbon to Porto in the week before 2024-05-08.\n"
            "- She opened her own bakery near the river in Porto.\n- She bakes pastel de nata every morning.")
    material = Material(card, cited=(card,))
    assert check("Ana", "Portugal is a country.\n\n" + card, material)[0] == "pasted"
    own = "Ana, my sister, lives in Porto since May 2024, where she runs a bakery by the river."
    assert check("Ana", own, material) is None


def test_every_rule_is_listed():
    assert set(quality.RULES) == {"empty", "markup", "frontmatter", "template", "tool", "instructions", "copy",
                                  "pasted", "relative_time", "ungrounded", "duplicate_sources"}


# ---- the repair turn -------------------------------------------------------------------------------------

class Note(BaseModel):
    name: str
    content: str


def judge(note: Note):
    return check(note.name, note.content, CARD)


def test_a_refused_answer_gets_one_repair_naming_the_rule(llm):
    llm.reply_json({"name": "Piano lessons for Sam", "content": "Sam has lessons on Tuesdays."})
    llm.reply_json({"name": "Ana in Porto", "content": GOOD})
    model = LLM.from_settings(Settings())
    note = model.structured([{"role": "user", "content": DIALOG}], Note, "card", check=judge)
    assert note.name == "Ana in Porto"
    repair = llm.requests[1]["messages"][-1]["content"]
    assert "rule `ungrounded`" in repair and '{"name": "<string>", "content": "<string>"}' in repair
    assert "Sam" not in repair.split("shape", 1)[1]  # nothing copyable as memory is shown
    assert model.usage.gates == {"ungrounded": 1} and model.usage.kinds["card"]["repairs"] == 1


def test_prose_then_the_shown_shape_copied_is_refused(llm):
    """The 7-day run's behaviour: prose first, then whatever the repair turn shows, copied back."""
    llm.reply("Sure! Here is the card you asked for: Ana moved.")
    llm.responder = copy_shown
    model = LLM.from_settings(Settings())
    with pytest.raises(AnswerRefused, match="rule `markup`") as refused:
        model.structured([{"role": "user", "content": DIALOG}], Note, "card", check=judge)
    assert isinstance(refused.value, JobFailed) and refused.value.exit_code == 9
    assert len(llm.requests) == 3  # the answer, a repair of its form, a repair of its content
    assert model.usage.gates == {"markup": 2} and model.usage.kinds["card"]["failures"] == 1


def test_the_shape_has_placeholders_only():
    shape = shape_of(response_schema(Note))
    assert shape == {"name": "<string>", "content": "<string>"}
    assert check(shape["name"], shape["content"], CARD)[0] == "markup"



def test_pathological_bodies_are_judged_quickly():
    """A reply of 30,000 brackets or braces (a repetition loop cut at max_tokens) is judged in well under a
    second each, never backtracks for minutes, and never raises."""
    import time

    for body in ("[[" * 15_000, "{{" * 15_000, '{"a":' * 6_000, "---\n" * 7_500, "<" * 30_000, "[[a|" * 7_500):
        started = time.perf_counter()
        check("n", body, CARD)
        assert time.perf_counter() - started < 3


def test_a_card_quoting_every_message_with_its_speaker_is_a_copy():
    """What Qwen2.5-Coder-1.5B wrote as the first card of the temporal story: each message quoted, labelled."""
    dialog = "\n".join(f"[2026-11-02T18:0{i}:00] {role}: {text}" for i, (role, text) in enumerate([
        ("user", "I live in Lisbon, close to the river."), ("assistant", "Thanks, noted."),
        ("user", "I work at Acme Robotics as an engineer."), ("assistant", "Thanks, noted."),
        ("user", "My partner Sam and I went hiking on Sunday."), ("assistant", "Thanks, noted.")]))
    card = ("### 2026-11-02 (Monday)\n- **User**: I live in Lisbon, close to the river.\n- **Assistant**: Thanks, noted.\n"
            "- **User**: I work at Acme Robotics as an engineer.\n- **Assistant**: Thanks, noted.\n"
            "- **User**: My partner Sam and I went hiking on Sunday.\n- **Assistant**: Thanks, noted.\n")
    assert check("Lifestyle details", card, Material(dialog, dialog=dialog))[0] == "copy"
    summary = "- Lives in Lisbon, by the river.\n- Engineer at Acme Robotics.\n- Went hiking with partner Sam on Sunday."
    assert check("Lisbon, Acme, Sam", summary, Material(dialog, dialog=dialog)) is None
