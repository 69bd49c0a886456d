"""Record a conversation turn from any surface: the CLI's `turn`, the Claude Code hook, the stdio MCP server, or
Python (`from dreamflow.hooks.capture import record_turn`).

Through the running service when one serves the workspace (it counts the turn and starts auto_memory when due);
else in this process: appended and counted, and the due run starts when the service does.
"""

from __future__ import annotations

from pathlib import Path


def record_turn(workspace: str | Path, session_id: str, messages: list[dict], compact: bool = False,
                turn_id: str | None = None) -> dict:
    """Record a turn's messages in `session/dialog/<session_id>.jsonl` and count it; `compact` asks for the
    session's summary now; `turn_id` makes a turn sent again a no-op (as in `engine.turns.record_turn`)."""
    from engine.client import connect, local_memory
    from engine.settings import Settings
    from engine.turns import TurnCounter
    from engine.turns import record_turn as record
    from storage.dialog import append_messages

    remote = connect(workspace)
    if remote is not None:
        return remote.turn(session_id, messages, compact, turn_id)
    memory = local_memory(workspace)
    counter = TurnCounter(memory.ws, Settings().turns_per_summary)
    return record(counter, lambda s, m: append_messages(memory, s, m), None, session_id, messages, compact, turn_id)
