"""The CLI, HTTP, MCP tool and jobs references in docs/, generated from the operation registry (`engine.ops`)
and the jobs registry (`engine.jobs`).

    python -m dreamflow.docs_gen            rewrite docs/cli.md, docs/http.md, docs/mcp-tools.md and
                                            docs/jobs-reference.md
    python -m dreamflow.docs_gen --check    exit 1 (naming the stale files) when they differ from the code

The CLI reference is each command's `--help` as click prints it at a fixed width (the generated memory
commands and the extensions); the HTTP reference is the `/ops/<name>` routes with their request fields; the
MCP reference is the tools of `dreamflow.mcp.server` with their annotations and input fields; the jobs
reference is every job with its parameters, defaults and help, and where each surface offers it. The output
depends only on the code (no environment, no clock, declaration order), so regenerating after a change to
an operation, a parameter's help text or a command is one command, and tests/test_docs.py fails until it ran.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100  # the CLI help's width (the `dreamflow` group's max_content_width)
COMMAND = "python -m dreamflow.docs_gen"
HEADER = (f"<!-- Generated from engine/ops.py, engine/jobs.py and the command definitions by `{COMMAND}`: do not "
          "edit by hand. -->\n\n")


def render_all() -> dict[str, str]:
    """Workspace-relative doc path -> its generated Markdown."""
    return {"docs/cli.md": cli_reference(), "docs/http.md": http_reference(), "docs/mcp-tools.md": mcp_reference(),
            "docs/jobs-reference.md": jobs_reference()}


# ---- CLI -------------------------------------------------------------------------------------------------

def cli_reference() -> str:
    from dreamflow.cli import cli

    # The group's own context settings (`-h`): click caches a command's help option from the first context it
    # sees, so a context without them would render differently after any earlier invocation in the process.
    settings = {**cli.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    root = click.Context(cli, info_name="dreamflow", **settings)
    parts = [HEADER, "# Command line reference\n\n",
             "Every command takes `--json` for machine-readable output (an error is then a JSON object on stdout). "
             "Exit codes:\n\n", _exit_codes(), _help_block(cli, root)]
    for name in cli.list_commands(root):
        parts.append(_command_section(cli.get_command(root, name), name, root))
    return "".join(parts)


def _exit_codes() -> str:
    """A table of exit codes and the errors that exit with them (every `DreamflowError` subclass)."""
    from storage import errors

    by_code: dict[int, list[type]] = {}
    for error in vars(errors).values():
        subclass = isinstance(error, type) and issubclass(error, errors.DreamflowError) and error is not errors.DreamflowError
        if subclass and "exit_code" in vars(error):  # declares its own code (one sharing its parent's: listed once)
            by_code.setdefault(error.exit_code, []).append(error)
    rows = ["| code | meaning |", "|---|---|", "| 0 | success |", "| 1 | an unexpected error |"]
    for code in sorted(by_code):
        meanings = sorted(f"`{e.__name__}`: {(inspect.getdoc(e) or '').split(chr(10) * 2)[0]}" for e in by_code[code])
        rows.append(f"| {code} | {_cell('<br>'.join(meanings))} |")
    return "\n".join(rows) + "\n\n"


def _command_section(command: click.Command, name: str, parent: click.Context) -> str:
    ctx = click.Context(command, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH)
    parts = [f"## `{ctx.command_path}`\n\n", _help_block(command, ctx)]
    if isinstance(command, click.Group):
        for sub in command.list_commands(ctx):
            parts.append(_command_section(command.get_command(ctx, sub), sub, ctx).replace("## ", "### ", 1))
    return "".join(parts)


def _help_block(command: click.Command, ctx: click.Context) -> str:
    return f"```text\n{command.get_help(ctx).rstrip()}\n```\n\n"


# ---- HTTP ------------------------------------------------------------------------------------------------

def http_reference() -> str:
    from dreamflow.http.api import DownloadRequest, UploadRequest
    from engine import ops

    parts = [HEADER, "# HTTP API reference: memory operations\n\n",
             "`dreamflow start` serves one `POST /ops/<name>` route per operation, with a JSON body of the fields "
             "below (unknown fields are refused) and a JSON answer; errors are `{\"error\": {type, message, "
             "exit_code}}` with the HTTP status of their kind. With `DREAMFLOW_API_TOKEN` set, send "
             "`Authorization: Bearer <token>`. The service's own routes (`/turn`, `/status`, `/flows/...`) and "
             "the full schemas are in the OpenAPI docs the service serves at `/docs`.\n\n"]
    for op in ops.OPS:
        if op.host_paths:  # the bytes travel in the request or the answer, never a path of the server
            model = UploadRequest if op.name == "upload" else DownloadRequest
            note = {"upload": "A JSON body with the bytes base64-encoded, or a multipart form (`file`, optional "
                              "`name`, `date`, `overwrite`); answers `{path, bytes}`.",
                    "download": "Answers the file's bytes (`application/octet-stream`)."}[op.name]
            parts.append(_section(f"POST /ops/{op.name}", note, [], _fields(model.model_json_schema())))
        else:
            parts.append(_section(f"POST /ops/{op.name}", op.help, [f"writes: {_yes(op.writes)}"],
                                  _fields(ops.json_schema(ops.request_model(op)))))
    return "".join(parts)


# ---- MCP -------------------------------------------------------------------------------------------------

def mcp_reference() -> str:
    from dreamflow.mcp.server import DEFAULT_TOOLS, tools
    from engine import ops

    parts = [HEADER, "# MCP tools reference\n\n",
             "`dreamflow mcp` (stdio) and the service's `/mcp` (streamable HTTP) offer these tools. Hosts get the "
             "default set; `dreamflow mcp --tools all` (or `DREAMFLOW_MCP_TOOLS=all` for the service) offers every "
             "tool. Unknown arguments are refused; an error is a tool result with `isError` and the CLI's message."
             "\n\n"]
    for tool in tools("all").values():
        hints = ", ".join(f"{key} {_yes(value)}" for key, value in tool.hints.items())
        facts = [f"set: {'default' if tool.name in DEFAULT_TOOLS else 'all'}", f"annotations: {hints}"]
        schema = ops.json_schema(ops.params_model(tool.name, tool.description, tool.params))
        parts.append(_section(tool.name, tool.description, facts, _fields(schema)))
    return "".join(parts)


# ---- jobs ------------------------------------------------------------------------------------------------

SURFACE_NAMES = {"cli": "the CLI", "http": "HTTP", "mcp": "the MCP tool"}


def jobs_reference() -> str:
    from deployments.serve import DEPLOYMENTS
    from engine import ops
    from engine.jobs import JOBS, TURN

    parts = [HEADER, "# Jobs reference\n\n",
             "Every job is declared once (engine/jobs.py) with its parameters as one typed request model, the "
             "same as its function's signature (the flow's, or `record_turn`'s for the turn). The CLI command, the HTTP route, the MCP tool and the "
             "Prefect deployments below are generated from that; what each job does is in docs/jobs.md. A run "
             "started over HTTP or MCP works on the caller's workspace (`workspace` is never a field).\n\n"]
    for job in (*JOBS.values(), TURN):
        route = "POST /turn" if job is TURN else f"POST /flows/{job.name}"
        facts = [f"CLI: `dreamflow {job.command}`" + (" (the operation's command, a run of the job with the "
                                                       "service)" if job.op else ""),
                 f"HTTP: `{route}`", f"MCP tool: `{job.tool}`" if job.tool else "MCP: no tool"]
        if job.name in DEPLOYMENTS:
            facts.append("deployments: " + ", ".join(f"`{name}`" for name in DEPLOYMENTS[job.name].full_names))
        facts.append(f"needs the LLM: {_yes(job.needs_llm)}")
        hidden = [f"{SURFACE_NAMES[surface]} takes no {', '.join(f'`{n}`' for n in names)}"
                  for surface, names in job.hidden.items()]
        if job.args:
            hidden.append("positional on the CLI: " + ", ".join(f"`{n}`" for n in job.args))
        model = ops.params_model(job.name, job.summary, job.parameters())
        parts.append(_section(f"{job.name}", job.summary, facts + hidden, _fields(ops.json_schema(model))))
    return "".join(parts)


# ---- shared ------------------------------------------------------------------------------------------------

def _section(title: str, description: str, facts: list[str], fields: str) -> str:
    lines = [f"## `{title}`\n\n", f"{description.strip()}\n\n"]
    if facts:
        lines.append("; ".join(facts) + "\n\n")
    lines.append(fields)
    return "".join(lines)


def _fields(schema: dict) -> str:
    """A Markdown table of a JSON schema's properties: name, type, required or default, description."""
    properties = schema.get("properties", {})
    if not properties:
        return "No fields.\n\n"
    required = set(schema.get("required", []))
    rows = ["| field | type | required / default | description |", "|---|---|---|---|"]
    for name, prop in properties.items():
        need = "required" if name in required else f"`{json.dumps(prop.get('default'), ensure_ascii=False)}`"
        rows.append(f"| `{name}` | {_type(prop)} | {need} | {_cell(prop.get('description', ''))} |")
    return "\n".join(rows) + "\n\n"


def _type(prop: dict) -> str:
    """A JSON schema's type in words: `string`, `array of string`, `one of "a", "b"`, `integer or null`."""
    if "enum" in prop:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(_type(option) for option in prop["anyOf"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"array of {_type(prop.get('items', {}))}"
    return kind


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def stale() -> list[str]:
    """The checked-in references that differ from what the code generates."""
    return [path for path, text in render_all().items()
            if not (ROOT / path).is_file() or (ROOT / path).read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        outdated = stale()
        for path in outdated:
            print(f"{path} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if outdated else 0
    if args:
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    for path, text in render_all().items():
        (ROOT / path).write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
