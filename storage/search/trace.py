"""`trace`: where a sentence of memory comes from, down to the original messages.

A fact (storage/text/facts.py) cites its sources: a node fact the card facts it was consolidated from
(`daily/<date>/<card>.md#^f2`), a card fact the dialog records (`session/dialog/<id>.jsonl#L3`, the jsonl's line)
or a resource's lines (`resource/x.md#L4-L9`). `trace` follows those links from one fact, recursively, and
returns the tree of steps:

- `fact`: a fact line (its sentence, kind, about, date, since/until, status in a digest node, replaced_by);
- `line`: a line of an older prose card or node (no fact), followed through the wikilinks written on it
  (best effort);
- `record`: one dialog record (role, created_at, text, id), the jsonl line it is on;
- `lines`: lines of a resource or other raw file (start/end line, text);
- `file`: a whole file cited without an anchor (or with a heading anchor);
- `broken`: a link that leads nowhere: a missing file, an anchor the file lacks, a path outside the workspace's
  memory, a record that is not JSON, a cycle (the step is already on the chain above it).

Bounded: at most MAX_DEPTH links deep and MAX_STEPS steps (then `truncated`), each text cut at TEXT_CHARS.
Nothing is raised for what the chain meets; every broken step is also listed in `problems`. Pure: files are
read through the `read` function the caller passes (storage.memory.Memory.trace checks each path).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Callable

from storage.errors import DreamflowError, InvalidInput, NotFound
from storage.text import facts, validity
from storage.text.graph_edit import line_ranges
from storage.text.markdown import block_ids, parse_links

MAX_DEPTH = 8  # links followed from the fact traced
MAX_STEPS = 200  # steps in one answer
TEXT_CHARS = 2_000  # most characters of one step's text
RAW = ("resource/", "session/")  # raw material: its lines are leaves, never followed further

Read = Callable[[str], list[str]]  # workspace path -> its lines; raises DreamflowError (missing, outside, binary)

_LINE = re.compile(r"^L?(\d+)$")


def start(path: str, fact: str | None) -> tuple[str, str]:
    """(file, anchor) of what to trace: `path#^f2` / `path#L12`, or `path` and a `fact` given as `f2`, `^f2`,
    `12`, `L12` or `path#^f2` (naming the same file). The anchor is `^id` or `L<n>`."""
    file, _, anchor = path.partition("#")
    spec = (fact or "").strip()
    if spec:
        other, hash_, ref = spec.rpartition("#")
        if hash_ and other and other.strip() != file.strip():
            raise InvalidInput(f"fact {spec!r} names another file than {file!r}")
        spec = ref if hash_ else spec
        if anchor and spec.lstrip("^") != anchor.lstrip("^"):
            raise InvalidInput(f"{path!r} and fact {fact!r} name two different facts")
        anchor = spec
    if not anchor:
        raise InvalidInput("name the fact to trace: its block id (f2), its line (12 or L12), or path#^f2")
    if _LINE.match(anchor):
        return file, "L" + _LINE.match(anchor).group(1)
    block = anchor.removeprefix("^")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,40}", block):
        raise InvalidInput(f"{anchor!r} is neither a block id (f2, ^f2) nor a line number (12, L12)")
    return file, "^" + block


def trace(read: Read, path: str, anchor: str, today: dt.date) -> dict:
    """The chain from fact `anchor` (`^id` or `L<n>`) of file `path` down to its original messages:
    {path, anchor, chain: step, steps, truncated, problems: [{path, anchor, problem}]}. Raises NotFound when
    `path` has no such fact or line (naming what it has)."""
    lines = read(path)
    tracer = _Tracer(read, today)
    tracer.files[path] = lines
    if anchor.startswith("^"):
        found = _facts(lines).get(anchor[1:])
        if found is None and anchor[1:] not in block_ids("\n".join(lines)):
            ids = [f"^{f.id}" for f in facts.parse("\n".join(lines)) if f.id]
            has = f"its facts: {', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''}" if ids else "it holds no facts"
            raise NotFound(f"{path} has no fact {anchor} ({has}; or give a line number)")
    else:
        number = int(anchor[1:])
        if not 1 <= number <= len(lines):
            raise NotFound(f"{path} has no line {number} (it has {len(lines)} lines)")
        if not lines[number - 1].strip():
            raise NotFound(f"line {number} of {path} is blank: nothing to trace")
    chain = tracer.follow(path, anchor, depth=0, above=())[0]
    return {"path": path, "anchor": anchor, "chain": chain, "steps": tracer.steps, "truncated": tracer.truncated,
            "problems": tracer.problems}


class _Tracer:
    """One trace: the files read so far, the steps made, what broke."""

    def __init__(self, read: Read, today: dt.date):
        self.read, self.today = read, today
        self.files: dict[str, list[str] | DreamflowError] = {}
        self.steps = 0
        self.truncated = False
        self.problems: list[dict] = []

    def lines(self, path: str) -> list[str]:
        """The file's lines (read once); raises what reading it raised."""
        if path not in self.files:
            try:
                self.files[path] = self.read(path)
            except DreamflowError as exc:
                self.files[path] = exc
        held = self.files[path]
        if isinstance(held, DreamflowError):
            raise held
        return held

    def follow(self, path: str, anchor: str | None, depth: int, above: tuple[str, ...]) -> list[dict]:
        """The steps one link `path#anchor` leads to (several for a range of lines)."""
        key = f"{path}#{anchor}" if anchor else path
        if key in above:
            return [self.broken(path, anchor, "cycle: this step is already on the chain above it")]
        try:
            lines = self.lines(path)
        except DreamflowError as exc:
            return [self.broken(path, anchor, str(exc))]
        if not anchor:
            return [self.step({"type": "file", "path": path, "anchor": None})]
        if anchor.startswith("^"):
            return self.block(path, lines, anchor, depth, above + (key,))
        ranges = line_ranges(anchor)
        if ranges is None:  # a heading: the file as cited
            return [self.step({"type": "file", "path": path, "anchor": anchor})]
        if any(first < 1 or last < first or last > len(lines) for first, last in ranges):
            return [self.broken(path, anchor, f"the lines are past the end of the file ({len(lines)} lines)")]
        jsonl, raw = path.endswith((".jsonl", ".ndjson")), path.startswith(RAW) or not path.endswith(".md")
        known = {} if jsonl or raw else _facts(lines, by_line=True)
        out: list[dict] = []
        for first, last in ranges:
            if raw and not jsonl:
                out.append(self.step({"type": "lines", "path": path, "anchor": f"L{first}-L{last}",
                                      "start_line": first, "end_line": last,
                                      "text": _cut("\n".join(lines[first - 1:last]))}))
                continue
            for n in range(first, last + 1):
                if self.full():
                    self.truncated = True
                    return out
                if not lines[n - 1].strip():
                    continue
                if jsonl:
                    out.append(self.record(path, lines, n))
                else:
                    out += self.markdown_line(path, lines, n, known.get(n), depth, above + (key,))
        return out

    def block(self, path: str, lines: list[str], anchor: str, depth: int, above: tuple[str, ...]) -> list[dict]:
        fact = _facts(lines).get(anchor[1:])
        if fact is not None:
            return self.markdown_line(path, lines, fact.line, fact, depth, above)
        for n, line in enumerate(lines, 1):
            if anchor[1:] in block_ids(line):
                return self.markdown_line(path, lines, n, None, depth, above)
        return [self.broken(path, anchor, f"{path} has no block {anchor}")]

    def markdown_line(self, path: str, lines: list[str], n: int, fact: facts.Fact | None, depth: int,
                      above: tuple[str, ...]) -> list[dict]:
        """A fact step (its sources followed) or a prose line step (the links on it followed)."""
        if fact is not None:
            step = {"type": "fact", "path": path, "anchor": f"^{fact.id}" if fact.id else f"L{n}", "line": n,
                    "text": fact.text, "kind": fact.kind, "about": fact.about, "date": fact.date,
                    "since": fact.since, "until": fact.until,
                    "status": validity.fact_status(None, fact.until, self.today) if path.startswith("digest/")
                    else None, "replaced_by": fact.replaced_by}
            links = list(fact.sources)
        else:
            step = {"type": "line", "path": path, "anchor": f"L{n}", "line": n, "text": _cut(lines[n - 1].strip())}
            links = [f"{k.target}#{k.anchor}" if k.anchor else k.target for k in parse_links(lines[n - 1])]
        step = self.step(step)
        step["sources"] = []
        for link in dict.fromkeys(links):
            if depth + 1 > MAX_DEPTH or self.full():
                self.truncated = True
                break
            target, _, anchor = link.partition("#")
            step["sources"] += self.follow(target.strip() or path, anchor.strip() or None, depth + 1,
                                           above + (f"{path}#L{n}",))
        return [step]

    def record(self, path: str, lines: list[str], n: int) -> dict:
        """One dialog record: {type, path, anchor, line, role, created_at, text, id}."""
        try:
            value = json.loads(lines[n - 1])
        except ValueError:
            value = None
        if not isinstance(value, dict):
            return self.broken(path, f"L{n}", f"line {n} of {path} is not a JSON record")
        return self.step({"type": "record", "path": path, "anchor": f"L{n}", "line": n, "role": value.get("role"),
                          "created_at": value.get("created_at"), "text": _cut(_content(value.get("content"))),
                          "id": value.get("id")})

    def step(self, step: dict) -> dict:
        self.steps += 1
        return step

    def full(self) -> bool:
        return self.steps >= MAX_STEPS

    def broken(self, path: str, anchor: str | None, problem: str) -> dict:
        self.problems.append({"path": path, "anchor": anchor, "problem": problem})
        return self.step({"type": "broken", "path": path, "anchor": anchor, "problem": problem})


def _facts(lines: list[str], by_line: bool = False) -> dict:
    """{block id: fact} (or {line: fact}) of a file's lines."""
    found = facts.parse("\n".join(lines))
    return {f.line: f for f in found} if by_line else {f.id: f for f in found if f.id}



def _content(value) -> str:
    """A record's `content` as text (a list of content blocks: their texts)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_content(v.get("text") if isinstance(v, dict) else v) for v in value)
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + " […]"
