"""Memory that stays true over a week: a scripted story of 11 facts that change, fed day by day.

Each of 7 days is one conversation (messages stamped with that day), run through `auto_memory` (the job a
session's turns trigger) and the nightly `auto_dream` of that day. Then, for every fact that changed:
- `search` for it now: is the first digest hit the current node, stating the new value (and the first hit
  overall)?
- `search --as-of` the day before the change: does the first digest hit state the old value?
- do two current nodes state different values of one fact?
It also counts what the content checks refused, the actions the dreams took, calls, tokens and time.

With `--scripted` the model is tests/llm_server.py playing a careful model (it writes the day's card with
dates, once the `relative_time` gate has refused its "yesterday", one unit per fact, and SUPERSEDEs a node whose
value changed): it measures Dreamflow's part (validity,
supersession, time-aware search). Without it, the endpoint `DREAMFLOW_LLM_BASE_URL` / `DREAMFLOW_LLM_MODEL`
plays every part, e.g. a local model on llama.cpp's server (README, "A local model"):

    python benchmarks/temporal.py --scripted
    DREAMFLOW_LLM_BASE_URL=http://127.0.0.1:8091/v1 DREAMFLOW_LLM_MODEL=qwen1.5b python benchmarks/temporal.py
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
    """Answers as a careful model would: cards with dates (after the gate's repair turn where it first wrote
    "yesterday"), one unit per fact, SUPERSEDE on a changed value."""
    from llm_server import Reply

    def card(user: str, repair: bool) -> dict:
        day = DAYS.index(re.search(r"^Date: (\d{4}-\d{2}-\d{2})", user, re.M).group(1))
        lines = [f"- {f.name}: {f.says.format(f.old)}" for f in FACTS if f.said == day]
        lines += [f"- {f.name}: {f.says.format(f.new)} Since "  # first says "yesterday": the gate asks for the date
                  + (since(f) if repair or not f.back else "yesterday") + f" (before: {f.old})." for f in FACTS
                  if f.changed == day]
        return {"name": f"Updates on {DAYS[day]}", "description": "What changed in my life that day",
                "content": "# Updates\n\n" + "\n".join(lines) + "\n"}

    def extract(user: str, repair: bool) -> dict:
        units = []
        for path, body in re.findall(r'<file path="([^"]+)">\n(.*?)\n</file>', user, re.S):
            for f in FACTS:
                m = re.search(rf"^- {re.escape(f.name)}: (.+)$", body, re.M)
                if m and "/" in path.removeprefix("daily/"):
                    when = re.search(r"Since (\d{4}-\d{2}-\d{2})", m.group(1))
                    units.append({"name": f.name, "bucket": "personal", "summary": f"{f.name}: {m.group(1)}",
                                  "paths": [path], "date": when.group(1) if when else path.split("/")[1]})
        return {"units": units, "topics": []}

    def integrate(user: str, repair: bool) -> dict:
        name = user.split("Unit: ", 1)[1].split("\n", 1)[0]
        summary = user.split("Summary: ", 1)[1].split("\n", 1)[0]
        fact = next(f for f in FACTS if f.name == name)
        value = fact.new if fact.new in summary.split("(before")[0] else fact.old
        content = f"{fact.name}: {fact.says.format(value)}"
        for path, listed in re.findall(r"^- (digest/\S+\.md): (.*?) —", user, re.M):
            if listed == name:
                node = re.search(rf'<node path="{re.escape(path)}">\n(.*?)\n</node>', user, re.S)
                if node and value in node.group(1):
                    return {"action": "CORROBORATE", "target": path}
                return {"action": "SUPERSEDE", "target": path, "name": name, "description": f"My {name.lower()}",
                        "content": content}
        return {"action": "CREATE", "target": None, "name": name, "description": f"My {name.lower()}",
                "content": content}

    def respond(body: dict) -> Reply:
        system = body["messages"][0]["content"]
        user = "\n".join(m["content"] or "" for m in body["messages"][1:] if m["role"] == "user")
        for marker, answer in (("Summarise the new messages", card), ("You consolidate", extract),
                               ("You maintain the long-term digest", integrate)):
            if marker in system:
                repair = any(m["role"] == "assistant" for m in body["messages"])
                return Reply(content=json.dumps(answer(user, repair)))
        return Reply(content="{}")

    return respond


# ---- checks ---------------------------------------------------------------------------------------------

def first_digest(hits: list[dict]) -> dict | None:
    return next((h for h in hits if h["path"].startswith("digest/")), None)


def text_of(memory, path: str) -> str:
    return memory.read(path, numbered=False)["content"].split("## History")[0]


def check(memory, days: int) -> dict:
    """Per fact changed within the first `days` days: the current node first now, the old value as of the day
    before the change, conflicts."""
    rows = []
    current = [n for n in memory.list("digest", recursive=True, limit=10_000)["entries"]
               if n.get("type") == "file" and n["path"].endswith(".md")]
    live = {n["path"]: text_of(memory, n["path"]) for n in current
            if (memory.frontmatter_get(n["path"])["frontmatter"] or {}).get("status", "current") == "current"}
    for f in (f for f in FACTS if f.changed < days):
        now = memory.search(f.query, limit=5, expand=0)
        top = first_digest(now)
        before = (date.fromisoformat(since(f)) - timedelta(days=1)).isoformat()
        then = first_digest(memory.search(f.query, limit=5, expand=0, as_of=before))
        values = {v for v in (f.old, f.new) for body in live.values() if v in body and f.name.split()[0].lower() in body.lower()}
        rows.append({
            "fact": f.name,
            "now_first_digest": bool(top and f.new in text_of(memory, top["path"]) and top.get("status") == "current"),
            "now_first_hit": bool(now and f.new in text_of(memory, now[0]["path"])),
            "as_of_old": bool(then and f.old in text_of(memory, then["path"])),
            "conflict": len(values) > 1,
            "top": top and top["path"], "then": then and then["path"],
        })
    return {"facts": rows, "current_nodes": len(live), "nodes": len(current)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripted", action="store_true", help="the scripted careful model instead of an endpoint")
    parser.add_argument("--keep", action="store_true", help="print the workspace folder and keep it")
    parser.add_argument("--days", type=int, default=len(DAYS), help="run the first N days only (a slow model)")
    args = parser.parse_args()

    scripted = careful_model() if args.scripted else None
    with endpoint("dreamflow-temporal-", scripted, "scripted-careful-model") as (home, settings):
        run(args, home, settings)


def run(args, home: Path, settings) -> None:
    from engine import prefect_env
    from engine.usage import Usage
    from flows.auto_dream import auto_dream
    from flows.auto_memory import auto_memory
    from storage.memory import Memory
    from tasks.usage import gates_line

    ws = home / "ws"
    memory = Memory(ws)
    spent, actions, failures, started = Usage(), [], [], time.perf_counter()
    print(f"endpoint {settings.llm_base_url} model {settings.llm_model}; {len(FACTS)} facts over {len(DAYS)} days"
          + (f", the first {args.days} run" if args.days < len(DAYS) else ""), flush=True)
    with prefect_env.interactive_runs():
        for n, day in enumerate(DAYS[:args.days]):
            t0 = time.perf_counter()
            card = auto_memory(session_id=f"day-{n + 1}", messages=conversation(n), workspace=str(ws),
                               return_state=True).result(raise_on_failure=False)
            if isinstance(card, BaseException):
                failures.append(f"{day} auto-memory: {str(card)[:160]}")
            spent.add(getattr(card, "usage", None) if isinstance(card, BaseException) else card.get("usage"))
            result = auto_dream(date=day, scan_days=1, max_units=6, workspace=str(ws),
                                return_state=True).result(raise_on_failure=False)
            summary = getattr(result, "summary", result)
            if isinstance(summary, dict):
                spent.add(summary["usage"])
                actions += [a["action"] for a in summary["actions"]]
                failures += [f"{day} unit {f['name']}: {f['error'][:160]}" for f in summary["failed"]]
            else:
                failures.append(f"{day} dream: {str(summary)[:160]}")
            print(f"{day}: card {'FAILED' if isinstance(card, BaseException) else card.get('card')}, dream "
                  + (", ".join(f"{a['action']} {a['target']}" for a in summary["actions"])
                     if isinstance(summary, dict) else "FAILED") + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    report = check(memory, args.days)
    u = spent.as_dict()
    rows = report["facts"]
    print(f"\n{'fact':<24} {'now: 1st node':>13} {'now: 1st hit':>12} {'as of: old':>10} {'conflict':>8}")
    for r in rows:
        print(f"{r['fact']:<24} {str(r['now_first_digest']):>13} {str(r['now_first_hit']):>12} "
              f"{str(r['as_of_old']):>10} {str(r['conflict']):>8}")
    total = len(rows)
    print(f"\ncurrent node first now: {sum(r['now_first_digest'] for r in rows)}/{total}; first hit overall: "
          f"{sum(r['now_first_hit'] for r in rows)}/{total}; old value as of before the change: "
          f"{sum(r['as_of_old'] for r in rows)}/{total}; facts with conflicting current nodes: "
          f"{sum(r['conflict'] for r in rows)}")
    print(f"nodes: {report['nodes']} ({report['current_nodes']} current); actions: "
          + ", ".join(f"{a} {actions.count(a)}" for a in sorted(set(actions))))
    print(f"LLM: {u['calls']} calls, {u['prompt_tokens']} prompt + {u['completion_tokens']} completion tokens, "
          f"{u['seconds']:.0f} s in calls; wall {time.perf_counter() - started:.0f} s; {gates_line(u)}")
    for failure in failures:
        print(f"  failed: {failure}")
    if args.keep:
        print(f"workspace kept: {ws}")


if __name__ == "__main__":
    main()
