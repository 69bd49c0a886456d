"""A job's parameters as its function declares them: names, annotations and defaults, read with `ast` from the
function's source file (e.g. flows/auto_dream.py), so the CLI options, HTTP models and MCP job tools show the
flow's own defaults without importing prefect or the flow. The function's signature is the only place a job's
parameters and defaults are written (engine/jobs.py names the function).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = object()  # the default of a parameter without one


@dataclass(frozen=True)
class JobParam:
    name: str
    annotation: str  # as written, e.g. "int" or "str | None"
    default: Any  # REQUIRED when the parameter has none


@cache
def job_params(module: str, function: str) -> dict[str, JobParam]:
    """The parameters of `function` in `module` (dotted, e.g. flows.auto_dream), in order (defaults must be
    literals); keyword-only ones (after `*`) are the callers' plumbing, not the job's: left out."""
    args = _function(module, function).args
    positional = args.posonlyargs + args.args
    defaults = [REQUIRED] * (len(positional) - len(args.defaults)) + [ast.literal_eval(d) for d in args.defaults]
    return {arg.arg: JobParam(arg.arg, ast.unparse(arg.annotation) if arg.annotation else "", default)
            for arg, default in zip(positional, defaults)}


def job_doc(module: str, function: str) -> str:
    """The docstring of `function` in `module`."""
    return ast.get_docstring(_function(module, function)) or ""


@cache
def _function(module: str, function: str) -> ast.FunctionDef:
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function), None)
    if found is None:
        raise LookupError(f"{module.replace('.', '/')}.py defines no function {function}")
    return found


def job_defaults(module: str, function: str) -> dict[str, Any]:
    """`{name: default}` of the parameters of `function` in `module` that have one."""
    return {name: p.default for name, p in job_params(module, function).items() if p.default is not REQUIRED}
