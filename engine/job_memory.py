"""The memory jobs write through: every operation as usual, but a job (a flow task or an agent tool call)
may put at most `DREAMFLOW_MAX_WRITE_CHARS` characters (default 100,000) into a card or node in one call.

LLM output is bounded twice: the LLM client caps reply tokens, and this caps what a job may write with it,
so a runaway answer cannot leave a 30 MB card. A write over the cap is refused (`TooLarge`, nothing written):
an agent gets it back as a tool error and can write less; a task fails its unit, whose input is then not
checkpointed and is retried on the next run. Only LLM-written folders are capped (`daily/`, `digest/`); raw
material (session logs, resources) is written as it comes.
"""

from __future__ import annotations

from engine import ops
from engine.settings import Settings
from storage.errors import InvalidInput

CAPPED_FOLDERS = ("daily/", "digest/")
TEXT_PARAMS = {"write": "content", "create": "content", "append": "content", "prepend": "content", "edit": "new"}


class TooLarge(InvalidInput):
    """A job tried to write more into one card or node than `DREAMFLOW_MAX_WRITE_CHARS` allows."""


class JobMemory:
    """`memory` (a `Memory` or `RemoteMemory`) with writes into cards and nodes capped at `limit` chars."""

    def __init__(self, memory, limit: int | None = None):
        self.memory = memory
        self.limit = Settings().max_write_chars if limit is None else limit

    def __repr__(self) -> str:
        return f"JobMemory({self.memory!r}, limit={self.limit})"

    def __getattr__(self, name: str):
        attr = getattr(self.memory, name)
        if name not in TEXT_PARAMS:
            return attr
        names = [p.name for p in ops.parameters(ops.BY_NAME[name])]

        def capped(*args, **kwargs):
            given = {**dict(zip(names, args)), **kwargs}
            self.check(str(given.get("path") or ""), given.get(TEXT_PARAMS[name]) or "")
            return attr(*args, **kwargs)

        capped.__doc__ = getattr(attr, "__doc__", None)
        return capped

    def check(self, path: str, text: str) -> None:
        """Refuse `text` for `path` when it is a card or node and longer than the cap."""
        if len(text) > self.limit and path.replace("\\", "/").lstrip("./").startswith(CAPPED_FOLDERS):
            raise TooLarge(f"a job may write at most {self.limit:,} characters into a card or node at once "
                           f"(DREAMFLOW_MAX_WRITE_CHARS); {path} got {len(text):,}: write a shorter text")
