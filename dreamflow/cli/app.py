"""The `dreamflow` group: one command per operation in `engine.ops`, plus the commands of the other modules here.

Memory commands are generated from the `Memory` method signatures (type hints -> click options, the docstring
-> help). They import only click, the storage layer and (for people) rich: never prefect, openai, torch,
sentence-transformers, pydantic or fastapi, so `dreamflow search` starts in a fraction of a second.
Errors print a clear message and exit with the error's `exit_code` (usage errors: 2).
"""

from __future__ import annotations

import inspect
import json
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dreamflow import __version__
from dreamflow.cli.common import fail
from engine import ops
from engine.access.client import open_memory
from storage.errors import DreamflowError, from_os_error

# The commands besides the generated ones, in the order help lists them: name -> (its module's loader, attribute).
# A module is imported only when one of its commands runs or help lists them, so `dreamflow search` loads neither
# the MCP server nor the job commands; their modules import prefect, openai and torch only inside command bodies.
def _service():
    from dreamflow.cli import service_commands
    return service_commands


def _flows():
    from dreamflow.cli import flow_commands
    return flow_commands


def _governance():
    from dreamflow.cli import governance_commands
    return governance_commands


def _embed():
    from dreamflow.cli import embed_command
    return embed_command


def _mcp():
    from dreamflow.cli import mcp_command
    return mcp_command


def _hook():
    from dreamflow.cli import hook_command
    return hook_command


def _import():
    from dreamflow.cli import import_command
    return import_command


def _workspaces():
    from dreamflow.cli import workspace_commands
    return workspace_commands


EXTENSIONS: dict[str, tuple[typing.Callable[[], types.ModuleType], str]] = {
    "start": (_service, "start"), "status": (_service, "status"), "turn": (_service, "turn"),
    **{name: (_flows, name.replace("-", "_")) for name in ("auto-memory", "auto-resource", "dream", "proactive")},
    **{name: (_governance, name.replace("-", "_"))
       for name in ("doctor", "doctor-fix", "link-mine", "merge", "split", "archive")},
    "embed": (_embed, "embed"), "mcp": (_mcp, "mcp"), "hook": (_hook, "hook"), "import-reme": (_import, "import_reme"),
    "workspace": (_workspaces, "workspace"), "token": (_workspaces, "token"),
}


def extension(name: str) -> click.Command:
    """The extension command `name` (a key of EXTENSIONS), its module imported now."""
    module, attribute = EXTENSIONS[name]
    command = getattr(module(), attribute)
    _whole_short_help(command)
    return command


@dataclass
class CliContext:
    """What every command receives as `ctx.obj` (`@click.pass_obj`): the workspace and a way to open it.

    `workspace_arg` is what `--workspace` said (a registered name or a folder; None: the default);
    `workspace` its folder and `name` its name, resolved on first use (engine.config.registry.resolve)."""

    workspace_arg: str | None
    _resolved: tuple[str, Path] | None = None

    def _resolve(self) -> tuple[str, Path]:
        if self._resolved is None:
            from engine.config.registry import resolve

            try:
                self._resolved = resolve(self.workspace_arg)
            except DreamflowError as exc:  # e.g. a malformed registry: as JSON when the command prints JSON
                context = click.get_current_context(silent=True)
                fail(exc, bool(context and context.params.get("as_json")))
        return self._resolved

    @property
    def workspace(self) -> Path:
        return self._resolve()[1]

    @property
    def name(self) -> str:
        return self._resolve()[0]

    def memory(self):
        """Through the running service when there is one, else in this process (engine.access.client)."""
        return open_memory(self.workspace)

    def across(self, op: ops.Op, kwargs: dict[str, Any]):
        """Run an operation that reads across workspaces (this one and those it reads, or `workspaces`) or names
        a file of another (`NAME:path`, engine/access/scoped.py): the running service decides what the caller's token
        may read; without one, this machine's registry."""
        from engine.access.client import service_for

        remote = service_for(self.workspace)
        if remote is not None:  # the service resolves the rest
            return getattr(remote, op.method_name)(**kwargs)
        from engine.access import scoped
        from engine.config.grants import ADMIN

        return scoped.call(scoped.LocalCatalog(self.name, self.workspace), ADMIN, self.name, op, kwargs)


class OperationsGroup(click.Group):
    """Memory commands are built from `ops.OPS` when looked up (a call builds only its own command); EXTENSIONS
    come first, imported when looked up, so an extension may replace a generated command (doctor, doctor-fix).
    Help lists them in declaration order: files, frontmatter, search, index, then extensions."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        generated = [op.cli_name for op in ops.OPS]
        return generated + [name for name in EXTENSIONS if name not in generated]

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """Like click's, but an unknown command gets the nearest names: `serch` -> "Did you mean search?"."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            if close:
                ctx.fail(f"No such command '{name}'. Did you mean {' or '.join(close)}?")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in EXTENSIONS:
            return extension(name)
        op = next((op for op in ops.OPS if op.cli_name == name), None)
        if op is None:
            return None
        command = build_command(op)
        if not op.writes:  # only operations that write run as jobs (engine/jobs.py `op`): a search loads no jobs
            return command
        from dreamflow.cli.flow_commands import WRAPPERS

        wrap = WRAPPERS.get(name)
        return wrap(command) if wrap else command


@click.group(cls=OperationsGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--workspace", "-w", default=None, metavar="NAME|DIR",
    show_default="$DREAMFLOW_WORKSPACE, the registered workspace of this folder, the registry's default, or "
                 "./.dreamflow",
    help="A registered workspace (`dreamflow workspace list`) or a folder (created on first use).",
)
@click.version_option(__version__, prog_name="dreamflow")
@click.pass_context
def cli(ctx: click.Context, workspace: str | None) -> None:
    """Dreamflow: file-native long-term memory for AI agents.

    Every PATH is relative to the workspace. Add --json to any command for machine-readable output.
    """
    ctx.obj = CliContext(workspace)


def _whole_short_help(cmd: click.Command) -> None:
    """An extension command's listing line (and its subcommands') is its first sentence, whole: click would cut
    it at ~45 characters with "..."."""
    if not cmd.short_help and cmd.help:
        cmd.short_help = ops.first_sentence(cmd.help)
    for sub in getattr(cmd, "commands", {}).values():
        _whole_short_help(sub)


# ---- commands generated from the operation registry --------------------------------------------------

def build_command(op: ops.Op) -> click.Command:
    """A click command for `op`: positional args and options from the Memory signature, plus --json."""
    params: list[click.Parameter] = [_click_param(op, p) for p in ops.surface_parameters(op)]
    if op.body:
        params.append(click.Option(["--file", "body_file"], type=click.File("r", encoding="utf-8"),
                                   help=f"Read {op.body} from this file ('-' for stdin)."))
    params.append(click.Option(["--json", "as_json"], is_flag=True, help="Print the result as JSON."))
    epilog = "\b\n" + "\n".join(f"{p.name.upper()}: {p.help}" for p in ops.parameters(op) if p.name in op.args)

    @click.pass_obj
    def callback(obj: CliContext, as_json: bool, body_file=None, **kwargs: Any) -> None:
        kwargs = {name: _from_click(value) for name, value in kwargs.items()}
        if op.body:
            body = _body(op, kwargs.pop(op.body, None), body_file)
            if body is not None:
                kwargs[op.body] = body
        try:
            if op.across or _names_workspace(kwargs):
                result = obj.across(op, kwargs)
            else:
                method = getattr(obj.memory(), op.method_name)
                if "progress" in inspect.signature(method).parameters and not as_json:
                    from dreamflow.cli import render

                    with render.progress(op.cli_name) as bar:
                        result = method(**kwargs, progress=bar)
                else:
                    result = method(**kwargs)
        except DreamflowError as exc:
            fail(exc, as_json)
        except OSError as exc:  # permissions, a full disk, a file where a folder should be: no traceback
            fail(from_os_error(exc), as_json)
        if as_json:
            click.echo(json.dumps(result, ensure_ascii=False, indent=2, default=str))
        else:
            from dreamflow.cli import plain

            if not plain.show(op.name, result):
                from dreamflow.cli import render

                render.show(op.name, result)

    return click.Command(op.cli_name, params=params, callback=callback, help=op.help, short_help=op.summary,
                         epilog=epilog if op.args else None)


class KeyValue(click.ParamType):
    """A JSON object (`'{"k": 1}'`) or a `key=value` pair whose value is parsed as JSON when it can be."""

    name = "KEY=VALUE|JSON"

    def convert(self, value: Any, param, ctx) -> dict:
        if isinstance(value, dict):
            return value
        text = str(value).strip()
        if text.startswith("{"):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                self.fail(f"not valid JSON: {exc}", param, ctx)
            if not isinstance(parsed, dict):
                self.fail("expected a JSON object", param, ctx)
            return parsed
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            self.fail(f"expected key=value or a JSON object, got {value!r}", param, ctx)
        try:
            return {key.strip(): json.loads(raw)}
        except json.JSONDecodeError:
            return {key.strip(): raw}


def _click_param(op: ops.Op, p: ops.Param) -> click.Parameter:
    hint = _strip_none(p.annotation)
    is_list = typing.get_origin(hint) is list
    base = typing.get_args(hint)[0] if is_list else hint
    ptype = _click_type(base)
    default = None if p.required or p.name == op.body else p.default
    if p.name in op.args:
        return click.Argument([p.name], type=ptype, nargs=-1 if is_list else 1, required=p.required,
                              default=None if is_list else default)
    flag = "--" + p.name.replace("_", "-")
    if base is bool:
        decls = [flag] if not default else [f"{flag}/--no-{flag[2:]}"]
        return click.Option([*decls, p.name], is_flag=True, default=bool(default), help=p.help)
    multiple = is_list or base is dict or typing.get_origin(base) is dict
    return click.Option(
        [flag, p.name], type=ptype, multiple=multiple, required=p.required and p.name != op.body,
        default=None if multiple else default, show_default=default not in (None, "") and not multiple,
        help=p.help + (" (repeatable)" if multiple else ""),
    )


def _click_type(hint: Any) -> click.ParamType:
    if typing.get_origin(hint) is typing.Literal:
        return click.Choice([str(v) for v in typing.get_args(hint)])
    if hint is dict or typing.get_origin(hint) is dict:
        return KeyValue()
    return {int: click.INT, float: click.FLOAT, bool: click.BOOL}.get(hint, click.STRING)


def _strip_none(hint: Any) -> Any:
    """`X | None` -> `X`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _names_workspace(kwargs: dict[str, Any]) -> bool:
    """Whether a path argument may name a file of another workspace (`NAME:path`): engine/access/scoped.py decides."""
    values = [kwargs.get(key) for key in ("path", "paths", "src", "dst", "prefix", "target", "new_target")]
    return any(":" in v for value in values for v in (value if isinstance(value, list) else [value])
               if isinstance(v, str))


def _from_click(value: Any) -> Any:
    """Click hands repeatable options and variadic args over as tuples; Memory takes lists/dicts or None."""
    if isinstance(value, tuple):
        if value and all(isinstance(v, dict) for v in value):
            merged: dict = {}
            for item in value:
                merged.update(item)
            return merged
        return list(value) or None
    return value


def _body(op: ops.Op, content: str | None, body_file) -> str | None:
    """Content from --content, else --file, else piped stdin; required bodies must come from somewhere."""
    if content is not None and body_file is not None:
        raise click.UsageError(f"give --{op.body} or --file, not both")
    if content is not None:
        return content
    if body_file is not None:
        return body_file.read()
    piped = "" if sys.stdin.isatty() else sys.stdin.read()
    if piped:
        return piped
    if next(p for p in ops.parameters(op) if p.name == op.body).required:
        raise click.UsageError(f"no {op.body}: give --{op.body} TEXT, --file PATH, or pipe text on stdin")
    return None


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="dreamflow")
