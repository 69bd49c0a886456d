"""Agent tools: the memory operations of `engine.ops`, restricted per job in code.

A `Toolbox` offers the read tools plus the write tools, and checks every write before it happens: the path
must pass the job's `can_write` (e.g. integrate: under `digest/`; auto_memory: its own card), and an optional
`guard(path, before, after)` may reject the change (the dream's link-drop guard). A rejected path is returned
to the model as a tool error; a guard rejection is fatal (`WriteRejected` propagates and fails the unit).
The toolbox remembers what its read tools returned (`seen`, material the answer may draw on) and each
written file as it was before (`undo` puts them back when the job refuses the answer).
Tools never touch `metadata/`, outside files (upload/download), deletions or moves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from engine import ops
from storage.errors import DreamflowError, NotFound, OutOfScope, WriteRejected
from storage.text_view import read_all
from storage.markdown import render_frontmatter, split_frontmatter
from storage.text_view import read_all, split_head
from storage.workspace import Workspace

READ_TOOLS = ("read", "stat", "list", "frontmatter_get", "search", "recall", "node_search", "traverse", "daily_list")
WRITE_TOOLS = ("write", "create", "edit", "append", "prepend", "frontmatter_update", "frontmatter_delete_keys")
RESULT_CHARS = 20_000  # a tool result longer than this is cut for the prompt
READ_PAGE = RESULT_CHARS // 2  # `read` pages for agent tools unless the model asks for another size


Guard = Callable[[str, str, str], None]


class Toolbox:
    """Tools for one agent run over `memory` (paths checked against workspace `ws`); `written` lists the
    paths it changed."""

    def __init__(self, memory, ws: Workspace, can_write: Callable[[str], bool] = lambda path: False,
                 write_scope: str = "nowhere", guard: Guard | None = None):
        self.memory = memory
        self.ws = ws
        self.can_write = can_write
        self.write_scope = write_scope
        self.guard = guard
        self.written: list[str] = []
        self.seen: list[str] = []
        self._before: dict[str, str | None] = {}
        self._names = READ_TOOLS + WRITE_TOOLS

    def schemas(self) -> list[dict]:
        """Tool definitions in the chat-completions format."""
        return [{"type": "function", "function": ops.tool_schema(ops.BY_NAME[name])} for name in self._names]

    def call(self, name: str, arguments: str | dict) -> Any:
        """Run one tool call; ordinary errors come back as `{"error": ...}` for the model to read."""
        try:
            args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments or {})
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return {"error": f"invalid arguments for {name}: {exc}"}
        if name not in self._names:
            return {"error": f"unknown tool {name!r}; available: {', '.join(self._names)}"}
        try:
            if name == "read":  # a page that fits the tool result (it says where to continue)
                args.setdefault("max_chars", READ_PAGE)
            if name in WRITE_TOOLS:
                path = self._check_write(name, args)
                self._before.setdefault(path, read_text(self.memory, path))
            result = getattr(self.memory, ops.BY_NAME[name].method_name)(**args)
        except WriteRejected:
            raise
        except (DreamflowError, TypeError, ValueError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        if name in WRITE_TOOLS and isinstance(result, dict) and result.get("path"):
            self.written.append(result["path"])
        result = _cut(result)
        if name in READ_TOOLS:
            self.seen.append(json.dumps(result, ensure_ascii=False, default=str))
        return result

    def before(self, path: str) -> str | None:
        """The text `path` had before the tools first wrote it (None: it did not exist, or was not written)."""
        return self._before.get(path)

    def undo(self) -> None:
        """Put every file the tools wrote back as it was (a new one is deleted)."""
        for path, text in reversed(list(self._before.items())):
            if text is None:
                if read_text(self.memory, path) is not None:
                    self.memory.delete(path)
            else:
                self.memory.write(path, text)
        self._before.clear()

    def _check_write(self, name: str, args: dict) -> str:
        """The normalised path of an allowed write (raises when the job may not write it)."""
        path = str(args.get("path") or "")
        if path and not PurePosixPath(path).suffix and (
                name in ("write", "create") or not os.path.lexists(self.ws.resolve(path))):
            path += ".md"  # the path rule Memory applies (a suffix-less path means <path>.md)
        if not path or not self.can_write(self.ws.normalize(path)):
            raise OutOfScope(f"this job may only write {self.write_scope}; {path or 'no path'} is not allowed")
        path = self.ws.normalize(path)
        before = read_text(self.memory, path) if self.guard is not None else None
        if before is not None:
            after = predict(name, before, args)
            if after is not None:
                self.guard(path, before, after)
        return path


def read_text(memory, path: str) -> str | None:
    """The raw text of a file, or None when it does not exist."""
    try:
        return read_all(memory, path)
    except NotFound:
        return None


def predict(name: str, before: str, args: dict) -> str | None:
    """The text a write tool would leave, for the guard to judge before anything is written (None: unknown,
    e.g. an edit whose text does not match, which Memory will refuse anyway)."""
    if name in ("write", "create"):
        given = split_frontmatter(args.get("content") or "")
        meta = dict(split_frontmatter(before).meta)
        meta.update(given.meta)
        meta.update(args.get("metadata") or {})
        meta.update({k: args[k] for k in ("name", "description") if args.get(k) is not None})
        return render_frontmatter(meta, given.body)
    if name == "edit":
        old, new = args.get("old") or "", args.get("new") or ""
        head, body = split_head(args.get("path") or "node.md", before)  # edit changes the body only
        if not old or old not in body:
            return None
        return head + (body.replace(old, new) if args.get("replace_all") else body.replace(old, new, 1))
    if name in ("append", "prepend"):
        return before + "\n" + (args.get("content") or "")  # adds text only: links can't be lost
    fm = split_frontmatter(before)
    meta = dict(fm.meta)
    if name == "frontmatter_update":
        meta.update(args.get("metadata") or {})
    elif name == "frontmatter_delete_keys":
        for key in args.get("keys") or []:
            meta.pop(key, None)
    return render_frontmatter(meta, fm.body)


def _cut(result: Any) -> Any:
    text = json.dumps(result, ensure_ascii=False, default=str)
    if len(text) <= RESULT_CHARS:
        return result
    return {"truncated": True, "result": text[:RESULT_CHARS]}
