"""`weigh`, `judge` and `decide` (engine/memory/consolidation.py) case by case, one row per model incident
docs/dream.md tells: the candidates built directly, the model played by the scripted server through the real
client (`engine.models.llm.LLM`), no flow run. Each row: the new fact, the facts shown, what the model answers to the
list (`compare`) and to the one-fact question (`still_true`), the decision expected (relation, index of the
target in the facts shown) and whether the model is asked at all."""

import pytest

from engine.memory.consolidation import decide, judge, weigh
from engine.memory.objects import Candidate, CardFact, Decision
from engine.models.llm import LLM
from llm_server import json_reply, text_of
from storage.text.facts import Fact

COMPARE = "You keep a memory of facts up to date"
STILL = "You check whether a remembered fact still holds"
DAY = "2026-11-21"


def shown(*texts: str, since: str = "2026-11-02", near: tuple[float, ...] = ()) -> list[Candidate]:
    return [Candidate("digest/personal/user.md", Fact(text, id=f"f{n}", since=since),
                      near[n - 1] if near else 0.0) for n, text in enumerate(texts, 1)]


def run(function, llm, text: str, facts: list[Candidate], compare=None, still=None, about="user") -> Decision:
    if compare is not None:
        llm.on(COMPARE, json_reply(dict(zip(("relation", "fact"), compare))))
    if still is not None:
        llm.on(STILL, json_reply({"still_true": still}))
    return function(LLM.from_settings(), CardFact(text, about=about, day=DAY, card="daily/x/c.md"), facts)


def outcome(decision: Decision, facts: list[Candidate]) -> tuple[str, int | None]:
    return decision.relation, (facts.index(decision.target) + 1 if decision.target else None)


def asked(llm, prompt: str) -> int:
    return len([r for r in llm.requests if prompt in r["messages"][0]["content"]])


WEIGH = [
    # (incident, new fact, facts shown, nearness, model's answer, expected, model asked)
    ("nothing shown: new, no question", "I live in Porto.", (), (), None, ("new", None), False),
    ("the same words: same, no question", "I live in Porto.", ("I live in Porto.",), (), None, ("same", 1), False),
    ("the 0.5B model named the wrong number: the closer fact is taken", "I work at Acme as an engineer.",
     ("I live in Lisbon.", "I work at Acme."), (), ("refines", 1), ("refines", 2), True),
    ("the 0.5B model replaced `I moved to Porto` with a new landlord: no shared word, new",
     "Ms. Varga is the landlord.", ("I moved to Porto.",), (), ("replaces", 1), ("new", None), True),
    ("a small model called `I work at Acme` a refinement of `I live in Lisbon`: new", "I work at Acme.",
     ("I live in Lisbon.",), (), ("refines", 1), ("new", None), True),
    ("a denial the listed fact does not make replaces it", "I drink tea now, not coffee.",
     ("I drink coffee every morning.",), (), ("refines", 1), ("replaces", 1), True),
    ("a change the 0.5B model called new replaces the fact it shares two words with",
     "I moved my gym sessions from Mondays to Thursdays.", ("My gym sessions are on Mondays.",), (),
     ("new", 0), ("replaces", 1), True),
    ("a change word alone ties no two facts: `we moved` does not retire a new piano teacher",
     "We moved to Birch Lane.", ("I have a new piano teacher.",), (), ("replaces", 1), ("new", None), True),
    ("a date two facts share is no shared subject", "The dentist appointment is on 2026-11-12.",
     ("My sister visits on 2026-11-12.",), (), ("same", 1), ("new", None), True),
    ("a refinement keeping too few words but sharing two says it anew: replaces",
     "My daughter goes to Riverside school by bus every day.", ("My daughter goes to Oak Primary school.",), (),
     ("refines", 1), ("replaces", 1), True),
    ("a change with no number means the fact its sense points at (MEANT, MEANT_MARGIN)",
     "My daughter changed schools to Riverside.", ("My daughter goes to Oak Primary.", "I bake bread."),
     (0.8, 0.2), ("new", 0), ("replaces", 1), True),
    ("two facts equally near in sense: none is meant", "My daughter changed schools to Riverside.",
     ("My son goes to Oak Primary.", "I bake bread."), (0.6, 0.55), ("new", 0), ("new", None), True),
]


@pytest.mark.parametrize("incident, text, facts, near, answer, expected, model", WEIGH, ids=[r[0] for r in WEIGH])
def test_weigh(llm, incident, text, facts, near, answer, expected, model):
    listed = shown(*facts, near=near)
    assert outcome(run(weigh, llm, text, listed, answer), listed) == expected
    assert bool(asked(llm, COMPARE)) is model


JUDGE = [
    # (incident, new fact, facts shown, `compare` answer, `still_true` answer, expected, one-fact question asked)
    ("the 1.5B model called `Dorota moved to Wroclaw` new: asked of the one fact, it no longer holds",
     "Dorota moved to Wroclaw for her new job.", ("My sister Dorota lives in Gdansk.", "I train at the gym."),
     ("new", 0), False, ("replaces", 1), True),
    ("... and when it still holds, the change is new", "Dorota moved to Wroclaw for her new job.",
     ("My sister Dorota lives in Gdansk.", "I train at the gym."), ("new", 0), True, ("new", None), True),
    ("a change sharing no word with any listed fact asks nothing more", "We moved to Birch Lane.",
     ("I have a new piano teacher.",), ("new", 0), None, ("new", None), False),
    ("a fact that says no change is not asked again", "Dorota likes Wroclaw.",
     ("My sister Dorota lives in Gdansk.",), ("new", 0), None, ("new", None), False),
]


@pytest.mark.parametrize("incident, text, facts, answer, still, expected, pair", JUDGE, ids=[r[0] for r in JUDGE])
def test_judge(llm, incident, text, facts, answer, still, expected, pair):
    listed = shown(*facts)
    assert outcome(run(judge, llm, text, listed, answer, still), listed) == expected
    assert asked(llm, STILL) == int(pair)
    if pair:
        [question] = [r for r in llm.requests if STILL in r["messages"][0]["content"]]
        assert facts[0] in text_of(question) and facts[-1] not in text_of(question)


DECIDE = [
    # (incident, new fact, since of the listed fact, expected)
    ("the 1.5B model chained same-day facts of one conversation into replacements: both kept",
     "My meeting with Jonas is on Friday.", DAY, ("new", None)),
    ("a correction said in words replaces even on the same day",
     "My meeting with Jonas is actually on Friday, not Thursday.", DAY, ("replaces", 1)),
    ("a replacement of an earlier day's fact stands", "My meeting with Jonas is on Friday.", "2026-11-02",
     ("replaces", 1)),
]


@pytest.mark.parametrize("incident, text, since, expected", DECIDE, ids=[r[0] for r in DECIDE])
def test_decide(llm, incident, text, since, expected):
    listed = shown("My meeting with Jonas is on Thursday.", since=since)
    assert outcome(run(decide, llm, text, listed, ("replaces", 1)), listed) == expected


NEAR = [
    # (incident, new fact, facts shown, their cosines to it, `still_true` answer, expected)
    ("the real 1.5B said `Priya moved to the Berlin office` ended `Priya Nair approved my time off`: with an "
     "embedder a fact far in sense (ASKED_NEAR) is not asked about", "Priya moved to the Berlin office.",
     ("Priya Nair approved my time off for December.", "I train at the gym."), (0.19, 0.1), None, ("new", None)),
    ("a fact near enough in sense is asked about", "Dorota moved to Wroclaw for her new job.",
     ("My sister Dorota lives in Gdansk.", "I train at the gym."), (0.41, 0.1), False, ("replaces", 1)),
]


@pytest.mark.parametrize("incident, text, facts, near, still, expected", NEAR, ids=[r[0] for r in NEAR])
def test_judge_with_an_embedder_asks_only_about_a_fact_near_in_sense(llm, incident, text, facts, near, still,
                                                                       expected):
    listed = shown(*facts, near=near)
    assert outcome(run(judge, llm, text, listed, ("new", 0), still), listed) == expected
    assert asked(llm, STILL) == int(still is not None)
