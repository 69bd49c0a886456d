"""The `dreamflow` console script: `dreamflow [--workspace W] hook claude-code [--verbose]` goes straight to
dreamflow/hooks/events.py, everything else to the CLI (dreamflow/cli/app.py).

Claude Code starts a new process for every hook event, the prompt waiting on `UserPromptSubmit`: that process
imports the standard library and the small modules a hook needs (the registry, service.json, one HTTP request
to the running service), not click and the generated commands (~0.3 s). Only that exact shape is taken here;
anything else (`--help`, other spellings) is the CLI's to parse, which runs the same hook.
"""

from __future__ import annotations

import sys

HOOK = ["hook", "claude-code"]


def main() -> None:
    """Console-script entry point. The process then exits as Python does (atexit handlers, e.g. a writer's
    marker removed, then the interpreter's teardown: 25-60 ms that a skip by `os._exit` saved, measured in
    docs/benchmarks.md and not worth a private exit path)."""
    run(sys.argv[1:])


def run(args: list[str]) -> None:
    """The hook's direct path, or the CLI."""
    hook = hook_call(args)
    if hook is not None:
        from dreamflow.hooks import claude_code

        claude_code(*hook)
        return
    from dreamflow.cli import main as cli_main

    cli_main()


def hook_call(args: list[str]) -> tuple[str | None, bool] | None:
    """(workspace, verbose) when `args` are `[--workspace W | -w W | --workspace=W] hook claude-code
    [--verbose | -v]`, else None."""
    workspace = None
    if args[:1] in (["--workspace"], ["-w"]) and len(args) > 1:
        workspace, args = args[1], args[2:]
    elif args and args[0].startswith("--workspace="):
        workspace, args = args[0].partition("=")[2], args[1:]
    if args[:2] != HOOK or any(a not in ("--verbose", "-v") for a in args[2:]):
        return None
    return workspace, len(args) > 2
