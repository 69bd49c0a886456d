"""Checks code makes on a model's facts that a small model gets wrong: an assistant's echo filed instead of the
user's words, a change to the same value, words of two messages joined into one claim (engine/memory/extraction.py)."""

import datetime as dt

import pytest

from engine.memory import extraction
from engine.memory.extraction import ExtractedFact, FactList, Item
from storage.text import facts

DAY = dt.date(2026, 11, 5)


def conversation(*lines: tuple[str, str]) -> list[Item]:
    return [Item(n, text, f"session/dialog/s1.jsonl#L{n}", f"2026-11-05 18:0{n}", DAY, speaker)
            for n, (speaker, text) in enumerate(lines, 1)]


def screened(items: list[Item], *answer: tuple[str, list[int]]) -> extraction.Screened:
    return extraction.screen(FactList(facts=[ExtractedFact(text=t, source=s) for t, s in answer]), items, "")


def card_fact(text: str, item: Item) -> facts.Fact:
    return facts.Fact(text=text, kind="fact", sources=(item.anchor,), labels=(item.label,))


ECHOES = [  # (user line, assistant line, the assistant's fact, what the card keeps)
    ("I sold the Corolla and bought a green Škoda Fabia.", "A green Fabia now, noted.",
     "A green Fabia now, noted.", "I sold the Corolla and bought a green Škoda Fabia."),
    ("My new landlord is Ms. Varga.", "Ms. Varga is your landlord now.",
     "Ms. Varga is your landlord now.", "My new landlord is Ms. Varga."),
    # the real 1.5B model filed the assistant's reply: it repeats three of the user's words and adds two
    ("We booked Osteria Lupa for our anniversary dinner.", "Osteria Lupa sounds lovely for an anniversary.",
     "Osteria Lupa sounds lovely for an anniversary.", "We booked Osteria Lupa for our anniversary dinner."),
    # the real 1.5B filed the assistant's reply, which says the date back and adds a remark
    ("I signed up for the Lakeside half marathon on April 12.", "April 12, plenty of time to train.",
     "April 12, plenty of time to train.", "I signed up for the Lakeside half marathon on April 12."),
]


@pytest.mark.parametrize("user, assistant, said, kept", ECHOES)
def test_an_assistants_echo_is_taken_from_the_users_message(user, assistant, said, kept):
    items = conversation(("user", user), ("assistant", assistant), ("user", "Thanks!"))
    echo = card_fact(said, items[1])

    out, taken = extraction.from_user([echo], items, "")

    assert taken == 1 and [(f.text, f.sources) for f in out] == [(kept, (items[0].anchor,))]


def test_an_echo_the_user_fact_says_already_is_left_out_and_what_the_assistant_adds_stays():
    items = conversation(("user", "My new landlord is Ms. Varga."),
                         ("assistant", "Ms. Varga is your landlord now. The Riverside bakery opens at seven."))
    user_fact = card_fact("My new landlord is Ms. Varga.", items[0])
    echo = card_fact("Ms. Varga is the user's landlord.", items[1])
    advice = card_fact("The Riverside bakery opens at seven.", items[1])  # the assistant's own, not an echo

    out, taken = extraction.from_user([user_fact, echo, advice], items, "")

    assert taken == 1 and [f.text for f in out] == ["My new landlord is Ms. Varga.",
                                                     "The Riverside bakery opens at seven."]
    assert out[1].sources == (items[1].anchor,)


GARBLES = [  # (messages, the model's fact and citations, what is kept (None: dropped), the rule)
    ([("user", "Project Heron is now called Kestrel, same team, same May 2 demo.")],
     ("Kestrel is now called Kestrel, same team, same May 2 demo.", [1]),
     "Project Heron is now called Kestrel, same team, same May 2 demo.", "same_change"),
    ([("user", "We renamed the band to Moss.")], ("The user renamed Moss to Moss.", [1]),
     "We renamed the band to Moss.", "same_change"),
    ([("user", "The doctor says Ines is allergic to peanuts."), ("assistant", "Oh no, how is she?"),
      ("user", "Fine. We had lunch at Fennel & Bean after.")],
     ("The doctor says Fennel & Bean is allergic to peanuts.", [1, 3]),
     "The doctor says Ines is allergic to peanuts.", "joined"),
    ([("user", "Fennel & Bean was lovely."), ("assistant", "Glad to hear!"), ("user", "My doctor is Dr. Reyes.")],
     ("Dr. Reyes is lovely Fennel & Bean doctor.", [1, 3]), "Fennel & Bean was lovely.", "joined"),
    ([("user", "Ok."), ("assistant", "Anything else?"), ("user", "Sure.")],
     ("The Kestrel demo moved to Friday.", [1, 3]), None, "ungrounded"),
]

REVERSED = [  # (the user's message, the model's change the wrong way round, the change as the message says it)
    # the real 1.5B model, on a story it had not seen
    ("Small thing: Quarry got renamed, legal didn't like the name. It's Lantern now.",
     "The quarry was renamed from 'Lantern' to 'Quarry'.", "The quarry was renamed from 'Quarry' to 'Lantern'."),
    ("I moved from Lisbon to Porto last week.", "I moved from Porto to Lisbon.", "I moved from Lisbon to Porto."),
    ("We switched the gym to Wednesdays, Mondays were too busy.", "Gym switched from Wednesdays to Mondays.",
     "Gym switched from Mondays to Wednesdays."),
    ("Forget what I said: I changed the dinner booking from Osteria Lupa to Casa Nube.",
     "I changed the dinner booking from Casa Nube to Osteria Lupa.",
     "I changed the dinner booking from Osteria Lupa to Casa Nube."),
    ("Heron is now called Kestrel.", "Kestrel is now called Heron.", "Heron is now called Kestrel."),
]


@pytest.mark.parametrize("said, answer, kept", REVERSED)
def test_a_change_the_wrong_way_round_is_turned_as_its_message_says_it(said, answer, kept):
    out = screened(conversation(("user", said)), (answer, [1]))

    assert [f.text for f in out.kept] == [kept] and out.restated == 1


@pytest.mark.parametrize("lines, answer, kept, rule", GARBLES)
def test_a_garble_is_restated_from_one_message_or_dropped(lines, answer, kept, rule):
    out = screened(conversation(*lines), answer)

    if kept is None:
        assert out.kept == [] and [d["rule"] for d in out.dropped] == [rule]
    else:
        assert [f.text for f in out.kept] == [kept] and out.restated == 1
        assert len(out.kept[0].sources) == 1


KEPT = [  # facts that look alike but are right: they stay as the model wrote them
    ([("user", "Project Heron is now called Kestrel.")], ("Project Heron is now called Kestrel.", [1])),
    ([("user", "I moved my gym sessions from Mondays to Thursdays.")],
     ("The user moved gym sessions from Mondays to Thursdays.", [1])),
    ([("assistant", "What is your dog called?"), ("user", "Rex, a beagle.")],
     ("The user's dog is called Rex, a beagle.", [1, 2])),  # an answer joined to its question
    # the message says the change the fact's way round, or marks neither value
    ([("user", "We switched the gym to Wednesdays, Mondays were too busy.")],
     ("Gym switched from Mondays to Wednesdays.", [1])),
    ([("user", "It's Casa Nube now, not Osteria Lupa: I changed the booking from Osteria Lupa to Casa Nube.")],
     ("I changed the booking from Osteria Lupa to Casa Nube.", [1])),
    ([("user", "Quarry and Lantern are both fine names; we went from Quarry to Lantern.")],
     ("We went from Quarry to Lantern.", [1])),
]


@pytest.mark.parametrize("lines, answer", KEPT)
def test_a_real_change_or_an_answer_to_a_question_stays(lines, answer):
    out = screened(conversation(*lines), answer)

    assert [f.text for f in out.kept] == [answer[0]] and out.restated == 0


def test_a_reply_that_opens_with_small_talk_keeps_its_own_fact():
    items = conversation(("user", "Yes, book the table."), ("assistant", "Yes, done: the table at Casa Nube is at 8."))
    fact = card_fact("Yes, done: the table at Casa Nube is at 8.", items[1])

    out, taken = extraction.from_user([fact], items, "")

    assert taken == 0 and out == [fact]


def test_a_question_the_assistant_asked_is_no_open_question_of_the_users():
    """The real 1.5B filed the assistant's `Do you plan to visit her?` as the user's open question."""
    items = conversation(("user", "She started at a bakery in Alfama."), ("assistant", "Do you plan to visit her?"),
                         ("user", "Should I book the flights now or wait for June?"))
    out = extraction.screen(FactList(facts=[ExtractedFact(text="Do you plan to visit her?", kind="question",
                                                          source=[2]),
                                            ExtractedFact(text="Should I book the flights now or wait for June?",
                                                          kind="question", source=[3])]), items, "")

    assert [f.text for f in out.kept] == ["Should I book the flights now or wait for June?"]
    assert [d["rule"] for d in out.dropped] == ["question"]


SPLIT = [  # (the user's line, the model's facts, what the card keeps)
    # the real 1.5B cut the new vet's name off the sentence that says it is Biscuit's vet
    ("We took Biscuit to a new vet today, Dr. Moreau on Elm Street, and we're staying with her.",
     ["We took Biscuit to a new vet today.", "Dr. Moreau on Elm Street, and we're staying with her."],
     ["We took Biscuit to a new vet on 2026-11-05, Dr. Moreau on Elm Street, and we're staying with her."]),
    ("We booked the anniversary dinner, Casa Nube on Via Roma.", ["Casa Nube on Via Roma."],
     ["We booked the anniversary dinner, Casa Nube on Via Roma."]),
    # a part that starts a clause of its own is a fact of its own
    ("I moved to Porto, and my sister lives in Gdansk.", ["I moved to Porto.", "My sister lives in Gdansk."],
     ["I moved to Porto.", "My sister lives in Gdansk."]),
    ("Priya moved to the Berlin office, so I report to Jonas Weber now.",
     ["Priya moved to the Berlin office.", "I report to Jonas Weber now."],
     ["Priya moved to the Berlin office.", "I report to Jonas Weber now."]),
    # a name starting a clause of its own is joined too: the sentence, both claims in the user's words
    ("I moved to Porto, Ana stayed in Lisbon.", ["I moved to Porto.", "Ana stayed in Lisbon."],
     ["I moved to Porto, Ana stayed in Lisbon."]),
]


@pytest.mark.parametrize("line, answer, kept", SPLIT)
def test_a_sentence_cut_before_a_name_is_one_fact(line, answer, kept):
    items = conversation(("user", line))
    out = screened(items, *[(text, [1]) for text in answer])
    assert [f.text for f in out.kept] == kept
    assert out.restated == (kept != answer)


UNSAID = [  # (a user message no kept fact cites, what the card keeps of it in the user's words)
    # the real 1.5B answered no fact for this turn; the later "new vet" then had nothing to replace
    ("Biscuit, our beagle, sees Dr. Haines at the Northgate clinic.",
     ["Biscuit, our beagle, sees Dr. Haines at the Northgate clinic."]),
    # the real 0.5B kept 1 of a day's 4 statements
    ("My physiotherapy sessions with Dr. Okafor are on Monday mornings.",
     ["My physiotherapy sessions with Dr. Okafor are on Monday mornings."]),
    ("Morning! My sister Dorota lives in Gdansk. We talk every Sunday.",
     ["My sister Dorota lives in Gdansk.", "We talk every Sunday."]),
    ("I moved to Porto on 2026-11-04.", ["I moved to Porto on 2026-11-04."]),
    # nothing of the user's own with a name or number, a request, a question, small talk: nothing kept
    ("Short one today, I'm tired.", []),
    ("Thanks for keeping track of all this.", []),
    ("Please remind me to call Dorota on Sunday.", []),
    ("Can you check whether Dr. Haines is open on Monday?", []),
    ("Fix the failing test in parser.py before the 3pm review.", []),
    ("I need you to check the Berlin numbers by Friday.", []),
    # a coding session's prompts: work on code, left to the model
    ("I get a KeyError in parser.py on line 42.", []),
    ("We call load_config() twice in the CLI.", []),
    ("My TodoWrite list has 3 items.", []),
    ("Let's move the Berlin import to Monday.", []),
    ("I keep the notes in src/docs on my laptop since 2024.", []),
]


@pytest.mark.parametrize("said, kept", UNSAID)
def test_a_users_statement_no_fact_cites_is_kept_in_their_words(said, kept):
    items = conversation(("user", said), ("assistant", "Noted."))
    out = extraction.unsaid([], items, "")
    assert [(f.text, f.sources, f.about) for f in out] == [(text, (items[0].anchor,), "user") for text in kept]


def test_a_statement_a_kept_fact_cites_or_says_gets_no_second_fact():
    items = conversation(("user", "My sister Dorota lives in Gdansk."), ("user", "Dorota lives in Gdansk now."))
    cited = card_fact("Dorota, the user's sister, lives in Gdansk.", items[0])
    assert extraction.unsaid([cited], items, "") == []  # the first is cited, the second says what it says
    split = conversation(("user", "Priya moved to the Berlin office, so I report to Jonas Weber now."))
    parts = [card_fact("Priya moved to the Berlin office.", split[0]),
             card_fact("I report to Jonas Weber now.", split[0])]
    assert extraction.unsaid(parts, split, "") == []  # its facts say it between them


def test_the_part_of_a_message_its_facts_left_out_is_kept_in_its_words():
    """The real 1.5B kept `remind me to get him something` of the sentence and dropped the birthday."""
    items = conversation(("user", "My brother Tomasz's birthday is on March 14, remind me to get him something."))
    reminder = card_fact("remind me to get him something.", items[0])
    out = extraction.unsaid([reminder], items, "")
    assert [(f.text, f.sources) for f in out] == [
        ("My brother Tomasz's birthday is on March 14, remind me to get him something.", (items[0].anchor,))]
