"""Agent-host hooks: Claude Code's events (`events`, recording turns with `engine.access.turns.record_turn`) and the
memory put before the agent (`context`). `claude_code` is the console script's fast way in (dreamflow/entry.py)."""

from dreamflow.hooks.events import claude_code

__all__ = ["claude_code"]
