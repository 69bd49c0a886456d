"""`dreamflow start`, `status` and `turn`: the commands around the service (dreamflow/service/).

`current_status` works with or without a running service (through it when it runs); `turn` records through
the workspace's memory (`engine.access.client`: `turn` runs `engine.access.turns.record_turn` here, or the service does), as
the stdio MCP server and the Claude Code hook do.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from deployments.serve import llm_warning
from dreamflow.cli.common import fail
from dreamflow.cli.job_command import job_command
from engine.config.settings import DEFAULT_PORT, DEFAULT_PREFECT_PORT, Settings, dreamflow_home
from engine.jobs import TURN
from storage.errors import DreamflowError


@click.command("start")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface the HTTP API listens on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="Port of the HTTP API.")
@click.option("--prefect-api", default=None, metavar="URL",
              help="Use this running Prefect API (or $PREFECT_API_URL) instead of starting a Prefect server.")
@click.option("--prefect-port", default=DEFAULT_PREFECT_PORT, show_default=True, type=int,
              help="Port of the Prefect server (and UI) the service starts.")
@click.option("--runner/--no-runner", default=True, show_default=True,
              help="Serve the deployments here; --no-runner when `prefect worker`s run them (see docs/service.md).")
@click.option("--serve", "only", multiple=True, metavar="NAME",
              help="Serve only these registered workspaces besides the default one (repeatable; default: all "
                   "that no other service owns).")
@click.pass_obj
def start(obj, host: str, port: int, prefect_api: str | None, prefect_port: int, runner: bool,
          only: tuple[str, ...]) -> None:
    """Run Dreamflow: index on save, nightly dreams, turn summaries, HTTP API and the Prefect UI.

    Serves the workspace (--workspace) and every registered one (`dreamflow workspace add`), each with its own
    index. Runs in the foreground until Ctrl-C or SIGTERM. Starts a Prefect server (database under
    $DREAMFLOW_HOME, default ~/.local/state/dreamflow) unless --prefect-api or PREFECT_API_URL names one.
    """
    from dreamflow.service import supervisor

    options = supervisor.Options(obj.workspace, host=host, port=port, prefect_api=prefect_api,
                                 prefect_port=prefect_port, runner=runner, only=list(only),
                                 follow_default=obj.workspace_arg is None and not os.environ.get("DREAMFLOW_WORKSPACE"))
    sys.exit(supervisor.start(options))


@click.command("status")
@click.option("--verbose", "-v", is_flag=True, help="Also pids, log files and the index's internal counters.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.pass_obj
def status(obj, verbose: bool, as_json: bool) -> None:
    """Show whether the service runs, what it runs, index size, last dream, recent LLM usage and pending work."""
    try:
        found = current_status(obj.workspace)
    except DreamflowError as exc:
        fail(exc, as_json)
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False, default=str))
    else:
        click.echo(format_status(found, verbose))


def _turn(obj, params: dict, as_json: bool) -> None:
    try:
        result = obj.memory().turn(**params)
    except DreamflowError as exc:
        fail(exc, as_json)
    if as_json:
        click.echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        click.echo(format_turn(result))


turn = job_command(TURN, _turn, no_wait=False, stdin=True, help=f"""{TURN.summary}

The messages are appended to session/dialog/<session-id>.jsonl at once (from --messages, --file, or a piped
stdin). With the service running it counts the turn and starts the auto_memory run; without it the turn is
counted and the run starts when the service does.""")


def current_status(workspace: Path) -> dict:
    """The running service's status, or what can be known without it (index, turn counters, last dream, and
    the same for every registered workspace)."""
    from dreamflow.service.workspace_status import recorded_dream
    from engine.models import usage_log
    from engine.access.client import open_memory, service_for
    from engine.models.semantic import words_only
    from engine.access.turns import TurnCounter
    from storage.files import redaction_log

    remote = service_for(workspace)
    if remote is not None:
        return {"running": True, **remote.status()}
    memory = open_memory(workspace)
    warnings = [llm_warning(Settings(), "in this shell (jobs run here without the service)"), words_only(Settings())]
    index = memory.index_stats()
    return {
        "running": False,
        "service": {"workspace": str(memory.ws.root)},
        "last_dream": recorded_dream(memory.ws),  # what the last dream recorded (any process)
        "index": index,
        "turns": {"every": Settings().turns_per_summary, "sessions": TurnCounter(memory.ws, 1).sessions()},
        "usage": usage_log.summary(str(memory.ws.root)),
        "redacted": redaction_log.summary(memory.ws),
        "warnings": [w for w in warnings if w],
        "logs": str(dreamflow_home() / "logs"),
        "workspaces": _registered(memory.ws.root, index),
    }


def _registered(root: Path, index: dict) -> list[dict]:
    """A status row for this workspace (its `index`) and every registered one, read without a service: the
    counts of an index that exists (through the service that serves it, if one does; a workspace never used
    stays untouched), the last dream its folder recorded."""
    from dreamflow.service.workspace_status import recorded_dream, row
    from engine.access.client import open_memory
    from engine.config.registry import UNREGISTERED, Registry
    from storage.files.workspace import Workspace

    registry = Registry.load()
    folders = {e.name: e.path for e in registry.entries.values()}
    if root not in folders.values():
        folders = {UNREGISTERED: root, **folders}
    rows = []
    for name, folder in folders.items():
        stats = index if folder == root else {}
        if folder != root and (folder / "metadata/index.duckdb").is_file():
            try:
                stats = open_memory(folder).index_stats()
            except DreamflowError as exc:
                stats = {"error": str(exc)}
        rows.append(row(name, folder, stats, name == (registry.default or UNREGISTERED),
                        recorded_dream(Workspace(folder, create=False)), None))
    return rows


def format_status(status: dict, verbose: bool = False) -> str:
    """People's view of `current_status`: what a user needs; `verbose` adds pids, logs and internal counters."""
    from dreamflow.service.workspace_status import lines as workspace_lines

    svc, index = status.get("service", {}), status.get("index", {})
    lines = [f"Workspace   {svc.get('workspace')}"]
    if not status.get("running"):
        lines.append("Service     not running (start it with `dreamflow start`)")
    else:
        lines.append(f"Service     running for {_duration(svc.get('uptime_s') or 0)}"
                     + (f", pid {svc.get('pid')}" if verbose else ""))
        lines.append(f"API         {svc.get('url')}   (docs: {svc.get('url')}/docs)")
        lines.append(f"Dashboard   {svc.get('url')}/ui/")
        lines.append(f"Prefect UI  {svc.get('ui')}")
        children = status.get("children", [])
        trouble = [c for c in children if not c["running"] or c["restarts"]]
        if verbose or trouble:
            for child in children if verbose else trouble:
                state = "running" if child["running"] else "STOPPED"
                lines.append(f"  {child['name']:<14} {state}, {child['restarts']} restart(s)"
                             + (f", pid {child['pid']}, log {child['log']}" if verbose or trouble else ""))
        runner = status.get("runner")
        if runner and (verbose or not runner["running"] or runner.get("error")):
            lines.append(f"  {'runner':<14} {'running' if runner['running'] else 'STOPPED'}, {runner['runs']} of "
                         f"{runner['limit']} runs going" + (f", Prefect: {runner['error']}" if runner.get("error") else ""))
    for warning in status.get("warnings", []):
        lines.append(f"Warning     {warning}")
    if status.get("logs"):
        lines.append(f"Logs        {status['logs']}" + ("   (a job run's log: in the Prefect UI)"
                                                          if status.get("running") else ""))
    if verbose:
        lines.append("Index       " + ", ".join(f"{k} {v}" for k, v in index.items() if isinstance(v, (int, float))))
    else:
        text = f"{index.get('files', 0)} files, {index.get('chunks', 0)} chunks, {index.get('links', 0)} links"
        if index.get("files_with_errors"):
            text += f", {index['files_with_errors']} files could not be parsed (indexed as text)"
        lines.append(f"Index       {text}")
    kept = status.get("redacted")
    if kept is not None:
        written = redaction_text(kept.get("by_kind") or {}, kept.get("private") or 0) or "nothing so far"
        lines.append(f"Kept out    {written}")
        if kept.get("index", {}).get("secrets"):
            lines.append(f"            {kept['index']['secrets']} secret(s) in {kept['index']['files']} file(s) "
                         "left out of the index (the files keep them)")
    vectors = status.get("vectors")
    if vectors and vectors.get("configured"):
        lines.append(f"Vectors     {vectors.get('embedded', 0)} of {vectors.get('texts', 0)} chunk texts embedded "
                     f"({vectors['configured']})" + (f"; error: {vectors['error']}" if vectors.get("error") else ""))
    if "last_dream" in status:
        dream = status["last_dream"]
        lines.append(f"Last dream  {dream['start_time']} ({dream['state']})" if dream else "Last dream  none yet")
    if status.get("next_dream"):
        lines.append(f"Next dream  {status['next_dream']['expected_start_time']}")
    sessions = status.get("turns", {}).get("sessions", {})
    waiting = {s: e["pending"] for s, e in sessions.items() if e.get("pending")}
    lines.append(f"Turns       {sum(waiting.values())} turn(s) waiting for a summary"
                 + (f" in {len(waiting)} session(s)" if waiting else "")
                 + (f"; {len(sessions)} session(s) counted" if verbose else ""))
    spent = status.get("usage")
    if spent and spent["runs"]:
        total = spent["total"]
        lines.append(f"LLM usage   last {len(spent['runs'])} run(s): {total['calls']} calls, "
                     f"{total['total_tokens']} tokens, {total['seconds']} s in calls")
        for run in spent["runs"][:5]:
            lines.append(f"  {run['at']}  {run['job']:<14} {run['calls']} calls, {run['total_tokens']} tokens, "
                         f"{run['seconds']} s")
    for run in status.get("active_runs", []):
        lines.append(f"Running     {run['deployment']} run {run['name']}: {run['state']}")
    if status.get("prefect_error"):
        lines.append(f"Prefect     unavailable: {status['prefect_error']}")
    if verbose and status.get("running"):
        lines.append(f"Prefect API {svc.get('prefect_api')}")
        if "watcher" in status:
            lines.append(f"Watcher     {'idle' if status['watcher'].get('idle') else 'busy'}")
    lines += workspace_lines(status.get("workspaces", []), bool(status.get("running")))
    return "\n".join(lines)


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def redaction_text(by_kind: dict, private: int) -> str:
    """`2 secrets (aws-access-key 1, openai-key 1), 1 private span`, or '' when nothing was kept out."""
    parts = []
    if by_kind:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
        parts.append(f"{sum(by_kind.values())} secret(s) redacted ({kinds})")
    if private:
        parts.append(f"{private} private span(s) dropped")
    return "; ".join(parts)


def format_turn(result: dict) -> str:
    """People's view of a recorded turn."""
    text = (f"Recorded {result['appended']} message(s) for session {result['session_id']} "
            f"(turn {result['turns']}; {result['pending']} waiting, auto_memory every {result['every']})")
    kept_out = redaction_text(result.get("redacted") or {}, result.get("private") or 0)
    if kept_out:
        text += f"\nkept out of memory: {kept_out}"
    if result.get("launched"):
        text += f"\nauto_memory run started: {result['launched']}"
        if result.get("ui_url"):
            text += f"\nfollow it in the Prefect UI: {result['ui_url']}"
    if result.get("launch_error"):
        text += f"\nauto_memory could not start ({result['launch_error']}); the next turn retries"
    if result.get("waiting"):
        text += f"\n{result['waiting']}"
    return text
