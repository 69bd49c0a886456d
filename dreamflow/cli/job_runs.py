"""How the CLI runs a memory job: as a run of its deployment on the running service, else in this process.

With `dreamflow start` running for the workspace, a job command asks the service to start a run of the job's
deployment (`POST /flows/<flow>`) and follows it (`GET /flows/runs/<id>` and its logs): the run shows in the
Prefect UI with its deployment and parameters, the UI's Retry re-runs only its failed units, and it runs with
the service's settings (LLM, embedder, timezone), so this shell needs none of them. `--no-wait` prints the
run id and its UI link and returns. Without the service, the flow runs in this process (Prefect starts a
temporary server for it, 10-30 s); such a run has no deployment, so the UI cannot retry it.

Either way the caller gets the flow's summary and whether the run ended Failed because units or items failed
(a planned failure, `JobFailed`, exit code 9); a run that failed otherwise raises a `DreamflowError`.
Prefect is imported only on the in-process path.
"""

from __future__ import annotations

import sys
import time
import typing
from pathlib import Path
from typing import Any

import click

from storage.arguments import MAX_COUNT
from storage.errors import DreamflowError, JobFailed


class _Count(click.ParamType):
    """A job option that counts (days, units, nodes...): 0 to MAX_COUNT, like the operations' counts."""

    name = "integer"

    def convert(self, value, param, ctx):
        number = click.INT.convert(value, param, ctx)
        if not 0 <= number <= MAX_COUNT:
            self.fail(f"{number} is not a count from 0 to {MAX_COUNT:,}", param, ctx)
        return number


COUNT = _Count()

FINAL_STATES = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
POLL_SECONDS = (0.1, 1.0)  # a run's state is asked for after 0.1 s, then twice as long each time, up to 1 s
ENGINE_CHATTER = {"Finished in state Completed()"}  # one per task run, without the task's name: noise here


def no_wait_option(fn):
    """`--no-wait`: start the run on the service, print its id and UI link, and return."""
    return click.option("--no-wait", is_flag=True,
                        help="With the service running: print the run id and UI link, don't wait.")(fn)


def run_job(workspace: Path, flow: str, params: dict[str, Any], quiet: bool,
            no_wait: bool = False) -> tuple[dict, bool] | None:
    """Run `flow` (a key of `deployments.serve.DEPLOYMENTS`) and return `(summary, units_failed)`, or None
    after `--no-wait` (the started run is printed). `quiet` (with --json) keeps progress off stderr."""
    from deployments.serve import DEPLOYMENTS
    from engine.access.client import service_for

    params = {k: v for k, v in params.items() if v is not None}
    remote = service_for(workspace)
    if remote is not None:
        run = remote.launch(flow, params)
        if no_wait:
            _print_started(run, quiet)
            return None
        return follow(remote, run, quiet)
    if no_wait:
        refuse_no_wait()
    if DEPLOYMENTS[flow].needs_llm:
        from engine.models.llm import require_llm

        require_llm()  # fail before paying for Prefect's start
    return _call_flow(workspace, flow, params, quiet)


def refuse_no_wait() -> typing.NoReturn:
    """`--no-wait` without the service: a usage error (the job would run in this process anyway)."""
    raise click.UsageError("--no-wait needs the running service (`dreamflow start`): without it the job runs in "
                           "this process")


def usage_text(usage: dict | None) -> str:
    """A job's LLM spend for its summary: `LLM 3 calls, 1126 tokens, 0.4 s in calls` ('' without calls)."""
    if not usage or not usage.get("calls"):
        return ""
    return f"LLM {usage['calls']} calls, {usage.get('total_tokens', 0)} tokens, {usage.get('seconds', 0)} s in calls"


def exit_code(units_failed: bool) -> int:
    """What a job command exits with after printing its summary."""
    return JobFailed.exit_code if units_failed else 0


# ---- a run of the deployment on the service ----------------------------------------------------------------

def follow(remote, run: dict, quiet: bool) -> tuple[dict, bool]:
    """Wait for a service run, streaming its state changes and log lines to stderr; its summary at the end."""
    from dreamflow.cli.render import err

    label, offset, shown, pause = run["deployment"], 0, None, POLL_SECONDS[0]
    if not quiet:
        err.print(f"[dim]{label}: run {run['name']} ({run['id']}) on the service: {run.get('ui_url') or ''}[/dim]")
    try:
        while True:
            status = remote.run_status(run["id"])
            if not quiet:
                offset += _print_logs(remote, run["id"], offset)
                if status["state"] != shown:
                    shown = status["state"]
                    err.print(f"[dim]{label}: {shown}[/dim]")
            if status["state_type"] in FINAL_STATES and (quiet or status.get("settled") is not False):
                break
            time.sleep(pause)
            pause = min(2 * pause, POLL_SECONDS[1])
    except KeyboardInterrupt:
        err.print(f"\n{label}: stopped waiting; the run goes on: {run.get('ui_url') or run['id']}")
        sys.exit(130)
    if not quiet:
        _drain_logs(remote, run["id"], offset, settled=status.get("settled"))
    summary = status["summary"]
    if status["state_type"] == "COMPLETED" and summary is not None:
        return summary, False
    if status["state_type"] == "FAILED" and summary is not None:  # planned: units failed, retryable
        return summary, True
    where = status["ui_url"] or status["id"]
    if status["state_type"] == "COMPLETED":
        raise DreamflowError(f"{label} run {status['name']} completed but its result could not be read ({where})")
    message = f"{label} run {status['name']} ended {status['state']}: {status['message'] or 'no message'} ({where})"
    if status.get("error"):  # the error it failed with: its class and exit code, as in-process
        from engine.access.client import error_from_detail

        raise error_from_detail({**status["error"], "message": message})
    raise DreamflowError(message)


def _drain_logs(remote, run_id: str, offset: int, settled: bool | None, settle: float = 2.0,
                limit: float = 6.0) -> None:
    """Print the log lines that reach the API after the final state: all at once for a run the service says is
    `settled` (its runner sent them); else (a worker's run: Prefect sends them in batches every ~2 s) until none
    came for `settle` seconds, at most `limit` seconds."""
    if settled:
        _print_logs(remote, run_id, offset)
        return
    started = last = time.monotonic()
    while time.monotonic() - last < settle and time.monotonic() - started < limit:
        time.sleep(0.5)
        printed = _print_logs(remote, run_id, offset)
        if printed:
            offset, last = offset + printed, time.monotonic()


def _print_logs(remote, run_id: str, offset: int) -> int:
    from rich.text import Text

    from dreamflow.cli.render import err

    lines = remote.run_logs(run_id, offset)
    for line in lines:
        first = line["message"].strip().split("\n", 1)[0]  # tracebacks stay in the UI
        if first and first not in ENGINE_CHATTER:
            err.print(Text(f"  {line['time'][11:19]} {first}", style="red" if line["level"] == "ERROR" else "dim"))
    return len(lines)


def _print_started(run: dict, as_json: bool) -> None:
    import json

    if as_json:
        click.echo(json.dumps(run, indent=2))
    else:
        click.echo(f"started {run['deployment']} run {run['name']}: {run['id']}")
        if run.get("ui_url"):
            click.echo(f"follow it in the Prefect UI: {run['ui_url']}")


# ---- in this process -----------------------------------------------------------------------------------------

def _call_flow(workspace: Path, name: str, params: dict, quiet: bool) -> tuple[dict, bool]:
    import os

    from deployments.serve import load_flow
    from engine.config import prefect_env

    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")  # the table says it all
    prefect_env.configure()
    with _spinner(f"{name.replace('_', '-')}", quiet):
        flow = load_flow(name)
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
            from dreamflow.cli.render import err

            self.started = time.monotonic()
            self.status = err.status(f"{self.label}: starting Prefect and running the flow…")
            self.status.__enter__()
        return self

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.__exit__(*exc)
            from dreamflow.cli.render import err

            err.print(f"[dim]{self.label} finished in {time.monotonic() - self.started:.1f} s[/dim]")
        return False
