"""CLI commands that run the memory jobs: `auto-memory`, `auto-resource`, `dream`, `proactive`, and the job
form of the generated `reindex` and `optimize` commands.

With the service running, each is a run of its deployment on the service (dreamflow/cli/job_runs.py: it shows in
the Prefect UI, which can retry it, and uses the service's LLM and timezone settings); without it, the LLM
jobs run their flows in this process, and `proactive`, `reindex` and `optimize` stay plain memory operations
(no Prefect start). Prefect and the flows are imported inside the command bodies, so other commands keep
their fast start. The result is a summary table, or JSON with `--json`. Exit codes: 0 success, 9 failed
units (the run ended Failed; retry it), else the error's code.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

import click

from dreamflow.cli.common import fail, print_result
from dreamflow.cli.job_command import job_command
from dreamflow.cli.job_runs import exit_code, no_wait_option, refuse_no_wait, run_job, usage_text
from engine.jobs import JOBS
from storage.errors import DreamflowError


def _run_flow(obj, params: dict, as_json: bool, no_wait: bool, job: str) -> None:
    _run(obj.workspace, job, params, as_json, no_wait)


def _proactive(obj, params: dict, as_json: bool, no_wait: bool) -> None:
    """A run of the proactive deployment on the service, else the plain read in this process (no Prefect)."""
    from engine.access.client import open_memory, service_for
    from engine.config.days import check_date, today
    from engine.memory.interests import proactive_topics

    if service_for(obj.workspace) is not None:
        _run(obj.workspace, "proactive", params, as_json, no_wait)
        return
    if no_wait:
        refuse_no_wait()
    try:
        date = params["date"]
        result = proactive_topics(open_memory(obj.workspace), check_date(date) if date else today(),
                                  params["include_content"])
    except DreamflowError as exc:
        fail(exc, as_json)
    print_result(result, as_json, _show_topics)


auto_memory, auto_resource, dream = (job_command(JOBS[name], functools.partial(_run_flow, job=name))
                                     for name in ("auto_memory", "auto_resource", "auto_dream"))
proactive = job_command(JOBS["proactive"], _proactive)


def as_job(command: click.Command, flow: str, shown=lambda result: result) -> click.Command:
    """The generated operation `command`, run as `flow`'s deployment when the service runs (same output:
    `shown` picks the operation's result out of the flow's), else as before."""
    original = command.callback

    @click.pass_context
    def callback(ctx: click.Context, no_wait: bool, as_json: bool, **kwargs: Any) -> None:
        from engine.access.client import service_for

        if service_for(ctx.obj.workspace) is None:
            if no_wait:
                refuse_no_wait()
            return ctx.invoke(original, as_json=as_json, **kwargs)
        try:
            done = run_job(ctx.obj.workspace, flow, kwargs, as_json, no_wait)
        except DreamflowError as exc:
            fail(exc, as_json)
        if done is not None:
            from dreamflow.cli import render

            print_result(shown(done[0]), as_json, lambda result: render.show(command.name, result))

    command.callback = callback
    no_wait_option(command)
    return command


# ---- running a flow ------------------------------------------------------------------------------------

def _run(workspace: Path, name: str, params: dict, as_json: bool, no_wait: bool) -> None:
    """Run flow `name` (on the service, else in this process) and print its summary."""
    try:
        done = run_job(workspace, name, params, as_json, no_wait)
    except DreamflowError as exc:
        fail(exc, as_json)
    if done is None:  # --no-wait: the started run was printed
        return
    result, failed = done
    print_result(result, as_json, SHOW.get(name, _show_dict))
    sys.exit(exit_code(failed))


# ---- output --------------------------------------------------------------------------------------------

def _table(title: str, *columns: str):
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


def _show_dict(result: dict) -> None:
    from rich.text import Text

    from dreamflow.cli.render import out

    table = _table("Result", "key", "value")
    for key, value in result.items():
        if key == "usage":
            continue  # its line below
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        table.add_row(Text(key), Text(text))
    out.print(table)
    if usage_text(result.get("usage")):
        out.print(Text(usage_text(result["usage"])))


def _show_dream(summary: dict) -> None:
    from rich.text import Text

    from dreamflow.cli.render import counted, out
    from storage.text.facts import said

    if not summary["actions"] and not summary["failed"]:
        out.print(Text(f"dream of {summary['date']}: {counted(summary['scanned'], 'file')} scanned, none changed since the "
                       "last dream; nothing to do", style="dim"))
        return
    table = _table(f"Dream of {summary['date']}", "fact", "action", "node")
    for column in table.columns[1:]:
        column.no_wrap = True  # paths and actions whole; the facts wrap
    for a in summary["actions"]:
        fact = said(a["fact"]) + (f" (was: {said(a['replaced'])})" if a.get("replaced") else "")
        table.add_row(Text(fact), Text(a["action"], style="green"), Text(a["node"]))
    for f in summary["failed"]:
        table.add_row(Text(f"{f['name']}: {f['error']}"), Text("FAILED", style="bold red"), Text(", ".join(f["paths"])))
    out.print(table)
    out.print(Text(f"{counted(summary['scanned'], 'file')} scanned, {summary['changed']} changed, "
                   f"{counted(summary['facts'], 'fact')} in {counted(summary['units'], 'subject')}, "
                   f"{len(summary['failed'])} failed, "
                   f"{counted(summary['topics'], 'new topic')}; "
                   + (usage_text(summary["usage"]) or "no LLM calls")))
    if summary["deferred"]:
        out.print(Text(f"left for the next run: {', '.join(summary['deferred'])}", style="dim"))
    if summary.get("words_only"):
        out.print(Text(f"facts compared by their words only: {summary['words_only']}", style="yellow"))


def _show_topics(result: dict) -> None:
    from rich.text import Text

    from dreamflow.cli.render import out

    if result.get("skipped"):
        out.print(Text(f"no topics: {result['skipped']}", style="dim"))
        return
    table = _table(f"Topics for {result['date']}", "title", "reason", "paths")
    for t in result["topics"]:
        table.add_row(Text(t["title"], style="bold"), Text(t["reason"]), Text("\n".join(t["paths"])))
    out.print(table)


def _show_card(result: dict) -> None:
    from rich.text import Text

    from dreamflow.cli.render import counted, out

    if result.get("skipped"):
        out.print(Text(f"nothing to do: {result['skipped']}", style="dim"))
        return
    card = result.get("card") or result.get("path")
    added = result["facts"] if "facts" in result else len(result.get("added") or [])
    if result.get("action") in ("unchanged", "deleted"):
        out.print(Text(f"card {card}: {result['action']}"))
        return
    out.print(Text((f"card {card}" if card else "no card (nothing worth remembering)") + f": {counted(added, 'fact')}"
                   " added" + (f", {len(result['dropped'])} dropped" if result.get("dropped") else "")))
    for dropped in result.get("dropped") or []:
        out.print(Text(f"  dropped ({dropped['rule']}): {dropped['text'][:100]}: {dropped['why']}", style="dim"))
    if usage_text(result.get("usage")):
        out.print(Text(usage_text(result["usage"])))


SHOW: dict[str, Callable[[dict], None]] = {"auto_dream": _show_dream, "proactive": _show_topics,
                                           "auto_memory": _show_card, "auto_resource": _show_card}

COMMANDS = (auto_memory, auto_resource, dream, proactive)
# The generated operation commands of the jobs declared `op` (`reindex`, `optimize`), as runs of their
# deployments when the service runs; what the operation returns is the flow's result, or a part of it.
PICK: dict[str, Callable[[dict], Any]] = {"reindex": lambda result: result["rebuilt"]}
WRAPPERS = {job.command: functools.partial(as_job, flow=job.name, shown=PICK.get(job.name, lambda result: result))
            for job in JOBS.values() if job.op}
