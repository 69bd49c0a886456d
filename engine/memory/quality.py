"""Content checks on what a model writes (cards, digest nodes, merged and split nodes): pure functions, one
per rule, each returning `(rule, message)` when the text breaks it, else None. The jobs run `check` on every
answer before anything is written; a refused answer gets one repair turn naming the rule (engine/models/llm.py),
then the unit fails and its input stays unconsumed.

Thresholds (chosen so that no good answer of the test suite is refused; docs/jobs.md "Quality gates"):
- a sentence or a name is judged for grounding only with at least `MIN_TERMS` distinct terms (stemmed words
  without stopwords, as search indexes them); it is `ungrounded` when none of them occurs in the material;
- texts are compared as streams of words without their layout (`_verbatim_words`: timestamps, speaker
  labels, list and quote markers, numbering, table pipes, emphasis and quotes dropped), so a transcript is
  the same stream however a model lays it out; a word is copied when it lies in a run of `VERBATIM_RUN`+
  words that occurs in the other text (shorter runs are a quoted phrase or a fact's few shared words);
- a card is a `copy` of its dialog when at least `COPY_SHARE` of its words (not in the card it updates) are
  copied from the dialog, and at least `COPY_MIN_WORDS` of them: one fact that reuses most of one message
  is not the transcript;
- a text echoes the `instructions` when at least `ECHO_SHARE` of its word runs (at least 2) come from the
  request's own text (system prompt, repair turn) and not from the material;
- a line that reads as an instruction to an agent (storage/text/instructions.py: override earlier instructions,
  run or fetch something, reveal secrets, change role) breaks `instructions` too, whatever the material says;
- a digest node `pasted` a source when at least `PASTED_SHARE` of a cited file's words (its Sources aside; a
  file of `PASTED_MIN_WORDS`+ words) are copied into it: the file whole, in any layout or order, not
  consolidated (a node that takes some of a card's lines as they are is selecting, and passes);
- a card sentence with a `relative_time` ("yesterday", "next Friday", "in 3 days"; English) and no date in
  it (YYYY-MM-DD, or a month name with a day) leaves the reader guessing when.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from engine import ops
from engine.models.llm import text_tool_call
from engine.memory.thresholds import (COPY_MIN_WORDS, COPY_SHARE, MIN_TERMS, PASTED_MIN_WORDS, PASTED_SHARE,
                                     VERBATIM_RUN)
from engine.memory.thresholds import INSTRUCTIONS_SHARE as ECHO_SHARE
from storage.index.tokenize import terms
from storage.text import instructions as planted
from storage.text.markdown import split_frontmatter


Finding = tuple[str, str]
RULES = ("empty", "markup", "frontmatter", "template", "tool", "instructions", "copy", "pasted", "relative_time",
         "ungrounded", "duplicate_sources")

# the tags the jobs wrap material in, and a placeholder of the shape a repair turn shows (`<string>`)
_MARKUP = re.compile(r"</?(?:file|node|card|messages|resource)\b[^>\n]*>", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"^\s*<[^<>\n]{1,80}>\s*$")
_HTML_LAYOUT = re.compile(r"<(?:div|p|h[1-6]|section|article|header|footer|ul|ol|li|table|tr|td|th)(?:\s[^<>\n]{0,200})?>",
                          re.IGNORECASE)  # a body laid out in HTML, not Markdown (inline tags like <br> are content)
_CODE = re.compile(r"```.*?```|~~~.*?~~~|`[^`\n]*`", re.DOTALL)
_TEMPLATE = re.compile(r"\{\{[^{}\n]{0,200}\}\}|\{%[^{}\n]{0,200}%\}|</?tool_call>|<function=|\[TOOL_CALLS\]")
_FRONTMATTER_KEYS = ("name", "description", "session_id", "source_conversation", "source_resource", "updated",
                     "tags", "date", "merged_from", "split_from", "split_into")
_PASTED = re.compile(r"^---[ \t]*\n(?:.*\n){0,30}?(?:" + "|".join(_FRONTMATTER_KEYS) + r")[ \t]*:.*\n"
                     r"(?:.*\n){0,30}?---[ \t]*$", re.MULTILINE)
SOURCES_HEADING = re.compile(r"^#{1,6}[ \t]+Sources[ \t]*$", re.MULTILINE | re.IGNORECASE)  # any level: models vary it
NEXT_SECTION = re.compile(r"^#{1,2}[ \t]", re.MULTILINE)
_LINK = re.compile(r"\[\[([^\[\]|\n]{0,500})(?:\|([^\[\]\n]{0,500}))?\]\]")
_MD_LINK = re.compile(r"\[([^\[\]\n]{0,500})\]\(([^()\n]{0,500})\)")
_LETTER = re.compile(r"[^\W\d_]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORDS = re.compile(r"\w+")
# a label opening a line, after any marker, number, quote, pipe or emphasis: `User:`, `- **Ana**:`,
# `> Sam (18:01):`, `1. User said:`
_LABEL = re.compile(r"^[\W\d_]{0,40}?[^\W\d_][\w'’ .-]{0,30}?[ \t]*(?:\([^()\n]{0,40}\))?[ \t*_]*:(?=\s|[*_]|$)",
                    re.MULTILINE)
# words that are layout, not content: a table's speaker cell (`| user |`), and the letters of a timestamp
# (2026-11-02T18:00:00Z, 6:30 pm) once its digits are gone
_LAYOUT_WORDS = frozenset({"user", "assistant", "system", "human", "ai", "bot", "t", "z", "am", "pm"})
_LETTERS = re.compile(r"[^\W\d_]+")
_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"
_RELATIVE = re.compile(
    r"\b(?:(?:the\s+)?day\s+(?:before\s+yesterday|after\s+tomorrow)|yesterday|tomorrow"
    rf"|(?:last|next|this\s+coming|coming)\s+(?:week(?:end)?|month|year|{_WEEKDAY})"
    r"|(?:in\s+)?(?:a|an|one|two|three|four|five|six|seven|\d{1,3})\s+(?:days?|weeks?|months?)\s+(?:ago|from\s+now|later)"
    r"|in\s+(?:a|one|two|three|four|five|six|seven|\d{1,3})\s+(?:days?|weeks?|months?))\b", re.IGNORECASE)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_ABSOLUTE = re.compile(rf"\b\d{{4}}-\d{{1,2}}-\d{{1,2}}\b|\b{_MONTH}\s+\d{{1,2}}\b|\b\d{{1,2}}\s+{_MONTH}(?!\w)"
                       r"|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b", re.IGNORECASE)


@dataclass(frozen=True)
class Material:
    """What a model's text is judged against: `sources` it may draw on (dialog, resource, source files,
    nodes), the `kept` text it updates (may stay as it was), the request's own `instructions`, and for a
    session card the `dialog` it must not copy."""

    sources: str
    kept: str = ""
    instructions: str = ""
    dialog: str | None = None
    cited: tuple[str, ...] = ()  # a node's source files, each of which it must not paste whole


# ---- one function per rule ------------------------------------------------------------------------------

def empty(body: str) -> Finding | None:
    """Nothing but headings, blank lines, links to files and Sources sections (a heading `Sources` of any level)."""
    prose = [line for line in without_sources(body).splitlines()
             if not line.lstrip().startswith("#") and _LETTER.search(_without_file_links(line))]
    if not prose:
        return "empty", "the body has no text (only headings or sources); write what the material says"
    return None


def markup(text: str) -> Finding | None:
    """The prompt's own wrappers (`<file path=...>`, `<messages>`...), a placeholder of the answer's shape, or a
    body laid out in HTML blocks (`<div><h2>...`) instead of Markdown (HTML inside code is content)."""
    found = _MARKUP.search(text)
    if found:
        return "markup", f"it contains the prompt's markup {found.group(0)!r}; write plain Markdown"
    if _PLACEHOLDER.match(text):
        return "markup", f"{text.strip()!r} is a placeholder of the answer's shape, not content"
    found = _HTML_LAYOUT.search(_CODE.sub("", text))
    if found:
        return "markup", f"it is laid out in HTML ({found.group(0)!r}); write Markdown: ## headings, paragraphs, lists"
    return None


def frontmatter(body: str) -> Finding | None:
    """A frontmatter block pasted into the body (a leading one is the system's to strip)."""
    rest = split_frontmatter(body).body
    if _PASTED.search(rest):
        return "frontmatter", "the body contains a pasted frontmatter block (---, name: ...); leave it out"
    return None


def template(text: str) -> Finding | None:
    """Template or tool-call syntax: `{{daily_list(date=...)}}`, `{% ... %}`, `<tool_call>`."""
    found = _TEMPLATE.search(text)
    if found:
        return "template", f"it contains template or tool-call syntax {found.group(0)[:60]!r}; write the content"
    return None


def tool(name: str, body: str = "") -> Finding | None:
    """A name that is a tool's, or a body that calls a tool (`daily_list(...)`, a JSON tool call)."""
    names = set(ops.BY_NAME)
    if re.sub(r"[\s-]+", "_", name.strip().lower()) in names:
        return "tool", f"{name!r} is the name of a tool, not of what the material says"
    for word in re.finditer(r"\b([a-z]+(?:_[a-z]+)*)\(|\b([a-z]+_[a-z_]+)\b", body):
        called = word.group(1) or word.group(2)
        if called in names:
            return "tool", f"it names the tool {called!r}; memory holds what the material says, not tool calls"
    if body and text_tool_call(body) is not None:
        return "tool", "it is a tool call written as text, not content"
    return None


def instructions(text: str, material: Material) -> Finding | None:
    """Text taken from the request's own instructions rather than from the material, or a line that reads as
    an instruction to an agent (storage/text/instructions.py, the detector recall and the hooks use): memory holds
    what was said, never orders to a model, even when the material says them."""
    for line in without_sources(text).splitlines():
        found = planted.kinds(line)
        if found:
            return "instructions", (f"{line.strip()[:100]!r} reads as an instruction to an agent ({', '.join(found)}); "
                                    "memory does not file it as a fact")
    mine = _shingles(text, 4)
    if not mine or not material.instructions:
        return None
    echoed = (mine & _shingles(material.instructions, 4)) - _shingles(material.sources + "\n" + material.kept, 4)
    if len(echoed) >= 2 and len(echoed) >= ECHO_SHARE * len(mine):
        return "instructions", "it repeats the instructions instead of saying what the material says"
    return None


def copy(body: str, material: Material) -> Finding | None:
    """A card that is mostly the dialog copied verbatim, in any layout: its messages under speaker labels,
    timestamps, bullets, numbers, quotes or in a table, in any order, some left out."""
    if material.dialog is None:
        return None
    mine = _verbatim_words(body)
    kept = _copied(mine, _run_set(material.kept))
    new = len(mine) - sum(kept)
    copied = sum(c and not k for c, k in zip(_copied(mine, _run_set(material.dialog)), kept))
    if copied >= COPY_MIN_WORDS and copied >= COPY_SHARE * new:
        return "copy", (f"{copied * 100 // new}% of it is the dialog copied word for word; summarise what matters "
                        "in your own words")
    return None


def pasted(body: str, material: Material) -> Finding | None:
    """A digest node that holds one of its cited files whole, word for word, in any layout or order."""
    new = _run_set(body) - _run_set(material.kept)
    for source in material.cited:
        theirs = _verbatim_words(without_sources(split_frontmatter(source).body))
        if len(theirs) >= PASTED_MIN_WORDS and sum(_copied(theirs, new)) >= PASTED_SHARE * len(theirs):
            return "pasted", ("it pastes a source file whole; write what the sources say about the unit in your own "
                              "words, and cite them in Sources")
    return None


def relative_time(body: str, material: Material) -> Finding | None:
    """A card sentence that says when by a relative time ("next Friday") and gives no date (sentences of the
    card it updates may stay)."""
    if material.dialog is None:
        return None
    kept = {" ".join(s.split()) for s in _sentences(material.kept)}
    for sentence in _sentences(body):
        if " ".join(sentence.split()) in kept:
            continue
        found = _RELATIVE.search(sentence)
        if found and not _ABSOLUTE.search(sentence):
            return "relative_time", (f"{found.group(0)!r} in {sentence.strip()[:100]!r}: write the date it means "
                                     "(YYYY-MM-DD), counted from the message's date")
    return None


def ungrounded(text: str, material: Material) -> Finding | None:
    """A sentence (or name) of `MIN_TERMS`+ terms none of which occurs in the material."""
    known = set(terms(material.sources + "\n" + material.kept))
    for sentence in _sentences(text):
        words = set(terms(sentence))
        if len(words) >= MIN_TERMS and not words & known:
            return "ungrounded", (f"{sentence.strip()[:120]!r} shares no word with the material; write only what "
                                  "the material says")
    return None


def duplicate_sources(body: str) -> Finding | None:
    """The same line twice in the `## Sources` section."""
    seen = set()
    for line in _sources_section(body).splitlines():
        key = " ".join(line.split()).lower()
        if key in seen and key.strip("-* "):
            return "duplicate_sources", f"the source line {line.strip()[:120]!r} appears twice; list each once"
        seen.add(key)
    return None


# ---- composed --------------------------------------------------------------------------------------------

def check(name: str | None, body: str | None, material: Material) -> Finding | None:
    """The first rule a written name and body break (None: both may be written). A None body is not
    judged (the node keeps its text); a None name neither."""
    if name is not None:
        for finding in (markup(name), template(name), tool(name), ungrounded(name, material)):
            if finding:
                return finding
    if body is None:
        return None
    text = split_frontmatter(body).body
    for finding in (empty(text), markup(body), frontmatter(body), template(body), tool("", body),
                    instructions(text, material), copy(text, material), pasted(text, material),
                    relative_time(without_sources(text), material), ungrounded(without_sources(text), material),
                    duplicate_sources(text)):
        if finding:
            return finding
    return None


# ---- helpers ---------------------------------------------------------------------------------------------

def _sources_section(body: str) -> str:
    match = SOURCES_HEADING.search(body)
    if not match:
        return ""
    following = NEXT_SECTION.search(body, match.end())
    return body[match.end():following.start() if following else len(body)]


def without_sources(body: str) -> str:
    """The body without its Sources sections (every one: a model may write two)."""
    while (match := SOURCES_HEADING.search(body)) is not None:
        section = _sources_section(body)
        body = body[:match.start()] + body[match.end() + len(section):]
    return body


def _without_file_links(line: str) -> str:
    """A line without the links that only name a file: wikilinks keep their alias, Markdown links their text
    unless that text is a path too."""
    return _MD_LINK.sub(lambda m: "" if _is_path(m.group(1)) else m.group(1), _plain(line))


def _is_path(text: str) -> bool:
    return not text.strip() or "/" in text or text.strip().lower().endswith((".md", ".jsonl"))


def _plain(text: str) -> str:
    """Text with wikilinks reduced to their alias (a link's path is not content)."""
    return _LINK.sub(lambda m: m.group(2) or "", text)


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(_plain(text)) if s.strip()]


def _verbatim_words(text: str) -> list[str]:
    """The words of a text without its layout, lowercased: only runs of letters (no timestamps, numbers,
    list or quote markers, pipes, emphasis or quotes), no speaker label opening a line (`User:`, `**Ana**:`)
    and no `_LAYOUT_WORDS`. A transcript and the same messages laid out by a model give the same stream."""
    text = _LABEL.sub(" ", _plain(text)).lower()
    return [word for word in _LETTERS.findall(text) if word not in _LAYOUT_WORDS]


def _runs(words: list[str]) -> Iterator[str]:
    """Each `VERBATIM_RUN`-word run of `words` in order, joined by spaces."""
    return map(" ".join, zip(*(words[i:] for i in range(VERBATIM_RUN))))


def _run_set(text: str) -> set[str]:
    return set(_runs(_verbatim_words(text)))


def _copied(words: list[str], runs: set[str]) -> bytearray:
    """For each of `words`, 1 when it lies in a run of `VERBATIM_RUN`+ words that are all in `runs`."""
    marks = bytearray(len(words))
    if runs:
        starts = [i for i, run in enumerate(_runs(words)) if run in runs]
        for i in starts:
            marks[i:i + VERBATIM_RUN] = b"\x01" * VERBATIM_RUN
    return marks


def _shingles(text: str, size: int) -> set[tuple[str, ...]]:
    words = _WORDS.findall(_plain(text).lower())
    return {tuple(words[i:i + size]) for i in range(len(words) - size + 1)}
