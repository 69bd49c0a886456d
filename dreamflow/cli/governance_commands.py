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

import json
import sys

import click

from dreamflow.cli.common import fail, json_option
from dreamflow.cli.job_runs import exit_code, job_option, no_wait_option, refuse_no_wait, run_job, usage_text
from storage.errors import DreamflowError


def _doctor_options(fn):
    """The options `doctor` and `doctor-fix` share (the report's thresholds, --json, --no-wait)."""
    for option in reversed((
        job_option("governance", "doctor", "dup_threshold", "Near-duplicate similarity, 0-1 [default: 0.3]."),
        job_option("governance", "doctor", "stale_days", "Days without update for `stale`."),
        job_option("governance", "doctor", "overlong_lines", "Lines from which a node is overlong."),
        json_option, no_wait_option)):
        fn = option(fn)
    return fn


@click.command("doctor")
@click.option("--fix", is_flag=True, help="Re-index drifted files and retarget links to moved files first.")
@_doctor_options
@click.pass_obj
def doctor(obj, fix: bool, dup_threshold: float | None, stale_days: int, overlong_lines: int, as_json: bool,
           no_wait: bool) -> None:
    """Check the memory graph: broken links and anchors, orphans, missing sources, near-duplicates, bad
    frontmatter, index drift. Exit code 0 when healthy, 1 when something needs attention."""
    from engine.client import connect

    params = {"fix": fix, "dup_threshold": dup_threshold, "stale_days": stale_days, "overlong_lines": overlong_lines}
    remote = connect(obj.workspace) if fix or no_wait else None
    try:
        if remote is not None:  # a repair: a run of the doctor deployment, in the UI
            done = run_job(obj.workspace, "doctor", params, as_json, no_wait, remote=remote)
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


@click.command("doctor-fix")
@_doctor_options
@click.pass_context
def doctor_fix(ctx, **options) -> None:
    """Repair what is safe to repair mechanically, then check: the same as `doctor --fix`."""
    ctx.invoke(doctor, fix=True, **options)


@click.command("link-mine")
@click.argument("paths", nargs=-1)
@job_option("governance", "link_mine", "max_nodes", "Most nodes per run (the rest wait).")
@job_option("governance", "link_mine", "candidates", "Candidate nodes shown per node.")
@json_option
@no_wait_option
@click.pass_obj
def link_mine(obj, paths: tuple[str, ...], max_nodes: int, candidates: int, as_json: bool, no_wait: bool) -> None:
    """Weave links to related nodes into PATHS, or into digest nodes changed since the last run."""
    params = {"paths": list(paths) or None, "max_nodes": max_nodes, "candidates": candidates}
    _run(obj.workspace, "link_mine", params, as_json, no_wait)


@click.command("merge")
@click.argument("survivor", required=False)
@click.argument("victim", required=False)
@job_option("governance", "merge", "max_pairs", "Most pairs from the doctor per run.")
@json_option
@no_wait_option
@click.pass_obj
def merge(obj, survivor: str | None, victim: str | None, max_pairs: int, as_json: bool, no_wait: bool) -> None:
    """Fold VICTIM into SURVIVOR (or each near-duplicate pair the doctor finds): sources and links united,
    links to VICTIM retargeted, VICTIM deleted."""
    if bool(survivor) != bool(victim):
        raise click.UsageError("give both SURVIVOR and VICTIM, or neither (to merge the doctor's near-duplicates)")
    params = {"pairs": [[survivor, victim]] if survivor else None, "max_pairs": max_pairs}
    _run(obj.workspace, "merge", params, as_json, no_wait)


@click.command("split")
@click.argument("paths", nargs=-1)
@job_option("governance", "split", "max_nodes", "Most nodes per run.")
@job_option("governance", "split", "max_parts", "Most parts per node.")
@json_option
@no_wait_option
@click.pass_obj
def split(obj, paths: tuple[str, ...], max_nodes: int, max_parts: int, as_json: bool, no_wait: bool) -> None:
    """Break PATHS (or the doctor's overlong nodes) into focused nodes that link to each other."""
    _run(obj.workspace, "split", {"paths": list(paths) or None, "max_nodes": max_nodes, "max_parts": max_parts},
         as_json, no_wait)


@click.command("archive")
@click.argument("paths", nargs=-1)
@job_option("governance", "archive", "stale_days",
            "Without PATHS: archive nodes nobody links to, not updated for this many days.")
@json_option
@no_wait_option
@click.pass_obj
def archive(obj, paths: tuple[str, ...], stale_days: int, as_json: bool, no_wait: bool) -> None:
    """Move PATHS (or the doctor's stale and expired nodes) to digest/archive/, links retargeted."""
    _run(obj.workspace, "archive", {"paths": list(paths) or None, "stale_days": stale_days}, as_json, no_wait)


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
    from storage.doctor import PROBLEMS, describe

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
        out.print(Text(key.replace("_", " "), style="bold"))
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
