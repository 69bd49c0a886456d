"""Memory that stays true over a week: a scripted story of 11 facts that change, fed day by day.

Each of 7 days is one conversation (messages stamped with that day), run through `auto_memory` (the job a
session's turns trigger: the day's card of facts) and the nightly `auto_dream` of that day (the facts into
subject nodes, what changed kept as history). Printed per day: facts written, re-checked as grounded in the
messages they cite, restated in their message's words, dropped by the checks; the dream's actions; seconds and
prompt tokens. At the end:
- the story's statements (each fact's first value and its change): share in a card with a citation that opens
  the message saying it;
- card facts whose words are not in the lines they cite (dates code resolved and how facts name the user
  aside);
- per changing fact, what memory answers now (the first digest fact among the search hits that says one of its
  values holds: is it the new one? A fact naming the old value to say it ended, "I left Acme Robotics", says
  neither) and `--as-of` the day before the change (the old one?), and whether a current fact still says the
  old value holds; with vectors when an embedder is configured (`DREAMFLOW_EMBEDDER=local`: the chunks are
  embedded first, as the service does). `--check DIR` asks these questions again of a workspace `--keep` kept.

With `--scripted` the model is tests/llm_server.py playing a careful model (facts in the messages' words, the
right relation when asked): it measures Dreamflow's part. Without it, the endpoint `DREAMFLOW_LLM_BASE_URL` /
`DREAMFLOW_LLM_MODEL` plays every part (README, "A local model"):

    python benchmarks/temporal.py --scripted
    DREAMFLOW_LLM_BASE_URL=http://127.0.0.1:8080/v1 DREAMFLOW_LLM_MODEL=qwen python benchmarks/temporal.py
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_endpoint import endpoint  # noqa: E402  (benchmarks/, after the path)

START = date(2026, 11, 2)
DAYS = [(START + timedelta(days=n)).isoformat() for n in range(7)]


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
    says: str      # how a careful model states a value ({} is the value)
    back: int = 0  # days before `changed` the change happened ("yesterday": 1)


FACTS = [
    Fact("Home city", "Which city do I live in?", "Lisbon", "Porto", 0, 3,
         "I live in Lisbon, close to the river.", "Big news: I moved to Porto yesterday, I don't live in Lisbon "
         "anymore.", "I live in {}.", 1),
    Fact("Employer", "Which company do I work at?", "Acme Robotics", "Globex Labs", 0, 2,
         "I work at Acme Robotics as an engineer.", "I left Acme Robotics; today was my first day at Globex Labs.",
         "I work at {}."),
    Fact("Partner", "What is my partner's name?", "Sam", "Alex", 0, 5,
         "My partner Sam and I went hiking on Sunday.", "Sam and I broke up. My partner is now Alex.",
         "My partner is {}."),
    Fact("Preferred editor", "Which code editor do I prefer?", "Vim", "Helix", 1, 4,
         "My editor of choice is Vim, I use it for everything.", "I switched my editor from Vim to Helix.",
         "My preferred code editor is {}."),
    Fact("Atlas project deadline", "When is the Atlas project deadline?", "2026-12-15", "2026-12-22", 1, 4,
         "The Atlas project deadline is 2026-12-15.", "The Atlas project deadline moved to 2026-12-22.",
         "The Atlas project deadline is {}."),
    Fact("Gym days", "Which days do I go to the gym?", "Mondays", "Thursdays", 0, 5,
         "I go to the gym on Mondays.", "I moved my gym sessions from Mondays to Thursdays.",
         "I go to the gym on {}."),
    Fact("Car", "What car do I drive?", "Volkswagen Golf", "Tesla Model 3", 1, 6,
         "I drive a Volkswagen Golf.", "I sold the Volkswagen Golf and I now drive a Tesla Model 3.",
         "I drive a {}."),
    Fact("Landlord", "Who is my landlord?", "Mr. Silva", "Ms. Costa", 2, 5,
         "My landlord is Mr. Silva.", "The flat was sold: my landlord is now Ms. Costa.",
         "My landlord is {}."),
    Fact("Coffee order", "What coffee do I order?", "espresso", "flat white", 2, 6,
         "My usual coffee order is an espresso.", "These days my coffee order is a flat white, not an espresso.",
         "My coffee order is {}."),
    Fact("Daughter's school", "Which school does my daughter go to?", "Oak Primary", "Riverside School", 1, 4,
         "My daughter goes to Oak Primary.", "My daughter changed schools: she goes to Riverside School now.",
         "My daughter goes to {}."),
    Fact("Language course", "Which language course am I taking?", "Spanish", "Italian", 3, 6,
         "I'm taking a Spanish course on Tuesdays.", "I dropped the Spanish course and started an Italian course.",
         "I am taking a {} language course."),
]


def conversation(day: int) -> list[dict]:
    """The day's messages: what the user says about the facts, with short replies, stamped with the day."""
    lines = [f.first for f in FACTS if f.said == day] + [f.change for f in FACTS if f.changed == day]
    messages, minute = [], 0
    for line in lines:
        for role, text in (("user", line), ("assistant", "Thanks, noted.")):
            messages.append({"role": role, "content": text, "created_at": f"{DAYS[day]}T18:{minute:02d}:00"})
            minute += 1
    return messages


def since(fact: Fact) -> str:
    return (date.fromisoformat(DAYS[fact.changed]) - timedelta(days=fact.back)).isoformat()


# ---- the scripted careful model ---------------------------------------------------------------------------

def careful_model():
    """Answers as a careful model would: each user message a fact in its own words (its relative time kept), and
    `replaces` when a listed fact holds the changed value."""
    from llm_server import Reply

    def extract(user: str) -> dict:
        found = []
        for number, text in re.findall(r"^\[(\d+)\] user, [^:]+:\d\d: (.+)$", user, re.M):
            fact = next((f for f in FACTS if text in (f.first, f.change)), None)
            if fact:
                kind = "event" if text == fact.change else "fact"
                found.append({"text": text, "about": "user", "kind": kind, "source": [int(number)]})
        return {"title": "What changed this week", "facts": found}

    def compare(user: str) -> dict:
        new = user.split("): ", 1)[1].split("\n", 1)[0]
        fact = next((f for f in FACTS if f.new in new), None)  # a change (its relative time resolved)
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
    from storage import facts

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
    from engine.extraction import FRAMING
    from storage.tokenize import terms

    said = set()
    for source in fact.sources:
        if "#L" in source:
            said |= set(terms(cited_text(memory, source)))
    dates = set(terms(fact.date or "")) | set(terms(" ".join(re.findall(r"\d{4}-\d{2}-\d{2}", fact.text))))
    return set(terms(fact.text)) - said - FRAMING - dates


def coverage(memory, found: list) -> tuple[int, int]:
    """(statements of the story in a card fact citing the message that says it, statements)."""
    hits, total = 0, 0
    for f in FACTS:
        for day, value, words in ((f.said, f.old, f.first), (f.changed, f.new, f.change)):
            total += 1
            line = [m["content"] for m in conversation(day) if m["role"] == "user"].index(words) * 2 + 1
            source = f"session/dialog/day-{day + 1}.jsonl#L{line}"
            hits += any(source in fact.sources and value.lower() in fact.text.lower() for _, fact in found)
    return hits, total


# a fact naming a value to say it no longer holds ("I don't live in Lisbon anymore", "I left Acme Robotics")
ENDED = re.compile(r"\b(?:not|no longer|any ?more|never|left|quit|sold|broke up|dropped|stopped|ended)\b|n't\b",
                   re.IGNORECASE)


def states(text: str, fact: Fact) -> str | None:
    """Which value of `fact` the sentence `text` says holds: "new" when it names the new one, "old" when it names
    the old one without saying it ended, else None."""
    text = text.lower()
    if fact.new.lower() in text:
        return "new"
    return "old" if fact.old.lower() in text and not ENDED.search(text) else None


def answer(memory, fact: Fact, day: str, as_of: str | None = None) -> str | None:
    """What memory answers to the fact's question: which value ("old", "new") the first digest fact among the
    search hits (`as_of` the day given) that held on `day` and states one says holds (None when none does)."""
    from storage import facts

    for hit in memory.search(fact.query, limit=10, expand=0, per_file=0, as_of=as_of):
        if not hit["path"].startswith("digest/"):
            continue
        text = memory.read(hit["path"], numbered=False)["content"]
        for found in facts.parse(text):
            if hit["start_line"] <= found.line <= hit["end_line"] and found.holds_on(day) \
                    and states(found.text, fact):
                return states(found.text, fact)
    return None


def check(memory, days: int) -> list[dict]:
    """Per fact changed within the first `days` days: what memory answers now and as of the day before the
    change, and whether a current fact still says the old value holds."""
    from storage import facts

    today = date.today().isoformat()
    current = []
    for entry in memory.list("digest", recursive=True, limit=10_000)["entries"]:
        if entry.get("type") == "file" and entry["path"].endswith(".md"):
            current += [f.text for f in facts.parse(memory.read(entry["path"], numbered=False)["content"]) if f.current]
    rows = []  # a change statement may name the old value too ("from Vim to Helix"): it states the new one
    for f in (f for f in FACTS if f.changed < days):
        before = (date.fromisoformat(since(f)) - timedelta(days=1)).isoformat()
        rows.append({"fact": f.name, "now": answer(memory, f, today) == "new",
                     "as_of": answer(memory, f, before, as_of=before) == "old",
                     "conflict": any(states(c, f) == "old" for c in current)})
    return rows


def print_answers(rows: list[dict]) -> None:
    """The per-fact answers (`check`) as a table and their totals."""
    print(f"\n{'fact':<24} {'now':>6} {'as of':>6} {'conflict':>8}")
    for r in rows:
        print(f"{r['fact']:<24} {str(r['now']):>6} {str(r['as_of']):>6} {str(r['conflict']):>8}")
    print(f"\nchanging facts right now: {sum(r['now'] for r in rows)}/{len(rows)}; as of the day before the change: "
          f"{sum(r['as_of'] for r in rows)}/{len(rows)}; with the old value still current: {sum(r['conflict'] for r in rows)}")


def with_vectors(memory):
    """`memory` searching with vectors as the service does (its chunks embedded first), when an embedder is
    configured (`DREAMFLOW_EMBEDDER`); else as it is, keyword only."""
    from engine.embedders import make_embedder
    from engine.semantic import vector_index
    from storage import vectors

    embedder = make_embedder()
    if embedder is None:
        return memory
    vectors.backfill(memory.db, embedder)
    memory.vectors = vector_index()
    return memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripted", action="store_true", help="the scripted careful model instead of an endpoint")
    parser.add_argument("--keep", action="store_true", help="print the workspace folder and keep it")
    parser.add_argument("--days", type=int, default=len(DAYS), help="run the first N days only (a slow model)")
    parser.add_argument("--check", type=Path, metavar="DIR", help="only ask the questions of a kept workspace")
    args = parser.parse_args()
    if args.check:
        from storage.memory import Memory

        print_answers(check(with_vectors(Memory(args.check)), args.days))
        return

    scripted = careful_model() if args.scripted else None
    with endpoint("dreamflow-temporal-", scripted, "scripted-careful-model") as (home, settings):
        run(args, home, settings)


def run(args, home: Path, settings) -> None:
    from engine import prefect_env

    prefect_env.configure()  # before the flows import prefect
    from engine.usage import Usage
    from engine.usage_log import gates_line
    from flows.auto_dream import auto_dream
    from flows.auto_memory import auto_memory
    from storage.memory import Memory

    ws = home / "ws"
    memory = Memory(ws)
    spent, failures, started, seen = Usage(), [], time.perf_counter(), set()
    print(f"endpoint {settings.llm_base_url} model {settings.llm_model}; {len(FACTS)} facts over {len(DAYS)} days"
          + (f", the first {args.days} run" if args.days < len(DAYS) else ""), flush=True)
    print(f"{'day':<11} {'card':<44} {'facts':>5} {'grounded':>8} {'restated':>8} {'dropped':>7} {'dream':<34} {'s':>5} "
          f"{'prompt tok':>10}", flush=True)
    with prefect_env.interactive_runs():
        for n, day in enumerate(DAYS[:args.days]):
            t0, day_usage = time.perf_counter(), Usage()
            card = auto_memory(session_id=f"day-{n + 1}", messages=conversation(n), workspace=str(ws),
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
            u = day_usage.as_dict()
            spent.add(u)
            print(f"{day:<11} {'FAILED' if failed_card else str(card.get('card')):<44} {len(new):>5} {grounded:>8} "
                  f"{restated:>8} {dropped:>7} {dream:<34} {time.perf_counter() - t0:>5.0f} {u['prompt_tokens']:>10}", flush=True)
    searching = with_vectors(memory)
    found = card_facts(memory)
    covered, statements = coverage(memory, found)
    loose = [(p, f.text, sorted(unsupported(memory, f))) for p, f in found if unsupported(memory, f)]
    rows = check(searching, args.days)
    print(f"\nsearch: {'keyword + vectors, as the service searches' if searching.vectors else 'keyword only'}")
    print(f"story statements in a card citing the right message: {covered}/{statements}; card facts "
          f"{len(found)}, with words not in their cited lines: {len(loose)}")
    for path, text, words in loose:
        print(f"  not in its lines ({', '.join(words)}): {text}  [{path}]")
    print_answers(rows)
    u, ran = spent.as_dict(), min(args.days, len(DAYS))
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
