"""`dreamflow mcp`: serve the workspace's memory over MCP on stdio (dreamflow/mcp/server.py)."""

from __future__ import annotations

import click

from dreamflow.cli.common import fail
from dreamflow.mcp.server import TOOL_SETS
from storage.errors import DreamflowError


@click.command("mcp")
@click.option("--tools", "tool_set", type=click.Choice(TOOL_SETS), default="default", show_default=True,
              help="Tool set: the short one for agents, or every memory operation.")
@click.option("--workspace", "-w", "workspace", default=None, metavar="NAME|DIR",
              help="The connection's default workspace (tools may name any registered one).")
@click.pass_obj
def mcp(obj, tool_set: str, workspace: str | None) -> None:
    """Serve the workspace's memory to an agent host over MCP (stdio).

    Hosts (Claude Code, Claude Desktop, Cursor, Codex) spawn this command. Calls go to the running
    service (`dreamflow start`) when there is one, else run in this process; several hosts may run it on
    one workspace at once. The service itself serves the same tools over HTTP at /mcp.
    """
    from dreamflow.mcp.server import serve_stdio

    try:
        serve_stdio(workspace or obj.workspace_arg, tool_set)
    except DreamflowError as exc:  # before serving: e.g. a malformed workspace registry
        fail(exc)
