"""CLI commands that keep the memory graph healthy: `doctor`, `link-mine`, `merge`, `split`, `archive`.

`doctor` calls the `doctor` operation directly (a fast read, no Prefect, through the service when it runs)
and replaces the command generated for it, to print a table per finding and exit 1 when the graph needs
attention (0 when healthy; errors: their own codes); `doctor --fix` writes, so with the service running it
is a run of the `doctor/manual` deployment (`doctor-fix` is the same, as the `doctor_fix` operation is the
writing half of `doctor`). The others are runs of their deployments on the service, else
flows in this process (dreamflow/cli/job_runs.py), and print each item's outcome and every file changed; exit 9
when an item failed (the run ended Failed; retry it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

import click

from dreamflow.cli.common import fail
from dreamflow.cli.job_command import job_command
from dreamflow.cli.job_runs import exit_code, refuse_no_wait, run_job, usage_text
from engine.jobs import JOBS
from storage.errors import DreamflowError


def _doctor(obj, params: dict, as_json: bool, no_wait: bool) -> None:
    from engine.access.client import service_for

    fix = params["fix"]
    try:
        if (fix or no_wait) and service_for(obj.workspace) is not None:  # a repair: a run of the doctor deployment
            done = run_job(obj.workspace, "doctor", params, as_json, no_wait)
            if done is None:
                return
            report = done[0]
        elif no_wait:
            refuse_no_wait()
        else:
            memory = obj.memory()
            report = (memory.doctor_fix if fix else memory.doctor)(**{k: v for k, v in params.items() if k != "fix"})
    except DreamflowError as exc:
        fail(exc, as_json)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2, default=str))
    else:
        _show_report(report)
    sys.exit(0 if report["ok"] else 1)


def _run_items(obj, params: dict, as_json: bool, no_wait: bool, job: str) -> None:
    _run(obj.workspace, job, params, as_json, no_wait)


def _merge(obj, params: dict, as_json: bool, no_wait: bool) -> None:
    survivor, victim = params.pop("survivor"), params.pop("victim")
    if bool(survivor) != bool(victim):
        raise click.UsageError("give both SURVIVOR and VICTIM, or neither (to merge the doctor's near-duplicates)")
    _run(obj.workspace, "merge", {"pairs": [[survivor, victim]] if survivor else None, **params}, as_json, no_wait)


DOCTOR = JOBS["doctor"]
doctor = job_command(DOCTOR, _doctor, help=f"{DOCTOR.summary} Exit code 0 when healthy, 1 when something needs "
                     "attention.")
doctor_fix = job_command(
    dataclasses.replace(DOCTOR, command="doctor-fix"),
    lambda obj, params, **flags: _doctor(obj, {"fix": True, **params}, **flags),
    help="Repair what is safe to repair mechanically, then check: the same as `doctor --fix`.", without=("fix",))
link_mine, split, archive = (job_command(JOBS[name], functools.partial(_run_items, job=name))
                             for name in ("link_mine", "split", "archive"))
merge = job_command(JOBS["merge"], _merge, params=(click.Argument(["survivor"], required=False),
                                                   click.Argument(["victim"], required=False)))


# ---- running and printing ------------------------------------------------------------------------------

def _run(workspace, name: str, params: dict, as_json: bool, no_wait: bool) -> None:
    try:
        done = run_job(workspace, name, params, as_json, no_wait)
    except DreamflowError as exc:
        fail(exc, as_json)
    if done is None:  # --no-wait: the started run was printed
        return
    summary, failed = done
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False, indent=2, default=str))
    else:
        _show_changes(summary)
    sys.exit(exit_code(failed))


def _table(*columns: str):
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _show_report(report: dict) -> None:
    from rich.text import Text

    from dreamflow.cli.render import out
    from storage.index.doctor import PROBLEMS, describe

    state = Text("healthy", style="bold green") if report["ok"] else Text("needs attention", style="bold yellow")
    out.print(Text("Memory graph: ") + state + Text(
        f"  ({report['files']} files, {report['digest_nodes']} digest nodes, {report['links']} links, "
        f"{report['seconds']} s)", style="dim"))
    fixed = report.get("fixed")
    if fixed:
        out.print(Text(f"fixed: re-indexed {len(fixed['reindexed'])} files, retargeted links to "
                       f"{len(fixed['retargeted'])} moved files", style="green"))
    summary = _table("finding", "count")
    for key, count in report["counts"].items():
        summary.add_row(Text(key), Text(str(count), style="bold red" if count and key in PROBLEMS else ""))
    out.print(summary)
    for key, count in report["counts"].items():
        if not count:
            continue
        out.print(Text(key.replace("_", " ") + ("" if key in PROBLEMS else " (note)"), style="bold"))
        for row in report[key][:20]:
            out.print(Text("  " + describe(key, row).replace("`", "")))
        if count > 20:
            out.print(Text(f"  … {count - 20} more (use --json for all)", style="dim"))


def _show_changes(summary: dict) -> None:
    from rich.text import Text

    from dreamflow.cli.render import out

    table = _table("item", "status", "detail")
    for o in summary["outcomes"]:
        table.add_row(Text(o["item"]), Text(o["status"], style="green" if o["status"] == "done" else "dim"),
                      Text(o["detail"]))
    for f in summary["failed"]:
        table.add_row(Text(f["item"]), Text("FAILED", style="bold red"), Text(f["error"]))
    out.print(table if summary["outcomes"] or summary["failed"] else Text("nothing to do", style="dim"))
    for title, paths in (("changed", summary["changed"]), ("deleted or moved away", summary["deleted"])):
        for path in paths:
            out.print(Text(f"{title}: ") + Text(path, style="cyan"))
    if summary.get("deferred"):
        out.print(Text(f"left for the next run: {len(summary['deferred'])} nodes", style="dim"))
    if usage_text(summary.get("usage")):
        out.print(Text(usage_text(summary["usage"])))


COMMANDS = (doctor, doctor_fix, link_mine, merge, split, archive)  # replacing the generated doctor, doctor-fix
