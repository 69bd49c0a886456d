"""`dreamflow hook claude-code`: the Claude Code hook (dreamflow/hooks/events.py) as a command. The console
script takes the plain form straight to the hook without loading the CLI (dreamflow/entry.py)."""

from __future__ import annotations

import click


@click.group("hook")
def hook() -> None:
    """Capture conversations from agent hosts' hooks and put memory before the agent (see docs/agents.md)."""


@hook.command("claude-code")
@click.option("--verbose", "-v", is_flag=True, help="Print what was captured on stderr.")
@click.pass_obj
def claude_code(obj, verbose: bool) -> None:
    """Claude Code hook: Stop, PreCompact, SessionEnd record the transcript's new turns; SessionStart and
    UserPromptSubmit print memory for the agent's context (a digest; recall for the prompt).

    Reads the hook's JSON from stdin. Always exits 0, so memory trouble never interrupts the session;
    problems are reported on stderr (Claude Code shows them in its debug log).
    """
    from dreamflow.hooks.events import claude_code as run_hook

    run_hook(obj.workspace_arg, verbose)
