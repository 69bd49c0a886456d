"""CLI commands that run the memory jobs as Prefect flows in this process: `auto-memory`, `auto-resource`,
`dream`, plus `proactive` (which only reads a file, so it runs without Prefect). `reindex` and `optimize`
are plain memory operations on the CLI (no Prefect start); their flows exist for schedules and the UI.

Prefect and the flows are imported inside the command bodies, so other commands keep their fast start.
Runs go to the Prefect server of `PREFECT_API_URL`, else of the workspace's running service (they show in
its UI), else to a temporary local server Prefect starts for the command (10-30 s). A spinner runs meanwhile;
the result is a summary table, or JSON with `--json`. Exit codes: 0 success, 1 failed units, else the
error's code.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from storage.errors import DreamflowError


def register(cli: click.Group) -> None:
    """Add the flow commands to the `dreamflow` group."""
    for command in (auto_memory, auto_resource, dream, proactive):
        cli.add_command(command)


def _json_option(fn):
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(fn)


@click.command("auto-memory")
@click.option("--session-id", "-s", required=True, help="Conversation id: session/dialog/<id>.jsonl.")
@click.option("--messages", "-m", help="JSON list of messages to append first ('-' reads stdin).")
@click.option("--file", "messages_file", type=click.File("r", encoding="utf-8"), help="Read the messages JSON from a file.")
@click.option("--date", help="Day of the card (YYYY-MM-DD); default: the latest message's day, else today.")
@click.option("--hint", help="A hint for the summary (what matters to you).")
@_json_option
@click.pass_obj
def auto_memory(obj, session_id: str, messages: str | None, messages_file, date: str | None, hint: str | None,
                as_json: bool) -> None:
    """Summarise a conversation's not-yet-summarised messages into its daily card."""
    parsed = _messages(messages, messages_file)
    params = {"session_id": session_id, "messages": parsed, "date": date, "hint": hint}
    _run(obj.workspace, "flows.auto_memory", "auto_memory", params, as_json, needs_llm=True)


@click.command("auto-resource")
@click.argument("path")
@_json_option
@click.pass_obj
def auto_resource(obj, path: str, as_json: bool) -> None:
    """Write, update or remove the daily card of resource PATH (under resource/[YYYY-MM-DD/])."""
    _run(obj.workspace, "flows.auto_resource", "auto_resource", {"path": path}, as_json, needs_llm=True)


@click.command("dream")
@click.option("--date", help="Last day of the window (YYYY-MM-DD); default today.")
@click.option("--hint", help="A hint for what to consolidate.")
@click.option("--scan-days", type=int, default=2, show_default=True, help="Days of daily files to scan.")
@click.option("--max-units", type=int, default=5, show_default=True, help="Most units per run.")
@click.option("--topic-count", type=int, default=3, show_default=True, help="New topics per day.")
@click.option("--topic-diversity-days", type=int, default=7, show_default=True,
              help="Avoid topics of this many previous days.")
@_json_option
@click.pass_obj
def dream(obj, as_json: bool, **params: Any) -> None:
    """Consolidate recent daily cards into digest nodes and write the day's interests (auto_dream)."""
    _run(obj.workspace, "flows.auto_dream", "auto_dream", params, as_json, needs_llm=True)


@click.command("proactive")
@click.option("--date", help="Day (YYYY-MM-DD); default today.")
@click.option("--include-content", is_flag=True, help="Include the text of each topic's files.")
@_json_option
@click.pass_obj
def proactive(obj, date: str | None, include_content: bool, as_json: bool) -> None:
    """Topics to bring up today, from daily/<date>/interests.yaml (written by dream)."""
    from engine.client import open_memory
    from tasks.context import check_date, today
    from tasks.interests import proactive_topics

    try:
        result = proactive_topics(open_memory(obj.workspace), check_date(date) if date else today(), include_content)
    except DreamflowError as exc:
        _fail(exc, as_json)
    _print(result, as_json, _show_topics)


# ---- running a flow ------------------------------------------------------------------------------------

def _messages(text: str | None, file) -> list[dict] | None:
    if text == "-":
        text = sys.stdin.read()
    elif file is not None:
        text = file.read()
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"messages are not valid JSON: {exc}", param_hint="--messages") from None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise click.BadParameter("messages must be a JSON list of objects", param_hint="--messages")
    return value


def _run(workspace: Path, module: str, name: str, params: dict, as_json: bool, needs_llm: bool) -> None:
    """Run flow `module.name` in this process and print its result."""
    from engine.llm import require_llm

    try:
        if needs_llm:
            require_llm()  # fail before paying for Prefect's start
        result, failed = _call_flow(workspace, module, name, params, as_json)
    except DreamflowError as exc:
        _fail(exc, as_json)
    _print(result, as_json, SHOW.get(name, _show_dict))
    if failed:
        sys.exit(1)


def _call_flow(workspace: Path, module: str, name: str, params: dict, quiet: bool) -> tuple[dict, bool]:
    import importlib
    import os

    from engine import prefect_env
    from engine.client import service_info
    from engine.settings import Settings

    running = service_info(workspace)
    if running and running.get("prefect_api"):  # the service's Prefect server: runs show in its UI, no start-up
        prefect_env.use_service_prefect(running, Settings().api_token)
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")  # the table says it all
    prefect_env.configure()
    with _spinner(f"{name.replace('_', '-')}", quiet):
        flow = getattr(importlib.import_module(module), name)
        with prefect_env.interactive_runs():
            state = flow(**params, workspace=str(workspace), return_state=True)
    result = state.result(raise_on_failure=False)
    summary = getattr(result, "summary", None)
    if isinstance(summary, dict):  # failed units: the run is Failed but has a summary
        return summary, True
    if isinstance(result, DreamflowError):
        raise result
    if isinstance(result, BaseException):
        raise DreamflowError(f"{name} failed: {type(result).__name__}: {result}")
    return result, False


class _spinner:
    """A spinner with elapsed time on stderr (nothing with --json or when stderr is not a terminal)."""

    def __init__(self, label: str, quiet: bool):
        self.label, self.quiet, self.status = label, quiet or not sys.stderr.isatty(), None

    def __enter__(self):
        if not self.quiet:
            from dreamflow.render import err

            self.started = time.monotonic()
            self.status = err.status(f"{self.label}: starting Prefect and running the flow…")
            self.status.__enter__()
        return self

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.__exit__(*exc)
            from dreamflow.render import err

            err.print(f"[dim]{self.label} finished in {time.monotonic() - self.started:.1f} s[/dim]")
        return False


def _fail(exc: DreamflowError, as_json: bool):
    from dreamflow.cli import fail

    fail(exc, as_json)


# ---- output --------------------------------------------------------------------------------------------

def _print(result: dict, as_json: bool, show: Callable[[dict], None]) -> None:
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2, default=str))
    else:
        show(result)


def _table(title: str, *columns: str):
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


def _show_dict(result: dict) -> None:
    from rich.text import Text

    from dreamflow.render import out

    table = _table("Result", "key", "value")
    for key, value in result.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        table.add_row(Text(key), Text(text))
    out.print(table)


def _show_dream(summary: dict) -> None:
    from rich.text import Text

    from dreamflow.render import out

    if not summary["actions"] and not summary["failed"]:
        out.print(Text(f"dream of {summary['date']}: {summary['scanned']} files scanned, none changed since the "
                       "last dream; nothing to do", style="dim"))
        return
    table = _table(f"Dream of {summary['date']}", "unit", "action", "target")
    for a in summary["actions"]:
        table.add_row(Text(a["name"]), Text(a["action"], style="green"), Text(a["target"]))
    for f in summary["failed"]:
        table.add_row(Text(f["name"]), Text("FAILED", style="bold red"), Text(f["error"]))
    out.print(table)
    usage = summary["usage"]
    out.print(Text(f"{summary['scanned']} files scanned, {summary['changed']} changed, {summary['units']} units, "
                   f"{len(summary['failed'])} failed, {summary['topics']} new topics; "
                   f"LLM {usage['calls']} calls, {usage['total_tokens']} tokens"))
    if summary["deferred"]:
        out.print(Text(f"left for the next run: {', '.join(summary['deferred'])}", style="dim"))


def _show_topics(result: dict) -> None:
    from rich.text import Text

    from dreamflow.render import out

    if result.get("skipped"):
        out.print(Text(f"no topics: {result['skipped']}", style="dim"))
        return
    table = _table(f"Topics for {result['date']}", "title", "reason", "paths")
    for t in result["topics"]:
        table.add_row(Text(t["title"], style="bold"), Text(t["reason"]), Text("\n".join(t["paths"])))
    out.print(table)


SHOW: dict[str, Callable[[dict], None]] = {"auto_dream": _show_dream}
