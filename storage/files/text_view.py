"""A file's text as `read` shows it: bytes decoded, lines paged within a size, the frontmatter head apart."""

from __future__ import annotations

from storage.errors import Conflict

READ_CHARS = 20_000  # default size of one `read` answer (about 5,000 tokens); the rest is paged by start_line
READ_CHARS_MAX = 1_000_000  # the most one `read` answer may hold, whatever max_chars asks


def decode(rel: str, data: bytes, errors: str = "replace") -> str:
    """A file's bytes as text; a binary file (a NUL byte near the start) is a Conflict."""
    if b"\x00" in data[:8192]:
        raise Conflict(f"{rel} is a binary file; use download (CLI, HTTP) or its dreamflow:// resource (MCP) "
                       "to get the bytes")
    return data.decode("utf-8", errors=errors)


def text_lines(rel: str, data: bytes) -> list[str]:
    """A text file's lines as `read` shows them (BOM dropped) and search cites them (`split_lines`)."""
    from storage.text.model import split_lines

    return split_lines(decode(rel, data).removeprefix("\ufeff"))


def page(lines: list[str], first: int, last: int, numbered: bool, max_chars: int) -> tuple[str, int, dict | None]:
    """(text, lines shown, cut) of lines first..last within max_chars: whole lines, at least one; a first line
    longer than the page is cut (`cut`: {line, shown_chars, chars})."""
    parts: list[str] = []
    size = 0
    for n in range(first, last + 1):
        line = lines[n - 1]
        part = f"{n:>6}\t{line}\n" if numbered else line + "\n"
        if size + len(part) > max_chars:
            if parts:
                break
            keep = max(0, max_chars - (len(part) - len(line)))
            parts.append(f"{n:>6}\t{line[:keep]}\n" if numbered else line[:keep] + "\n")
            return "".join(parts), 1, {"line": n, "shown_chars": keep, "chars": len(line)}
        parts.append(part)
        size += len(part)
    return "".join(parts), len(parts), None


def read_all(memory, path: str) -> str:
    """The whole text of a file as `read` numbers its lines, with no size bound (for Dreamflow's own jobs;
    agents page with `read`) of any memory (`Memory`, `RemoteMemory`): the pages of `read` joined, or the decoded
    bytes when a line is longer than a page."""
    parts, at = [], None
    while True:
        answer = memory.read(path, start_line=at, numbered=False, max_chars=READ_CHARS_MAX)
        if answer["cut_line"]:
            rel, data = memory.download_content(path)
            return "".join(line + "\n" for line in text_lines(rel, data))
        parts.append(answer["content"])
        at = answer["next_start_line"]
        if at is None:
            return "".join(parts)


def split_head(rel: str, text: str) -> tuple[str, str]:
    """(frontmatter block with its fences, body) of a Markdown file's text; ("", text) for other files. A
    malformed block still counts as the head, so body-only operations never touch it."""
    from storage.text.markdown import file_kind, split_frontmatter

    if file_kind(rel) != "markdown":
        return "", text
    fm = split_frontmatter(text)
    if fm.raw is None:
        return "", text
    lines = text.splitlines(keepends=True)
    return "".join(lines[:fm.end_line]), "".join(lines[fm.end_line:])
