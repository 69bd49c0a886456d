"""Memory that stays true over a week: a scripted story of facts that change, fed day by day, and what an agent
gets from it.

Two stories (`--story`): `week`, one user's 11 facts (home city, employer, partner, editor, a deadline, gym days,
car, landlord, coffee, a daughter's school, a language course), replies "Thanks, noted."; `second`, 8 facts about
other people and things (a project renamed, a birthday corrected, a sister's move, physiotherapy rescheduled, a
dinner booking corrected in words, "forget what I said about ...", a dog's new vet, a new manager, a race
postponed), in natural words with small talk, and an assistant that acknowledges each value ("Noted, Dr. Moreau
is Biscuit's vet now.") so its echo is in the dialog too.

Each of 7 days is one conversation (messages stamped with that day), run through `auto_memory` (the job a
session's turns trigger: the day's card of facts) and the nightly `auto_dream` of that day (the facts into
subject nodes, what changed kept as history). Printed per day: facts written, re-checked as grounded in the
messages they cite, restated in their message's words, kept in the user's words where the model filed nothing
(`unsaid`), dropped by the checks; the dream's actions; seconds and prompt tokens. At the end:
- the story's statements (each fact's first value and its change): share in a card with a citation that opens
  the message saying it;
- card facts whose words are not in the lines they cite (dates code resolved and how facts name the user
  aside);
- per changing fact, what an agent gets when it asks the fact's question ("Who is Biscuit's vet?"), read as the
  agent reads it, piece by piece (a search hit, a recall piece `[path:lines]`, an injected piece):
  - `hit`: search's first hit overall (`Memory.search` with the CLI's defaults) that names either value;
  - `recall`: `recall --budget 400`, fresh (no session): its first piece naming either value, and no piece
    presenting the other value as holding;
  - `hook`: what the UserPromptSubmit hook injects for the question (dreamflow/hooks/context.py, called as the
    hook calls it, a fresh session id each question), judged as recall;
  each asked now (the value wanted: the new one) and `--as-of` the day before the change (the old one; search
  and recall only: the hook has no as-of), and whether a current digest fact still says the old value holds.
  A piece names a value when one of its clauses does; a clause naming the old value to say it ended ("I don't
  live in Lisbon anymore", "Quarry got renamed") names neither, nor does a line whose `(until:: day)` has
  passed (a node's history). A piece dated after the as-of day (a later conversation) counts as what it says.
  With vectors when an embedder is configured (`DREAMFLOW_EMBEDDER=local`: the chunks are embedded first, as
  the service does). `--check DIR` asks these questions again of a workspace `--keep` kept (its story found
  from its first conversation unless `--story` says).

With `--scripted` the model is tests/llm_server.py playing a careful model (facts from the user's messages in
their words, the right relation when asked): it measures Dreamflow's part. Without it, the endpoint
`DREAMFLOW_LLM_BASE_URL` / `DREAMFLOW_LLM_MODEL` plays every part (README, "A local model"):

    python benchmarks/temporal.py --scripted [--story second]
    DREAMFLOW_LLM_BASE_URL=http://127.0.0.1:8080/v1 DREAMFLOW_LLM_MODEL=qwen python benchmarks/temporal.py --keep
    python benchmarks/temporal.py --check /tmp/dreamflow-temporal-xxxx/ws
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_endpoint import endpoint  # noqa: E402  (benchmarks/, after the path)

NOTED = "Thanks, noted."
RECALL_BUDGET = 400  # tokens: `recall --budget 400`, what an agent is handed


@dataclass(frozen=True)
class Fact:
    name: str      # what a careful model names the node
    query: str     # how an agent asks for it
    old: str
    new: str
    said: int      # day index the old value is said
    changed: int   # day index the new value is said
    first: str     # the user's words for the old value
    change: str    # the user's words for the change
    back: int = 0  # days before `changed` the change happened ("yesterday": 1)
    heard: str = NOTED  # the assistant's reply to `first`
    noted: str = NOTED  # the assistant's reply to `change`


@dataclass(frozen=True)
class Story:
    name: str
    start: date
    facts: tuple[Fact, ...]
    chatter: dict[int, tuple[str, str]] = field(default_factory=dict)  # day index: (user, reply) naming no value

    @property
    def days(self) -> list[str]:
        return [(self.start + timedelta(days=n)).isoformat() for n in range(7)]


WEEK = Story("week", date(2026, 11, 2), (
    Fact("Home city", "Which city do I live in?", "Lisbon", "Porto", 0, 3,
         "I live in Lisbon, close to the river.", "Big news: I moved to Porto yesterday, I don't live in Lisbon "
         "anymore.", 1),
    Fact("Employer", "Which company do I work at?", "Acme Robotics", "Globex Labs", 0, 2,
         "I work at Acme Robotics as an engineer.", "I left Acme Robotics; today was my first day at Globex Labs."),
    Fact("Partner", "What is my partner's name?", "Sam", "Alex", 0, 5,
         "My partner Sam and I went hiking on Sunday.", "Sam and I broke up. My partner is now Alex."),
    Fact("Preferred editor", "Which code editor do I prefer?", "Vim", "Helix", 1, 4,
         "My editor of choice is Vim, I use it for everything.", "I switched my editor from Vim to Helix."),
    Fact("Atlas project deadline", "When is the Atlas project deadline?", "2026-12-15", "2026-12-22", 1, 4,
         "The Atlas project deadline is 2026-12-15.", "The Atlas project deadline moved to 2026-12-22."),
    Fact("Gym days", "Which days do I go to the gym?", "Mondays", "Thursdays", 0, 5,
         "I go to the gym on Mondays.", "I moved my gym sessions from Mondays to Thursdays."),
    Fact("Car", "What car do I drive?", "Volkswagen Golf", "Tesla Model 3", 1, 6,
         "I drive a Volkswagen Golf.", "I sold the Volkswagen Golf and I now drive a Tesla Model 3."),
    Fact("Landlord", "Who is my landlord?", "Mr. Silva", "Ms. Costa", 2, 5,
         "My landlord is Mr. Silva.", "The flat was sold: my landlord is now Ms. Costa."),
    Fact("Coffee order", "What coffee do I order?", "espresso", "flat white", 2, 6,
         "My usual coffee order is an espresso.", "These days my coffee order is a flat white, not an espresso."),
    Fact("Daughter's school", "Which school does my daughter go to?", "Oak Primary", "Riverside School", 1, 4,
         "My daughter goes to Oak Primary.", "My daughter changed schools: she goes to Riverside School now."),
    Fact("Language course", "Which language course am I taking?", "Spanish", "Italian", 3, 6,
         "I'm taking a Spanish course on Tuesdays.", "I dropped the Spanish course and started an Italian course."),
))

SECOND = Story("second", date(2026, 11, 16), (
    Fact("Data migration project", "What is the codename of the data migration project I lead?", "Quarry",
         "Lantern", 0, 3,
         "I'm leading the data migration project at work, codename Quarry.",
         "Small thing: Quarry got renamed, legal didn't like the name. It's Lantern now.",
         heard="Good luck with Quarry!", noted="Lantern it is."),
    Fact("Tomasz's birthday", "When is my brother Tomasz's birthday?", "March 14", "March 24", 1, 4,
         "My brother Tomasz's birthday is on March 14, remind me to get him something.",
         "I was wrong about Tomasz's birthday: it's March 24, not the 14th.",
         heard="March 14 for Tomasz, I'll keep it in mind.", noted="Thanks for the correction, March 24 then."),
    Fact("Dorota's city", "Which city does my sister Dorota live in?", "Gdansk", "Wroclaw", 0, 5,
         "My sister Dorota lives in Gdansk, we talk every Sunday.",
         "Dorota moved to Wroclaw yesterday for her new job.",
         back=1, heard="Nice, Gdansk is a lovely city.", noted="Wroclaw, that's a big change for her."),
    Fact("Physiotherapy", "When are my physiotherapy sessions?", "Monday mornings", "Friday afternoons", 1, 3,
         "My physiotherapy sessions with Dr. Okafor are on Monday mornings.",
         "Dr. Okafor's office called, we're doing Friday afternoons from now on.",
         heard="Monday mornings with Dr. Okafor, got it.", noted="Noted, Friday afternoons now."),
    Fact("Anniversary dinner", "Where is our anniversary dinner booked?", "Osteria Lupa", "Casa Nube", 2, 5,
         "I booked our anniversary dinner at Osteria Lupa.",
         "Forget what I said about the anniversary dinner, it was Casa Nube I booked, not Osteria Lupa.",
         heard="Osteria Lupa sounds lovely for an anniversary.", noted="Got it, Casa Nube for the anniversary."),
    Fact("Biscuit's vet", "Who is Biscuit's vet?", "Dr. Haines", "Dr. Moreau", 0, 6,
         "Biscuit, our beagle, sees Dr. Haines at the Northgate clinic.",
         "We took Biscuit to a new vet today, Dr. Moreau on Elm Street, and we're staying with her.",
         heard="Dr. Haines for Biscuit, noted.", noted="Noted, Dr. Moreau is Biscuit's vet now."),
    Fact("Manager", "Who is my manager at work?", "Priya Nair", "Jonas Weber", 1, 4,
         "My manager Priya Nair approved my time off for December.",
         "Priya moved to the Berlin office, so I report to Jonas Weber now.",
         heard="Great that Priya Nair approved it.", noted="Jonas Weber, got it. I hope the handover goes well."),
    Fact("Lakeside half marathon", "When is the Lakeside half marathon?", "April 12", "April 26", 2, 6,
         "I signed up for the Lakeside half marathon on April 12.",
         "The Lakeside half marathon got postponed to April 26 because of the bridge works.",
         heard="April 12, plenty of time to train.", noted="Noted, April 26 for the race now."),
), chatter={0: ("Morning! Busy week ahead.", "Morning! Tell me what's going on and I'll keep track."),
            2: ("It rained all day here.", "A good day to stay in, then."),
            4: ("Short one today, I'm tired.", "No problem, rest well."),
            6: ("Thanks for keeping track of all this.", "Anytime.")})

STORIES = {s.name: s for s in (WEEK, SECOND)}


def conversation(story: Story, day: int) -> list[dict]:
    """The day's messages: small talk, then what the user says about the facts, each with the assistant's
    reply, stamped with the day."""
    pairs = ([story.chatter[day]] if day in story.chatter else []) \
        + [(f.first, f.heard) for f in story.facts if f.said == day] \
        + [(f.change, f.noted) for f in story.facts if f.changed == day]
    messages, minute = [], 0
    for pair in pairs:
        for role, text in zip(("user", "assistant"), pair):
            messages.append({"role": role, "content": text,
                             "created_at": f"{story.days[day]}T18:{minute:02d}:00"})
            minute += 1
    return messages


def since(story: Story, fact: Fact) -> str:
    return (date.fromisoformat(story.days[fact.changed]) - timedelta(days=fact.back)).isoformat()


# ---- the scripted careful model ---------------------------------------------------------------------------

def careful_model(story: Story):
    """Answers as a careful model would: each user message about a fact of `story` a fact in its own words (its
    relative time kept; small talk and the assistant's replies left out), and `replaces` when a listed fact holds
    the changed value."""
    from llm_server import Reply

    def extract(user: str) -> dict:
        found = []
        for number, text in re.findall(r"^\[(\d+)\] user, [^:]+:\d\d: (.+)$", user, re.M):
            fact = next((f for f in story.facts if text in (f.first, f.change)), None)
            if fact:
                kind = "event" if text == fact.change else "fact"
                found.append({"text": text, "about": "user", "kind": kind, "source": [int(number)]})
        return {"title": "What changed this week", "facts": found}

    def compare(user: str) -> dict:
        new = user.split("): ", 1)[1].split("\n", 1)[0]
        fact = next((f for f in story.facts if f.new in new), None)  # a change (its relative time resolved)
        for number, listed in re.findall(r"^(\d+)\. (.+)$", user, re.M):
            if fact and fact.old in listed and fact.new not in listed:
                return {"relation": "replaces", "fact": int(number)}
        return {"relation": "new", "fact": 0}

    def respond(body: dict) -> Reply:
        if "messages" not in body:
            return None
        system = body["messages"][0]["content"]
        user = "\n".join(m["content"] or "" for m in body["messages"][1:] if m["role"] == "user")
        if "list the facts worth remembering" in system:
            return Reply(content=json.dumps(extract(user)))
        if "You keep a memory of facts up to date" in system:
            return Reply(content=json.dumps(compare(user)))
        return Reply(content=json.dumps({"topics": []}))

    return respond


# ---- checks ---------------------------------------------------------------------------------------------

def card_facts(memory) -> list[tuple[str, object]]:
    """(card path, fact) of every card of the story."""
    from storage.text import facts

    out = []
    for entry in memory.list("daily", recursive=True, limit=10_000)["entries"]:
        path = entry["path"]
        if entry.get("type") == "file" and path.count("/") == 2 and path.endswith(".md"):
            out += [(path, f) for f in facts.parse(memory.read(path, numbered=False)["content"])]
    return out


def cited_text(memory, source: str) -> str:
    path, _, anchor = source.partition("#L")
    start, _, end = anchor.partition("-L")
    page = memory.read(path, start_line=int(start), end_line=int(end or start), numbered=False)["content"]
    return "\n".join(json.loads(line).get("content", "") if path.endswith(".jsonl") else line
                     for line in page.splitlines() if line.strip())


def unsupported(memory, fact) -> set[str]:
    """The fact's words its cited lines do not have (besides framing words and the date code wrote)."""
    from engine.memory.extraction import FRAMING
    from storage.index.tokenize import terms

    said = set()
    for source in fact.sources:
        if "#L" in source:
            said |= set(terms(cited_text(memory, source)))
    dates = set(terms(fact.date or "")) | set(terms(" ".join(re.findall(r"\d{4}-\d{2}-\d{2}", fact.text))))
    return set(terms(fact.text)) - said - FRAMING - dates


def coverage(story: Story, found: list) -> tuple[int, int]:
    """(statements of the story in a card fact citing the message that says it, statements)."""
    hits, total = 0, 0
    for f in story.facts:
        for day, value, words in ((f.said, f.old, f.first), (f.changed, f.new, f.change)):
            total += 1
            line = [m["content"] for m in conversation(story, day) if m["role"] == "user"].index(words) * 2 + 1
            source = f"session/dialog/day-{day + 1}.jsonl#L{line}"
            hits += any(source in fact.sources and value.lower() in fact.text.lower() for _, fact in found)
    return hits, total


# ---- what an agent gets -------------------------------------------------------------------------------------

# a clause naming a value to say it no longer holds ("I don't live in Lisbon anymore", "Quarry got renamed")
ENDED = re.compile(r"\b(?:not|no longer|any ?more|never|left|quit|sold|broke up|dropped|stopped|ended|renamed|"
                   r"moved|switched|used to|forget|wrong|instead|formerly)\b|n't\b", re.IGNORECASE)
# clauses: sentences and `;`-joined parts (a day's index line joins a card's facts), titles' dots kept
CLAUSE = re.compile(r"(?<!\bMr)(?<!\bMs)(?<!\bDr)(?<!\bMrs)[.;!?](?=\s|$)")
PIECE = re.compile(r"^\[[^\]\s]+:\d+(?:-\d+)?\]", re.M)  # a recall or hook piece starts with its citation
LABEL = re.compile(r"\[[^\]\s]+\] (?:superseded|expired)\b(?: \S*\.\.(\d{4}-\d\d-\d\d))?")  # storage/text/validity.label
UNTIL = re.compile(r"\(until:: (\d{4}-\d\d-\d\d)\)")
CITATION = re.compile(r"\((?:source|replaced_by):: [^()]*\)")  # where a line comes from, no claim ("spanish-course.md")


def state(clause: str, fact: Fact) -> str | None:
    """Which value of `fact` the clause says holds: "new" when it names the new one, "old" when it names the old
    one without saying it ended, else None."""
    def names(value: str) -> bool:  # as words: "Sam" is not in "same"
        return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", clause, re.IGNORECASE) is not None

    if names(fact.new):
        return "new"
    return "old" if names(fact.old) and not ENDED.search(clause) else None


def states(piece: str, fact: Fact, day: str) -> set[str]:
    """The values of `fact` the piece of text says hold on `day`: its clauses', none when its citation says it
    no longer held then (`[path:lines] superseded 2026-11-02..2026-11-04`), those of lines whose `until` has
    passed left out (a node's history: what held before); a line's `(source:: [[...]])` names where it comes
    from, not what holds (a card's file name `quarry-renaming.md`)."""
    ended = LABEL.match(piece)
    if ended and (ended.group(1) is None or ended.group(1) <= day):
        return set()
    found = set()
    for line in piece.splitlines():
        until = UNTIL.search(line)
        if until and until.group(1) <= day:
            continue
        found |= {state(c, fact) for c in CLAUSE.split(CITATION.sub("", line))} - {None}
    return found


def pieces(text: str | None) -> list[str]:
    """A recall's or the hook's text as the pieces it cites (`[path:lines] ...` to the next), the header before
    the first left out."""
    starts = [m.start() for m in PIECE.finditer(text or "")]
    return [text[a:b].strip() for a, b in zip(starts, starts[1:] + [len(text or "")])]


def judge(got: list[str], fact: Fact, day: str, want: str, alone: bool) -> tuple[str, str | None]:
    """What the pieces an agent got say, wanting value `want` ("new" or "old") on `day`: ("ok", None) when the
    first piece naming a value names `want` only (and with `alone`, no piece presents the other one), else
    the verdict ("OLD", "NEW", "BOTH": the first piece naming a value names the other or both; "none": no
    piece names one; "ok+OLD", "ok+NEW": a later piece presents the other) and the piece that decided it."""
    other = "old" if want == "new" else "new"
    named = [(p, states(p, fact, day)) for p in got]
    named = [(p, s) for p, s in named if s]
    if not named:
        return "none", None
    first, said = named[0]
    if said != {want}:
        return ("BOTH" if len(said) > 1 else other.upper()), first
    wrong = next((p for p, s in named if other in s), None) if alone else None
    return ("ok", None) if wrong is None else (f"ok+{other.upper()}", wrong)


def asked(memory, fact: Fact, how: str, as_of: str | None = None) -> list[str]:
    """The pieces an agent gets for the fact's question: `how` "hit" (search, the CLI's defaults), "recall"
    (`--budget 400`, no session) or "hook" (UserPromptSubmit, a fresh session)."""
    if how == "hit":  # each hit cited as recall cites it, with its time (storage/text/validity.label), then its text
        from storage.text.validity import label

        return [f"[{h['path']}:{h['start_line']}-{h['end_line']}] {label(h) or ''}\n{h['text']}"
                for h in memory.search(fact.query, as_of=as_of)]
    if how == "recall":
        return pieces(memory.recall(fact.query, budget=RECALL_BUDGET, as_of=as_of)["text"])
    from dreamflow.hooks.context import inject, question
    from engine.config.grants import ADMIN
    from engine.access.scoped import LocalCatalog
    from engine.config.settings import Settings

    payload = {"hook_event_name": "UserPromptSubmit", "session_id": f"temporal-{uuid.uuid4().hex}",
               "prompt": fact.query}
    arguments = question(payload, Settings())  # the hook in its own process: the workspace as its catalog's own
    return pieces(inject(LocalCatalog("temporal", memory.ws.root), ADMIN, "temporal", **arguments)) if arguments else []


def shown(piece: str, fact: Fact, day: str) -> str:
    """The piece's citation and its first line naming a value of `fact` (what decided a verdict), on one line."""
    cite = PIECE.match(piece)
    line = next((line for line in piece.splitlines() if states(line, fact, day)), piece)
    return " ".join(((cite.group(0) + " ... ") if cite and not line.startswith(cite.group(0)) else "")
                    .split() + line.split())


MEASURES = (("hit", "now"), ("hit", "as_of"), ("recall", "now"), ("recall", "as_of"), ("hook", "now"))


def check(memory, story: Story, days: int) -> list[dict]:
    """Per fact changed within the first `days` days: each measure's verdict (`judge`) and the piece behind a
    miss, asked now and as of the day before the change, and whether a current digest fact still says the
    old value holds."""
    from storage.text import facts

    today = date.today().isoformat()
    current = []
    for entry in memory.list("digest", recursive=True, limit=10_000)["entries"]:
        if entry.get("type") == "file" and entry["path"].endswith(".md"):
            current += [f.text for f in facts.parse(memory.read(entry["path"], numbered=False)["content"]) if f.current]
    rows = []
    for f in (f for f in story.facts if f.changed < days):
        before = (date.fromisoformat(since(story, f)) - timedelta(days=1)).isoformat()
        row = {"fact": f.name, "conflict": any(state(c, f) == "old" for c in current)}
        for how, when in MEASURES:
            day, want = (today, "new") if when == "now" else (before, "old")
            got = asked(memory, f, how, as_of=None if when == "now" else before)
            verdict, piece = judge(got, f, day, want, alone=how != "hit")
            row[f"{how} {when}"] = (verdict, piece and shown(piece, f, day))
        rows.append(row)
    return rows


def print_answers(rows: list[dict]) -> None:
    """The per-fact verdicts (`check`) as a table, the pieces behind the misses, and the totals per measure."""
    names = [f"{how} {when}".replace("as_of", "as-of") for how, when in MEASURES]
    print(f"\n{'fact':<24} " + " ".join(f"{n:>11}" for n in names) + f" {'conflict':>8}")
    for r in rows:
        print(f"{r['fact']:<24} " + " ".join(f"{r[f'{h} {w}'][0]:>11}" for h, w in MEASURES)
              + f" {str(r['conflict']):>8}")
    print("(ok: the first piece naming a value names the one that held (now: the new, as-of: the old); OLD/NEW/BOTH:"
          " it names the other or both; none: no piece names one; ok+OLD/ok+NEW: a later piece presents the other)")
    misses = [(r["fact"], n, r[f"{h} {w}"][1]) for r in rows for (h, w), n in zip(MEASURES, names)
              if r[f"{h} {w}"][1]]
    for fact, name, piece in misses:
        print(f"  {fact}, {name}: {piece[:160]}")
    n = len(rows)

    def total(how: str, when: str) -> str:
        return f"{sum(r[f'{how} {when}'][0] == 'ok' for r in rows)}/{n}"

    print(f"\nfirst hit now {total('hit', 'now')}, as-of {total('hit', 'as_of')}; recall now {total('recall', 'now')}, "
          f"as-of {total('recall', 'as_of')}; hook now {total('hook', 'now')}; a current digest fact with the old "
          f"value: {sum(r['conflict'] for r in rows)}")


def searching(ws: Path):
    """The workspace's `Memory` searching with vectors as the service does (its chunks embedded first), when an
    embedder is configured (`DREAMFLOW_EMBEDDER`); else keyword only."""
    from engine.access.client import reopen
    from engine.models.embedders import make_embedder
    from engine.models.semantic import vector_index
    from storage.index import vectors
    from storage.memory import Memory

    embedder = make_embedder()
    if embedder is None:
        return Memory(ws)
    os.environ["DREAMFLOW_CLI_VECTORS"] = "1"  # the hook's own memory (its catalog's) too, as in the service
    reopen(ws)  # the memory the run's jobs opened in this process has no vectors
    vectors.backfill(Memory(ws).db, embedder)
    return Memory(ws, vectors=vector_index())


def search_line(memory) -> str:
    return f"search: {'keyword + vectors, as the service searches' if memory.vectors is not None else 'keyword only'}"


def story_of(ws: Path) -> Story:
    """The story whose first conversation a kept workspace holds (`week` when none matches)."""
    dialog = ws / "session" / "dialog" / "day-1.jsonl"
    said = dialog.read_text(encoding="utf-8") if dialog.is_file() else ""
    return next((s for s in STORIES.values() if s.facts[0].first in said), WEEK)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--story", choices=sorted(STORIES), help="which story (default: week; with --check, the "
                        "kept workspace's)")
    parser.add_argument("--scripted", action="store_true", help="the scripted careful model instead of an endpoint")
    parser.add_argument("--keep", action="store_true", help="print the workspace folder and keep it")
    parser.add_argument("--days", type=int, default=7, help="run the first N days only (a slow model)")
    parser.add_argument("--check", type=Path, metavar="DIR", help="only ask the questions of a kept workspace")
    args = parser.parse_args()
    if args.check:
        os.environ.setdefault("DREAMFLOW_EMBEDDER", "none")  # keyword only unless set, as a run searches
        if not (args.check / "session" / "dialog").is_dir():
            sys.exit(f"{args.check}: not a workspace this benchmark kept (no session/dialog/)")
        story = STORIES[args.story] if args.story else story_of(args.check)
        memory = searching(args.check)
        print(f"story {story.name}; {search_line(memory)}")
        print_answers(check(memory, story, args.days))
        return

    story = STORIES[args.story or "week"]
    scripted = careful_model(story) if args.scripted else None
    with endpoint("dreamflow-temporal-", scripted, "scripted-careful-model") as (home, settings):
        run(args, story, home, settings)


def run(args, story: Story, home: Path, settings) -> None:
    from engine.config import prefect_env

    prefect_env.configure()  # before the flows import prefect
    from engine.models.usage import Usage
    from engine.models.usage_log import gates_line
    from flows.auto_dream import auto_dream
    from flows.auto_memory import auto_memory
    from storage.memory import Memory

    ws = home / "ws"
    memory = Memory(ws)
    spent, failures, started, seen = Usage(), [], time.perf_counter(), set()
    days = story.days
    print(f"story {story.name}: endpoint {settings.llm_base_url} model {settings.llm_model}; {len(story.facts)} "
          f"facts over {len(days)} days" + (f", the first {args.days} run" if args.days < len(days) else ""),
          flush=True)
    print(f"{'day':<11} {'card':<44} {'facts':>5} {'grounded':>8} {'restated':>8} {'unsaid':>6} {'dropped':>7} "
          f"{'dream':<34} {'s':>5} {'prompt tok':>10}", flush=True)
    with prefect_env.interactive_runs():
        for n, day in enumerate(days[:args.days]):
            t0, day_usage = time.perf_counter(), Usage()
            card = auto_memory(session_id=f"day-{n + 1}", messages=conversation(story, n), workspace=str(ws),
                               return_state=True).result(raise_on_failure=False)
            failed_card = isinstance(card, BaseException)
            if failed_card:
                failures.append(f"{day} auto-memory: {str(card)[:200]}")
            day_usage.add(getattr(card, "usage", None) if failed_card else card.get("usage"))
            result = auto_dream(date=day, scan_days=1, max_units=6, workspace=str(ws),
                                return_state=True).result(raise_on_failure=False)
            summary = getattr(result, "summary", result)
            if isinstance(summary, dict):
                day_usage.add(summary["usage"])
                failures += [f"{day} unit {f['name']}: {f['error'][:200]}" for f in summary["failed"]]
                actions = [a["action"] for a in summary["actions"]]
                dream = ", ".join(f"{a} {actions.count(a)}" for a in sorted(set(actions))) or "-"
            else:
                failures.append(f"{day} dream: {str(summary)[:200]}")
                dream = "FAILED"
            new = [(p, f) for p, f in card_facts(memory) if (p, f.id) not in seen]
            seen |= {(p, f.id) for p, f in new}
            grounded = sum(not unsupported(memory, f) for _, f in new)
            dropped = 0 if failed_card else len(card.get("dropped") or [])
            restated = 0 if failed_card else card.get("restated", 0)
            unsaid = 0 if failed_card else card.get("unsaid", 0)
            u = day_usage.as_dict()
            spent.add(u)
            print(f"{day:<11} {'FAILED' if failed_card else str(card.get('card')):<44} {len(new):>5} {grounded:>8} "
                  f"{restated:>8} {unsaid:>6} {dropped:>7} {dream:<34} {time.perf_counter() - t0:>5.0f} "
                  f"{u['prompt_tokens']:>10}", flush=True)
    asking = searching(ws)
    found = card_facts(memory)
    covered, statements = coverage(story, found)
    loose = [(p, f.text, sorted(unsupported(memory, f))) for p, f in found if unsupported(memory, f)]
    rows = check(asking, story, args.days)
    print(f"\n{search_line(asking)}")
    print(f"story statements in a card citing the right message: {covered}/{statements}; card facts "
          f"{len(found)}, with words not in their cited lines: {len(loose)}")
    for path, text, words in loose:
        print(f"  not in its lines ({', '.join(words)}): {text}  [{path}]")
    print_answers(rows)
    u, ran = spent.as_dict(), min(args.days, len(days))
    print(f"LLM: {u['calls']} calls, {u['prompt_tokens']} prompt + {u['completion_tokens']} completion tokens "
          f"({u['prompt_tokens'] // max(ran, 1)} prompt tokens a day), {u['seconds']:.0f} s in calls; wall "
          f"{time.perf_counter() - started:.0f} s ({(time.perf_counter() - started) / max(ran, 1):.0f} s a day); "
          f"{gates_line(u)}")
    for failure in failures:
        print(f"  failed: {failure}")
    if args.keep:
        print(f"workspace kept: {ws}")


if __name__ == "__main__":
    main()
