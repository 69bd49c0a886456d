"""Facts: the one-line statements cards and digest nodes are made of, in plain Markdown a person can edit.

A fact is a list item on one line: its sentence, then Dataview-style inline fields, then a block id:

    - Ana works at a bakery in Alfama. (about:: Ana) (source:: [[session/dialog/s1.jsonl#L3|2024-05-08 18:02]]) ^f2

Fields (all optional, in this order when written):
- `about`: who or what the fact is about (cards: what the dream groups by);
- `date`: the day the fact holds or happens, when the text gives one (cards);
- `since` / `until`: the fact's validity in a digest node (`until` exclusive: on that day what replaced it
  holds); a fact without `until` holds now;
- `retracted` / `reason`: the day a person said the fact is wrong and why (`dreamflow retract`,
  storage/files/retraction.py); a retracted fact is never current: a node's stands in `## History` with `until` that
  day, a card's stays in place and no job learns it again;
- `replaced_by`: the fact that replaced it (a history entry), `[[node#^id]]`;
- `source`: where it comes from: a card's facts cite the dialog records (`session/dialog/<id>.jsonl#L<n>`,
  the jsonl's line) or the resource's lines (`#L<a>-L<b>`); a node's facts cite card facts (`card#^id`); a
  person's correction cites the person and the day as words (`(source:: person 2026-12-07)`, kept as written).

A fact's sentence and field values are what a message or a model said: data, never structure. `render` (the
one writer of fact lines) neutralises in them what this module, storage/text/markdown.py or Obsidian would take for
structure (`plain_text`, `plain_value`): an inline field's `::`, a block id's `^` and a heading's `#` are
escaped with `\\` (Markdown shows them as written), so are a list marker, quote, fence or HTML tag opening the
sentence, and a wikilink into `metadata/` or out of the workspace becomes its plain words.
`parse_line(fact.render())` gives back the neutralised sentence and no field it did not set
(tests/test_fact_lines.py).

The section a fact stands under gives its kind (`## Preferences` -> preference, see `KINDS`); facts under
`## History` are no longer current. `## Sources` lists the files a node draws on. Everything else in a file
(a title, a summary paragraph, a person's notes) is kept as written: edits here are line edits, never a
re-render of the whole file.

Pure functions over text; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable

from storage.text import redact

KINDS = {  # kind -> the section heading its facts stand under, in the order sections are written
    "fact": "Facts",
    "preference": "Preferences",
    "plan": "Plans",
    "decision": "Decisions",
    "event": "Events",
    "procedure": "How-to",
    "question": "Open questions",
}
HEADINGS = {heading.lower(): kind for kind, heading in KINDS.items()}
HISTORY, SOURCES = "History", "Sources"
FIELDS = ("about", "date", "since", "until", "retracted", "reason", "replaced_by", "source")
LINK_FIELDS = ("replaced_by", "source")

_ID = r"[A-Za-z0-9][A-Za-z0-9-]{0,40}"
_FACT = re.compile(rf"^- (?P<rest>.*\S)\s+\^(?P<id>{_ID})[ \t]*$")
_FIELD = re.compile(r"\((?P<key>[a-z_]+):: (?P<value>(?:[^()\[\]]|\[\[[^\[\]]*\]\])*)\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_LINK = re.compile(r"\[\[([^\[\]|]+)(?:\|[^\[\]]*)?\]\]")
_ID_NUMBER = re.compile(r"^f(\d+)$")


@dataclass(frozen=True)
class Fact:
    """One fact line: its sentence, fields, block id, kind (from its section) and where it stands."""

    text: str
    id: str = ""
    kind: str = "fact"
    about: str | None = None
    date: str | None = None
    since: str | None = None
    until: str | None = None
    retracted: str | None = None       # the day a person retracted it (never current again)
    reason: str | None = None          # why, in their words
    replaced_by: str | None = None
    sources: tuple[str, ...] = ()      # link targets with their anchors: `path#L3`, `card.md#^f2`
    labels: tuple[str, ...] = ()       # the aliases the source links show (same order; '' for none)
    line: int = 0                      # 1-based line in the text it was read from (0: not read from a text)
    current: bool = True               # False under `## History`
    extra: dict = field(default_factory=dict, compare=False)  # fields this module does not know, kept

    def holds_on(self, day: str) -> bool:
        """Whether the fact held on `day` (YYYY-MM-DD): `since <= day < until`, open ends hold."""
        return (not self.since or self.since <= day) and (not self.until or day < self.until)

    def render(self) -> str:
        """The fact as its Markdown line."""
        parts = [f"- {plain_text(redact.redact(self.text)[0])}"]
        for key in FIELDS[:-2]:
            value = getattr(self, key)
            if value:
                parts.append(f"({key}:: {plain_value(value)})")
        if self.replaced_by:
            parts.append(f"(replaced_by:: [[{self.replaced_by}]])")
        parts += [f"({key}:: {plain_value(value)})" for key, value in self.extra.items()]
        if self.sources:
            links = ", ".join(f"[[{s}|{_plain_label(label)}]]" if label else f"[[{s}]]"
                              for s, label in zip(self.sources, self.labels or ("",) * len(self.sources)))
            parts.append(f"(source:: {links})")
        return " ".join(parts) + (f" ^{self.id}" if self.id else "")


class _Escape:
    """A `\\` that `plain_text` writes between what matches `before` and what matches `after`, so that what
    follows is not read as structure, and that `said` takes off again: one declaration for both directions."""

    def __init__(self, before: str, after: str):
        self._on = re.compile(f"{before}(?=(?:{after}))")
        self._off = re.compile(f"(?P<before>{before})\\\\(?=(?:{after}))")

    def write(self, text: str) -> str:
        return self._on.sub(lambda m: m.group(0) + "\\", text)

    def take_off(self, text: str) -> str:
        return self._off.sub(lambda m: m.group("before"), text)


# what would read as structure inside a fact's sentence (see the module docstring), escaped in this order
_FIELD_COLONS = _Escape(r"(?<![\\:])", r":{2,}")  # `(key:: v)`, `[key::v]`, `key:: v`, `key::v`
_IN_WORDS = (_FIELD_COLONS, _Escape(r"(?<!\S)", r"\^[A-Za-z0-9]"),  # a block id
             _Escape(r"(?<!\S)", r"#{1,6}(?:\s|$)"))  # a heading
_OPENING = (_Escape("^", r"[><]|`{3,}[^`]*$|~{3}|[-+*](?:\s|$)|(?P<rule>[-*_])(?:\s*(?P=rule)){2,}\s*$"),  # a block
            _Escape(r"^\d{1,9}", r"[.)](?:\s|$)"))  # an ordered list item
_WIKILINK = re.compile(r"\[\[([^\[\]\n]+?)\]\]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)")
_CODE_FIELD = r"(\([a-z_]+::)"  # what `parse_line` reads as a field even inside code: its space made a no-break one
_CODE_FIELD_ON, _CODE_FIELD_OFF = re.compile(_CODE_FIELD + " "), re.compile(_CODE_FIELD + "\u00a0")


def _all(escapes: tuple[_Escape, ...], text: str, off: bool = False) -> str:
    for escape in escapes:
        text = escape.take_off(text) if off else escape.write(text)
    return text


def plain_text(text: str) -> str:
    """A fact's sentence on one line with nothing in it read as structure: inline fields, block ids and headings
    anywhere escaped (`(until\\:: x)`, `\\^f1`, `\\## History`: Markdown shows them as written; code spans as
    written), a block opening it (`\\> `, `\\- `, `\\```...`) and wikilinks into `metadata/` or out of the
    workspace (their alias or target, as words). Idempotent: `plain_text(plain_text(t)) == plain_text(t)`."""
    text = _apart(_WIKILINK.sub(_inside_link, " ".join(str(text).split())), _WIKILINK, _escaped)  # links kept
    return _all(_OPENING, text)


def _apart(text: str, spans: re.Pattern, outside: Callable[[str], str], inside: Callable[[str], str] = str) -> str:
    """`text` with `outside` applied between the matches of `spans`, `inside` to each match."""
    at, pieces = 0, []
    for span in spans.finditer(text):
        pieces += [outside(text[at:span.start()]), inside(span.group(0))]
        at = span.end()
    return "".join(pieces) + outside(text[at:])


def _escaped(text: str) -> str:
    """`text` (no wikilink) escaped; its code spans as written, but for a field's space, made a no-break one."""
    return _apart(text, _CODE_SPAN, _escaped_words, lambda code: _CODE_FIELD_ON.sub("\\1\u00a0", code))


def _escaped_words(text: str) -> str:
    return _all(_IN_WORDS, text)


def _inside_link(match: re.Match) -> str:
    """A wikilink kept when it names a workspace file outside `metadata/`, else its alias or target as words."""
    head, _, alias = match.group(1).partition("|")
    target = head.partition("#")[0].strip().replace("\\", "/")
    parts = [p for p in target.split("/") if p not in ("", ".")]
    if not (target.startswith(("/", "~")) or _SCHEME.match(target) or ".." in parts
            or (parts and parts[0].lower() == "metadata")):
        return match.group(0)
    return " ".join((alias.strip() or head.strip()).split())


def said(text: str) -> str:
    """A fact's sentence as it was said, for people to read (the dashboard, the CLI's text): the escapes
    `plain_text` wrote taken off again (`\\::`, `\\^`, `\\#`, a block opening's `\\`, a code span's no-break
    space after a field); kept wikilinks and code spans as written. The line in the file keeps its escapes."""
    text = _apart(str(text), _WIKILINK, _unescaped)
    return _all(_OPENING, text, off=True)


def _unescaped(text: str) -> str:
    return _apart(text, _CODE_SPAN, _said_words, lambda code: _CODE_FIELD_OFF.sub("\\1 ", code))


def _said_words(text: str) -> str:
    return _all(_IN_WORDS, text, off=True)


def plain_value(value: str) -> str:
    """A field's value that ends where its field does: no brackets, parentheses or field `::` of its own."""
    return " ".join(_FIELD_COLONS.write(re.sub(r"[()\[\]]", " ", str(value))).split())


def _plain_label(label: str) -> str:
    """A source link's alias that keeps the link whole."""
    return " ".join(re.sub(r"[\[\]|()]", " ", str(label)).split())


def parse_line(line: str) -> Fact | None:
    """The fact a Markdown line holds (kind and position left for the caller), else None."""
    match = _FACT.match(line.rstrip("\r\n"))
    if not match:
        return None
    rest = match.group("rest")
    fields: dict[str, str] = {}
    first = len(rest)
    for found in _FIELD.finditer(rest):
        fields.setdefault(found.group("key"), found.group("value").strip())
        first = min(first, found.start())
    text = rest[:first].strip()
    if not text:
        return None
    sources, labels = [], []
    said = fields.pop("source", "")
    if said and not _LINK.search(said):  # a source in words (a person's correction): kept as written
        fields["source"] = said
    for found in _LINK.finditer(said):
        sources.append(found.group(1).strip())
        alias = found.group(0)[2:-2].partition("|")[2]
        labels.append(alias.strip())
    replaced = _LINK.search(fields.pop("replaced_by", ""))
    known = {k: fields.pop(k) or None for k in ("about", "date", "since", "until", "retracted", "reason")
             if k in fields}
    return Fact(text=text, id=match.group("id"), sources=tuple(sources), labels=tuple(labels),
                replaced_by=replaced.group(1).strip() if replaced else None, extra=fields, **known)


def parse(text: str) -> list[Fact]:
    """Every fact of a Markdown text (frontmatter included or not), with its line, kind and whether it is
    current; fenced code is skipped."""
    facts, kind, current, fence = [], "fact", True, None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        heading = _HEADING.match(line)
        if heading:
            title = heading.group(2).strip().lower()
            current = title != HISTORY.lower()
            kind = HEADINGS.get(title, kind if len(heading.group(1)) > 2 else "fact")
            continue
        fact = parse_line(line)
        if fact is not None:
            held = current and not fact.until and not fact.retracted
            facts.append(replace(fact, kind=kind, line=number, current=held))
    return facts


def by_id(text: str) -> dict[str, Fact]:
    return {f.id: f for f in parse(text) if f.id}


def highest_id(text: str) -> int:
    """The highest `n` of the `f<n>` block ids of `text`'s facts (0: none)."""
    return max((int(m.group(1)) for f in parse(text) if (m := _ID_NUMBER.match(f.id))), default=0)


def next_id(text: str, used: int = 0) -> str:
    """A block id no fact of `text` has, nor had up to `used`: `f<n>` past the highest."""
    return f"f{max(highest_id(text), used) + 1}"


def describe(body: str, limit: int = 240) -> str:
    """A card's or node's description: its first current facts, joined."""
    said = [f.text.rstrip(".") for f in parse(body) if f.current]
    text = "; ".join(said)
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + "..."


def has_facts(text: str) -> bool:
    return any(parse_line(line) for line in text.split("\n"))


# ---- line edits ------------------------------------------------------------------------------------------

def add(text: str, fact: Fact) -> str:
    """`text` with `fact` appended to the section of its kind (current) or `## History` (not current); a
    missing section is created: kinds in `KINDS` order, before History and Sources."""
    heading = HISTORY if not fact.current else KINDS.get(fact.kind, KINDS["fact"])
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    start, end = _section(lines, heading)
    if start is None:
        at = _new_section_at(lines, heading)
        block = ([""] if at and lines[at - 1].strip() else []) + [f"## {heading}", "", fact.render()]
        if at < len(lines):
            block.append("")
        lines[at:at] = block
    else:
        last = end
        while last > start + 1 and not lines[last - 1].strip():
            last -= 1
        lines.insert(last, fact.render())
    return "\n".join(lines) + "\n"


def update(text: str, fact_id: str, **changes) -> str:
    """`text` with the fact `fact_id` changed in place (its line re-rendered with `changes`)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        fact = parse_line(line)
        if fact is not None and fact.id == fact_id:
            lines[i] = replace(fact, **changes).render()
            return "\n".join(lines)
    raise KeyError(fact_id)


def retire(text: str, fact_id: str, until: str, replaced_by: str | None = None) -> str:
    """`text` with the fact `fact_id` moved to `## History`, closed on `until` and linked to what replaced
    it (a history entry keeps its sentence, window and sources)."""
    fact = by_id(text).get(fact_id)
    if fact is None:
        raise KeyError(fact_id)
    lines = text.split("\n")
    del lines[fact.line - 1]
    _drop_if_empty(lines, fact.line - 1)
    closed = replace(fact, until=until, replaced_by=replaced_by or fact.replaced_by, current=False)
    return add("\n".join(lines), closed)


def _drop_if_empty(lines: list[str], at: int) -> None:
    """Remove the `## kind` section around line index `at` when no line of it is left but blank ones."""
    start = at - 1
    while start >= 0 and not _HEADING.match(lines[start]):
        start -= 1
    if start < 0 or (_HEADING.match(lines[start]).group(2).strip().lower() not in HEADINGS):
        return
    end = start + 1
    while end < len(lines) and not _HEADING.match(lines[end]):
        end += 1
    if all(not line.strip() for line in lines[start + 1:end]):
        del lines[start:end]


def with_source(text: str, fact_id: str, source: str, label: str = "") -> str:
    """`text` with `source` added to the sources of fact `fact_id` (no change when it is cited already)."""
    fact = by_id(text).get(fact_id)
    if fact is None:
        raise KeyError(fact_id)
    if source in fact.sources:
        return text
    labels = fact.labels or ("",) * len(fact.sources)
    return update(text, fact_id, sources=fact.sources + (source,), labels=labels + (label,))


def cites(text: str, source: str) -> bool:
    """Whether any fact of `text` cites `source` (e.g. a card fact `card.md#^f2`): consolidated already."""
    return any(source in f.sources for f in parse(text))


def _section(lines: list[str], heading: str) -> tuple[int | None, int]:
    """(line index of `## heading`, index where its section ends) or (None, 0)."""
    for i, line in enumerate(lines):
        found = _HEADING.match(line)
        if found and found.group(2).strip().lower() == heading.lower():
            end = i + 1
            while end < len(lines) and not (_HEADING.match(lines[end]) and len(_HEADING.match(lines[end]).group(1)) <= 2):
                end += 1
            return i, end
    return None, 0


def _new_section_at(lines: list[str], heading: str) -> int:
    """Where a new `## heading` goes: after the sections that come before it in the standard order."""
    order = [*KINDS.values(), HISTORY, SOURCES]
    later = {h.lower() for h in order[order.index(heading) + 1:]} if heading in order else {HISTORY.lower(),
                                                                                               SOURCES.lower()}
    for i, line in enumerate(lines):
        found = _HEADING.match(line)
        if found and len(found.group(1)) <= 2 and found.group(2).strip().lower() in later:
            return i
    return len(lines)
