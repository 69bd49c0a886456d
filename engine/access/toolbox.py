"""What the jobs' checked writes share: a file's text as a job reads it (`read_text`), and the text a write
operation would leave (`predict`), which a job's guard judges before anything is written (the governance
jobs' link guard: a write that would drop links is `WriteRejected`).
"""

from __future__ import annotations

from storage.errors import NotFound
from storage.files.text_view import read_all, split_head
from storage.text.markdown import render_frontmatter, split_frontmatter


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
