"""Plain data shared by the parser, the index and search: what a file is made of once read, and its line
numbering (`split_lines`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Link:
    """A wikilink `[[target#anchor|alias]]` found at `line` (1-based) of its source file.

    `target` is the literal workspace-relative path as written (no `.md` guessing); `anchor` is kept verbatim
    (e.g. `L3-L9`); `predicate` is set for typed links such as `uses:: [[x]]`.
    """

    target: str
    line: int
    anchor: str | None = None
    alias: str | None = None
    predicate: str | None = None


@dataclass(frozen=True)
class Chunk:
    """A searchable piece of a file: lines `start_line`..`end_line` (1-based, inclusive) of the original.

    A fact line (storage/facts.py) is a chunk of its own: `search_text` is then what BM25 and the vectors read
    instead of `text` (its sentence and what it is about, without the inline fields), and in a digest node
    `valid_from`/`valid_to` are its `since`/`until` (YYYY-MM-DD)."""

    text: str
    start_line: int
    end_line: int
    headings: tuple[str, ...] = ()  # heading skeleton, outermost first, e.g. ("Title", "Setup")
    search_text: str | None = None
    valid_from: str | None = None
    valid_to: str | None = None


@dataclass
class ParsedFile:
    """Everything the index needs from one file."""

    path: str
    kind: str  # markdown | jsonl | text | binary
    name: str | None = None
    description: str | None = None
    frontmatter: dict[str, Any] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    date: str | None = None  # YYYY-MM-DD from the daily path or a `date` frontmatter key
    chunks: list[Chunk] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    line_count: int = 0
    errors: list[str] = field(default_factory=list)  # e.g. malformed frontmatter; the file is still indexed


def normalize_tag(tag: str) -> str:
    """The form tags are counted and filtered by: case-folded, runs of whitespace as `_` (`New York` ->
    `new_york`); files keep their own spelling."""
    return "_".join(str(tag).casefold().split())


def split_lines(text: str) -> list[str]:
    """Lines of `text` as every Dreamflow tool numbers them: split on "\\n" only, a trailing CR dropped."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines
