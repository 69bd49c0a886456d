"""Cut files into searchable chunks, each with its exact 1-based line range in the original file.

Markdown is chunked by structure, over the block outline of storage/text/outline.py (`parse_blocks`).

Chunking a Markdown body (`chunk_markdown`):
- headings at the top level make a section tree; a section that fits `max_chars` is one chunk, never cut;
- a section that does not fit is cut into its own blocks and its subsections (each handled the same way);
  neighbouring pieces that belong to the same section are packed greedily up to `max_chars`, so small
  sibling sections share a chunk (its `headings` is then the parent's skeleton);
- a block that does not fit alone is cut by its structure: lists by item (an item too big by its own
  blocks), quotes by their blocks, tables by rows with the header and delimiter rows repeated in every piece,
  fenced code by lines with the opening and closing fence repeated; anything else (a long paragraph,
  indented code, HTML) by a greedy line split, each piece ending in a `[Part i/N]` line; a single line
  longer than the limit is cut at a sentence end or a space, never inside a `[[wikilink]]`.
- chunk text is the source lines of its range, joined by "\\n" (a CR before it dropped), plus only those
  repeated headers, fences and `[Part i/N]` markers; ancestor headings are not copied into the text: they
  are in `Chunk.headings`. Blank-only pieces are never emitted.
- a fact line (a one-line top-level list item storage/text/facts.py reads as a fact) is a chunk of its own, never
  packed with its neighbours: its text is the line, its headings its section skeleton, its `search_text` the
  fact's sentence, its `about` and the sentences of the facts it replaced (`replaced_by` it, in this file, and
  theirs in turn: a change often drops the subject the old fact named, "I switched to Wednesdays" for "I go to
  the gym on Mondays"), as retrieval keys only (`fact_windows`: its `since`/`until` as `valid_from`/`valid_to`); a section
  holding facts is never one chunk whole, and in a file with facts a chunk of headings alone is not emitted
  (the fact chunks carry those headings). A body without facts is chunked exactly as without this rule.

`.jsonl` files are chunked by records (`chunk_jsonl`); other text by size with a small line overlap
(`chunk_text`).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from storage.index.tokenize import terms
from storage.search.timeref import local_date
from storage.text.facts import SOURCES, Fact, parse_line
from storage.text.model import Chunk, split_lines
from storage.text.outline import Block, Outline, parse_blocks, trim

MAX_CHARS = 1500  # default chunk size in characters (tuned with the LoCoMo retrieval benchmark)
TEXT_OVERLAP_LINES = 2  # lines repeated between consecutive chunks of plain text files
_MARKER_ROOM = len("\n[Part 999/999]")

_WIKILINK = re.compile(r"\[\[[^\[\]\n]+?\]\]")
_CLOSING_FENCE = re.compile(r"^[ \t>]*(?:[-*+]\s+)?(`{3,}|~{3,})[ \t]*$")
_OPENING_FENCE = re.compile(r"(`{3,}|~{3,})")

# ---------------------------------------------------------------------------------------------- pieces


class _Piece:
    """Part of a chunk: lines start..end, or an explicit `body` (with a cut line), between synthetic text."""

    __slots__ = ("start", "end", "prefix", "body", "suffix", "joins_prev", "group", "headings", "heading_only",
                 "fact")

    def __init__(self, start, end, prefix="", body=None, suffix="", joins_prev=True):
        self.start, self.end = start, end
        self.prefix, self.body, self.suffix = prefix, body, suffix
        self.joins_prev = joins_prev and not prefix  # may follow other lines in one chunk
        self.group = self.headings = None
        self.heading_only = False
        self.fact: Fact | None = None  # a fact line: a chunk of its own


class _Lines:
    """Body lines with O(1) lengths of line ranges, and the body's fact lines."""

    def __init__(self, lines: list[str], facts: dict[int, Fact] | None = None, headings: set[int] | None = None,
                 keys: dict[str, str] | None = None):
        self.lines = lines
        self.keys = keys or {}  # fact id -> the words of the facts it replaced (retrieval keys)
        self.offsets = [0]
        total = 0
        for line in lines:
            total += len(line) + 1
            self.offsets.append(total)
        self.facts = facts or {}  # 0-based line -> the fact it holds
        self.fact_lines = sorted(self.facts)
        self.heading_lines = headings or set()

    def only_headings(self, p: _Piece) -> bool:
        """Whether a piece holds nothing but headings and blank lines."""
        return p.body is None and all(i in self.heading_lines or not self.lines[i].strip()
                                      for i in range(p.start, p.end + 1))

    def holds_fact(self, a: int, b: int) -> bool:
        """Whether lines a..b hold a fact line."""
        at = bisect_right(self.fact_lines, b) - 1
        return at >= 0 and self.fact_lines[at] >= a

    def size(self, a: int, b: int) -> int:
        return self.offsets[b + 1] - self.offsets[a] - 1 if b >= a else 0

    def text(self, a: int, b: int) -> str:
        return "\n".join(self.lines[a : b + 1])

    def piece_size(self, p: _Piece) -> int:
        body = len(p.body) if p.body is not None else self.size(p.start, p.end)
        return len(p.prefix) + body + len(p.suffix)

    def piece_text(self, p: _Piece) -> str:
        return p.prefix + (p.body if p.body is not None else self.text(p.start, p.end)) + p.suffix


def _cut_line(line: str, budget: int, first_budget: int | None = None) -> list[str]:
    """Cut one long line into pieces of at most `budget` characters (the first at most `first_budget`).

    Cuts after a sentence end if one lies in the second half of the window, else after a space or comma,
    else at the limit; a cut never falls inside a `[[wikilink]]` (a longer link stays whole). The pieces
    concatenate to the line.
    """
    links = [m.span() for m in _WIKILINK.finditer(line)] if "[[" in line else []
    link_starts = [a for a, _ in links]
    out: list[str] = []
    pos = 0
    window = first_budget or budget
    while len(line) - pos > window:
        lo, hi = pos + window // 2, pos + window
        cut = -1
        for seps in ((". ", "! ", "? ", "。", "！", "？", "; ", "；"), (" ", "\t", "，", "、", ", ")):
            for sep in seps:
                i = line.rfind(sep, lo, hi)
                if i >= 0:
                    cut = max(cut, i + len(sep))
            if cut > pos:
                break
        if cut <= pos:
            cut = hi
        k = bisect_right(link_starts, cut - 1) - 1
        if k >= 0 and cut < links[k][1]:  # inside a wikilink: cut before it, or after it if it starts here
            cut = links[k][0] if links[k][0] > pos else links[k][1]
        out.append(line[pos:cut])
        pos = cut
        window = budget
    out.append(line[pos:])
    return out


def _pack_lines(lines: list[str], budget: int, first_budget: int | None = None):
    """Greedy groups of lines of at most `budget` characters (the first group at most `first_budget`).

    Yields (first, last, text, at_line_start): `text` is None for whole lines first..last, else the
    group's text, which holds a piece of a line longer than `budget` (the tail of one such line may start
    a group: then `at_line_start` is False).
    """
    budget = max(budget, 20)
    limit = budget if first_budget is None else max(min(first_budget, budget), 0)
    out: list[tuple[int, int, str | None, bool]] = []
    first, parts, size, whole, at_start = -1, [], 0, True, True

    def flush(last: int) -> None:
        nonlocal first, limit
        if first >= 0:
            out.append((first, last, None if whole else "\n".join(parts), at_start))
        first, limit = -1, budget

    for i, line in enumerate(lines):
        room = limit - size - 1 if first >= 0 else limit
        if len(line) <= room:
            if first < 0:
                first, parts, size, whole, at_start = i, [line], len(line), True, True
            else:
                parts.append(line)
                size += 1 + len(line)
            continue
        if len(line) <= budget:
            flush(i - 1)
            first, parts, size, whole, at_start = i, [line], len(line), True, True
            continue
        if room < max(20, budget // 4):
            flush(i - 1)
            room = limit if limit >= 20 else budget
        pieces = _cut_line(line, budget, room)
        if first >= 0:
            parts.append(pieces[0])
            whole = False
            flush(i)
        else:
            out.append((i, i, pieces[0], True))
            limit = budget
        out.extend((i, i, piece, False) for piece in pieces[1:-1])
        first, parts, size, whole, at_start = i, [pieces[-1]], len(pieces[-1]), False, False
    flush(len(lines) - 1)
    return out


def _part_pieces(src: _Lines, a: int, b: int, max_chars: int, lead: int = 0) -> list[_Piece]:
    """The last resort: lines a..b packed greedily, each piece marked `[Part i/N]`."""
    a, b = trim(src.lines, a, b)
    if a > b:
        return []
    budget = max_chars - _MARKER_ROOM
    groups = _pack_lines(src.lines[a : b + 1], budget, budget - lead if lead else None)
    if len(groups) == 1 and groups[0][2] is None:
        return [_Piece(a, b)]
    n = len(groups)
    return [
        _Piece(a + i, a + j, body=text, suffix=f"\n[Part {k}/{n}]", joins_prev=at_start)
        for k, (i, j, text, at_start) in enumerate(groups, 1)
    ]


def _fence_pieces(src: _Lines, block: Block, max_chars: int, lead: int = 0) -> list[_Piece]:
    """A long fenced code block cut by lines, each piece opened and closed by the fence."""
    lines = src.lines
    opening = lines[block.start]
    m = _OPENING_FENCE.search(opening)
    closed = block.end > block.start and _CLOSING_FENCE.match(lines[block.end]) is not None
    closing = lines[block.end] if closed else (m.group(1) if m else "```")
    last = block.end - 1 if closed else block.end
    if last <= block.start:
        return _part_pieces(src, block.start, block.end, max_chars, lead)
    open_text, close_text = opening.lstrip(" ") + "\n", "\n" + closing.lstrip(" ")
    budget = max_chars - len(open_text) - len(close_text)
    groups = _pack_lines(lines[block.start + 1 : last + 1], budget, budget - lead if lead else None)
    pieces = []
    for k, (i, j, text, at_start) in enumerate(groups):
        i, j = i + block.start + 1, j + block.start + 1
        head, tail = k == 0, k == len(groups) - 1 and closed
        piece = _Piece(
            block.start if head else i,
            block.end if tail else j,
            prefix="" if head else open_text,
            suffix="" if tail else close_text,
        )
        if text is not None:
            piece.body = (opening + "\n" if head else "") + text + ("\n" + closing if tail else "")
            piece.joins_prev = head
        pieces.append(piece)
    return pieces


def _table_pieces(src: _Lines, block: Block, max_chars: int, lead: int = 0) -> list[_Piece]:
    """A long table cut by rows, the header and delimiter rows repeated in every piece."""
    if not block.rows:
        return _part_pieces(src, block.start, block.end, max_chars, lead)
    head_end = block.rows[0] - 1
    header = src.text(block.start, head_end) + "\n"
    budget = max_chars - len(header)
    groups = _pack_lines(src.lines[head_end + 1 : block.end + 1], budget, budget - lead if lead else None)
    pieces = []
    for k, (i, j, text, at_start) in enumerate(groups):
        i, j = i + head_end + 1, j + head_end + 1
        piece = _Piece(block.start if k == 0 else i, j, prefix="" if k == 0 else header)
        if text is not None:
            piece.body = (header if k == 0 else "") + text
            piece.joins_prev = k == 0
        pieces.append(piece)
    return pieces


def _block_pieces(src: _Lines, block: Block, max_chars: int, lead: int = 0) -> list[_Piece]:
    """One piece for a block that fits, else the pieces of its structure (see the module docstring).

    `lead`: characters of a heading waiting to join the first piece of a block that is cut anyway.
    """
    if block.start in src.facts and block.kind == "item":
        piece = _Piece(block.start, block.end, joins_prev=False)
        piece.fact = src.facts[block.start]
        return [piece]
    if src.size(block.start, block.end) <= max_chars and not src.holds_fact(block.start, block.end):
        return [_Piece(block.start, block.end)]
    if block.kind == "table":
        return _table_pieces(src, block, max_chars, lead)
    if block.kind == "fence":
        return _fence_pieces(src, block, max_chars, lead)
    if block.children:
        pieces = []
        for k, child in enumerate(block.children):
            gap = src.size(block.start, child.start - 1) + 1 if child.start > block.start else 0
            pieces.extend(_block_pieces(src, child, max_chars, lead + gap if k == 0 and lead else 0))
        if pieces and pieces[0].joins_prev:
            pieces[0].start = min(pieces[0].start, block.start)  # keep a line holding only the list marker
        return pieces
    return _part_pieces(src, block.start, block.end, max_chars, lead)


@dataclass
class _Section:
    headings: tuple[str, ...]
    level: int
    start: int
    end: int = 0
    blocks: list[Block] = field(default_factory=list)
    children: list[_Section] = field(default_factory=list)


def _sections(outline: Outline) -> _Section:
    """The section tree of the top-level headings; the root holds what precedes the first heading."""
    root = _Section((), 0, 0)
    stack = [root]
    for b in outline.blocks:
        if b.kind == "heading":
            while stack[-1].level >= b.level:
                stack.pop()
            section = _Section(stack[-1].headings + (b.title,), b.level, b.start)
            stack[-1].children.append(section)
            stack.append(section)
        stack[-1].blocks.append(b)

    def close(s: _Section, end: int) -> None:
        s.end = end
        for k, child in enumerate(s.children):
            close(child, s.children[k + 1].start - 1 if k + 1 < len(s.children) else end)

    close(root, len(outline.lines) - 1)
    return root


def _section_pieces(
    src: _Lines, s: _Section, parent: _Section | None, max_chars: int, lead_start: int | None = None
) -> list[_Piece]:
    """Pieces of a section: itself whole when it fits, else its blocks and subsections.

    `lead_start`: first line of headings (of enclosing sections with no text of their own) waiting to join
    this section's first piece.
    """
    a, b = trim(src.lines, s.start, s.end)
    if a > b:
        return []
    if src.size(a, b) <= max_chars and not src.holds_fact(a, b):
        piece = _Piece(a, b)
        piece.group, piece.headings = parent or s, s.headings
        return [piece]

    def lead(at: int) -> int:
        return 0 if lead_start is None else src.size(lead_start, at - 1) + 1

    pieces = []
    for k, block in enumerate(s.blocks):
        if k == 0 and block.kind == "heading" and src.size(block.start, block.end) <= max_chars:
            block_pieces = [_Piece(block.start, block.end)]
            block_pieces[0].heading_only = True
            lead_start = block.start if lead_start is None else lead_start
        else:
            block_pieces = _block_pieces(src, block, max_chars, lead(block.start))  # a heading too long: cut
            lead_start = None
        for piece in block_pieces:
            piece.group, piece.headings = s, s.headings
        pieces.extend(block_pieces)
    for child in s.children:
        pieces.extend(_section_pieces(src, child, s, max_chars, lead_start))
        lead_start = None
    return pieces


def _pack(src: _Lines, pieces: list[_Piece], first_line: int, max_chars: int, fact_windows: bool = False
          ) -> list[Chunk]:
    """Join neighbouring pieces of the same section (or after a lone heading) while they fit; make chunks."""
    chunks: list[Chunk] = []
    cur: _Piece | None = None

    def flush(p: _Piece) -> None:
        if p.fact is not None:
            chunks.append(_fact_chunk(src, p, first_line, fact_windows))
            return
        if src.facts and (src.only_headings(p) or p.headings[-1:] == (SOURCES,)):
            return  # headings alone: the fact chunks under them carry them; a fact file's source list: links
        text = src.piece_text(p)
        if text.strip():
            chunks.append(Chunk(text, p.start + first_line, p.end + first_line, p.headings))

    for p in pieces:
        if (
            cur is not None
            and cur.fact is None
            and (cur.group is p.group or cur.heading_only)
            and cur.body is None
            and not cur.suffix
            and p.joins_prev
            and len(cur.prefix) + src.size(cur.start, p.start - 1) + 1 + src.piece_size(p) <= max_chars
        ):
            joined = _Piece(cur.start, p.end, cur.prefix, None, p.suffix)
            if p.body is not None:
                joined.body = src.text(cur.start, p.start - 1) + "\n" + p.body
            if cur.heading_only:
                joined.group, joined.headings, joined.heading_only = p.group, p.headings, p.heading_only
            else:
                joined.group, joined.headings = cur.group, cur.group.headings
            cur = joined
            continue
        if cur is not None:
            flush(cur)
        cur = p
    if cur is not None:
        flush(cur)
    return chunks


def _fact_chunk(src: _Lines, p: _Piece, first_line: int, fact_windows: bool) -> Chunk:
    """The chunk of one fact line (see the module docstring)."""
    fact = p.fact
    return Chunk(src.piece_text(p), p.start + first_line, p.end + first_line, p.headings,
                 search_text="\n".join(filter(None, (fact.text, fact.about, src.keys.get(fact.id)))),
                 valid_from=fact.since if fact_windows else None, valid_to=fact.until if fact_windows else None,
                 fact_id=fact.id or None, cites=fact.sources)


REPLACED_KEYS = 4  # most replaced facts whose words a fact takes as keys (its chain back, newest first)


def _replaced_keys(facts: dict[int, Fact], path: str | None) -> dict[str, str]:
    """{fact id: the sentences of the facts it replaced, newest first}: a history fact's `replaced_by` link to
    a fact of this file (`path#^id`, or `#^id`) makes its sentence (and its own predecessors') the successor's."""
    before: dict[str, list[Fact]] = {}
    for fact in facts.values():
        target, _, anchor = (fact.replaced_by or "").partition("#")
        if anchor.startswith("^") and (not target or path is None or target in (path, path.removesuffix(".md"))):
            before.setdefault(anchor[1:], []).append(fact)
    keys: dict[str, str] = {}
    for fact_id in before:
        chain, todo, seen = [], list(before[fact_id]), {fact_id}
        while todo and len(chain) < REPLACED_KEYS:
            old = todo.pop(0)
            if old.id in seen:
                continue
            seen.add(old.id)
            chain.append(" ".join(filter(None, (old.text, old.about))))
            todo += before.get(old.id, [])
        keys[fact_id] = "\n".join(chain)
    return keys


def _facts(outline: Outline) -> dict[int, Fact]:
    """{0-based line: fact} of the one-line items of top-level lists that are fact lines."""
    return {item.start: fact for block in outline.blocks if block.kind == "list" for item in block.children
            if item.start == item.end and (fact := parse_line(outline.lines[item.start])) is not None}


def chunk_markdown(
    body: str, first_line: int = 1, max_chars: int = MAX_CHARS, outline: Outline | None = None,
    fact_windows: bool = False, path: str | None = None,
) -> list[Chunk]:
    """Structure-aware chunks of a Markdown body whose first line is line `first_line` of its file.

    Pass the `outline` from `parse_blocks(body)` when you already have one. `fact_windows`: fact chunks take
    their fact's `since`/`until` as their validity (a digest node's facts). `path`: the file's, to tell the
    `replaced_by` links that point into it.
    """
    outline = outline or parse_blocks(body)
    if not outline.blocks:
        return []
    facts = _facts(outline)
    src = _Lines(outline.lines, facts, {b.start for b in outline.blocks if b.kind == "heading"} if facts else None,
                 _replaced_keys(facts, path) if facts else None)
    root = _sections(outline)
    while not root.blocks and len(root.children) == 1:  # a document under one title is that section
        root = root.children[0]
    return _pack(src, _section_pieces(src, root, None, max_chars), first_line, max_chars, fact_windows)


# ---------------------------------------------------------------------------------------------- other files


def _record_text(value, key: str = "", out: list[str] | None = None) -> list[str]:
    """Readable lines of a JSON record: `key.sub: value`, strings unescaped, nulls and empties left out."""
    out = [] if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            _record_text(v, f"{key}.{k}" if key else str(k), out)
    elif isinstance(value, list):
        if all(not isinstance(v, (dict, list)) for v in value):
            items = [v if isinstance(v, str) else json.dumps(v) for v in value if v is not None]
            if items:
                out.append(f"{key}: {', '.join(items)}" if key else ", ".join(items))
        else:
            for v in value:
                _record_text(v, key, out)
    elif value is not None and value != "":
        text = value if isinstance(value, str) else json.dumps(value)
        out.append(f"{key}: {text}" if key else text)
    return out


TEXT_BLOCKS = {None, "text", "input_text", "output_text"}  # content blocks that are what was said


def said(record) -> tuple[str, str] | None:
    """(speaker, text) of a conversation record (`{role, content}`, storage/files/dialog.py): the text of its content
    (a string, or its text blocks: tool calls, their inputs and results, thinking and media are not what was
    said), or None when it says nothing."""
    if not isinstance(record, dict):
        return None
    content = record.get("content")
    blocks = content if isinstance(content, list) else [content]
    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in TEXT_BLOCKS and isinstance(block.get("text"), str):
            parts.append(block["text"])
    text = "\n".join(p.strip() for p in parts if p.strip())
    return (str(record.get("role") or "user"), text) if text else None


ACKNOWLEDGING = "ok okay sure noted note got it great now thanks thank you understood perfect nice cool alright right yes"
_ACK = frozenset(terms(ACKNOWLEDGING))
ECHO_NEW_WORDS = 2  # words a reply may add to the line it echoes (acknowledging words aside), or as many as it repeats


def echoes(records: list[tuple[int, str, str]], cited: set[int]) -> set[int]:
    """Lines of `records` ((line, speaker, text), in order) that only echo a cited line: a message not the
    user's, right after the user's cited message, repeating some of its words and adding no more than
    ECHO_NEW_WORDS or as many as it repeats ("Noted, gym on Mondays and Thursdays.", "March 14 for Tomasz, I'll
    keep it in mind."), or saying its value back first (`says_back`): the fact citing the user's line says what
    it says. A reply adding more is its own."""
    found, last_user = set(), None
    for line, speaker, text in records:
        if speaker == "user":
            last_user = (line, set(terms(text))) if line in cited else None
            continue
        words = set(terms(text)) - _ACK
        shared = words & last_user[1] if last_user is not None else set()
        if shared and (len(words - shared) <= max(ECHO_NEW_WORDS, len(shared)) or says_back(text, last_user[1])):
            found.add(line)
    return found


def says_back(reply: str, said: set[str]) -> bool:
    """Whether `reply` opens with a clause made only of the terms `said` holds, acknowledging words aside
    (`April 12, plenty of time to train.` after `I signed up for the Lakeside half marathon on April 12.`): a
    reply that says the value back, then remarks on it."""
    opening = set(terms(re.split(r"[,.;:!?]|\s[-–—]\s", reply, maxsplit=1)[0])) - _ACK
    return bool(opening) and opening <= said


def chunk_jsonl(text: str, first_line: int = 1, max_chars: int = MAX_CHARS, dialog: bool = False) -> list[Chunk]:
    """Chunks of a JSON Lines file: whole records packed up to `max_chars`, each chunk's lines exact.

    A record's text is its fields as `key: value` lines (nested keys dotted, strings unescaped, so words
    and CJK text are searchable); a line that is not valid JSON is kept as it is. Records are separated by
    a blank line. A record longer than `max_chars` alone is split into `[Part i/N]` pieces.
    A conversation (`dialog`, session/dialog/*.jsonl) is indexed as what was said: each record `speaker: text`
    (`said`), records that say nothing (a tool call alone) left out, and the chunk's `search_text` the words
    said alone (no speaker, no JSON keys: "user" in a question matches no conversation for being one); a chunk
    holds the records of one day, its `valid_from` that day, so `as_of` an earlier day leaves it out.
    """
    records: list[tuple[int, str]] = []
    spoken: dict[int, tuple[str, str]] = {}  # line -> (speaker, what was said)
    said_on: dict[int, str] = {}  # line -> the day it was said (its `created_at`'s local day, as cards date it)
    for i, line in enumerate(split_lines(text)):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            value, rendered = None, line
        else:
            rendered = "\n".join(_record_text(value))
        if dialog and value is None:  # not a record (a write cut short): its text as it is
            spoken[i] = ("", line)
        elif dialog:
            message = said(value)
            if message is None:
                continue
            rendered, spoken[i] = f"{message[0]}: {message[1]}", message
            when = value.get("created_at")
            if isinstance(when, str) and (day := local_date(when)):
                said_on[i] = day
        records.append((i, rendered if rendered.strip() else line))

    chunks: list[Chunk] = []
    group: list[tuple[int, str]] = []
    size = 0
    day: str | None = None  # of the records in `group`

    def flush() -> None:
        if group:
            chunks.append(
                Chunk("\n\n".join(r for _, r in group), group[0][0] + first_line, group[-1][0] + first_line,
                      search_text="\n".join(spoken[i][1] for i, _ in group) if dialog else None,
                      said=tuple((i + first_line, *spoken[i]) for i, _ in group) if dialog else (),
                      valid_from=min((said_on[i] for i, _ in group if i in said_on), default=None))
            )
            group.clear()

    for i, rendered in records:
        if len(rendered) > max_chars:
            flush()
            lines = rendered.split("\n")
            parts = _pack_lines(lines, max_chars - _MARKER_ROOM)
            for k, (a, b, cut, _) in enumerate(parts, 1):
                body = cut if cut is not None else "\n".join(lines[a : b + 1])
                words = body[len(rendered) - len(spoken[i][1]) if k == 1 else 0:] if dialog else None  # no speaker
                chunks.append(Chunk(f"{body}\n[Part {k}/{len(parts)}]", i + first_line, i + first_line,
                                    search_text=words, said=((i + first_line, spoken[i][0], words),) if dialog else (),
                                    valid_from=said_on.get(i)))
            size = 0
            continue
        if group and (size + 2 + len(rendered) > max_chars or said_on.get(i, day) != day):  # a day a chunk
            flush()
            size = 0
        size += len(rendered) + (2 if group else 0)
        if not group:
            day = said_on.get(i)
        group.append((i, rendered))
    flush()
    return chunks


def chunk_text(
    text: str,
    first_line: int = 1,
    max_chars: int = MAX_CHARS,
    overlap: int = TEXT_OVERLAP_LINES,
    header_lines: int = 0,
) -> list[Chunk]:
    """Chunks of plain text by size: whole lines up to `max_chars`, consecutive chunks sharing `overlap` lines.

    `header_lines` (e.g. 1 for CSV) are repeated at the top of every later chunk. A line longer than
    `max_chars` is split into `[Part i/N]` pieces.
    """
    lines = split_lines(text)
    src = _Lines(lines)
    header = src.text(0, header_lines - 1) + "\n" if 0 < header_lines < len(lines) else ""
    chunks: list[Chunk] = []

    def emit(body: str, a: int, b: int) -> None:
        if body.strip():
            chunks.append(Chunk(body, a + first_line, b + first_line))

    i, n = 0, len(lines)
    while i < n:
        while i < n and not lines[i].strip():
            i += 1
        if i >= n:
            break
        prefix = header if header and i >= header_lines else ""
        budget = max(max_chars - len(prefix), 20)
        if len(lines[i]) > budget:
            parts = _cut_line(lines[i], budget - _MARKER_ROOM)
            for k, part in enumerate(parts, 1):
                emit(f"{prefix}{part}\n[Part {k}/{len(parts)}]", i, i)
            i += 1
            continue
        j = i
        while j + 1 < n and src.size(i, j + 1) <= budget:
            j += 1
        a, b = trim(lines, i, j)
        emit(prefix + src.text(a, b), a, b)
        if j + 1 >= n:
            break
        long_next = len(lines[j + 1]) > budget
        i = j + 1 if long_next or j - i + 1 <= overlap else max(j + 1 - overlap, i + 1, header_lines)
    return chunks
