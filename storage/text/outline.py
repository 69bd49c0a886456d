"""A Markdown body's block outline, with the first and last line of every block (`parse_blocks`).

`parse_blocks` reads the body into an `Outline`: the block tree
(headings, paragraphs, lists and their items, quotes, GFM tables, fenced and indented code, HTML) with
the first and last line of each block. Line ranges come from marko's `source_span` character offsets
(marko >= 2.2 records one for every block element), mapped to lines with a bisect over line starts; only
the block pass of marko runs, inline parsing is skipped (nothing here needs it; it would double the cost).
Measured on this machine marko's block pass reads only 0.3-1 MB/s (lists are the slowest, and a long tight
list grows superlinearly), which alone would use the whole 1 s budget for reindexing a 1 MB workspace. So
`parse_blocks` first tries `_scan_fast`, a line scan of the subset LLMs and people mostly write (column-0
ATX headings, paragraphs, one-line list items, GFM tables, fenced code; ~20 MB/s). A body with anything else
is cut into top-level segments that parse the same alone as in place (`_segments`), each read by the line
scan or, failing that, by marko. The tests compare with marko alone on tens of thousands of generated
documents: the same blocks for the subset, the same leaf blocks and headings for everything else.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from marko.block import Document
from marko.ext.gfm import GFM
from marko.parser import Parser
from marko.source import Source

from storage.text.model import split_lines

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+|$)(.*?)(?:[ \t]+#+)?[ \t]*$")
# The line scan (`_scan_fast`) accepts only lines starting in column 0 (or blank), made of:
_FAST_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")
_FAST_FENCE = re.compile(r"(?:(`{3,})[^`]*|(~{3,}).*)$")
_FAST_ITEM = re.compile(r"(?:([-*+])|\d{1,9}([.)])) (?=\S)")
_TABLE_SPLIT = re.compile(r"\s*(?<!\\)\|\s*")  # marko's GFM table cell splitter
_TABLE_DELIMITER = re.compile(r":?-+:?")
# Segment boundaries (`_segments`):
_FENCE_LIKE = re.compile(r"^[ \t>]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)*(`{3,}|~{3,})(.*)$")
_TOP_BULLET = re.compile(r"[-*+][ \t]+\S")
_ITEM_WITH_TEXT = re.compile(r"(?:[-*+]|\d{1,9}[.)])[ \t]+\S")
_THEMATIC = re.compile(r" {0,3}([-*_])[ \t]*(?:\1[ \t]*){2,}$")
_HTML_LONG = re.compile(r" {0,3}<(?:script|pre|style|textarea|!--|\?|![A-Za-z]|!\[CDATA\[)", re.IGNORECASE)
# Lines that start any other block syntax: the scan gives up on them and marko parses the body.
_SPECIAL = re.compile(
    r"(?:[ \t]"  # indentation: code, continuation
    r"|(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)"  # other list items
    r"|[>]|<"  # quote, HTML block
    r"|\[.*\]:"  # link reference definition, footnote
    r"|[ \t|:-]*-[ \t|:-]*$"  # setext underline, thematic break, table delimiter row
    r"|=+[ \t]*$"  # setext underline
    r"|([*_])[ \t]*(?:\1[ \t]*){2,}$)"  # thematic break
)

@dataclass
class Block:
    """A Markdown block spanning lines `start`..`end` (0-based, inclusive) of the body."""

    kind: str  # heading | paragraph | list | item | quote | table | fence | code | other
    start: int
    end: int
    level: int = 0  # heading level
    title: str = ""  # heading text
    children: list[Block] = field(default_factory=list)  # items of a list, blocks of an item or quote
    rows: list[int] = field(default_factory=list)  # table: line of each body row (header lines precede)


@dataclass
class Outline:
    """The lines of a Markdown body and its top-level blocks."""

    lines: list[str]
    blocks: list[Block]
    problem: str = ""  # why the structure was not read (the body is then one plain block)

    def leaves(self) -> list[tuple[int, int, bool]]:
        """Line ranges of leaf blocks in order, as (start, end, is_code); container markers included."""
        out: list[tuple[int, int, bool]] = []

        def walk(blocks: list[Block]) -> None:
            for b in blocks:
                if b.children:
                    walk(b.children)
                elif b.kind == "table":
                    out.append((b.start, b.rows[0] - 1 if b.rows else b.end, False))
                    out.extend((r, r, False) for r in b.rows)
                else:
                    out.append((b.start, b.end, b.kind in ("fence", "code")))

        walk(self.blocks)
        return out


_PARSER = Parser()
for _element in GFM.elements:
    _PARSER.add_element(_element)


def parse_blocks(body: str, fast: bool = True) -> Outline:
    """Outline a Markdown body: its lines and block tree.

    With `fast` (the default) the line scan reads the body, or else each of its top-level segments
    (`_segments`), handing to marko only the segments it does not understand; `fast=False` is marko alone.
    """
    lines = split_lines(body)
    if not body.strip():
        return Outline(lines, [])
    problem = too_deep(lines)
    if problem:
        return Outline(lines, [Block("other", 0, len(lines) - 1)], problem)
    if not fast:
        return Outline(lines, _marko_blocks(lines))
    blocks = _scan_fast(lines)
    if blocks is None:
        blocks = []
        for a, b in _segments(lines):
            part = lines[a:b]
            found = _scan_fast(part)
            blocks.extend(_shift(block, a) for block in (found if found is not None else _marko_blocks(part)))
    return Outline(lines, blocks)


def _segments(lines: list[str]) -> list[tuple[int, int]]:
    """Split a body into runs of lines that parse the same alone as in place (ranges [a, b)).

    A new segment starts, outside fenced code, at a line in column 0 after a blank line, or at a bullet item
    `- text` in column 0 that follows a list item or paragraph text (it cannot continue anything; a list
    is cut in two lists there, which changes no chunk text). Fences
    opened in column 0 are followed exactly; after a fence opened elsewhere (indented, in a list or quote,
    after an HTML line) the rest is one segment, and so is a body with an HTML block that may hold blank lines (`<pre>`, `<!--`).
    """
    if any(_HTML_LONG.match(line) for line in lines if "<" in line[:4]):
        return [(0, len(lines))]
    out, start, fence, blank, html = [], 0, "", False, False
    for i, line in enumerate(lines):
        top = line[:1] not in ("", " ", "\t")
        item = (
            top
            and not html
            and _TOP_BULLET.match(line)
            and not _THEMATIC.match(line)
            and i > 0
            and (_ITEM_WITH_TEXT.match(lines[i - 1].lstrip()) or _is_plain(lines[i - 1].lstrip()))
        )
        if (blank and top or item) and not fence and i > start:
            out.append((start, i))
            start = i
        html = (html or (not fence and line.lstrip(" ").startswith("<"))) and bool(line.strip())
        m = _FENCE_LIKE.match(line) if ("`" in line or "~" in line) else None
        if m:
            run, info = m.group(1), m.group(2)
            if not fence and not (run[0] == "`" and "`" in info):
                if html or not line.startswith(run):
                    break  # an indented or nested fence, or one after HTML: leave the rest to the parser
                fence = run
            elif fence and run[0] == fence[0] and len(run) >= len(fence) and not info.strip():
                if line.lstrip(" ").startswith(run) and len(line) - len(line.lstrip(" ")) <= 3:
                    fence = ""
        blank = not line.strip()
    out.append((start, len(lines)))
    return out


def _shift(block: Block, by: int) -> Block:
    """`block` (and its children) moved down by `by` lines."""
    block.start += by
    block.end += by
    block.rows = [r + by for r in block.rows]
    for child in block.children:
        _shift(child, by)
    return block


def _table_cells(line: str) -> list[str]:
    cells = _TABLE_SPLIT.split(line.strip())
    if cells and not cells[0]:
        cells.pop(0)
    if cells and not cells[-1]:
        cells.pop()
    return cells


def _is_table_head(lines: list[str], i: int) -> bool:
    """True when lines i and i+1 are a GFM table header and delimiter row (marko's rules)."""
    if i + 1 >= len(lines) or not _TABLE_SPLIT.search(lines[i]) or lines[i + 1][:1] in ("", " ", "\t"):
        return False
    head, delimiter = _table_cells(lines[i]), _table_cells(lines[i + 1])
    return (
        len(head) == len(delimiter) > 0
        and not all(_TABLE_DELIMITER.match(c) for c in head)
        and all(_TABLE_DELIMITER.match(c) for c in delimiter)
    )


def _is_plain(text: str) -> bool:
    """True when `text` starts no block syntax (it is paragraph text)."""
    return not (_FAST_FENCE.match(text) or _FAST_HEADING.match(text) or _FAST_ITEM.match(text) or _SPECIAL.match(text))


def _scan_fast(lines: list[str]) -> list[Block] | None:
    """Blocks of a body written in the common subset, or None to leave it to marko.

    The subset: every non-blank line starts in column 0 and is an ATX heading, a paragraph line, a
    one-line list item (`- x`, `1. x`) whose text starts no other block, a GFM table (not interrupting a
    paragraph) or a fenced code block; list items follow a blank line, a heading, a table, a fence or another
    item. Everything else (indentation, quotes, HTML, setext headings, lazy continuation...) returns None.
    The tests compare the result with marko's on generated documents.
    """
    blocks: list[Block] = []
    n = len(lines)
    para = -1  # first line of the open paragraph
    items: list[Block] = []  # items of the open list
    marker = ""  # bullet character or ordered delimiter of the open list
    last = ""  # kind of the previous non-blank line: paragraph | item | other
    blank = True  # the previous line was blank

    def close_paragraph(end: int) -> None:
        nonlocal para
        if para >= 0:
            blocks.append(Block("paragraph", para, end))
            para = -1

    def close_list() -> None:
        if items:
            blocks.append(Block("list", items[0].start, items[-1].end, children=items[:]))
            items.clear()

    i = 0
    while i < n:
        line = lines[i]
        if not line.strip():
            close_paragraph(i - 1)
            blank = True
            i += 1
            continue
        if line[0] in " \t":
            return None
        fence = _FAST_FENCE.match(line) if line[0] in "`~" else None
        item = _FAST_ITEM.match(line) if line[0] in "-*+0123456789" else None
        if fence:
            close_paragraph(i - 1)
            close_list()
            run = fence.group(1) or fence.group(2)
            closing = re.compile(f"( {{0,3}}){re.escape(run[0])}{{{len(run)},}}[ \\t]*$")
            j = i + 1
            while j < n:
                m = closing.match(lines[j])
                if m:
                    if m.group(1):
                        return None  # an indented closing fence: leave it to marko
                    break
                j += 1
            end = j if j < n else trim(lines, i, n - 1)[1]
            blocks.append(Block("fence", i, end))
            i, last, blank = j + 1, "other", False
            continue
        if _FAST_HEADING.match(line):
            close_paragraph(i - 1)
            close_list()
            m = _ATX.match(line)
            blocks.append(Block("heading", i, i, len(m.group(1)), m.group(2).strip()))
            last = "other"
        elif item:
            if para >= 0 or not _is_plain(line[item.end() :]):
                return None
            kind = item.group(1) or item.group(2)
            if not (items and last == "item" and kind == marker):
                close_list()
                marker = kind
            items.append(Block("item", i, i, children=[Block("paragraph", i, i)]))
            last = "item"
        elif last == "item" and not blank:
            return None  # lazy continuation of the item's paragraph
        elif para < 0 and _is_table_head(lines, i):
            close_list()
            rows, j = [], i + 2
            while j < n and lines[j].strip():
                nxt = lines[j]
                if _FAST_HEADING.match(nxt) or _FAST_ITEM.match(nxt) or _FAST_FENCE.match(nxt):
                    break
                if _SPECIAL.match(nxt):
                    return None
                rows.append(j)
                j += 1
            blocks.append(Block("table", i, rows[-1] if rows else i + 1, rows=rows))
            i, last, blank = j, "other", False
            continue
        elif _SPECIAL.match(line):
            return None
        else:
            if para < 0:
                close_list()
                para = i
            last = "paragraph"
        blank = False
        i += 1
    close_paragraph(n - 1)
    close_list()
    return blocks


MAX_NESTING = 100       # container markers (`- `, `> `, `1. `) opening one line that marko is given at most
DEEP_LINE = 8           # lines opening more containers than this are "deep"...
MAX_DEEP_MARKERS = 5000  # ...and their markers together may not pass this (~1 s of marko)
_CONTAINER_RUN = re.compile(r"(?:[ \t]*(?:>|(?:[-+*]|\d{1,9}[.)])(?=[ \t]|$)))+")
_CONTAINER_MARK = re.compile(r">|[-+*]|\d{1,9}[.)]")


def too_deep(lines: list[str]) -> str:
    """Why Markdown is nested too deep to hand to marko (empty when it is not): marko recurses per level and
    rescans the line each time (~0.2 ms per level per line; a 400 KB `- - - ...` line took 16 s and then hit
    the recursion limit anyway, 4,000 lines nested 100 deep took a minute)."""
    deep = 0
    for number, line in enumerate(lines, 1):
        if line[:1] not in " \t-+*>0123456789":
            continue
        run = _CONTAINER_RUN.match(line)
        depth = len(_CONTAINER_MARK.findall(run.group())) if run else 0
        if depth > MAX_NESTING:
            return f"line {number} nests more than {MAX_NESTING} lists or quotes"
        deep += depth if depth > DEEP_LINE else 0
        if deep > MAX_DEEP_MARKERS:
            return f"lists or quotes nested more than {DEEP_LINE} deep on too many lines (to line {number})"
    return ""


def _marko_blocks(lines: list[str]) -> list[Block]:
    # Same lengths as `lines`, so offsets map 1:1; marko would turn a lone CR or a form feed into a line break.
    text = "\n".join(lines).replace("\r", " ").replace("\f", " ")
    starts = [0]
    starts.extend(m.end() for m in re.finditer("\n", text))
    source = Source(text)
    source.parser = _PARSER
    doc = Document()
    with source.under_state(doc):
        doc.children = _PARSER.parse_source(source)

    def line_of(offset: int) -> int:
        return bisect_right(starts, offset) - 1

    def convert(el) -> Block | None:
        kind = _KINDS.get(type(el).__name__, "other")
        if kind == "blank" or el.source_span is None:
            return None
        a, b = el.source_span
        start, end = line_of(a), line_of(max(a, b - 1))
        while end > start and not lines[end].strip():
            end -= 1
        block = Block(kind, start, end)
        if kind == "heading":
            block.level = el.level
            if type(el).__name__ == "SetextHeading":
                block.title = " ".join(s.strip() for s in lines[start:end])
            else:
                m = _ATX.match(lines[start].lstrip(" >"))
                block.title = m.group(2).strip() if m else lines[start].strip().strip("#").strip()
        elif kind == "table":
            block.rows = [line_of(row.source_span[0]) for row in el.children[1:] if row.source_span]
        elif kind in ("list", "item", "quote"):
            block.children = [c for c in map(convert, el.children) if c is not None]
        return block

    return [b for b in map(convert, doc.children) if b is not None]


_KINDS = {
    "BlankLine": "blank",
    "Heading": "heading",
    "SetextHeading": "heading",
    "Paragraph": "paragraph",
    "List": "list",
    "ListItem": "item",
    "Quote": "quote",
    "Alert": "quote",
    "Table": "table",
    "FencedCode": "fence",
    "CodeBlock": "code",
}


def trim(lines: list[str], a: int, b: int) -> tuple[int, int]:
    """Narrow a..b to its first and last non-blank lines (a > b when all blank)."""
    while a <= b and not lines[a].strip():
        a += 1
    while b >= a and not lines[b].strip():
        b -= 1
    return a, b
