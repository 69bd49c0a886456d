"""The content checks (engine/memory/quality.py), one test per rule, and the repair turn they drive (scripted server)."""

import pytest
from pydantic import BaseModel

from engine.config.settings import Settings
from engine.models.llm import LLM, AnswerRefused, shape_of, response_schema
from llm_server import copy_shown
from engine.memory import quality
from engine.memory.quality import Material, check
from storage.errors import JobFailed
from storage.files.dialog import transcript

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
    messages = [("user", "I live in Lisbon, close to the river."), ("assistant", "Thanks, noted."),
                ("user", "I work at Acme Robotics as an engineer."), ("assistant", "Thanks, noted."),
                ("user", "My partner Sam and I went hiking on Sunday."), ("assistant", "Thanks, noted.")]
    dialog = "\n".join(f"[2026-11-02T18:0{i}:00] {role}: {text}" for i, (role, text) in enumerate(messages))
    card = "### 2026-11-02 (Monday)\n" + "".join(f"- **{role.title()}**: {text}\n" for role, text in messages)
    assert check("Lifestyle details", card, Material(dialog, dialog=dialog))[0] == "copy"
    # this week's real card: each message under its time
    timed = "".join(f"- **2026-11-02T18:0{i}:00**:\n  - {role.title()}: {text}\n"
                    for i, (role, text) in enumerate(messages))
    assert check("Lifestyle details", timed, Material(dialog, dialog=dialog))[0] == "copy"
    summary = "- Lives in Lisbon, by the river.\n- Engineer at Acme Robotics.\n- Went hiking with partner Sam on Sunday."
    assert check("Lisbon, Acme, Sam", summary, Material(dialog, dialog=dialog)) is None


# ---- copy and pasted: the source with layout around it is refused, summaries and facts pass -------------

MESSAGES = [  # (time, role, text): one evening's conversation, a few short replies among longer messages
    ("18:00", "user", "I live in Lisbon, close to the river, in a small flat with my partner Sam."),
    ("18:01", "assistant", "Lisbon by the river sounds lovely. How long have you two lived there?"),
    ("18:02", "user", "Since March 2024. Before that we rented a place in Porto for three years."),
    ("18:03", "assistant", "Thanks, noted."),
    ("18:04", "user", "I work at Acme Robotics as an engineer on the warehouse arm team."),
    ("18:05", "assistant", "That sounds like interesting work. Do you get there by tram?"),
    ("18:06", "user", "Mostly by bike; it takes about twenty minutes along the river."),
    ("18:07", "assistant", "Got it: you cycle to work along the river."),
    ("18:08", "user", "My sister Ana moved to Lisbon last week and starts at a bakery in Alfama on Monday."),
    ("18:09", "assistant", "Nice, I will remember that Ana moved to Lisbon and starts at the bakery on Monday."),
]
STORY = transcript([{"created_at": f"2026-11-02T{time}:00", "role": role, "content": text}
                    for time, role, text in MESSAGES])


def said(line, messages=MESSAGES) -> str:
    """The messages laid out one by one: `line(time, role, text)` for each."""
    return "\n".join(line(*message) for message in messages)


COPIED_LAYOUTS = {  # how models lay a transcript out as a card
    "the real 1.5B card": said(lambda t, r, x: f"- **2026-11-02T{t}:00**:\n  - {r.title()}: {x}"),
    "bold speaker labels": said(lambda t, r, x: f"- **{r.title()}**: {x}"),
    "plain speaker labels": said(lambda t, r, x: f"{r.title()}: {x}"),
    "timestamps first": said(lambda t, r, x: f"[2026-11-02 {t}] {r}: {x}"),
    "bold times": said(lambda t, r, x: f"**{t}** {r.title()}: {x}"),
    "numbered": "\n".join(f"{i}. {r.title()}: {x}" for i, (t, r, x) in enumerate(MESSAGES, 1)),
    "quoted": said(lambda t, r, x: f'> **{r.title()}:** "{x}"\n>'),
    "a table": "| Time | Speaker | Message |\n|---|---|---|\n" + said(lambda t, r, x: f"| {t} | {r} | {x} |"),
    "italic labels, curly quotes": said(lambda t, r, x: f"* _{r.title()} ({t})_: “{x}”"),
    "a heading over bare bullets": "# Evening call, 2026-11-02\n\n## Notes\n\n" + said(lambda t, r, x: f"- {x}"),
    "re-ordered: the user's messages first": said(lambda t, r, x: f"- {r.title()} said: {x}",
                                                  sorted(MESSAGES, key=lambda m: m[1] != "user")),
    "every other message dropped": said(lambda t, r, x: f"- {t} {x}", MESSAGES[::2]),
}
SUMMARIES = {  # what a card should be: facts and summaries that reuse a few words of the dialog
    "facts with dates": ("## Facts\n\n- Lives in Lisbon near the river with partner Sam (since March 2024).\n"
                         "- Lived in Porto for three years before that.\n"
                         "- Engineer at Acme Robotics (warehouse arm team).\n"
                         "- Cycles to work, about twenty minutes along the river.\n"
                         "- Sister Ana moved to Lisbon in the week before 2026-11-02; she starts at a bakery in Alfama "
                         "on 2026-11-09."),
    "facts reusing 4-6 words each": ("- Ana moved to Lisbon last week (before 2026-11-02).\n"
                                     "- Works at Acme Robotics as an engineer.\n"
                                     "- Lives in a small flat with partner Sam.\n"
                                     "- Rented a place in Porto for three years.\n"
                                     "- Goes by bike, about twenty minutes along the river."),
    "one fact reusing most of a message": ("- Works at Acme Robotics as an engineer on the warehouse arm team.\n"
                                           "- Lives in Lisbon near the river with Sam.\n"
                                           "- Ana (sister) starts at a bakery in Alfama on 2026-11-09."),
    "one message as a fact": "- I work at Acme Robotics as an engineer on the warehouse arm team.",
    "a summary quoting a phrase": ("# Lisbon life\n\nThe user and partner Sam have lived by the river in Lisbon "
                                   "since March 2024, after three years in Porto. The user is an engineer at Acme "
                                   'Robotics and cycles to work ("about twenty minutes along the river"). Sister Ana '
                                   "moved to Lisbon in the week before 2026-11-02 and starts at a bakery in Alfama on "
                                   "2026-11-09."),
    "labelled sections": ("**Home:** Lisbon, by the river, with Sam since March 2024 (Porto before).\n"
                          "**Work:** engineer at Acme Robotics, on the warehouse arm team; cycles there.\n"
                          "**Family:** sister Ana moved to Lisbon; bakery job in Alfama from 2026-11-09."),
}


@pytest.mark.parametrize("layout", COPIED_LAYOUTS)
def test_a_card_that_is_the_dialog_in_any_layout_is_a_copy(layout):
    finding = check("Evening call", COPIED_LAYOUTS[layout], Material(STORY, dialog=STORY))
    assert finding and finding[0] == "copy", finding


def test_a_copied_card_under_its_own_heading_and_intro_is_a_copy():
    body = ("# What we talked about\n\nA relaxed evening chat about home, work and family.\n\n"
            + COPIED_LAYOUTS["bold speaker labels"])
    assert check("Evening call", body, Material(STORY, dialog=STORY))[0] == "copy"


@pytest.mark.parametrize("summary", SUMMARIES)
def test_summaries_and_facts_that_reuse_a_few_words_pass(summary):
    assert check("Lisbon, Acme, Ana", SUMMARIES[summary], Material(STORY, dialog=STORY)) is None


CARD_FACTS = ["The user lives in Lisbon, close to the river, with partner Sam since March 2024.",
              "Before Lisbon they rented a place in Porto for three years.",
              "The user works at Acme Robotics as an engineer on the warehouse arm team.",
              "The user cycles to work, about twenty minutes along the river.",
              "Sister Ana moved to Lisbon in the week before 2026-11-02.",
              "Ana starts at a bakery in Alfama on 2026-11-09."]
SOURCE_CARD = ("---\nname: Lisbon, Acme and Ana\nsession_id: s1\n---\n# Lisbon, Acme and Ana\n\n"
               + "\n".join(f"- {fact}" for fact in CARD_FACTS)
               + "\n\n## Sources\n\n- 2026-11-02: the evening call ([[session/dialog/s1.jsonl]]).\n")
NODE_SOURCES = "\n\n## Sources\n\n- The evening call of 2026-11-02 ([[daily/2026-11-02/lisbon.md]]).\n"
PASTED_LAYOUTS = {  # how models lay a cited card out as a node
    "the card under a new heading": "# Lisbon\n\n" + "\n".join(f"- {x}" for x in CARD_FACTS) + NODE_SOURCES,
    "numbered": "\n".join(f"{i}. {x}" for i, x in enumerate(CARD_FACTS, 1)) + NODE_SOURCES,
    "quoted": "\n".join(f"> {x}" for x in CARD_FACTS) + NODE_SOURCES,
    "a table": "| Date | Fact |\n|---|---|\n" + "\n".join(f"| 2026-11-02 | {x} |" for x in CARD_FACTS) + NODE_SOURCES,
    "bold labels": "\n".join(f"- **Fact {i}**: {x}" for i, x in enumerate(CARD_FACTS, 1)) + NODE_SOURCES,
    "dates first": "\n".join(f"- [2026-11-02 18:00] {x}" for x in CARD_FACTS) + NODE_SOURCES,
    "re-ordered": "\n".join(f"- *{x}*" for x in reversed(CARD_FACTS)) + NODE_SOURCES,
    "an intro, then the card": ("The user's life in Lisbon, as of November 2026.\n\n"
                                + "\n".join(f"* “{x}”" for x in CARD_FACTS) + NODE_SOURCES),
}
NODE_SUMMARIES = {
    "own words": ("The user has lived in Lisbon with Sam since March 2024 (three years in Porto before), works as an "
                  "engineer at Acme Robotics and bikes to work. Sister Ana arrived in the week before 2026-11-02."
                  + NODE_SOURCES),
    "two of the card's lines, selected": ("# Work\n\n- The user works at Acme Robotics as an engineer on the warehouse "
                                          "arm team.\n- The user cycles to work, about twenty minutes along the river."
                                          + NODE_SOURCES),
    "facts reusing a few words": ("- Lives in Lisbon, close to the river, since March 2024.\n- Engineer at Acme "
                                  "Robotics.\n- Ana moved to Lisbon in the week before 2026-11-02.\n- She starts at a "
                                  "bakery in Alfama on 2026-11-09." + NODE_SOURCES),
}


@pytest.mark.parametrize("layout", PASTED_LAYOUTS)
def test_a_node_that_is_its_source_card_in_any_layout_is_pasted(layout):
    finding = check("Lisbon", PASTED_LAYOUTS[layout], Material(SOURCE_CARD, cited=(SOURCE_CARD,)))
    assert finding and finding[0] == "pasted", finding


def test_a_node_that_is_a_cited_transcript_in_another_layout_is_pasted():
    """A daily note that is a conversation, cited by a node that lays it out again."""
    material = Material(STORY, cited=(STORY,))
    for layout in ("the real 1.5B card", "a table", "re-ordered: the user's messages first"):
        assert check("Lisbon", COPIED_LAYOUTS[layout] + NODE_SOURCES, material)[0] == "pasted", layout


@pytest.mark.parametrize("summary", NODE_SUMMARIES)
def test_nodes_in_their_own_words_or_selecting_lines_pass(summary):
    assert check("Lisbon", NODE_SUMMARIES[summary], Material(SOURCE_CARD, cited=(SOURCE_CARD,))) is None


def test_the_copy_checks_are_fast_on_a_long_card():
    """They run on every answer: a 30,000-character card against a dialog as long, in well under 50 ms."""
    import random
    import time

    vocabulary = sorted({word for _, _, text in MESSAGES for word in text.split()})
    pick = random.Random(0).choice
    said = [" ".join(pick(vocabulary) for _ in range(12)) for _ in range(600)]
    dialog = "\n".join(f"[2026-11-02T18:{i % 60:02d}:00] user: {text}" for i, text in enumerate(said))[:30_000]
    card = "\n".join(f"- **User**: {text}" for text in said)[:30_000]
    material = Material(dialog, dialog=dialog, cited=(dialog,))
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        assert quality.copy(card, material)[0] == "copy" and quality.pasted(card, material)[0] == "pasted"
        timings.append(time.perf_counter() - started)
    assert min(timings) < 0.05, timings
