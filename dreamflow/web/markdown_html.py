"""A memory file's Markdown as safe HTML for the dashboard: one `<div class="block">` per top-level block with
the lines it comes from, working wikilinks, and the query's words marked.

- Blocks: storage/text/outline.parse_blocks cuts the body (the same cut the index's chunks follow), lists into their
  items; each is rendered alone by marko (GFM) as a `Segment` with the file lines it comes from (the file page
  wraps it with `id="L<first line>"`, `data-start` and `data-end`), so a search hit opens the file at its lines
  and a line's "where from?" names it. A fact line (storage/text/facts.py) is left to the page, which shows it as a
  fact (dreamflow/web/fact_rows.py); its sentence is rendered by `render_inline`.
- Wikilinks `[[target#anchor|alias]]` become links to the target's file page (`#L9-L10` opens it at those
  lines, `#^f2` at that fact); a target that does not exist is marked `missing`. Typed links (`uses:: [[x]]`)
  keep their text.
- Safety: memory text is written by people and models, so raw HTML is shown as text, only http(s), mailto and
  in-page URLs are followed, and images are links, never loaded (the page loads nothing from elsewhere).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Collection, Container
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import marko
from marko import inline
from marko.ext.gfm import GFM
from marko.helpers import MarkoExtension
from marko.html_renderer import HTMLRenderer

from storage.index.tokenize import terms
from storage.text.instructions import is_instruction
from storage.text.markdown import heading_slug
from storage.text.model import split_lines
from storage.text.outline import parse_blocks

SAFE_SCHEMES = ("http", "https", "mailto")
_WORD = re.compile(r"\w+")
_LINES_ANCHOR = re.compile(r"^L(\d+)(?:-L(\d+))?")
_BLOCK_ANCHOR = re.compile(r"^\^([A-Za-z0-9][A-Za-z0-9-]*)$")

LinkTo = Callable[[str, str | None], tuple[str, bool, str | None]]  # (target, anchor) -> (href, exists, name)


class WikiLink(inline.InlineElement):
    """`[[target#anchor|alias]]` (code spans win over it: marko's CodeSpan has a higher priority)."""

    pattern = re.compile(r"\[\[([^\[\]\n]+?)\]\]")
    priority = 6
    parse_children = False

    def __init__(self, match):
        inner = match.group(1)
        head, _, alias = inner.partition("|")
        target, _, anchor = head.removesuffix("\\").partition("#")
        self.target, self.anchor = target.strip(), anchor.strip() or None
        self.alias = alias.strip() or None
        self.children = inner


class _SafeRenderer:
    """Over marko's HTML renderer (and GFM's: a mixin of the last extension comes first) the rules of the module
    docstring; `link_to` and `marked` are set per call."""

    link_to: LinkTo = staticmethod(lambda target, anchor: ("#", False, None))
    marked: frozenset[str] = frozenset()

    def render_wiki_link(self, element: WikiLink) -> str:
        href, exists, name = self.link_to(element.target, element.anchor)
        written = element.target + (f"#{element.anchor}" if element.anchor else "")
        label = element.alias or name or written
        kind = "wikilink" if exists else "wikilink missing"
        title = written if exists else f"{written}: no such file"
        return f'<a class="{kind}" href="{html.escape(href)}" title="{html.escape(title)}">{html.escape(label)}</a>'

    def render_raw_text(self, element) -> str:
        return mark(element.children, self.marked)

    def render_html_block(self, element) -> str:
        return f"<pre class=\"raw-html\">{html.escape(element.body)}</pre>\n"

    def render_inline_html(self, element) -> str:
        return html.escape(element.children)

    def render_link(self, element) -> str:
        body = self.render_children(element)
        if not _safe(element.dest):
            return body
        return f'<a href="{html.escape(element.dest)}" rel="noreferrer noopener">{body}</a>'

    def render_auto_link(self, element) -> str:
        return self.render_link(element)

    def render_url(self, element) -> str:  # GFM's bare URLs
        return self.render_link(element)

    def render_image(self, element) -> str:
        label = self.render_children(element) or html.escape(element.dest)
        if not _safe(element.dest):
            return f"[image: {label}]"
        return f'<a class="image" href="{html.escape(element.dest)}" rel="noreferrer noopener">[image: {label}]</a>'

    def render_heading(self, element) -> str:
        text = self.render_children(element)
        slug = heading_slug(_plain(element))
        return f'<h{element.level} id="h-{html.escape(slug)}">{text}</h{element.level}>\n'


_WIKI = MarkoExtension(elements=[WikiLink], renderer_mixins=[_SafeRenderer])


@dataclass(frozen=True)
class Segment:
    """A piece of the body as the page shows it: file lines `start`..`end`, its HTML (None for a fact line,
    which the page shows as a fact), whether it overlaps the lines asked for (`hit`), and its block kind."""

    start: int
    end: int
    html: str | None
    hit: bool = False
    kind: str = "paragraph"


def render_body(body: str, first_line: int, link_to: LinkTo, query: str = "",
                lines: tuple[int, int] | None = None, fact_lines: Container[int] = ()) -> list[Segment]:
    """The body (which starts at file line `first_line`) as segments: each top-level block, each item of a
    list, rendered alone; a one-line item on a file line in `fact_lines` is left for the page (html None).
    `query`'s words are marked; segments overlapping file `lines` (first, last) are `hit`."""
    outline = parse_blocks(body)
    source = outline.lines
    markdown = _markdown(link_to, query)
    out = []
    for block in outline.blocks:
        for part in (block.children or [block]) if block.kind == "list" else [block]:
            start, end = part.start + first_line, part.end + first_line
            hit = lines is not None and start <= lines[1] and end >= lines[0]
            if start == end and start in fact_lines:
                out.append(Segment(start, end, None, hit, "fact"))
                continue
            text = "\n".join(source[part.start:part.end + 1]) + "\n"
            out.append(Segment(start, end, markdown.render(markdown.parse(text)), hit, part.kind))
    return out


def render_inline(text: str, link_to: LinkTo, query: str = "") -> str:
    """One line of Markdown (a fact's sentence) as inline HTML: wikilinks working, `query`'s words marked."""
    markdown = _markdown(link_to, query)
    html_text = markdown.render(markdown.parse(text.strip())).strip()
    return html_text.removeprefix("<p>").removesuffix("</p>") if html_text.startswith("<p>") else html_text


def _markdown(link_to: LinkTo, query: str) -> marko.Markdown:
    """A marko renderer with the rules above, `link_to` for wikilinks and `query`'s words to mark (not
    thread-safe: one per call)."""
    markdown = marko.Markdown(renderer=HTMLRenderer, extensions=[GFM, _WIKI])
    markdown.parse("")  # sets the renderer up
    markdown.renderer.link_to = link_to
    markdown.renderer.marked = frozenset(terms(query)) if query else frozenset()
    return markdown


def instruction_lines(text: str, first_line: int = 1) -> list[int]:
    """The lines of a page of text that read as instructions to an agent."""
    return [n for n, line in enumerate(split_lines(text), first_line) if is_instruction(line)]


def render_source(text: str, first_line: int = 1, query: str = "", lines: tuple[int, int] | None = None,
                  instructions: Collection[int] | None = None) -> str:
    """Plain text as numbered lines (`id="L<n>"`), the query's words marked, `lines` highlighted, a line that
    reads as an instruction to an agent marked (`instruction`, storage/text/instructions.py; `instructions`: those
    lines' numbers when the caller has `instruction_lines` already, the detector being ~0.5 ms a line)."""
    marked = frozenset(terms(query)) if query else frozenset()
    flagged = set(instruction_lines(text, first_line) if instructions is None else instructions)
    rows = []
    for n, line in enumerate(split_lines(text), first_line):
        hit = " hit" if lines is not None and lines[0] <= n <= lines[1] else ""
        flag = (' instruction" title="reads as an instruction to an agent: recall and the hooks leave it out'
                if n in flagged else "")
        rows.append(f'<span class="line{hit}{flag}" id="L{n}"><a class="ln" href="#L{n}">{n}</a>'
                    f'<span class="lt">{mark(line, marked) or " "}</span></span>')
    return "".join(rows)


def compact(text: str) -> str:
    """A snippet without its blank lines (its citation says which lines it spans)."""
    return "\n".join(line for line in str(text).split("\n") if line.strip())


def mark(text: str, marked: frozenset[str] | set[str]) -> str:
    """`text` HTML-escaped, each word whose search term (storage/index/tokenize.py) is in `marked` in `<mark>`."""
    if not marked:
        return html.escape(text)
    out, at = [], 0
    for word in _WORD.finditer(text):
        if _terms_of(word.group()) & marked:
            out += [html.escape(text[at:word.start()]), "<mark>", html.escape(word.group()), "</mark>"]
            at = word.end()
    out.append(html.escape(text[at:]))
    return "".join(out)


@lru_cache(maxsize=100_000)
def _terms_of(word: str) -> frozenset[str]:
    return frozenset(terms(word))


def line_range(anchor: str | None) -> tuple[int, int] | None:
    """A wikilink anchor's first line range (`L9-L10,L15` -> (9, 10)), None for other anchors."""
    found = _LINES_ANCHOR.match(anchor or "")
    if not found:
        return None
    first = int(found.group(1))
    return first, int(found.group(2) or first)


def block_id(anchor: str | None) -> str | None:
    """A wikilink anchor's block id (`^f2` -> `f2`: the fact's anchor on its file's page), None for others."""
    found = _BLOCK_ANCHOR.match(anchor or "")
    return found.group(1) if found else None


def _safe(url: str) -> bool:
    """Whether a Markdown link's URL may be followed: http(s), mailto, or within the page (`#x`)."""
    url = url.strip()
    if url.startswith("#"):
        return True
    return urlsplit(url).scheme.lower() in SAFE_SCHEMES


def _plain(element) -> str:
    """The text of an element without markup (for heading slugs)."""
    children = element.children
    if isinstance(children, str):
        return children
    return "".join(_plain(child) for child in children)
