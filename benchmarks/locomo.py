"""Retrieval on LoCoMo conversations: session recall@1/5/10, MRR and turn hit@k (categories 1-4).

Builds a workspace with one daily Markdown note per conversation session, dated by its
`session_<N>_date_time` (`daily/YYYY-MM-DD/<conv>-session-<N>.md`, speakers' turns as paragraphs, photo
captions as text, generated summaries/observations left out), indexes all the conversations in ONE
workspace, runs every question of categories 1-4 as a search over the whole workspace (the protocol other
memory systems are measured with: no per-conversation filter, so the other conversations' sessions compete),
and prints the metrics. `--per-conversation` restricts each search to its conversation (the note's tag), the
easier protocol, kept as a secondary figure.

    python benchmarks/locomo.py --data PATH [--conversations IDS] [--mode keyword|vector|hybrid]
                                [--workspace DIR] [--per-file N] [--per-conversation]

The data is LoCoMo's public release (`SOURCE`, file data/locomo10.json: ten conversations) or a folder of
`conv-<id>.json` files, one conversation each (`load`); docs/benchmarks.md measures the five development
conversations conv-26, 30, 41, 42, 43 (`--conversations dev` picks them out of locomo10.json).

Metrics, per question, averaged (a session is a (conversation, session number) pair, so a hit from another
conversation never counts): session recall@k = share of its evidence sessions among the sessions of
the top-k search results (chunks, as `search(limit=k)` returns them); MRR = 1/rank of the first result from
an evidence session; turn hit@k = some top-k chunk's line range holds an evidence turn; distinct-session
recall@k = the same share among the first k distinct sessions of the ranking (what a one-document-per-session
index measures); recall@5 (and recall@1) by group = per question category and for questions with one or
several evidence sessions. `--mode vector|hybrid` runs through benchmarks/locomo_hybrid.py, which embeds the workspace
and supplies `make_vectors` (an object with `.candidates(con, query, k, ...)`, see storage/index/vectors.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.files.workspace import Workspace  # noqa: E402
from storage.index import indexer as index  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402
from storage.search.search import PER_FILE, search  # noqa: E402

SOURCE = "https://github.com/snap-research/locomo"
PUBLIC_FILE = "locomo10.json"  # the release's data/locomo10.json: a list of {sample_id, conversation, qa, ...}
DEVELOPMENT = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")  # the five docs/benchmarks.md measures
NO_DATA = f"""no LoCoMo data given: pass --data PATH or set DREAMFLOW_LOCOMO.
LoCoMo is public ({SOURCE}, CC BY-NC 4.0): its data/{PUBLIC_FILE} holds ten conversations.
    git clone --depth 1 {SOURCE}
    python {{script}} --data locomo/data/{PUBLIC_FILE}
--data also takes the clone's folder, or a folder of conv-<id>.json files (one conversation each: its fields
and its qa). docs/benchmarks.md measures the five development conversations ({", ".join(DEVELOPMENT)}):
add --conversations dev to compare with its figures."""
KS = (1, 5, 10)
DISTINCT_POOL = 50  # results fetched per question to rank distinct sessions
TURN_ID = re.compile(r"D(\d+):(\d+)")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def session_date(text: str) -> dt.datetime:
    """'1:56 pm on 8 May, 2023' -> datetime."""
    return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def add_data_options(parser: argparse.ArgumentParser) -> None:
    """`--data PATH` (default `$DREAMFLOW_LOCOMO`) and `--conversations IDS`: what every LoCoMo benchmark reads."""
    parser.add_argument("--data", metavar="PATH", default=os.environ.get("DREAMFLOW_LOCOMO"),
                        help=f"LoCoMo: the public {PUBLIC_FILE} ({SOURCE}), a clone of that repository or a folder "
                             "of conv-<id>.json files (default: $DREAMFLOW_LOCOMO)")
    parser.add_argument("--conversations", metavar="IDS",
                        help=f"comma-separated conversation ids to use, or dev: the five docs/benchmarks.md "
                             f"measures ({','.join(DEVELOPMENT)}); default all")


def load(data: str | os.PathLike | None, only: str | None = None) -> dict[str, dict]:
    """{conversation id: conversation (speakers, `session_<N>` turns and dates, `qa`)}, sorted by id, from
    LoCoMo's public `locomo10.json` (or a folder holding it, as `data/locomo10.json` in a clone) or from a folder
    of `conv-<id>.json` files; `only` keeps the comma-separated ids it names (`dev`: `DEVELOPMENT`). Without data, or with a path that
    holds none, says where to get it and exits 2 (no traceback)."""
    if not data:
        _leave(NO_DATA.format(script=sys.argv[0] or "benchmarks/locomo.py"))
    path = Path(data).expanduser()
    try:
        if path.is_dir():
            files = sorted(path.glob("conv-*.json"))
            public = next((p for p in (path / PUBLIC_FILE, path / "data" / PUBLIC_FILE) if p.is_file()), None)
            if files:
                convs = {f.stem: json.loads(f.read_text()) for f in files}
            elif public:
                convs = _public(json.loads(public.read_text()))
            else:
                _leave(f"{path} holds no conv-*.json and no {PUBLIC_FILE} (see --help for where to get LoCoMo)")
        elif path.is_file():
            loaded = json.loads(path.read_text())
            convs = _public(loaded) if isinstance(loaded, list) else {path.stem: loaded}
        else:
            _leave(f"no such file or folder: {path} (LoCoMo: {SOURCE}, file data/{PUBLIC_FILE})")
        bad = [cid for cid, conv in convs.items() if not isinstance(conv, dict) or "speaker_a" not in conv
               or "qa" not in conv]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _leave(f"{path} is not LoCoMo data: {exc}")
    if bad:
        _leave(f"{path} is not LoCoMo data: {', '.join(bad)} has no speaker_a or qa")
    if only:
        wanted = list(DEVELOPMENT) if only == "dev" else [cid.strip() for cid in only.split(",") if cid.strip()]
        if missing := [cid for cid in wanted if cid not in convs]:
            _leave(f"{path} has no conversation {', '.join(missing)} (it has {', '.join(sorted(convs))})")
        convs = {cid: convs[cid] for cid in wanted}
    return dict(sorted(convs.items()))


def _public(samples: list) -> dict[str, dict]:
    """The conversations of the public release's list: each sample's `conversation` with its `qa` beside."""
    return {str(s["sample_id"]): {**s["conversation"], "qa": s["qa"]} for s in samples}


def _leave(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def build_workspace(convs: dict[str, dict], workspace: str | None, prefix: str) -> tuple[Path, Workspace, dict]:
    """The conversations written into one workspace (`workspace`, or a new temp folder named `prefix`...):
    (root, ws, turn lines by path)."""
    root = Path(workspace) if workspace else Path(tempfile.mkdtemp(prefix=prefix))
    ws = Workspace(root)
    turn_lines: dict = {}
    for conv_id, conv in convs.items():
        turn_lines |= write_conversation(ws, conv_id, conv)
    return root, ws, turn_lines


def write_conversation(ws: Workspace, conv_id: str, data: dict) -> dict[str, dict[str, int]]:
    """Write one note per session; return {path: {dia_id: line}} for turn-level scoring."""
    speakers = f"{data['speaker_a']} and {data['speaker_b']}"
    turn_lines: dict[str, dict[str, int]] = {}
    for key in data:
        m = re.fullmatch(r"session_(\d+)", key)
        if not m or not data[key]:
            continue
        n = int(m.group(1))
        when = session_date(data[f"session_{n}_date_time"])
        rel = f"daily/{when:%Y-%m-%d}/{conv_id}-session-{n}.md"
        lines = [
            "---",
            f"name: {conv_id} session {n}",
            f"description: Conversation between {speakers} at {data[f'session_{n}_date_time']}",
            f"date: {when:%Y-%m-%d}",
            f"tags: [{conv_id}]",
            "---",
            f"# {speakers}, {when:%-d %B %Y}",
            "",
        ]
        where: dict[str, int] = {}
        for turn in data[key]:
            text = " ".join(str(turn.get("text", "")).split())
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            where[turn["dia_id"]] = len(lines) + 1
            lines += [f"{turn['speaker']}: {text}", ""]
        ws.write_text(rel, "\n".join(lines))
        turn_lines[rel] = where
    return turn_lines


def questions(convs: dict[str, dict]) -> Iterator[tuple[str, dict, set[tuple[int, int]]]]:
    """(conversation id, question, its evidence {(session, turn)}) for every question of categories 1-4 that
    names evidence."""
    for conv_id, data in convs.items():
        for qa in data["qa"]:
            evidence = {(int(s), int(t)) for e in qa.get("evidence", []) for s, t in TURN_ID.findall(e)}
            if qa.get("category") in CATEGORIES and evidence:
                yield conv_id, qa, evidence


def session_of(path: str) -> tuple[str, int]:
    """(conversation id, N) of a note `.../<conv>-session-<N>.md`."""
    m = re.search(r"([^/]+)-session-(\d+)\.md$", path)
    return m.group(1), int(m.group(2))


def evidence_sessions(conv_id: str, evidence: set[tuple[int, int]]) -> set[tuple[str, int]]:
    """The (conversation, session) pairs that hold a question's evidence turns."""
    return {(conv_id, s) for s, _ in evidence}


def make_vectors(mode: str):
    """The vectors object for `--mode vector|hybrid` (None for keyword).

    Embedding the workspace takes a model and minutes of CPU, so benchmarks/locomo_hybrid.py does that and
    plugs its vector index in here (replacing this function) before calling `evaluate`.
    """
    if mode == "keyword":
        return None
    sys.exit("vector and hybrid modes need embeddings: run benchmarks/locomo_hybrid.py --modes " + mode)


def evaluate(ws: Workspace, convs: dict[str, dict], turn_lines: dict, mode: str, per_file: int | None = PER_FILE,
             per_conversation: bool = False) -> dict:
    """The metrics over every question; each searched over the whole workspace unless `per_conversation`."""
    vectors = make_vectors(mode)
    weights = {"keyword": (1.0, 0.0), "vector": (0.0, 1.0), "hybrid": (1.0, 1.0)}[mode]
    totals = ({f"recall@{k}": 0.0 for k in KS} | {"mrr": 0.0} | {f"turn_hit@{k}": 0.0 for k in KS}
              | {f"distinct_session_recall@{k}": 0.0 for k in KS})
    groups: dict[str, list[float]] = {}  # recall@5 per question category and per evidence spread
    groups_at_1: dict[str, list[float]] = {}  # the same for recall@1
    n = 0
    latencies = []
    with IndexDB(ws).session() as con:
        for conv_id, qa, evidence in questions(convs):
            ev_sessions = evidence_sessions(conv_id, evidence)
            t0 = time.perf_counter()
            hits = search(con, qa["question"], limit=DISTINCT_POOL, tags=[conv_id] if per_conversation else None,
                          expand=0, vectors=vectors, weights=weights, per_file=per_file)
            latencies.append(time.perf_counter() - t0)
            sessions = [session_of(h["path"]) for h in hits]
            distinct = list(dict.fromkeys(sessions))
            sessions, hits = sessions[: max(KS)], hits[: max(KS)]
            turns_hit = [_holds_turn(h, turn_lines, evidence) for h in hits]
            for k in KS:
                totals[f"recall@{k}"] += len(ev_sessions & set(sessions[:k])) / len(ev_sessions)
                totals[f"turn_hit@{k}"] += any(turns_hit[:k])
                totals[f"distinct_session_recall@{k}"] += len(ev_sessions & set(distinct[:k])) / len(ev_sessions)
            for group in (CATEGORIES[qa["category"]], "one evidence session" if len(ev_sessions) == 1
                          else "several evidence sessions"):
                groups.setdefault(group, []).append(len(ev_sessions & set(sessions[:5])) / len(ev_sessions))
                groups_at_1.setdefault(group, []).append(len(ev_sessions & set(sessions[:1])) / len(ev_sessions))
            first = next((i for i, s in enumerate(sessions, 1) if s in ev_sessions), None)
            totals["mrr"] += 1 / first if first else 0.0
            n += 1
    result = {key: round(value / n, 4) for key, value in totals.items()}
    result["recall@5 by group"] = {g: f"{sum(v) / len(v):.3f} ({len(v)})" for g, v in sorted(groups.items())}
    result["recall@1 by group"] = {g: f"{sum(v) / len(v):.3f}" for g, v in sorted(groups_at_1.items())}
    latencies.sort()
    result["questions"] = n
    result["search_p50_ms"] = round(1000 * latencies[len(latencies) // 2], 2)
    return result


def _holds_turn(hit: dict, turn_lines: dict, evidence: set[tuple[int, int]]) -> bool:
    lines = turn_lines[hit["path"]]
    for s, t in evidence:
        line = lines.get(f"D{s}:{t}")
        if line is not None and hit["start_line"] <= line <= hit["end_line"]:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_options(parser)
    parser.add_argument("--mode", choices=("keyword", "vector", "hybrid"), default="keyword")
    parser.add_argument("--workspace", help="build the workspace here (default: a temp folder)")
    parser.add_argument("--per-file", type=int, default=PER_FILE, help="chunks per file in the results (0: no cap)")
    parser.add_argument("--per-conversation", action="store_true",
                        help="search each question within its conversation only (tag filter; secondary protocol)")
    args = parser.parse_args()

    convs = load(args.data, args.conversations)
    root, ws, turn_lines = build_workspace(convs, args.workspace, "locomo-")
    size = sum((ws.root / rel).stat().st_size for rel in turn_lines)
    with IndexDB(ws).session() as con:  # first open builds the index; time a full reindex on top
        t0 = time.perf_counter()
        built = index.rebuild(con, ws)
        reindex_s = time.perf_counter() - t0
    print(f"workspace {root}: {built['files']} files, {size / 1e6:.2f} MB, {built['chunks']} chunks")
    print(f"reindex: {reindex_s:.3f} s")
    result = evaluate(ws, convs, turn_lines, args.mode, args.per_file or None, args.per_conversation)
    scope = "within its conversation" if args.per_conversation else f"over all {len(convs)} conversations"
    print(f"mode {args.mode}, {result.pop('questions')} questions (categories 1-4), each searched {scope}")
    for key, value in result.items():
        print(f"  {key:>27}: {value}")
    if not args.workspace:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
