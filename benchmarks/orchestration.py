"""Orchestration overhead of the memory jobs: what Prefect + Dreamflow add around the LLM calls.

An instant scripted LLM (tests/llm_server.py, real HTTP on 127.0.0.1) answers every call, so the time left
after subtracting time spent inside LLM calls is orchestration: Prefect flow/task runs, state reporting,
file reads/writes, indexing, checkpoints. Prefect runs in its default local mode (a temporary server,
started once per process and reported separately), flows in-process as the CLI runs them.

    python benchmarks/orchestration.py [--dreams 3] [--memory-calls 5] [--units 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def instant_llm():
    """A responder answering the facts and comparison prompts at once, with plausible JSON."""
    from llm_server import Reply

    def respond(body: dict) -> Reply | None:
        if "messages" not in body:
            return None
        system = body["messages"][0]["content"]
        if "You keep a memory of facts up to date" in system:
            return Reply(content=json.dumps({"relation": "replaces", "fact": 1}))
        return Reply(content=json.dumps({"title": "Conversation notes", "facts": [
            {"text": "The user said message number one.", "about": "user", "kind": "fact", "source": [1]}]}))

    return respond


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dreams", type=int, default=3, help="measured dream runs (after one warm-up)")
    parser.add_argument("--units", type=int, default=5, help="subjects per dream (one fact each, changed every day)")
    parser.add_argument("--memory-calls", type=int, default=5, help="measured auto_memory calls")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="dreamflow-bench-")
    os.environ["PREFECT_HOME"] = str(Path(home) / "prefect")
    from engine.config import prefect_env

    prefect_env.configure()
    from llm_server import LLMServer

    server = LLMServer().start()
    server.responder = instant_llm()
    os.environ.update(DREAMFLOW_LLM_BASE_URL=server.base_url, DREAMFLOW_LLM_MODEL="instant",
                      DREAMFLOW_LLM_MAX_RETRIES="0", DREAMFLOW_EMBEDDER="none")

    t0 = time.perf_counter()
    from flows.auto_dream import auto_dream
    from flows.auto_memory import auto_memory
    from storage.memory import Memory
    imported = time.perf_counter() - t0

    ws = Path(home) / "ws"
    memory = Memory(ws)

    def write_day(day: str) -> None:
        """A card of one fact per subject; from the second day each replaces the day before's (one question)."""
        from storage.text import facts

        body = "# Notes\n"
        for i in range(args.units):
            body = facts.add(body, facts.Fact(f"Subject {i} likes the colour of {day}.", id=f"f{i + 1}",
                                              about=f"subject {i}", sources=(f"session/dialog/s.jsonl#L{i + 1}",)))
        memory.write(f"daily/{day}/notes.md", body, name="Notes")

    def plain_dream(day: str) -> tuple[float, float]:
        """The same dream stages called as plain functions (`task.fn`): storage + LLM work, no Prefect."""
        from tasks.dream import consolidate, finish, gather
        from tasks.topics import select_topics

        started = time.perf_counter()
        found = gather.fn(str(ws), day, 1, args.units, None)
        outcomes = [consolidate.fn(str(ws), unit, day) for unit in found["units"]]
        topics = select_topics.fn(str(ws), day, found["topics"], 3, 7)
        summary = finish.fn(str(ws), day, found, outcomes, [], topics)
        return time.perf_counter() - started, summary["usage"]["seconds"]

    def plain_memory(call: int) -> tuple[float, float]:
        from tasks.cards import refresh_day, summarise_session
        from tasks.sessions import mark_summarised, record_messages, unsummarised

        started = time.perf_counter()
        record_messages.fn(str(ws), "plain", messages(call))
        todo = unsummarised.fn(str(ws), "plain")
        card = summarise_session.fn(str(ws), "plain", todo["records"], todo["lines"], "2024-06-10", None)
        refresh_day.fn(str(ws), "2024-06-10")
        mark_summarised.fn(str(ws), "plain", todo["end"], card["path"])
        return time.perf_counter() - started, card["usage"]["seconds"]

    def messages(call: int) -> list[dict]:
        return [{"role": "user", "content": f"I said message number one ({call}).", "created_at": "2024-06-10T10:00:00"},
                {"role": "assistant", "content": f"reply {call}", "created_at": "2024-06-10T10:00:05"}]

    flow_dreams, plain_dreams, flow_memory, plain_memory_rows = [], [], [], []
    with prefect_env.interactive_runs():
        for run in range(args.dreams + 1):  # run 0 starts Prefect's temporary server: reported apart
            day = f"2024-06-{run + 1:02d}"
            write_day(day)
            started = time.perf_counter()
            summary = auto_dream(date=day, scan_days=1, max_units=args.units, workspace=str(ws))
            assert len(summary["actions"]) == args.units and not summary["failed"], summary
            flow_dreams.append((time.perf_counter() - started, summary["usage"]["seconds"]))
            if run:
                day = f"2024-07-{run:02d}"
                write_day(day)
                plain_dreams.append(plain_dream(day))
        for call in range(args.memory_calls + 1):
            started = time.perf_counter()
            out = auto_memory(session_id="bench", messages=messages(call), workspace=str(ws))
            flow_memory.append((time.perf_counter() - started, out["usage"]["seconds"]))
            plain_memory_rows.append(plain_memory(call))
    server.stop()

    def median(rows: list, at: int) -> float:
        return statistics.median(row[at] for row in rows)

    dreams, cards = flow_dreams[1:], flow_memory[1:]
    print(f"load average while measuring: {open('/proc/loadavg').read().split()[0]} on {os.cpu_count()} cores")
    print(f"import flows (prefect, openai, storage): {imported:.2f} s")
    print(f"first dream incl. Prefect temporary server start: {flow_dreams[0][0]:.2f} s")
    print(f"dream, {args.units} units, instant LLM, {len(dreams)} runs: median wall {median(dreams, 0):.2f} s "
          f"(min {min(w for w, _ in dreams):.2f}), LLM {median(dreams, 1):.3f} s, "
          f"orchestration overhead (wall - LLM) {statistics.median(w - x for w, x in dreams):.2f} s; "
          f"the same stages as plain sequential calls without Prefect: "
          f"{statistics.median(w - x for w, x in plain_dreams):.2f} s + LLM")
    work = statistics.median(w - x for w, x in plain_memory_rows[1:])
    print(f"auto_memory per call (2 new messages), {len(cards)} calls: median wall {median(cards, 0):.2f} s "
          f"(min {min(w for w, _ in cards):.2f}), LLM {median(cards, 1):.3f} s, overhead (wall - LLM) "
          f"{statistics.median(w - x for w, x in cards):.2f} s = storage work {work:.2f} s "
          f"+ Prefect {statistics.median(w - x for w, x in cards) - work:.2f} s (5 tasks)")


if __name__ == "__main__":
    main()
