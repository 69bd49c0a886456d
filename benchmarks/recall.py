"""`recall` against `search` on LoCoMo: how much of a question's evidence fits in a context budget.

The workspace and protocol of benchmarks/locomo.py (one daily note per conversation session, every question
of categories 1-4 asked over the whole workspace, keyword search only, no embedder). For each question and a
budget of 1,000 / 2,000 / 4,000 tokens (storage.search.recall.tokens, the estimate recall itself uses):

- search: the top-k hits (`search`, default one passage per file) cut to the budget: hits in rank order,
  each rendered as recall renders a piece (`[path:start-end] date` + the chunk's text), as many as fit;
- recall: `recall(query, budget)` (no session).

Printed per budget and method: evidence sessions inside = share of the question's evidence sessions that the
answer cites (averaged over questions); evidence turns inside = share of its evidence turns whose line is
inside a cited range; sources = distinct files cited; tokens = tokens used.

    python benchmarks/recall.py --data PATH [--conversations IDS] [--workspace DIR] [--questions N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.locomo import (  # noqa: E402
    add_data_options,
    build_workspace,
    evidence_sessions,
    load,
    questions,
    session_of,
)
from storage.files.workspace import Workspace  # noqa: E402
from storage.index import indexer as index  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402
from storage.search.recall import recall, tokens  # noqa: E402
from storage.search.search import search  # noqa: E402

BUDGETS = (1000, 2000, 4000)
POOL = 50  # search hits fetched per question (more than any budget holds)


def search_cut(hits: list[dict], budget: int) -> tuple[list[dict], int]:
    """(the leading hits that fit `budget` when rendered like recall's pieces, tokens they take)."""
    kept, used = [], 0
    for hit in hits:
        text = f"[{hit['path']}:{hit['start_line']}-{hit['end_line']}]" + (
            f" {hit['date']}" if hit.get("date") else "") + "\n" + hit["text"]
        cost = tokens(text) + (1 if kept else 0)
        if used + cost > budget:
            break
        kept.append(hit)
        used += cost
    return kept, used


def scores(cited: list[dict], conv_id: str, evidence: set[tuple[int, int]], turn_lines: dict) -> tuple[float, float]:
    """(share of evidence sessions cited, share of evidence turns inside a cited line range)."""
    ev_sessions = evidence_sessions(conv_id, evidence)
    sessions = {session_of(c["path"]) for c in cited}
    turns = 0
    for s, t in evidence:
        for c in cited:
            if session_of(c["path"]) != (conv_id, s):
                continue
            line = turn_lines[c["path"]].get(f"D{s}:{t}")
            if line is not None and c["start_line"] <= line <= c["end_line"]:
                turns += 1
                break
    return len(ev_sessions & sessions) / len(ev_sessions), turns / len(evidence)


def evaluate(ws: Workspace, convs: dict, turn_lines: dict, most: int | None = None) -> tuple[dict, int]:
    """{(budget, method): [evidence sessions, evidence turns, sources, tokens] summed}, questions asked."""
    totals = {(b, m): [0.0, 0.0, 0, 0] for b in BUDGETS for m in ("search", "recall")}
    n = 0
    with IndexDB(ws).session() as con:
        for conv_id, qa, evidence in questions(convs):
            if most is not None and n >= most:
                break
            hits = search(con, qa["question"], limit=POOL, expand=0)
            for budget in BUDGETS:
                cut, cut_tokens = search_cut(hits, budget)
                answer, _ = recall(con, ws, qa["question"], budget)
                for method, cited, used in (("search", cut, cut_tokens),
                                            ("recall", answer["items"], answer["tokens"])):
                    sess, turn = scores(cited, conv_id, evidence, turn_lines)
                    row = totals[(budget, method)]
                    row[0] += sess
                    row[1] += turn
                    row[2] += len({c["path"] for c in cited})
                    row[3] += used
            n += 1
    return totals, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_options(parser)
    parser.add_argument("--workspace", help="build the workspace here (default: a temp folder)")
    parser.add_argument("--questions", type=int, help="only the first N questions (a quick look)")
    args = parser.parse_args()
    convs = load(args.data, args.conversations)
    root, ws, turn_lines = build_workspace(convs, args.workspace, "locomo-recall-")
    with IndexDB(ws).session() as con:
        built = index.rebuild(con, ws)
    print(f"workspace {root}: {built['files']} files, {built['chunks']} chunks; keyword search, no embedder")
    t0 = time.perf_counter()
    totals, n = evaluate(ws, convs, turn_lines, args.questions)
    print(f"{n} questions (categories 1-4) over all {len(convs)} conversations, {time.perf_counter() - t0:.0f} s")
    print()
    print("| budget (tokens) | method | evidence sessions inside | evidence turns inside | sources | tokens used |")
    print("|---:|---|---:|---:|---:|---:|")
    for budget in BUDGETS:
        for method in ("search", "recall"):
            sess, turn, sources, used = totals[(budget, method)]
            label = "search top-k cut to budget" if method == "search" else "recall"
            print(f"| {budget:,} | {label} | {sess / n:.3f} | {turn / n:.3f} | {sources / n:.1f} | {used / n:,.0f} |")


if __name__ == "__main__":
    main()
