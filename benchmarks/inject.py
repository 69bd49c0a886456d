"""What the Claude Code hooks inject (dreamflow/hooks/context.py), on LoCoMo: useful, quiet when irrelevant, fast.

Each LoCoMo conversation is its own workspace (one memory per project, as routing by `cwd` gives), built as
benchmarks/locomo.py builds notes (keyword search only, `DREAMFLOW_EMBEDDER=none`). Printed:

- usefulness: every question of categories 1-4 asked as a prompt with the hook's recall (`min_score`,
  `min_relevance`, `min_words` from the settings) at several budgets, each in a fresh session, and all of a
  conversation's questions in order in one session (the session's record: nothing given twice, so a later
  prompt gets only what is new): share of prompts that inject something; share of their evidence sessions
  cited in what the prompt injected (averaged over prompts); tokens injected per prompt;
- quiet: prompts with nothing relevant in that workspace, each in a fresh session: the questions of the other
  conversations (a sample) and small talk; share that inject nothing;
- by memory size (`--sizes`, only this table): the same at the hook's budget in fresh sessions, on memories of
  one and of two sessions of a conversation (its questions whose evidence they hold; 30 other conversations'
  questions each), the whole conversation, and a conversation among N generated sessions (`--filler`, default
  2,000: turns of half the other conversations, speakers renamed, in random sessions; the other
  conversations' questions from the rest), so the thresholds can be seen to hold from a few chunks to
  thousands of files;
- latency: `dreamflow hook claude-code` as Claude Code runs it (a fresh process per event, stdin JSON; the
  console script as pyproject.toml declares it) for UserPromptSubmit and SessionStart, and the hook's own
  answer time inside a process (`hook_context.context`), in-process and, with `--service`, through a running
  `dreamflow start`.

    DREAMFLOW_EMBEDDER=none python benchmarks/inject.py --data PATH [--budgets 300,600,1200] [--latency 30]
                                                        [--service] [--latency-only]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("DREAMFLOW_EMBEDDER", "none")

from benchmarks.locomo import (  # noqa: E402
    add_data_options, evidence_sessions, load, questions, session_of, write_conversation)
from benchmarks.service import pct  # noqa: E402
from cli_probe import ENTRY  # noqa: E402  (the console script as pyproject.toml declares it)
from dreamflow.hooks import context as hook_context  # noqa: E402
from engine.config.settings import Settings  # noqa: E402
from storage.files.workspace import Workspace  # noqa: E402
from storage.index import indexer as index  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402
from storage.search.recall import recall  # noqa: E402

SMALL_TALK = [
    "hi", "thanks!", "ok, go ahead", "looks good to me", "run the tests please", "commit and push",
    "fix the typo in line 3", "can you explain this error?", "why is the build failing?", "what's up",
    "rename this function to parse_args", "add a docstring here", "make it faster", "undo that",
    "show me the diff", "continue", "yes", "no, the other file", "write a unit test for it", "good night",
]
OTHERS_PER_WORKSPACE = 150  # questions of the other conversations asked in each workspace
OTHERS_PER_PART = 30  # ... in each memory of one or two sessions
PADDED = 2  # conversations put among generated sessions (each memory is built and indexed anew)
NAMES = ("Avery Blake Casey Dana Emery Finley Gray Harper Indy Jules Kai Logan Morgan Noel Oakley Parker Quinn "
         "Reese Sage Tatum").split()  # the speakers of generated sessions


def build(convs: dict[str, dict]) -> dict[str, tuple[Workspace, dict]]:
    """{conversation id: (its own indexed workspace, the conversation)}."""
    built = {}
    for cid, conv in convs.items():
        ws = Workspace(Path(tempfile.mkdtemp(prefix=f"inject-{cid}-")) / "ws")  # the service harness's layout
        write_conversation(ws, cid, conv)
        with IndexDB(ws).session() as con:
            index.rebuild(con, ws)
        built[cid] = (ws, conv)
    return built


def thresholds(s: Settings) -> dict:
    """The hook's thresholds under `s`, as recall takes them."""
    return {"min_score": s.inject_min_score, "min_relevance": s.inject_min_relevance, "min_words": s.inject_min_words}


def usefulness(built: dict, budgets: list[int], s: Settings) -> dict[tuple[int, str], dict]:
    """Per (budget, "fresh" | "one session"): prompts, injecting, evidence share, tokens injected."""
    convs = {cid: conv for cid, (_, conv) in built.items()}
    out = {}
    for budget in budgets:
        for mode in ("fresh", "one session"):
            row = out[(budget, mode)] = {"prompts": 0, "injecting": 0, "evidence": 0.0, "tokens": 0}
            for cid, (ws, _) in built.items():
                given: set[str] = set()
                with IndexDB(ws).session() as con:
                    for qc, qa, evidence in questions({cid: convs[cid]}):
                        answer, keys = recall(con, ws, qa["question"], hook_context._fit(budget), given=given,
                                              **thresholds(s))
                        if mode == "one session":
                            given.update(keys)
                        cited = {session_of(item["path"]) for item in answer["items"]}
                        wanted = evidence_sessions(qc, evidence)
                        row["prompts"] += 1
                        row["injecting"] += bool(answer["items"])
                        row["evidence"] += len(wanted & cited) / len(wanted)
                        row["tokens"] += answer["tokens"]
    return out


def quiet(built: dict, budget: int, s: Settings) -> dict[str, tuple[int, int]]:
    """{kind: (prompts, prompts that injected nothing)} for other conversations' questions and small talk."""
    convs = {cid: conv for cid, (_, conv) in built.items()}
    rng = random.Random(7)
    counts = {"other conversations' questions": [0, 0], "small talk": [0, 0]}
    for cid, (ws, _) in built.items():
        others = [qa["question"] for qc, qa, _ in questions(convs) if qc != cid]
        asked = [("other conversations' questions", q) for q in rng.sample(others, OTHERS_PER_WORKSPACE)]
        asked += [("small talk", q) for q in SMALL_TALK]
        with IndexDB(ws).session() as con:
            for kind, prompt in asked:
                answer, _ = recall(con, ws, prompt, hook_context._fit(budget), **thresholds(s))
                counts[kind][0] += 1
                counts[kind][1] += not answer["items"]
    return {k: (n, silent) for k, (n, silent) in counts.items()}


def sizes(convs: dict[str, dict], filler: list[int], s: Settings) -> None:
    """The table by memory size (see the module docstring), at the hook's prompt budget in fresh sessions."""
    budget = hook_context._fit(s.inject_prompt_tokens)
    print("| memory | memories | files | chunks | own questions | inject something | evidence sessions cited | "
          "other conversations' questions: inject nothing | small talk: inject nothing |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    kinds = [("one session", _parts(convs, 1)), ("two sessions", _parts(convs, 2)),
             ("the whole conversation", _parts(convs, 0))]
    kinds += [(f"the conversation + {n:,} generated sessions", _padded(convs, n)) for n in filler]
    for label, memories in kinds:
        count = {"memories": 0, "files": 0, "chunks": 0, "own": 0, "injecting": 0, "evidence": 0.0, "other": 0,
                 "other quiet": 0, "small": 0, "small quiet": 0}
        for ws, own, others in memories:
            with IndexDB(ws).session() as con:
                count["memories"] += 1
                count["files"] += con.execute("SELECT count(*) FROM files").fetchone()[0]
                count["chunks"] += con.execute("SELECT count(*) FROM chunks").fetchone()[0]
                for cid, qa, evidence in own:
                    answer, _ = recall(con, ws, qa["question"], budget, **thresholds(s))
                    cited = {session_of(item["path"]) for item in answer["items"]}
                    wanted = evidence_sessions(cid, evidence)
                    count["own"] += 1
                    count["injecting"] += bool(answer["items"])
                    count["evidence"] += len(wanted & cited) / len(wanted)
                for kind, prompts in (("other", others), ("small", SMALL_TALK)):
                    for prompt in prompts:
                        count[kind] += 1
                        count[f"{kind} quiet"] += not recall(con, ws, prompt, budget, **thresholds(s))[0]["items"]
            shutil.rmtree(ws.root.parent, ignore_errors=True)
        m = count["memories"]
        print(f"| {label} | {m} | {count['files'] / m:,.0f} | {count['chunks'] / m:,.0f} | {count['own']} | "
              f"{count['injecting'] / count['own']:.3f} | {count['evidence'] / count['own']:.3f} | "
              f"{count['other quiet'] / count['other']:.3f} | {count['small quiet'] / count['small']:.3f} |")


def _parts(convs: dict[str, dict], k: int):
    """(workspace, own questions, other conversations' questions) of every conversation's memories of `k`
    sessions in a row (every third window), each with the questions whose evidence it holds; 0: the whole
    conversation."""
    rng = random.Random(7)
    every = list(questions(convs))
    for cid, conv in convs.items():
        others = [qa["question"] for qc, qa, _ in every if qc != cid]
        numbers = sorted(int(key.split("_")[1]) for key in conv if re.fullmatch(r"session_\d+", key) and conv[key])
        windows = [numbers] if k == 0 else [numbers[at:at + k] for at in range(0, len(numbers) - k + 1, 3)]
        for kept in windows:
            own = [(qc, qa, ev) for qc, qa, ev in every if qc == cid and {n for n, _ in ev} <= set(kept)]
            if not own:
                continue
            part = {key: value for key, value in conv.items()
                    if not re.fullmatch(r"session_\d+", key) or int(key.split("_")[1]) in kept}
            ws = _workspace(f"inject-{cid}-", lambda ws, part=part, cid=cid: write_conversation(ws, cid, part))
            yield ws, own, rng.sample(others, OTHERS_PER_WORKSPACE if k == 0 else OTHERS_PER_PART)


def _padded(convs: dict[str, dict], n: int):
    """(workspace, own questions, other questions) of the first PADDED conversations, each among `n` generated
    sessions made of the turns of half the other conversations; the other questions from the rest."""
    rng = random.Random(7)
    every = list(questions(convs))
    ids = list(convs)
    for at, cid in enumerate(ids[:PADDED]):
        rest = ids[at + 1:] + ids[:at]
        sources, asked = rest[:max(1, len(rest) // 2)], rest[max(1, len(rest) // 2):]
        others = [qa["question"] for qc, qa, _ in every if qc in asked]

        def write(ws, cid=cid, sources=sources):
            write_conversation(ws, cid, convs[cid])
            _generated(ws, [convs[c] for c in sources], n, random.Random(3))

        yield (_workspace(f"inject-{cid}-{n}-", write), [(qc, qa, ev) for qc, qa, ev in every if qc == cid],
               rng.sample(others, min(OTHERS_PER_WORKSPACE, len(others))))


def _generated(ws: Workspace, sources: list[dict], n: int, rng: random.Random) -> None:
    """`n` sessions of 8-16 random turns of the `sources`, between two speakers of NAMES (the sources' speakers
    renamed in the text too), written as an editor would (no fsync each): `daily/<day>/filler-session-<i>.md`."""
    turns = [(turn["speaker"], " ".join(str(turn["text"]).split())) for conv in sources for key, value in conv.items()
             if re.fullmatch(r"session_\d+", key) and value for turn in value if turn.get("text")]
    speakers = sorted({conv[k] for conv in sources for k in ("speaker_a", "speaker_b")}, key=len, reverse=True)
    named = re.compile(r"\b(" + "|".join(map(re.escape, speakers)) + r")\b")
    day = dt.date(2020, 1, 1)
    for i in range(n):
        pair = rng.sample(NAMES, 2)
        picked = rng.sample(turns, rng.randint(8, 16))
        who: dict[str, str] = {}
        for speaker, _ in picked:
            who.setdefault(speaker, pair[len(who) % 2])
        lines = [f"# {pair[0]} and {pair[1]}", ""]
        for speaker, text in picked:
            text = named.sub(lambda m: who.get(m.group(1), pair[1]), text)
            lines += [f"{who[speaker]}: {text}", ""]
        path = ws.root / f"daily/{day + dt.timedelta(days=i % 1500):%Y-%m-%d}/filler-session-{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines), encoding="utf-8")


def _workspace(prefix: str, write) -> Workspace:
    """A new workspace that `write(ws)` fills, indexed in one rebuild."""
    ws = Workspace(Path(tempfile.mkdtemp(prefix=prefix)) / "ws")
    write(ws)
    with IndexDB(ws).session() as con:
        index.rebuild(con, ws)
    return ws


def payloads(conv: dict, n: int) -> list[dict]:
    """n UserPromptSubmit inputs (the conversation's questions, one session) and SessionStart inputs."""
    qs = [qa["question"] for qa in conv["qa"]][:n]
    base = {"transcript_path": "/tmp/none.jsonl", "cwd": "/tmp", "permission_mode": "default"}
    prompts = [{**base, "session_id": f"latency-{time.time_ns()}", "hook_event_name": "UserPromptSubmit",
                "prompt": q} for q in qs]
    starts = [{**base, "session_id": f"start-{i}", "hook_event_name": "SessionStart", "source": "startup"}
              for i in range(max(3, n // 3))]
    return prompts + starts


def latency(ws: Workspace, conv: dict, n: int, service_pid: int | None = None) -> dict[str, dict[str, list[float]]]:
    """{event: {"process": wall seconds of `dreamflow hook claude-code`, "cpu": its user+sys seconds, "service":
    the service process's CPU seconds meanwhile (with `service_pid`), "answer": hook_context.context}}. CPU time
    hardly depends on the machine's load, so it tells what the wall time is on a quiet machine."""
    times: dict[str, dict[str, list[float]]] = {}
    for payload in payloads(conv, n):
        served = _cpu_of(service_pid)
        before = _children_cpu()
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", ENTRY, "--workspace", str(ws.root), "hook", "claude-code"],
                              input=json.dumps(payload), capture_output=True, text=True, timeout=120)
        wall = time.perf_counter() - started
        assert done.returncode == 0 and not done.stderr, done.stderr
        event = times.setdefault(payload["hook_event_name"], {"process": [], "cpu": [], "answer": []})
        event["process"].append(wall)
        event["cpu"].append(_children_cpu() - before)
        if service_pid is not None:
            event.setdefault("service", []).append(_cpu_of(service_pid) - served)
        started = time.perf_counter()
        hook_context.context(ws.root, {**payload, "session_id": payload["session_id"] + "-b"})
        event["answer"].append(time.perf_counter() - started)
    return times


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int | None) -> float:
    """User+sys CPU seconds of process `pid` so far (Linux /proc; 0 without a pid)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


MEASURED = {"process": "process (fresh `dreamflow hook claude-code`), wall", "cpu": "that process's CPU (user+sys)",
            "service": "the service's CPU for it", "answer": "answer inside the process, wall"}


def show_latency(label: str, times: dict) -> None:
    for event, kinds in times.items():
        for kind, values in kinds.items():
            print(f"| {label} | {event} | {MEASURED[kind]} | {len(values)} | {statistics.median(values) * 1000:.0f} | "
                  f"{pct(values, 95) * 1000:.0f} | {max(values) * 1000:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_options(parser)
    parser.add_argument("--budgets", default="300,600,1200", help="prompt budgets in tokens, comma-separated")
    parser.add_argument("--latency", type=int, default=30, help="prompts timed per setting (0: none)")
    parser.add_argument("--service", action="store_true", help="also time the hooks through `dreamflow start`")
    parser.add_argument("--latency-only", action="store_true", help="skip the usefulness and quiet tables")
    parser.add_argument("--sizes", action="store_true", help="only the table by memory size")
    parser.add_argument("--filler", default="2000", help="generated sessions around a conversation (--sizes), "
                                                         "comma-separated")
    args = parser.parse_args()
    s = Settings()
    budgets = [int(b) for b in args.budgets.split(",")]
    if args.sizes:
        convs = {path.stem: json.loads(path.read_text()) for path in sorted(Path(args.data).glob("conv-*.json"))}
        print(f"{len(convs)} conversations, keyword only; min_score {s.inject_min_score}, min_relevance "
              f"{s.inject_min_relevance}, min_words {s.inject_min_words}; budget {s.inject_prompt_tokens}\n")
        return sizes(convs, [int(n) for n in args.filler.split(",")], s)
    started = time.perf_counter()
    built = build(load(args.data, args.conversations))
    print(f"{len(built)} workspaces (one per conversation), keyword only; min_score {s.inject_min_score}, "
          f"min_relevance {s.inject_min_relevance}; built in {time.perf_counter() - started:.0f} s")
    if args.latency_only:
        return timing(built, args)
    print()
    print("| budget (tokens) | sessions | prompts | inject something | evidence sessions cited | "
          "tokens injected per prompt |")
    print("|---:|---|---:|---:|---:|---:|")
    for (budget, mode), r in usefulness(built, budgets, s).items():
        n = r["prompts"]
        label = "a fresh one per prompt" if mode == "fresh" else "one per conversation"
        print(f"| {budget:,} | {label} | {n} | {r['injecting'] / n:.3f} | {r['evidence'] / n:.3f} | "
              f"{r['tokens'] / n:,.0f} |")
    print()
    print("| prompts with nothing relevant | prompts | inject nothing |")
    print("|---|---:|---:|")
    for kind, (n, silent) in quiet(built, s.inject_prompt_tokens, s).items():
        print(f"| {kind} | {n} | {silent / n:.3f} |")
    timing(built, args)


def timing(built: dict, args: argparse.Namespace) -> None:
    """The latency table (in-process; with --service also through a running service)."""
    if not args.latency:
        return
    cid, (ws, conv) = next(iter(built.items()))
    print()
    print(f"latency on {cid} ({sum(1 for _ in ws.root.rglob('*.md'))} notes); load average {os.getloadavg()[0]:.1f}")
    print()
    print("| where | event | measured | n | p50 ms | p95 ms | max ms |")
    print("|---|---|---|---:|---:|---:|---:|")
    show_latency("in-process", latency(ws, conv, args.latency))
    if args.service:
        from llm_server import LLMServer
        from service_harness import RunningService

        llm = LLMServer().start()
        svc = RunningService.start(ws.root.parent, llm=llm, env={"DREAMFLOW_EMBEDDER": "none"})
        try:
            show_latency("through the service", latency(ws, conv, args.latency, service_pid=svc.proc.pid))
        finally:
            svc.stop()
            llm.stop()
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
