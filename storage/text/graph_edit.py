"""Mechanical graph edits: line anchors that follow their text, relinking, and the link-preserving text
compositions behind link mining, merge and split.

Nothing here calls an LLM: the governance flows decide *what* to change, these functions make the change
without losing a link. Each composition returns text that keeps every wikilink of its inputs (a missing one is
added back, under `## Sources` when it was a source, else under `## Related`), so callers can check
`link targets before ⊆ link targets after` and refuse a write that breaks it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import duckdb

from storage.errors import Conflict, DreamflowError, InvalidInput
from storage.files import journal
from storage.files.workspace import Workspace, content_hash, fsync_folder, special_kind
from storage.index import indexer as index
from storage.index.tokenize import terms
from storage.text.markdown import parse_links, rewrite_links, split_frontmatter
from storage.text.model import Link

RAW_PREFIXES = ("resource/", "session/")  # raw material: never rewritten, its links are not the graph's
ARCHIVE = "digest/archive/"
REINDEX_ONE_BY_ONE = 8  # above this many rewritten files, one reconcile beats a commit per file (~0.1 s each)
_LINE_RANGE = re.compile(r"^L(\d+)(?:-L?(\d+))?$")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")


# ---- line anchors ----------------------------------------------------------------------------------------

def line_ranges(anchor: str | None) -> list[tuple[int, int]] | None:
    """[(first, last)] of a line anchor (`L3`, `L3-L9`, `L9-L10,L15-L20`); None for other anchors."""
    if not anchor:
        return None
    ranges = []
    for part in anchor.split(","):
        m = _LINE_RANGE.match(part.strip())
        if not m:
            return None
        first = int(m.group(1))
        ranges.append((first, int(m.group(2) or first)))
    return ranges


def follow_anchor(anchor: str | None, before: list[str], after: list[str]) -> str | None:
    """The anchor pointing at the same lines once the text went from `before` to `after` (lists of lines).

    Line ranges move to where their exact lines are now (nearest match); None when any range's text is gone
    (or is blank). Other anchors (headings, blocks) are returned unchanged.
    """
    ranges = line_ranges(anchor)
    if ranges is None:
        return anchor
    moved = []
    for first, last in ranges:
        block = before[first - 1:last] if 1 <= first <= last <= len(before) else []
        at = _find_lines(after, block, first - 1)
        if at is None:
            return None
        moved.append(f"L{at + 1}" if first == last else f"L{at + 1}-L{at + len(block)}")
    return ",".join(moved)


def _find_lines(lines: list[str], block: list[str], near: int) -> int | None:
    if not block or not any(line.strip() for line in block):
        return None
    starts = [i for i, line in enumerate(lines) if line == block[0] and lines[i:i + len(block)] == block]
    return min(starts, key=lambda i: abs(i - near)) if starts else None


# ---- relinking and moving (journaled: see storage/files/journal.py) -------------------------------------------

def relink(con: duckdb.DuckDBPyConnection, ws: Workspace, target: str, new_target: str,
           before: str | None = None) -> dict:
    """Point every link to `target` at `new_target`, in every file outside resource/ and session/.

    Aliases and predicates stay as written. Line anchors follow their lines: from the text `target` had
    (`before`, default the file at `target` now) to the text at `new_target`; an anchor whose lines are gone
    is dropped. With neither text known, anchors are kept. `target == new_target` (with `before`) only
    re-anchors links into a rewritten file. Returns {target, new_target, rewritten: [{path, links,
    anchors_dropped}]}; changed files are re-indexed. Journaled: `storage.files.recovery` finishes a crashed one.
    """
    if target == new_target and before is None:
        raise InvalidInput("relinking a path to itself needs `before`, the text it had")
    _check_target(new_target)
    sources = [r[0] for r in con.execute(
        "SELECT DISTINCT source FROM links WHERE target = ? ORDER BY source", [target]).fetchall()]
    plan = {"target": target, "new_target": new_target,
            "before": before if before is not None else _text_or_none(ws, target),
            "files": _hashes(ws, [s for s in sources if not s.startswith(RAW_PREFIXES)])}
    with journal.intent(ws, "relink", plan):
        rewritten = replay_relink(con, ws, plan)
    return {"target": target, "new_target": new_target, "rewritten": rewritten}


def move(con: duckdb.DuckDBPyConnection, ws: Workspace, old: str, new: str, overwrite: bool = False) -> dict:
    """Rename file `old` to `new` (an existing file there only replaced with `overwrite`) and rewrite `[[old]]`
    links in every Markdown file outside resource/ and session/ that has them (anchors, aliases, predicates
    kept); re-indexes. Journaled: after a crash, `storage.files.recovery` finishes it (rename done) or drops it
    (rename not done, nothing changed yet)."""
    old_path, new_path = ws.regular(old), ws.resolve(new)
    if os.path.lexists(new_path) and (not overwrite or new_path.is_dir() or special_kind(new_path) is not None):
        raise Conflict(f"{new} already exists; move replaces an existing file only with overwrite"
                       if not overwrite else f"{new} is not a regular file; move never replaces it")
    plan = {"src": old, "dst": new, "files": _hashes(ws, _files_mentioning(ws, old))}
    with journal.intent(ws, "move", plan):
        new_path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(old_path, new_path)
        fsync_folder(new_path.parent)
        fsync_folder(old_path.parent)
        rewritten = replay_move(con, ws, plan)
    return {"from": old, "to": new, "rewritten": rewritten}


def replay_move(con: duckdb.DuckDBPyConnection, ws: Workspace, plan: dict) -> list[dict]:
    """Rewrite the links of a move's `plan` in the files still as planned (the rename done); re-index."""
    src, dst = plan["src"], plan["dst"]
    rewritten = []
    for rel, text in unchanged(ws, plan["files"]):
        changed, count = rewrite_links(text, src, dst)
        if count:
            write_text(ws, rel, changed)
            rewritten.append({"path": rel, "links": count})
    index.remove_file(con, src, ws)
    reindex(con, ws, [dst, *plan["files"]])  # all planned files: a crashed run rewrote some unindexed
    return rewritten


def replay_relink(con: duckdb.DuckDBPyConnection, ws: Workspace, plan: dict) -> list[dict]:
    """Rewrite the links of a relink's `plan` in the files still as planned, anchors following; re-index."""
    target, new_target, old_text = plan["target"], plan["new_target"], plan["before"]
    new_text = _text_or_none(ws, new_target)
    old_lines = old_text.splitlines() if old_text is not None else None
    new_lines = new_text.splitlines() if new_text is not None else None
    rewritten = []
    for source, text in unchanged(ws, plan["files"]):
        dropped = 0

        def follow(anchor: str | None) -> str | None:
            nonlocal dropped
            if old_lines is None or new_lines is None:
                return anchor
            moved = follow_anchor(anchor, old_lines, new_lines)
            dropped += anchor is not None and moved is None
            return moved

        changed, count = rewrite_links(text, target, new_target, anchor=follow)
        if changed != text:
            write_text(ws, source, changed)
            rewritten.append({"path": source, "links": count, "anchors_dropped": dropped})
    reindex(con, ws, list(plan["files"]))  # all planned files: a crashed run rewrote some unindexed
    return rewritten


def reindex(con: duckdb.DuckDBPyConnection, ws: Workspace, paths: list[str]) -> None:
    """Re-index files just written: one by one when few, else in one reconcile transaction."""
    if len(set(paths)) > REINDEX_ONE_BY_ONE:
        index.reconcile(con, ws)
    else:
        for path in dict.fromkeys(paths):
            index.index_file(con, ws, path, force=True)


def _check_target(new_target: str) -> None:
    if not new_target.strip() or any(c in new_target for c in "[]|#\n\r"):
        raise InvalidInput(f"{new_target!r} cannot be a wikilink target (no [ ] | # or line breaks)")


def _files_mentioning(ws: Workspace, target: str) -> list[str]:
    """Markdown files outside resource/ and session/ whose bytes contain `target` (cheap pre-filter)."""
    needle = target.encode()
    found = []
    for rel in ws.iter_files():
        if rel.endswith(".md") and not rel.startswith(RAW_PREFIXES):  # names not UTF-8: never yielded
            data = _bytes_or_none(ws, rel)
            if data is not None and needle in data:
                found.append(rel)
    return found


def _hashes(ws: Workspace, paths: list[str]) -> dict[str, str]:
    """{path: content hash} of the files an operation is about to rewrite (missing ones left out)."""
    out = {}
    for rel in paths:
        data = _bytes_or_none(ws, rel)
        if data is not None:
            out[rel] = content_hash(data)
    return out


def unchanged(ws: Workspace, files: dict[str, str]):
    """(path, text) of the planned files whose content still has the recorded hash (not yet rewritten).
    Text is decoded with surrogateescape, so bytes that are not UTF-8 survive the rewrite unchanged."""
    for rel, digest in files.items():
        data = _bytes_or_none(ws, rel)
        if data is not None and content_hash(data) == digest:
            yield rel, data.decode("utf-8", "surrogateescape")


def write_text(ws: Workspace, rel: str, text: str) -> None:
    ws.write_bytes(rel, text.encode("utf-8", "surrogateescape"))


def _bytes_or_none(ws: Workspace, rel: str) -> bytes | None:
    try:
        return ws.read_bytes(rel)
    except (OSError, DreamflowError):
        return None


def _text_or_none(ws: Workspace, rel: str) -> str | None:
    """UTF-8 text of a file; None when it is missing, special or not valid UTF-8."""
    data = _bytes_or_none(ws, rel)
    try:
        return data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        return None


# ---- sections ----------------------------------------------------------------------------------------------

def section_lines(body: str, title: str) -> tuple[int, int] | None:
    """0-based [start, end) line range of the `## title` section of `body` (heading line included, ending
    at the next heading of level 1 or 2; fenced code ignored), or None when there is none."""
    if not re.search(rf"^##[ \t]+{re.escape(title)}[ \t#]*$", body, re.MULTILINE | re.IGNORECASE):
        return None
    lines = body.split("\n")
    start = None
    fence = None
    for i, line in enumerate(lines):
        if not line or line[0] not in "#`~ \t":
            continue
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            marker = stripped[:3]
            fence = None if fence == marker else (fence or marker)
            continue
        if fence:
            continue
        m = _HEADING.match(line)
        if not m or len(m.group(1)) > 2:
            continue
        if start is not None:
            return start, i
        if len(m.group(1)) == 2 and m.group(2).strip().lower() == title.lower():
            start = i
    return (start, len(lines)) if start is not None else None


def add_to_section(body: str, title: str, items: list[str], before: str | None = None) -> str:
    """`body` with `items` (lines) appended to its `## title` section, created when missing: placed before
    the `## before` section if there is one, else at the end."""
    if not items:
        return body
    lines = body.rstrip("\n").split("\n")
    found = section_lines("\n".join(lines), title)
    if found:
        start, end = found
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        lines[end:end] = items
        return "\n".join(lines) + "\n"
    block = ["", f"## {title}", "", *items, ""]
    anchor = section_lines("\n".join(lines), before) if before else None
    if anchor:
        lines[anchor[0]:anchor[0]] = block[1:]
        return "\n".join(lines) + "\n"
    return "\n".join(lines + block)


def source_lines(text: str) -> list[str]:
    """The lines of the `## Sources` section of a file's body that hold a wikilink."""
    fm = split_frontmatter(text)
    found = section_lines(fm.body, "Sources")
    if not found:
        return []
    lines = fm.body.split("\n")[found[0] + 1:found[1]]
    return [line for line in lines if parse_links(line)]


def link_targets(text: str) -> set[str]:
    """Targets of every wikilink in a file's text (frontmatter included)."""
    return {link.target for link in parse_links(text)}


# ---- compositions ------------------------------------------------------------------------------------------

@dataclass
class Proposal:
    """A link to add to a node: where possible woven into prose by replacing the exact phrase `old` with
    `new` (the same words plus the wikilink), else listed under `## Related` with `reason`."""

    target: str
    old: str | None = None
    new: str | None = None
    reason: str = ""
    predicate: str | None = None
    name: str | None = None


def weave(body: str, proposals: list[Proposal]) -> tuple[str, list[dict]]:
    """Add each proposed link to `body`; returns the new body and, per link, {target, how: woven|related}.

    A phrase edit is applied only when `old` occurs exactly once outside the Sources section, `new` links
    `target`, keeps every link and word of `old`, and adds no other link; otherwise the link is listed.
    """
    report, related = [], []
    for p in proposals:
        if p.target in link_targets(body):
            continue
        if _phrase_edit_ok(body, p):
            body = body.replace(p.old, p.new, 1)
            report.append({"target": p.target, "how": "woven"})
        else:
            related.append(related_item(Link(p.target, 0, predicate=p.predicate, alias=p.name), p.reason))
            report.append({"target": p.target, "how": "related"})
    return add_to_section(body, "Related", related, before="Sources"), report


def _phrase_edit_ok(body: str, p: Proposal) -> bool:
    if not p.old or not p.new or body.count(p.old) != 1:
        return False
    sources = section_lines(body, "Sources")
    if sources:
        offset = len("\n".join(body.split("\n")[:sources[0]]))
        if body.index(p.old) >= offset:
            return False
    old_links, new_links = link_targets(p.old), link_targets(p.new)
    if p.target not in new_links or not old_links <= new_links or new_links - old_links - {p.target}:
        return False
    return set(terms(p.old)) <= set(terms(p.new))


def related_item(link: Link, reason: str = "") -> str:
    """A `## Related` list item for `link` (predicate, anchor and alias kept)."""
    anchor = f"#{link.anchor}" if link.anchor else ""
    alias = f"|{link.alias}" if link.alias else ""
    pred = f"{link.predicate}:: " if link.predicate else ""
    reason = " ".join(reason.split())
    return f"- {pred}[[{link.target}{anchor}{alias}]]" + (f": {reason}" if reason else "")


def restore_links(body: str, originals: list[str], keep: set[str] = frozenset(), skip: set[str] = frozenset()) -> str:
    """`body` plus every link of the `originals` (file texts) it lost: source lines are copied into its
    `## Sources`, other links listed under `## Related`. Targets in `keep` count as present, `skip` are left
    out (e.g. the merged nodes themselves)."""
    have = link_targets(body) | set(keep) | set(skip)
    sources, related = [], []
    for text in originals:
        for line in source_lines(text):
            if link_targets(line) - have and line not in sources:
                sources.append(line)
                have |= link_targets(line)
    for text in originals:
        for link in parse_links(text):
            if link.target not in have:
                related.append(related_item(link))
                have.add(link.target)
    body = add_to_section(body, "Related", related, before="Sources")
    return add_to_section(body, "Sources", sources)


def merge_body(content: str, survivor_text: str, victim_text: str, survivor: str, victim: str,
               frontmatter_links: set[str] = frozenset()) -> str:
    """The survivor's new body: the merged `content` plus every link of either node it lost (links between
    the two are left to relinking). `frontmatter_links`: targets the survivor's frontmatter will hold."""
    body = split_frontmatter(content).body.strip("\n") + "\n"
    return restore_links(body, [survivor_text, victim_text], keep=frontmatter_links, skip={survivor, victim})


def split_bodies(original: str, path: str, overview: str, parts: list[dict],
                 part_paths: list[str]) -> tuple[str, list[str]]:
    """Bodies of the hub (kept at `path`) and of each part after a split.

    Each part ({name, description, content, sources}) links to the hub and its siblings and carries the
    original `## Sources` lines of its `sources` (all of them when it names none the original cites). The hub
    gets `overview`, a `## Parts` list, every other link of the original no part kept, and the original
    `## Sources` section in full, so no source or link is lost.
    """
    lines = source_lines(original)
    cited = set().union(*(link_targets(line) for line in lines)) if lines else set()
    bodies = []
    for i, part in enumerate(parts):
        body = split_frontmatter(part.get("content") or "").body.strip("\n") + "\n"
        siblings = [Link(path, 0)] + [Link(p, 0, alias=parts[j]["name"]) for j, p in enumerate(part_paths) if j != i]
        body = add_to_section(body, "Related", [related_item(s) for s in siblings
                                                if s.target not in link_targets(body)], before="Sources")
        wanted = set(part.get("sources") or []) & cited or cited
        carried = [line for line in lines if link_targets(line) & wanted and line not in body]
        bodies.append(add_to_section(body, "Sources", carried))
    hub = split_frontmatter(overview).body.strip("\n") + "\n"
    listing = [related_item(Link(p, 0, alias=part["name"]), part.get("description") or "")
               for p, part in zip(part_paths, parts)]
    hub = add_to_section(add_to_section(hub, "Parts", listing), "Sources", [x for x in lines if x not in hub])
    kept = set().union(*(link_targets(b) for b in bodies)) if bodies else set()
    return restore_links(hub, [original], keep=kept, skip={path}), bodies
