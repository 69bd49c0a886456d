"""`recall`: the best distinct evidence for a query, packed into a token budget, with citations, never giving
a session what it was already given.

Candidates are `search` hits (at most two passages per file). Each hit is narrowed to its lines that carry
the query's rarer words (each query term weighted by its inverse document frequency, as keyword search
weighs it), so a budget holds many sources rather than a few whole passages. A piece is cited as
`path:start-end` (the line numbers of `read`) with the file's date, and packed greedily: every hit's best
piece first, in search order, then the hits' other pieces, each only if it still fits. Tokens are estimated
(`tokens`: about 4 characters of ASCII text per token, one per other character), conservatively for CJK.
The answer is memory quoted as data: its text opens with storage/text/instructions.FRAME (counted in the budget),
and a line that reads as an instruction to the agent is given as `[instruction left out: path:line]`, its
item flagged (`flags: ["instruction"]`).

With a `session` id, the lines given are remembered in `metadata/recall/<session>.json` (by path and line
text, so a line stays given when an edit moves it): a later recall of that session leaves them out and
fills the budget with what is new. The same file logs each time the session was given something (`log`:
`{at, kind, query, items: [{path, start_line, end_line}]}`, kind `recall` or the hook's `session-start`),
which the dashboard shows. Bounded: the newest MAX_GIVEN lines and MAX_LOG log entries per session, the
MAX_SESSIONS most recently used sessions.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from datetime import datetime, timezone
from typing import Any

import duckdb

from storage.errors import IndexBusy, NotFound
from storage.files.locks import FileLock, LockTimeout
from storage.files.workspace import Workspace, check_session_id
from storage.index.indexer import cited_lines
from storage.index.tokenize import terms, tokens
from storage.search.relevance import QueryTerms, relevant
from storage.search.search import search
from storage.text import validity
from storage.text.facts import parse_line
from storage.text.instructions import FLAG, FRAME, neutralise
from storage.text.model import DIALOG

PER_FILE = 2  # passages of one file among the candidates
MAX_POOL = 400  # most search hits one recall looks through
DEEPER = 4  # times more hits looked through while the budget is not full
FOLLOW = 1  # non-blank lines kept after each matching line
PIECE_TOKENS = 200  # most tokens of one piece (a longer one is cut)
MIN_TOKENS = 16  # a piece smaller than this would not fit a useful header and line: packing stops below it
MAX_GIVEN = 20_000  # line keys remembered per session (the newest)
MAX_LOG = 200  # times a session was given something, logged per session (the newest)
MAX_SESSIONS = 1_000  # session files kept (the most recently used)
FOLDER = "metadata/recall"
LOCK = "recall.lock"  # in metadata/


@dataclass
class Piece:
    path: str
    lines: list[tuple[int, str]]  # (line number, text)
    when: str | None  # what its citation says of its time (storage/text/validity.label)
    score: float  # the hit's fused search score
    weight: float  # how much of the query its lines carry
    rank: int  # the hit's place in the search results

    @property
    def start_line(self) -> int:
        return self.lines[0][0]

    @property
    def end_line(self) -> int:
        return self.lines[-1][0]

    @cached_property
    def _shown(self) -> list[tuple[str, bool]]:
        """Each line as it may be put before a model and whether an instruction was left out of it
        (storage/text/instructions.neutralise: memory is quoted as data); worked out once for `render` and `flags`."""
        return [neutralise(text, f"{self.path}:{n}") for n, text in self.lines]

    def render(self) -> str:
        """`[path:start-end] when` and its lines, each that reads as an instruction neutralised."""
        where = f"{self.path}:{self.start_line}" + (f"-{self.end_line}" if self.end_line != self.start_line else "")
        head = f"[{where}]" + (f" {self.when}" if self.when else "")
        return head + "\n" + "\n".join(text for text, _ in self._shown)

    @property
    def flags(self) -> list[str]:
        return [FLAG] if any(flagged for _, flagged in self._shown) else []


def recall(con: duckdb.DuckDBPyConnection, ws: Workspace, query: str, budget: int, given: set[str] | None = None,
           vectors: Any = None, min_score: float | None = None, min_relevance: float | None = None,
           min_words: int | None = None, **filters: Any) -> tuple[dict, list[str]]:
    """(answer, keys of the lines it gives) for `query` within `budget` tokens, leaving out lines whose key is
    in `given`. `filters` go to `search` (start_date, end_date, tags, path_prefix). With `min_score`,
    `min_relevance` or `min_words`, the answer is empty unless a piece it gives comes from a hit that reaches
    them (storage/search/relevance.py: a keyword score, a share of the query's weight, distinct words of the query, in
    numbers that mean the same at any size of the memory; with `vectors`, one word and a meaning that close):
    evidence only when there is something that relevant not given before (then the budget is filled as without
    them). When what is left does not fill the budget (a session given much already), the search goes deeper, up
    to MAX_POOL hits."""
    given = given or set()
    query_terms = QueryTerms.of(con, query)
    weights = query_terms.weights()
    pool = min(MAX_POOL, max(10, budget // 40))
    candidates = _Candidates(con, ws, weights, given, history=bool(filters.get("history")))
    searched = 0  # the limit of the last search
    while True:
        if pool > searched:  # one search for this pool and the next: it costs about the same for 4x the hits
            searched = min(MAX_POOL, DEEPER * pool)
            candidates.hits = search(con, query, limit=searched, expand=0, vectors=vectors, per_file=PER_FILE,
                                     **filters)
        hits = candidates.hits[:pool]
        chosen, used, withheld = _pack(candidates, len(hits), budget - FRAMED)
        if budget - used < MIN_TOKENS or len(hits) < pool or pool >= MAX_POOL:
            break
        pool = min(MAX_POOL, DEEPER * pool)
    if (min_score, min_relevance, min_words) != (None, None, None) and not relevant(
            con, query_terms, list(dict.fromkeys(hits[p.rank]["chunk_id"] for p, _ in chosen)), min_score,
            min_relevance, min_words, vectors):
        chosen = []  # nothing new that relevant: what fills the budget would be the weaker matches alone
    answer = framed([text for _, text in chosen])
    items = [{"path": p.path, "start_line": p.start_line, "end_line": p.end_line,
              **{k: hits[p.rank].get(k) for k in ("date", "status", "valid_from", "valid_to")},
              "score": p.score, "tokens": tokens(text), "flags": p.flags} for p, text in chosen]
    keys = [line_key(p.path, text) for p, _ in chosen for _, text in p.lines]
    return {"query": query, "budget": budget, "tokens": tokens(answer), "text": answer, "items": items,
            "withheld": withheld}, keys


def merge(own: str, parts: list[tuple[str, dict]], budget: int, given: set[str]) -> tuple[dict, list[str]]:
    """One answer within `budget` from the answers of several workspaces (`parts`: (workspace, answer), the
    caller's workspace `own` among them): their pieces ranked together by score (ties: in `parts` order, then
    each answer's order), each cited with its workspace (`NAME:path:start-end` for another workspace's), taken
    while they fit; pieces all of whose lines are in `given` are left out. The keys of the lines given."""
    pieces = []
    for order, (workspace, answer) in enumerate(parts):
        texts = answer["text"].removeprefix(FRAME + "\n\n").split("\n\n") if answer["text"] else []  # no piece
        # holds a blank line (a record's words are one line, `_lines`)
        for place, (item, text) in enumerate(zip(answer["items"], texts)):
            head, _, body = text.partition("\n")
            keys = [line_key(item["path"], line) for line in body.split("\n")]
            if given.issuperset(keys):
                continue
            if workspace != own:
                head = f"[{workspace}:{head[1:]}"
            text = f"{head}\n{body}"
            pieces.append((-(item.get("score") or 0), order, place,
                           {**item, "workspace": workspace, "tokens": tokens(text)}, text, keys))
    chosen, used = [], FRAMED
    for piece in sorted(pieces, key=lambda p: p[:3]):
        cost = tokens(piece[4]) + (1 if chosen else 0)
        if used + cost <= budget:  # the frame's cost counted from the start
            chosen.append(piece)
            used += cost
    text = framed([p[4] for p in chosen])
    behind = next((a["index_behind"] for _, a in parts if a.get("index_behind")), None)
    answer = {"query": parts[0][1]["query"], "budget": budget, "tokens": tokens(text), "text": text,
              "items": [p[3] for p in chosen], "withheld": sum(a.get("withheld", 0) for _, a in parts)}
    return ({**answer, "index_behind": behind} if behind else answer), [k for p in chosen for k in p[5]]


def framed(pieces: list[str]) -> str:
    """The answer's text: the pieces under the FRAME line that quotes them as memory, not instructions ("" for
    none). The frame costs FRAMED tokens of the budget."""
    return "\n\n".join([FRAME, *pieces]) if pieces else ""


FRAMED = tokens(FRAME) + 1  # the frame line and the blank line after it


class _Candidates:
    """The search hits of one recall (`hits`, best first) and the pieces of each, worked out when packing
    first reaches the hit and kept for a deeper pass (each file read once per recall)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, ws: Workspace, weights: dict[str, float], given: set[str],
                 history: bool = False):
        self.con, self.ws, self.weights, self.given, self.history = con, ws, weights, given, history
        self.hits: list[dict] = []
        self.files: dict[str, list[str]] = {}
        self.done: dict[tuple[int, int], tuple[list[Piece], int]] = {}  # (rank, chunk id) -> pieces, withheld
        self.answered: dict[int, tuple[str, frozenset[str]]] = {}  # chunk id -> `_answers`

    def pieces(self, rank: int) -> tuple[list[Piece], int]:
        """(pieces of hit `rank`, best first; lines it left out as given)."""
        hit = self.hits[rank]
        key = (rank, hit["chunk_id"])
        if key not in self.done:
            if hit["path"] not in self.files:
                self.files[hit["path"]] = _lines(self.con, self.ws, hit["path"])
            self.done[key] = _pieces(hit, rank, self.weights, self.given, self.files[hit["path"]])
        return self.done[key]

    def said_before(self, piece: Piece, n: int) -> bool:
        """Whether `piece`, lines of a conversation, holds query words that a fact among the first `n` hits, dated
        after the day they were said, holds all of: what was said before about what the question asks, which a
        later fact answers (a statement no card kept, "Biscuit sees Dr. Haines", after "We took Biscuit to a new
        vet, Dr. Moreau"). The fact is what holds; the older words are left to `read`, `--as-of` and `--history`."""
        day = self.hits[piece.rank].get("date")
        words = self._words(" ".join(text for _, text in piece.lines))
        if self.history or not piece.path.startswith(DIALOG) or not day or not words:
            return False
        for hit in self.hits[:n]:
            if hit["chunk_id"] not in self.answered:
                self.answered[hit["chunk_id"]] = _answers(hit, self._words)
            since, held = self.answered[hit["chunk_id"]]
            if since > day and held >= words:
                return True
        return False

    def _words(self, text: str) -> frozenset[str]:
        return frozenset(t for t in terms(text) if self.weights.get(t, 0.0) > 0)


def _answers(hit: dict, words) -> tuple[str, frozenset[str]]:
    """(the day from which hit holds, the query words it holds) of a fact hit that holds now; ("", {}) for any
    other hit. A fact's words are its sentence and subject, not its fields and links."""
    fact = parse_line(hit["text"]) if "\n" not in hit["text"].strip() else None
    since = hit.get("valid_from") or hit.get("date") or ""
    if fact is None or hit["path"].startswith(DIALOG) or hit.get("status") not in (None, "current"):
        return "", frozenset()
    return since, words(" ".join(filter(None, (fact.text, fact.about))))


def _lines(con: duckdb.DuckDBPyConnection, ws: Workspace, path: str) -> list[str | None]:
    """A hit's file as recall reads it, by line (None: a line it never gives). A conversation's records read as
    what was said (`speaker: text`, storage/index/chunking.said); a record a card fact cites, or that echoes one
    (storage/index/chunking.echoes), is left out (the fact says it, and search gives the fact), as is one that says
    nothing (a tool call)."""
    from storage.files.text_view import text_lines

    try:
        lines: list[str | None] = list(text_lines(path, ws.read_bytes(path)))
    except (NotFound, OSError, ValueError):  # gone or changed to something unreadable since it was indexed
        return []
    if not path.startswith(DIALOG):
        return lines
    from storage.index.chunking import echoes, said  # a conversation's records (the chunker's marko import, only then)

    cited = cited_lines(con, [path]).get(path, set())
    records = []
    for n, line in enumerate(lines, 1):
        try:
            message = said(json.loads(line)) if line.strip() else None
        except ValueError:
            message = None
        lines[n - 1] = None
        if message:
            records.append((n, *message))
    cited |= echoes(records, cited)
    for n, speaker, text in records:
        if n not in cited:
            lines[n - 1] = f"{speaker}: {' '.join(text.split())}"  # one line, as the record is
    return lines


def _pack(candidates: _Candidates, n: int, budget: int) -> tuple[list[tuple[Piece, str]], int, int]:
    """(pieces with their text, tokens used, lines withheld as given in the hits looked at) from the first `n`
    hits: every hit's best piece first, in search order, then their other pieces, each if it still fits; in
    the answer a file's pieces stay together. Once the budget is full, later hits are not looked at."""
    chosen: list[tuple[Piece, str]] = []
    taken: dict[str, set[int]] = {}
    rests: list[Piece] = []
    used = withheld = 0

    def take(piece: Piece) -> None:
        nonlocal used
        if taken.get(piece.path, set()) & {n for n, _ in piece.lines}:
            return  # overlapping chunks of one file: said once
        text = piece.render()
        cost = tokens(text) + (1 if chosen else 0)  # the blank line between pieces: "\n\n" is 1 token
        if used + cost > budget:
            return
        chosen.append((piece, text))
        taken.setdefault(piece.path, set()).update(n for n, _ in piece.lines)
        used += cost

    for rank in range(n):
        if budget - used < MIN_TOKENS:
            break
        pieces, held = candidates.pieces(rank)
        withheld += held
        pieces = [p for p in pieces if not candidates.said_before(p, n)]
        if pieces:
            take(pieces[0])
            rests += pieces[1:]
    for piece in rests:
        if budget - used < MIN_TOKENS:
            break
        take(piece)
    chosen.sort(key=lambda c: (c[0].rank, c[0].start_line))  # in search order, a file's pieces together
    return chosen, used, withheld


def _pieces(hit: dict, rank: int, weights: dict[str, float], given: set[str], lines: list[str | None]
            ) -> tuple[list[Piece], int]:
    """The pieces of one hit, best first, without lines in `given` (and how many lines that left out)."""
    path = hit["path"]
    rows = [(n, lines[n - 1]) for n in range(hit["start_line"], min(hit["end_line"], len(lines)) + 1)
            if lines[n - 1] is not None]
    fresh = [(n, text) for n, text in rows if text.strip() and line_key(path, text) not in given]
    held = sum(1 for _, text in rows if text.strip()) - len(fresh)
    scored = [(sum(weights.get(t, 0.0) for t in set(terms(text))), n, text) for n, text in rows if text.strip()]
    best = max((s for s, _, _ in scored), default=0.0)
    if best <= 0:  # matched by meaning, not by words: its first lines
        return _grouped(path, fresh[:3], hit, rank, {})[:1], held
    new = {n for n, _ in fresh}
    scored = [(s, n, text) for s, n, text in scored if n in new]
    picked = {n for s, n, _ in scored if s >= best / 2}
    following = [n for n, _ in fresh]
    for n in sorted(picked):  # each with the next line: in a dialogue the answer follows the question
        later = [m for m in following if m > n][:FOLLOW]
        picked.update(later)
    chosen = [(n, text) for n, text in fresh if n in picked]
    pieces = _grouped(path, chosen, hit, rank, {n: s for s, n, _ in scored})
    pieces.sort(key=lambda p: -p.weight)
    return pieces, held


def _grouped(path: str, lines: list[tuple[int, str]], hit: dict, rank: int, score_of: dict[int, float]) -> list[Piece]:
    """Pieces of `lines` (numbered, in order): lines at most one blank line apart go together, up to
    PIECE_TOKENS a piece; a longer line is cut."""
    groups: list[list[tuple[int, str]]] = []
    size = 0
    for n, text in lines:
        text = _clip(text, PIECE_TOKENS)
        cost = tokens(text) + 1
        if groups and n - groups[-1][-1][0] <= 2 and size + cost <= PIECE_TOKENS:
            groups[-1].append((n, text))
            size += cost
        else:
            groups.append([(n, text)])
            size = cost
    return [Piece(path, group, validity.label(hit), hit["score"], max(score_of.get(n, 0.0) for n, _ in group), rank)
            for group in groups]



def _clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` tokens, marked with […] when cut."""
    if tokens(text) <= limit:
        return text
    keep, used = 0, 0.0
    for ch in text:
        used += 0.25 if ch.isascii() else 1
        if used > limit - 2:
            break
        keep += 1
    return text[:keep] + " […]"


def line_key(path: str, text: str) -> str:
    """What identifies a given line: its file and its text."""
    return hashlib.blake2b(f"{path}\n{text}".encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()


# ---- what each session was given --------------------------------------------------------------------------

def given(ws: Workspace, session: str) -> set[str]:
    """The line keys `session` was given (empty for a new session or an unreadable file)."""
    return set(_record(ws, _file(session)).get("given", []))


def sessions(ws: Workspace, limit: int = 100) -> list[dict]:
    """The sessions given something, most recently first: `{session, at, lines, times}` (`lines` given,
    `times` logged)."""
    try:
        with os.scandir(ws.root / FOLDER) as entries:
            files = sorted(((e.stat().st_mtime, e.name) for e in entries if e.name.endswith(".json")), reverse=True)
    except OSError:
        return []
    rows = []
    for _, name in files[:limit]:
        record = _record(ws, f"{FOLDER}/{name}")
        log = record.get("log", [])
        rows.append({"session": name.removesuffix(".json"), "at": log[-1].get("at") if log else None,
                     "lines": len(record.get("given", [])), "times": len(log)})
    return rows


def log(ws: Workspace, session: str) -> list[dict]:
    """What `session` was given, each time (`{at, kind, query, items}`), newest first."""
    return [e for e in reversed(_record(ws, _file(session)).get("log", [])) if isinstance(e, dict)]


def _record(ws: Workspace, rel: str) -> dict:
    """A session's record (`{}` when missing or unreadable)."""
    try:
        data = json.loads((ws.root / rel).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember(ws: Workspace, session: str, keys: list[str], kind: str = "recall", query: str | None = None,
             items: list[dict] | None = None) -> None:
    """Add `keys` to what `session` was given (newest MAX_GIVEN kept) and log the giving (`kind`, the `query`,
    the `items` cited: path, start_line, end_line); drop the least recently used sessions past MAX_SESSIONS.
    Serialised between processes by `metadata/recall.lock` (not the index lock: the session-start digest
    records what it showed without opening the index)."""
    from storage.index.db import lock_timeout

    rel = _file(session)
    if not keys:
        return
    folder = ws.root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "kind": kind, "query": query,
             "items": [{k: item.get(k) for k in ("path", "start_line", "end_line")} for item in items or []]}
    try:
        with FileLock(ws.metadata / LOCK).held(lock_timeout()):
            record = _record(ws, rel)
            merged = list(dict.fromkeys([*record.get("given", []), *keys]))[-MAX_GIVEN:]
            log = [*record.get("log", []), entry][-MAX_LOG:]
            ws.write_text(rel, json.dumps({"session": session, "given": merged, "log": log}))
            with os.scandir(folder) as entries:
                names = [e.name for e in entries if e.name.endswith(".json")]
            if len(names) <= MAX_SESSIONS:
                return  # the common case: no file's age needed
            sessions = sorted((folder / name for name in names), key=lambda p: p.stat().st_mtime)
            for stale in sessions[:len(sessions) - MAX_SESSIONS]:
                stale.unlink(missing_ok=True)
    except LockTimeout:
        raise IndexBusy(f"what sessions were given ({FOLDER}) is locked by another process") from None


def _file(session: str) -> str:
    return f"{FOLDER}/{check_session_id(session)}.json"
