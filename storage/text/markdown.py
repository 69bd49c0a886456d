"""The Markdown model: frontmatter, wikilinks, link rewriting, and `parse_file` (bytes -> ParsedFile).

Frontmatter is a YAML block between a first line `---` and a closing `---` (or `...`) line. python-frontmatter's
YAML handler splits and writes it, configured with these fences and loading through `storage.text.yaml_load`
(PyYAML's C SafeLoader, bounded: an alias bomb is malformed frontmatter, a value that cannot be constructed
such as `date: 2024-13-45` is kept as text and reported) instead of its default loader, which expands aliases
without bound. Its `frontmatter.parse` is not used: it strips the text and the body, which would change a
file's body on every frontmatter update. Keys `name`, `description`, `tags` and `date` are recognised; every
key is kept, in order, and `render_frontmatter` writes them back.

Wikilinks: `[[target]]`, `[[target|alias]]` (`[[target\\|alias]]` inside tables), `[[target#anchor]]`,
`![[embed]]`. The target is the literal workspace-relative path as written (trimmed; no `.md` appended, no
title lookup); the anchor is stored verbatim (`L9`, `L9-L10,L15-L20`, a heading). `[[#anchor]]` (a link
into the same file) has no target and is not a link edge. Links in fenced or indented code blocks and in
inline code spans are ignored.

Typed links (Dataview-style inline fields): the word before `::` is the link's predicate, stored as
written. The field's value runs to the end of the line, or to the matching bracket when the field itself
is bracketed (`[uses:: [[a]]]`, `(uses:: [[a]])`); every link in the value carries the predicate, so
`uses:: [[a]], [[b]]`, `- uses:: [[a]]` and `uses:: [[[a]], [[b]]]` all give `uses`. The legacy wrapper
`related:: [[x]]` is therefore a link with predicate `related`; a plain `[[x]]` has none.

Links in frontmatter values (`source_conversation: "[[session/dialog/x.jsonl]]"`) are links too, found
in the raw YAML text (so also when it does not parse), on their own line, with the top-level key as
predicate (`source_conversation`), the way Dataview treats frontmatter fields.
"""

from __future__ import annotations

import datetime as dt
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Callable

import yaml
from frontmatter.default_handlers import YAMLHandler

from storage.index.chunking import chunk_jsonl, chunk_markdown, chunk_text
from storage.text.model import DIALOG, GENERATED_BLOCKS, Link, ParsedFile, split_lines
from storage.text.outline import Outline, parse_blocks
from storage.text.yaml_load import load as load_yaml

MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdx")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
BINARY_SNIFF_BYTES = 8192

_FENCE = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.MULTILINE)  # a fence line; the block opens with `---`
_WIKILINK = re.compile(r"\[\[([^\[\]\n]+?)\]\]")
_FIELD = re.compile(r"(\w[\w-]*)\*{0,2}::(?!:)")
_BACKTICKS = re.compile(r"`+")
_TOP_KEY = re.compile(r"""^(?:"([^"]+)"|'([^']+)'|([^\s#'"?:\-][^:#]*?|-[^\s:#][^:#]*?))[ \t]*:(?:[ \t]|$)""")
_PATH_DATE = re.compile(r"^(?:daily/(\d{4}-\d{2}-\d{2})(?:\.md$|/)|resource/(\d{4}-\d{2}-\d{2})/)")
_ISO_DATE = re.compile(r"^\s*(\d{4}-\d{2}-\d{2})(?:$|[T ])")
_ANCHOR_TAIL = re.compile(r"[ \t]*#[^|\]\n]*?(?=\\?\||\]\])")  # `#anchor` after a link's target


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    """Safe YAML dumper writing lists of plain values inline (`tags: [a, b]`), everything else in blocks."""


def _represent_list(dumper: yaml.SafeDumper, value: list) -> yaml.Node:
    inline = all(isinstance(v, (str, int, float, bool)) and "\n" not in str(v) for v in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=inline)


_Dumper.add_representer(list, _represent_list)


# ---------------------------------------------------------------------------------------------- frontmatter


@dataclass
class Frontmatter:
    """A file split into its YAML frontmatter and body.

    `meta`: the keys in file order ({} when there is no block or it does not parse). `body`: the text after
    the block, starting at line `body_line`. `error`: why the block did not parse, else None; on error the
    whole text is `body` (body_line 1), so re-rendering never drops the unparsed block. `raw`: the YAML text
    between the fences (None without a block). `end_line`: line of the closing fence (0 without a block).
    `value_errors`: values of a parsed block kept as text because YAML could not construct them.
    """

    meta: dict[str, Any]
    body: str
    body_line: int = 1
    error: str | None = None
    raw: str | None = None
    end_line: int = 0
    value_errors: list[str] = field(default_factory=list)


class BoundedYAMLHandler(YAMLHandler):
    """python-frontmatter's YAML handler with Dreamflow's fences (a fence line is exactly `---`, or `...` to
    close, so blank lines after it stay in the body) and the bounded loader: `frontmatter.loads(text,
    handler=FRONTMATTER)` is as safe on hostile files as `split_frontmatter`."""

    def detect(self, text: str) -> bool:
        return text.startswith("---") and super().detect(text)

    def split(self, text: str) -> tuple[str, str]:
        """(raw YAML, body), each without the newline ending the fence line before it; ValueError when the
        block is not closed."""
        raw, body = super().split(text)
        return raw.removeprefix("\n"), body.removeprefix("\n")

    def load(self, fm: str, **kwargs: Any) -> Any:
        """The YAML between the fences, bounded (`storage.text.yaml_load.load`; `_load_yaml` also takes its
        report of values kept as text)."""
        return load_yaml(fm, first_line=2)[0]

    def export(self, metadata: dict[str, Any], **kwargs: Any) -> str:
        return super().export(metadata, Dumper=_Dumper, sort_keys=False, width=1 << 20, **kwargs)


FRONTMATTER = BoundedYAMLHandler(fm_boundary=_FENCE)


def _find_block(text: str) -> tuple[str, int, int] | None:
    """(raw YAML, closing fence line, offset of the body) of a leading frontmatter block, if any."""
    start = 1 if text.startswith("\ufeff") else 0
    if not FRONTMATTER.detect(text[start:]):
        return None
    try:
        raw, body = FRONTMATTER.split(text[start:])
    except ValueError:  # no closing fence: no block
        return None
    return raw, raw.count("\n") + 2, len(text) - len(body)


def _load_yaml(raw: str) -> tuple[dict[str, Any], str | None, list[str]]:
    """(the mapping in a frontmatter block, None, value errors), or ({}, a message saying why not, [])."""
    try:
        meta, problems = load_yaml(raw, first_line=2)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return {}, f"malformed frontmatter (YAML){where}: {problem}; the file is indexed as text", []
    if meta is None:
        return {}, None, []
    if not isinstance(meta, dict):
        kind = type(meta).__name__
        return {}, f"frontmatter is a YAML {kind}, not a mapping of keys; the file is indexed as text", []
    return meta, None, [f"malformed frontmatter value: {problem}" for problem in problems]


def split_frontmatter(text: str) -> Frontmatter:
    """Split `text` into frontmatter (`meta`, `raw`) and body; malformed YAML sets `error`, never raises."""
    found = _find_block(text)
    if found is None:
        return Frontmatter({}, text)
    raw, end_line, body_at = found
    meta, error, value_errors = _load_yaml(raw)
    if error:
        return Frontmatter({}, text, 1, error, raw, end_line)
    return Frontmatter(meta, text[body_at:], end_line + 1, None, raw, end_line, value_errors)


def render_frontmatter(meta: dict[str, Any], body: str) -> str:
    """Text of a file with `meta` as YAML frontmatter (keys in the given order) followed by `body`.

    No block is written when `meta` is empty. Values round-trip through `split_frontmatter` unchanged
    (dates stay dates). Raises ValueError for a value YAML cannot represent.
    """
    if not meta:
        return body
    try:
        block = FRONTMATTER.export(meta)
    except yaml.YAMLError as exc:
        raise ValueError(f"frontmatter cannot be written as YAML: {exc}") from exc
    return f"---\n{block}\n---\n{body}"


# ---------------------------------------------------------------------------------------------- wikilinks


@dataclass
class _Match:
    """One wikilink occurrence: the Link and where its target sits in the scanned text."""

    link: Link
    target_span: tuple[int, int]


def _link_parts(inner: str) -> tuple[str, str | None, str | None, int, int]:
    """(target, anchor, alias, target start, target end) of the text between `[[` and `]]`."""
    head, alias = inner, None
    bar = inner.find("|")
    if bar >= 0:
        head, alias = inner[:bar], inner[bar + 1 :].strip() or None
        if head.endswith("\\"):
            head = head[:-1]
    hash_at = head.find("#")
    anchor = None
    if hash_at >= 0:
        anchor = head[hash_at + 1 :].strip() or None
        head = head[:hash_at]
    target = head.strip()
    lead = len(head) - len(head.lstrip())
    return target, anchor, alias, lead, lead + len(target)


class _Spans:
    """Sorted, merged character ranges with O(log n) membership."""

    def __init__(self, spans):
        merged: list[list[int]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def __contains__(self, pos: int) -> bool:
        i = bisect_right(self.starts, pos) - 1
        return i >= 0 and pos < self.ends[i]

    def within(self, a: int, b: int) -> list[tuple[int, int]]:
        """The ranges overlapping a..b, clipped and shifted so that `a` is 0."""
        i = max(bisect_right(self.starts, a) - 1, 0)
        out = []
        while i < len(self.starts) and self.starts[i] < b:
            if self.ends[i] > a:
                out.append((max(self.starts[i], a) - a, min(self.ends[i], b) - a))
            i += 1
        return out


def _code_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges of inline code spans in one block's text (CommonMark backtick-run matching)."""
    runs = [m.span() for m in _BACKTICKS.finditer(text) if not (m.start() and text[m.start() - 1] == "\\")]
    by_width: dict[int, list[int]] = {}
    for k, (a, b) in enumerate(runs):
        by_width.setdefault(b - a, []).append(k)
    spans = []
    k = 0
    while k < len(runs):
        a, b = runs[k]
        same = by_width[b - a]
        j = bisect_right(same, k)
        if j < len(same):
            spans.append((a, runs[same[j]][1]))
            k = same[j] + 1
        else:
            k += 1
    return spans


def _fields(line: str, skip: _Spans) -> list[tuple[int, int, str]]:
    """Inline fields `key:: value` on a line as (value start, value end, predicate), ordered by start.

    A field runs to the end of the line, or to its closing bracket when written `[key:: ...]`/`(key:: ...)`.
    """
    found = [m for m in _FIELD.finditer(line) if m.start() not in skip]
    openers = []
    for m in found:
        before = m.start() - 1
        while before >= 0 and line[before] == "*":
            before -= 1
        openers.append(before if before >= 0 and line[before] in "[(" else -1)
    closing: dict[int, int] = {}
    if any(i >= 0 for i in openers):
        stacks: dict[str, list[int]] = {"[": [], "(": []}
        for i, ch in enumerate(line):
            if ch in "[(" and i not in skip:
                stacks[ch].append(i)
            elif ch in "])" and i not in skip:
                stack = stacks["[" if ch == "]" else "("]
                if stack:
                    closing[stack.pop()] = i
    return [
        (m.end(), closing.get(opener, len(line)) if opener >= 0 else len(line), m.group(1))
        for m, opener in zip(found, openers)
    ]


def _body_matches(body: str, outline: Outline | None, first_line: int) -> list[_Match]:
    """Wikilinks of a Markdown body outside code, with predicates and original line numbers."""
    if "[[" not in body:
        return []
    outline = outline or parse_blocks(body)
    lines = outline.lines
    leaves = outline.leaves()
    leaf_starts = [a for a, _, _ in leaves]
    offsets = [0]  # of each line in the CR-free text "\n".join(lines)
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    code_of_leaf: dict[int, _Spans] = {}
    out: list[_Match] = []
    for row, line in enumerate(lines):
        if "[[" not in line:
            continue
        leaf = bisect_right(leaf_starts, row) - 1
        if leaf < 0 or leaves[leaf][1] < row or leaves[leaf][2]:
            continue  # in a code block (or outside any block)
        a, b, _ = leaves[leaf]
        if leaf not in code_of_leaf:
            block = "\n".join(lines[a : b + 1])
            code_of_leaf[leaf] = _Spans(
                (s + offsets[a], e + offsets[a]) for s, e in (_code_spans(block) if "`" in block else [])
            )
        spans = code_of_leaf[leaf]
        code = spans.within(offsets[row], offsets[row] + len(line)) if spans.starts else []
        found = list(_WIKILINK.finditer(line))
        if code:
            in_code = _Spans(code)
            found = [m for m in found if m.start() not in in_code]
        fields = _fields(line, _Spans(code + [m.span() for m in found])) if "::" in line else []
        active: list[tuple[int, int, str]] = []
        k = 0
        for m in found:
            target, anchor, alias, t0, t1 = _link_parts(m.group(1))
            while k < len(fields) and fields[k][0] <= m.start():
                active.append(fields[k])
                k += 1
            while active and active[-1][1] <= m.start():
                active.pop()
            if target:
                predicate = active[-1][2] if active else None
                at = offsets[row] + m.start(1)
                out.append(_Match(Link(target, row + first_line, anchor, alias, predicate), (at + t0, at + t1)))
    return out


def _frontmatter_matches(raw: str, first_line: int) -> list[_Match]:
    """Wikilinks in raw frontmatter YAML; each carries the top-level key it sits under as predicate."""
    out: list[_Match] = []
    if "[[" not in raw:
        return out
    key = None
    offset = 0
    for row, line in enumerate(raw.split("\n")):
        m = _TOP_KEY.match(line)
        if m:
            key = next(g for g in m.groups() if g is not None).strip()
        for w in _WIKILINK.finditer(line):
            target, anchor, alias, t0, t1 = _link_parts(w.group(1))
            if target:
                start = offset + w.start(1)
                out.append(_Match(Link(target, row + first_line, anchor, alias, key), (start + t0, start + t1)))
        offset += len(line) + 1
    return out


def _file_matches(text: str) -> list[_Match]:
    """Every wikilink of a Markdown file (frontmatter included), target spans as offsets into `text`."""
    found = _find_block(text)
    if found is None:
        return _body_matches_at(text, 0, 1)
    raw, end_line, body_at = found
    raw_at = text.index("\n", 1 if text.startswith("\ufeff") else 0) + 1
    matches = _frontmatter_matches(raw, 2)
    for m in matches:
        m.target_span = (m.target_span[0] + raw_at, m.target_span[1] + raw_at)
    return matches + _body_matches_at(text[body_at:], body_at, end_line + 1)


def _body_matches_at(body: str, base: int, first_line: int) -> list[_Match]:
    """`_body_matches` with target spans shifted to offsets into the original text (CRs counted)."""
    matches = _body_matches(body, None, first_line)
    if matches and "\r" in body:
        # spans were computed on the CR-free join of lines: map them back line by line
        starts = [0]
        for line in body.split("\n"):
            starts.append(starts[-1] + len(line) + 1)
        clean = [0]
        for line in split_lines(body):
            clean.append(clean[-1] + len(line) + 1)
        for m in matches:
            row = m.link.line - first_line
            shift = starts[row] - clean[row]
            m.target_span = (m.target_span[0] + shift, m.target_span[1] + shift)
    for m in matches:
        m.target_span = (m.target_span[0] + base, m.target_span[1] + base)
    return matches


def parse_links(text: str, first_line: int = 1) -> list[Link]:
    """Wikilinks of a Markdown text whose first line is line `first_line` of its file, in order.

    A leading frontmatter block is read too (its links take their YAML key as predicate). Links in code
    blocks and code spans are skipped; `pred:: [[t]]` gives predicate `pred`.
    """
    shift = first_line - 1
    links = [m.link for m in _file_matches(text)]
    if shift:
        links = [Link(k.target, k.line + shift, k.anchor, k.alias, k.predicate) for k in links]
    return links


def rewrite_links(
    text: str, old_target: str, new_target: str, anchor: Callable[[str | None], str | None] | None = None
) -> tuple[str, int]:
    """Point every `[[old_target...]]` (exact literal target) at `new_target`; returns (text, count).

    Anchors, aliases, predicates, embeds and spacing stay as written; code blocks and spans are not
    touched; links in the frontmatter are rewritten too. `anchor`, when given, maps each rewritten link's
    anchor (None when it has none) to its new anchor (None drops it), e.g. to follow moved lines.
    """
    if not new_target.strip() or any(c in new_target for c in "[]|#\n\r"):
        raise ValueError(f"{new_target!r} cannot be a wikilink target (no [ ] | # or line breaks)")
    old = old_target.strip()
    hits = [m for m in _file_matches(text) if m.link.target == old]
    if not hits:
        return text, 0
    parts, pos = [], 0
    for m in hits:
        a, b = m.target_span
        parts.append(text[pos:a])
        parts.append(new_target)
        pos = b
        new_anchor = anchor(m.link.anchor) if anchor is not None else m.link.anchor
        if new_anchor != m.link.anchor:
            tail = _ANCHOR_TAIL.match(text, b)
            pos = tail.end() if tail else b
            if new_anchor:
                parts.append("#" + new_anchor)
    parts.append(text[pos:])
    return "".join(parts), len(hits)


# ---------------------------------------------------------------------------------------------- files


def _tags(value: Any) -> list[str]:
    """Tags from `tags: [a, b]`, `tags: a, b` or `tags: a b` (a leading `#` dropped), deduplicated."""
    if isinstance(value, str):
        items = value.split(",") if "," in value else value.split()
    elif isinstance(value, (list, tuple)):
        items = [str(v) for v in value if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    else:
        return []
    out: list[str] = []
    for item in items:
        tag = item.strip().lstrip("#").strip()
        if tag and tag not in out:
            out.append(tag)
    return out


def _frontmatter_date(value: Any) -> str | None:
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str):
        m = _ISO_DATE.match(value)
        if m:
            try:
                return dt.date.fromisoformat(m.group(1)).isoformat()
            except ValueError:
                return None
    return None


def headings(text: str) -> list[str]:
    """The text of every heading of a Markdown file, in order (frontmatter skipped; headings in lists and
    quotes included, `#` lines in code not)."""
    out: list[str] = []

    def walk(blocks) -> None:
        for block in blocks:
            if block.kind == "heading":
                out.append(block.title)
            walk(block.children)

    walk(parse_blocks(split_frontmatter(text).body).blocks)
    return out


_BLOCK_ID = re.compile(r"\s\^([A-Za-z0-9][A-Za-z0-9-]*)[ \t]*\r?$", re.MULTILINE)


def block_ids(text: str) -> set[str]:
    """The block ids of a Markdown text: `^id` ending a line (a fact's `^f2`, Obsidian's block references)."""
    return set(_BLOCK_ID.findall(text))


def heading_slug(text: str) -> str:
    """GitHub-style anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text.strip().lower()))


def path_date(path: str) -> str | None:
    """YYYY-MM-DD of `daily/YYYY-MM-DD.md`, `daily/YYYY-MM-DD/...` or `resource/YYYY-MM-DD/...`."""
    m = _PATH_DATE.match(path)
    if not m:
        return None
    try:
        return dt.date.fromisoformat(m.group(1) or m.group(2)).isoformat()
    except ValueError:
        return None


def _jsonable(value: Any) -> Any:
    """Frontmatter values as JSON-ready data (dates as ISO strings)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


DAY_PAGE = re.compile(r"^daily/\d{4}-\d{2}-\d{2}\.md$")  # its card list is generated (storage/files/day_page.py)
_GENERATED = re.compile(r"^daily/\d{4}-\d{2}-\d{2}/interests\.yaml$")  # the dream's topics for proactive


def is_generated(path: str) -> bool:
    """Whether `path` is a file the jobs write for their own use (a day's interests.yaml): indexed as a file
    (listed, linked) but given no chunks, so it never takes an agent's search or recall budget."""
    return bool(_GENERATED.match(path))


def without_generated(body: str) -> str:
    """A day page's body with the lines of its generated card list blanked (line numbers kept): the list
    repeats the cards' names and descriptions, which the cards themselves answer for."""
    lines = body.split("\n")
    inside = False
    for i, line in enumerate(lines):
        opens = line.strip().startswith(tuple(start for start, _ in GENERATED_BLOCKS))
        if opens or inside:
            inside = not line.strip().startswith(tuple(end for _, end in GENERATED_BLOCKS))
            lines[i] = ""
    return "\n".join(lines)


def file_kind(path: str) -> str:
    """markdown | jsonl | text, by suffix (content may still make a file `binary`)."""
    suffix = PurePosixPath(path).suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    return "text"


def decode_text(data: bytes) -> str | None:
    """UTF-8 text of `data` (BOM dropped; bytes that are not UTF-8 become U+FFFD), or None when it looks
    binary (NUL early on, or more than one character in 8 undecodable)."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        if undecodable(text, data) * 8 > max(len(text), 64):
            return None
    return text[1:] if text.startswith("\ufeff") else text


def undecodable(text: str, data: bytes) -> int:
    """How many U+FFFD in `text` (decoded from `data`) stand for bytes that were not UTF-8."""
    return text.count("\ufffd") - data.count("\ufffd".encode())


def _drop_nul_lines(data: bytes) -> tuple[bytes, int]:
    """`data` with every line holding a NUL byte emptied (line numbers kept), and how many there were."""
    lines = data.split(b"\n")
    bad = sum(b"\x00" in line for line in lines)
    return b"\n".join(b"" if b"\x00" in line else line for line in lines), bad


def parse_file(path: str, data: bytes) -> ParsedFile:
    """Everything the index needs from one file; bad input never raises, it lands in `errors`.

    Markdown: frontmatter (JSON-ready copy in `frontmatter`), name, description, tags, date (a valid
    `date` key wins over the date in the path), structure-aware chunks of the body (each fact line its own,
    with its `since`/`until` as validity in digest nodes) and links. A file whose
    body is empty gets one chunk of its frontmatter text; malformed frontmatter is chunked as plain text.
    JSON Lines: chunks by records (lines with NUL bytes skipped). Other text: chunks by size (CSV repeats its
    header row). Bytes that are not UTF-8 are read as U+FFFD and reported. Binary: no chunks.
    """
    parsed = ParsedFile(path=path, kind=file_kind(path), date=path_date(path))
    if parsed.kind == "jsonl" and b"\x00" in data:  # a log with some garbage lines: skip only those
        data, dropped = _drop_nul_lines(data)
        parsed.errors.append(f"{dropped} lines with NUL bytes skipped; the other records are indexed")
    text = decode_text(data)
    if text is None:
        parsed.kind = "binary"
        parsed.errors.append("binary file (NUL bytes or mostly not UTF-8): stored, not indexed as text")
        return parsed
    if undecodable(text, data):
        parsed.errors.append(f"{undecodable(text, data)} bytes that are not UTF-8 read as U+FFFD; the rest is indexed")
    lines = split_lines(text)
    parsed.line_count = len(lines)
    try:
        if parsed.kind == "markdown":
            _parse_markdown(parsed, text)
        elif parsed.kind == "jsonl":
            parsed.chunks = chunk_jsonl(text, dialog=path.startswith(DIALOG))
        elif is_generated(path):
            pass  # the jobs' own bookkeeping: stored, not searched against what was said and learnt
        else:
            header = 1 if PurePosixPath(path).suffix.lower() in (".csv", ".tsv") else 0
            parsed.chunks = chunk_text(text, header_lines=header, overlap=0 if header else 2)
    except Exception as exc:  # a parser bug must not stop indexing: fall back to plain text
        parsed.errors.append(f"could not parse as {parsed.kind} ({type(exc).__name__}: {exc}); indexed as text")
        parsed.chunks = chunk_text(text)
    return parsed


def _parse_markdown(parsed: ParsedFile, text: str) -> None:
    found = _find_block(text)
    body, body_line, chunks, links = text, 1, [], []
    if found is not None:
        raw, end_line, body_at = found
        meta, error, value_errors = _load_yaml(raw)
        body, body_line = text[body_at:], end_line + 1
        links = [m.link for m in _frontmatter_matches(raw, 2)]
        parsed.errors += value_errors
        if error:
            parsed.errors.append(error)
            chunks = chunk_text(raw, first_line=2)
        _apply_meta(parsed, meta)
    outline = parse_blocks(body)
    if outline.problem:
        parsed.errors.append(f"Markdown structure not read ({outline.problem}); indexed as plain text")
    if DAY_PAGE.match(parsed.path):  # a day page: what a person wrote on it, not its title over the generated list
        searched = without_generated(body)
        chunks += [c for c in chunk_markdown(searched, body_line) if any(
            line.strip() and not line.lstrip().startswith("#") for line in c.text.split("\n"))]
    else:
        chunks += chunk_markdown(body, body_line, outline=outline, fact_windows=parsed.path.startswith("digest/"),
                                 path=parsed.path)
    if not chunks and found is not None and not DAY_PAGE.match(parsed.path):  # a day page's is generated
        chunks = chunk_text(found[0], first_line=2)  # frontmatter only: name/description stay searchable
    parsed.chunks = chunks
    parsed.links = links + [m.link for m in _body_matches(body, outline, body_line)]


def _apply_meta(parsed: ParsedFile, meta: dict[str, Any]) -> None:
    parsed.frontmatter = _jsonable(meta)
    for key in ("name", "description"):
        value = meta.get(key)
        if value is not None and not isinstance(value, (dict, list)):
            setattr(parsed, key, str(value).strip())
    parsed.tags = list(dict.fromkeys(_tags(meta.get("tags")) + _tags(meta.get("memory_tags"))))  # ReMe's key too
    if meta.get("date") is not None:
        date = _frontmatter_date(meta["date"])
        if date:
            parsed.date = date
        elif not any(f"{meta['date']!r} at line" in e for e in parsed.errors):  # else YAML already said why
            parsed.errors.append(f"malformed frontmatter value: date {meta['date']!r} is not a YYYY-MM-DD date; "
                                 "not used as the note's date")

