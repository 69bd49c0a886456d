"""Agent-host hooks: Claude Code's events (`events`), the memory put before the agent (`context`) and recording a
turn from any surface (`capture`). `claude_code` is the console script's fast way in (dreamflow/entry.py)."""

from dreamflow.hooks.events import claude_code

__all__ = ["claude_code"]
