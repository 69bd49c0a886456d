"""A CLI job command built from the job's declaration (engine/jobs.py), as the memory commands are from theirs.

Each parameter of the job's function the CLI does not hide becomes an argument (the declaration's `args`: a
list takes any number) or an option (`--scan-days`, with the declaration's short flag), with the function's
default shown and the declaration's help; an `int` is a count (0 to MAX_COUNT) as in the operations. A JSON
`body` parameter (a turn's messages) is an option holding the JSON text ('-': read it from stdin) or `--file`.
`--json` and `--no-wait` follow. The command's body (`run`) gets the parameters by name; what it prints and how
it exits stay with it (dreamflow/cli/flow_commands.py, governance_commands.py, service_commands.py).
"""

from __future__ import annotations

import json
import sys
import types
import typing
from typing import Any, Callable

import click

from dreamflow.cli.common import fail
from dreamflow.cli.job_runs import COUNT, no_wait_option
from engine.jobs import Job
from storage.arguments import Count
from storage.errors import InvalidInput


def job_command(job: Job, run: Callable[..., None], *, params: tuple[click.Parameter, ...] = (),
                help: str | None = None, no_wait: bool = True, stdin: bool = False,
                without: tuple[str, ...] = ()) -> click.Command:
    """The click command `job.command`: `params` (the command's own, e.g. doctor's --fix) first, then the
    job's, --json and (with `no_wait`) --no-wait. `run(obj, parameters, as_json=..., no_wait=...)` does the work;
    `help` is the command's help (default: the job's summary). `stdin`: without the body option, a piped
    stdin is the body. `without`: parameters `run` sets itself (doctor-fix's `fix`), not offered."""
    offered = [p for p in job.parameters("cli") if p.name not in without]
    declared = []
    for p in offered:
        declared.append(_click_param(job, p))
        if p.name == job.body:
            declared.append(click.Option(["--file", "body_file"], type=click.File("r", encoding="utf-8"),
                                         help=f"Read the {job.body} JSON from this file."))
    declared.append(click.Option(["--json", "as_json"], is_flag=True, help="Print the result as JSON."))

    @click.pass_obj
    def callback(obj, as_json: bool, body_file=None, **kwargs: Any) -> None:
        flags = {"as_json": as_json}
        if no_wait:
            flags["no_wait"] = kwargs.pop("no_wait")
        kwargs = {name: list(value) or None if isinstance(value, tuple) else value for name, value in kwargs.items()}
        if job.body:
            kwargs[job.body] = _body(job.body, kwargs[job.body], body_file, stdin, as_json)
        run(obj, kwargs, **flags)

    epilog = "\b\n" + "\n".join(f"{p.name.upper()}: {p.help}" for p in offered if p.name in job.args)
    command = click.Command(job.command, params=[*params, *declared], callback=callback,
                            help=help or job.summary, epilog=epilog if job.args else None)
    return no_wait_option(command) if no_wait else command


def _click_param(job: Job, p) -> click.Parameter:
    hint = _strip_none(p.annotation)
    if p.name in job.args:
        many = typing.get_origin(hint) is list
        return click.Argument([p.name], nargs=-1 if many else 1, required=p.required and not many)
    decls = [f"--{p.name.replace('_', '-')}", *([f"-{job.short[p.name]}"] if p.name in job.short else []), p.name]
    help = p.help + ("" if p.help.endswith(".") else ".")
    if hint is bool:
        return click.Option(decls, is_flag=True, default=p.default, help=help)
    if p.name == job.body:
        return click.Option(decls, metavar="JSON", default=None, help=f"{help[:-1]} (a JSON list, or one object; '-' reads stdin).")
    kind = {Count: COUNT, float: click.FLOAT}.get(hint, click.STRING)
    default = None if p.required else p.default
    return click.Option(decls, type=kind, required=p.required, default=default, show_default=default is not None,
                        help=help)


def _strip_none(hint: Any) -> Any:
    """`X | None` -> `X`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _body(name: str, text: str | None, file, stdin: bool, as_json: bool) -> list[dict] | None:
    """The JSON list of `--<name>` ('-': stdin), else of --file, else (with `stdin`) of a piped stdin; a single
    object is a list of one."""
    if text is not None and file is not None:
        raise click.UsageError(f"give --{name} or --file, not both")
    if text == "-" or (text is None and file is None and stdin and not sys.stdin.isatty()):
        text = sys.stdin.read()
    elif file is not None:
        text = file.read()
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(InvalidInput(f"--{name} is not valid JSON: {exc}"), as_json)
    value = [value] if isinstance(value, dict) else value
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        fail(InvalidInput(f"--{name} must be a JSON list of objects"), as_json)
    return value
