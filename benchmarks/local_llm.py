"""How the LLM jobs hold up on an endpoint: auto-memory of one conversation, then a dream over that card and
three older prose cards (written before cards were facts: the dream reads their facts once).

Runs against whatever `DREAMFLOW_LLM_BASE_URL` / `DREAMFLOW_LLM_MODEL` name (a llama.cpp, Ollama, vLLM or
LM Studio server, or a hosted API), with every other `DREAMFLOW_LLM_*` setting as configured. With
`--scripted` (or when no endpoint is configured and `--scripted` is given) it starts tests/llm_server.py with
a scripted "small model" that makes the mistakes measured on Qwen2.5-Coder-0.5B/1.5B served by llama.cpp
(docs/benchmarks.md, "LLM jobs on a small model"): no `json_schema` support (HTTP 400), an invalid first answer
without constrained decoding, a fact citing the wrong message, a fact the messages do not say.

Prints per call kind: calls, valid-first-try rate, repairs, failures, tokens and seconds; the card's facts kept
and dropped; for the dream what it did per fact and the nodes written; and what Dreamflow learned about the
endpoint (response_format mode).

    python benchmarks/local_llm.py --scripted
    DREAMFLOW_LLM_BASE_URL=http://127.0.0.1:8080/v1 DREAMFLOW_LLM_MODEL=qwen python benchmarks/local_llm.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_endpoint import endpoint  # noqa: E402  (benchmarks/, after the path)

DAY = "2024-05-08"
CONVERSATION = [
    ("user", "Hi! Quick update: my sister Ana moved to Lisbon last week."),
    ("assistant", "That's big news. Is she settling in?"),
    ("user", "Yes, she started at a bakery in Alfama. She bakes the pastel de nata there."),
    ("assistant", "Lovely. Do you plan to visit her?"),
    ("user", "In June, probably the 14th to the 20th. I still need to book flights."),
    ("assistant", "Shall I remind you to book them this week?"),
    ("user", "Yes please, before Friday. Prices go up after that."),
    ("assistant", "Noted: book flights to Lisbon before Friday."),
    ("user", "Also, my sourdough starter died again. I only fed it once a day."),
    ("assistant", "Starters usually need feeding every 12 hours at room temperature."),
    ("user", "Right, equal weights of flour and water. I'll try again."),
    ("assistant", "Good luck with the new starter!"),
]
DAILY = {
    f"daily/{DAY}/call-with-ana.md": ("Call with Ana", "- Ana moved to Lisbon in May and works at a bakery in "
                                      "Alfama.\n- Visit planned for 14-20 June; flights not booked yet.\n"),
    f"daily/{DAY}/sourdough.md": ("Sourdough", "- Feed the starter every 12 hours with equal weights of flour and "
                                  "water.\n- The last one died when fed once a day.\n"),
    f"daily/{DAY}/standup.md": ("Standup", "- Release 2.3 ships on Thursday; Marta owns the changelog.\n"),
}
NODES = {"digest/wiki/portugal.md": ("Portugal", "Portugal's capital is Lisbon, famous for pastel de nata.\n")}


def small_model():
    """A responder with the measured mistakes of small local models (see the module docstring)."""
    import re

    from llm_server import Reply

    def respond(body: dict) -> Reply | None:
        if "messages" not in body:
            return None
        system = body["messages"][0]["content"]
        user = "\n".join(m["content"] or "" for m in body["messages"][1:] if m["role"] == "user")
        fmt = (body.get("response_format") or {}).get("type")
        if fmt == "json_schema":
            return Reply(content="json_schema is not supported", status=400)
        if "list the facts worth remembering" in system:
            if fmt is None and "could not be used" not in user:  # unconstrained: prose around broken JSON
                return Reply(content='Here are the facts: {"title": "News", "facts": [')
            said = re.findall(r"^\[(\d+)\] (?:\w+, [\d-]+ [\d:]+: |under [^:]+: )?(.+)$", user, re.M)
            found = [{"text": text.rstrip("?!"), "about": "user", "kind": "fact", "source": [int(n) + 1]}
                     for n, text in said if len(text.split()) > 4]  # each cited one line too far
            found.append({"text": "The user won the lottery.", "about": "user", "kind": "event", "source": [1]})
            return Reply(content=json.dumps({"title": "News and plans", "facts": found}))
        if "You keep a memory of facts up to date" in system:
            return Reply(content=json.dumps({"relation": "new", "fact": 0}))
        return Reply(content=json.dumps({"topics": []}))

    return respond


def build_workspace(root: Path):
    from storage.memory import Memory

    memory = Memory(root)
    for path, (name, body) in {**DAILY, **NODES}.items():
        memory.write(path, body, name=name)
    return memory


def rows(usage: dict) -> list[str]:
    """The per-kind table of one job's usage, and what the content checks refused."""
    from engine.models.usage_log import gates_line

    lines = [f"  {'kind':<10} {'calls':>5} {'valid 1st':>9} {'repairs':>7} {'failures':>8} {'prompt tok':>10} "
             f"{'compl. tok':>10} {'seconds':>8}"]
    for kind, k in sorted(usage["kinds"].items()):
        rate = f"{k['first_try']}/{k['answers']}" if k["answers"] else "-"
        lines.append(f"  {kind:<10} {k['calls']:>5} {rate:>9} {k['repairs']:>7} {k['failures']:>8} "
                     f"{k['prompt_tokens']:>10} {k['completion_tokens']:>10} {k['seconds']:>8.2f}")
    lines.append(f"  {'total':<10} {usage['calls']:>5} {'':>9} {'':>7} {'':>8} {usage['prompt_tokens']:>10} "
                 f"{usage['completion_tokens']:>10} {usage['seconds']:>8.2f}")
    return lines + [f"  {gates_line(usage)}"]


def show(memory, path: str) -> str:
    """A written card or node as the benchmark prints it, to judge its content by hand."""
    text = memory.read(path, numbered=False)["content"]
    return f"  --- {path}\n" + "\n".join(f"  | {line}" for line in text.splitlines()[:30])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripted", action="store_true",
                        help="start tests/llm_server.py with a scripted small model instead of a configured endpoint")
    parser.add_argument("--max-units", type=int, default=5, help="dream units: subjects (default 5)")
    args = parser.parse_args()

    scripted = small_model() if args.scripted else None
    with endpoint("dreamflow-local-llm-", scripted, "scripted-small-model") as (home, settings):
        run(args, home, settings)


def run(args, home: Path, settings) -> None:
    from engine.config import prefect_env

    prefect_env.configure()  # before the flows import prefect
    from engine.models.llm import learned
    from flows.auto_dream import auto_dream
    from flows.auto_memory import auto_memory

    ws = home / "ws"
    memory = build_workspace(ws)
    messages = [{"role": role, "content": text, "created_at": f"{DAY}T09:{i:02d}:00"}
                for i, (role, text) in enumerate(CONVERSATION)]
    print(f"endpoint {settings.llm_base_url} model {settings.llm_model}; json {settings.llm_json}, "
          f"max_tokens {settings.llm_max_tokens}, timeout {settings.llm_timeout:g} s")
    with prefect_env.interactive_runs():
        started = time.perf_counter()
        state = auto_memory(session_id="bench", messages=messages, workspace=str(ws), return_state=True)
        card = state.result(raise_on_failure=False)
        seconds = time.perf_counter() - started
        if isinstance(card, BaseException):
            print(f"auto-memory FAILED after {seconds:.1f} s: {card}")
            if getattr(card, "usage", None):
                print("\n".join(rows(card.usage)))
        else:
            print(f"auto-memory: card {card['card']}, {card['facts']} facts kept ({card['recited']} re-cited, {card.get('restated', 0)} restated), "
                  f"{len(card['dropped'])} dropped, in {seconds:.1f} s (incl. Prefect start)")
            for dropped in card["dropped"]:
                print(f"  dropped ({dropped['rule']}): {dropped['text'][:100]}")
            print("\n".join(rows(card["usage"])))
            print(show(memory, card["card"]))
        started = time.perf_counter()
        state = auto_dream(date=DAY, scan_days=1, max_units=args.max_units, workspace=str(ws),
                           return_state=True)
        result = state.result(raise_on_failure=False)
        summary = getattr(result, "summary", result)
        seconds = time.perf_counter() - started
        if not isinstance(summary, dict):
            print(f"dream FAILED after {seconds:.1f} s: {summary}")
        else:
            nodes = sorted({a["node"] for a in summary["actions"]})
            print(f"dream: {summary['facts']} facts in {summary['units']} subjects, {len(summary['failed'])} failed, "
                  f"{len(nodes)} nodes written in {seconds:.1f} s")
            for action in summary["actions"]:
                print(f"  {action['action']:<8} {action['node']}: {action['fact']}")
            for failure in summary["failed"]:
                print(f"  failed unit {failure['name']}: {failure['error'][:160]}")
            print("\n".join(rows(summary["usage"])))
            for node in nodes:
                print(show(memory, node))
    print(f"learned about the endpoint: {learned(settings.llm_base_url, settings.llm_model)}")


if __name__ == "__main__":
    main()
