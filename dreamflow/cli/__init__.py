"""The `dreamflow` command line: the click group and its commands (dreamflow/cli/app.py), one module per family
of commands; `main` is the console script's way in (dreamflow/entry.py)."""

from dreamflow.cli.app import cli, main

__all__ = ["cli", "main"]
