"""What the CLI's command modules share: printing an error (`fail`), the `--json` option, printing a result."""

from __future__ import annotations

import json
import sys
import typing
from typing import Callable

import click

from storage.errors import DreamflowError


def fail(exc: DreamflowError, as_json: bool = False) -> typing.NoReturn:
    """Print a DreamflowError (as JSON on stdout with --json, else on stderr) and exit with its code."""
    if as_json:
        click.echo(json.dumps(exc.to_json(), ensure_ascii=False))
    else:
        from dreamflow.cli.render import error

        error(str(exc))
    sys.exit(exc.exit_code)


def json_option(fn):
    """`--json`: print the result as JSON."""
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(fn)


def print_result(result: dict, as_json: bool, show: Callable[[dict], None]) -> None:
    """`result` as indented JSON with --json, else as `show` draws it for people."""
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2, default=str))
    else:
        show(result)
