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
    """The parameters of `function` in `module` (dotted, e.g. flows.auto_dream), in order; keyword-only ones
    (after `*`) are the callers' plumbing, not the job's: left out. A default is a literal, or a constant the
    module imports by name (`from storage.arguments import STALE_DAYS`) that is a literal where it is set."""
    args = _function(module, function).args
    positional = args.posonlyargs + args.args
    defaults = [REQUIRED] * (len(positional) - len(args.defaults)) + [_value(d, module) for d in args.defaults]
    return {arg.arg: JobParam(arg.arg, ast.unparse(arg.annotation) if arg.annotation else "", default)
            for arg, default in zip(positional, defaults)}


def job_doc(module: str, function: str) -> str:
    """The docstring of `function` in `module`."""
    return ast.get_docstring(_function(module, function)) or ""


def _value(node: ast.expr, module: str) -> Any:
    """A default's value: a literal, or the literal a name imported from another project module is set to."""
    if not isinstance(node, ast.Name):
        return ast.literal_eval(node)
    source = next((imp.module for imp in _tree(module).body if isinstance(imp, ast.ImportFrom) and imp.module
                   and any(alias.name == node.id and alias.asname is None for alias in imp.names)), None)
    assigned = next((stmt.value for stmt in _tree(source).body if isinstance(stmt, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets)), None) if source else None
    if assigned is None:
        raise LookupError(f"{module}: the default {node.id} is no constant imported from a project module")
    return ast.literal_eval(assigned)


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(ROOT.joinpath(*module.split(".")).with_suffix(".py").read_text(encoding="utf-8"))


@cache
def _function(module: str, function: str) -> ast.FunctionDef:
    tree = _tree(module)
    found = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function), None)
    if found is None:
        raise LookupError(f"{module.replace('.', '/')}.py defines no function {function}")
    return found


def job_defaults(module: str, function: str) -> dict[str, Any]:
    """`{name: default}` of the parameters of `function` in `module` that have one."""
    return {name: p.default for name, p in job_params(module, function).items() if p.default is not REQUIRED}
