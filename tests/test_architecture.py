"""The shape docs/architecture.md promises holds in the code: imports point one way down the layers, no modules
import each other in a circle, storage/ stays plain Python, no module is loaded by a name string, and the
surface packages of dreamflow/ import neither the package they live in nor each other beyond SURFACE_IMPORTS.
Imports inside functions count too, in every sub-package."""

import ast
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["dreamflow", "deployments", "flows", "tasks", "engine", "storage"]  # each imports only those below it
SAME_LAYER = {"deployments": "flows"}  # the deployments declare the flows they run: one layer in the docs' picture
HEAVY = ("prefect", "openai", "torch", "sentence_transformers")
# Which surface package of dreamflow/ may import which other one (its modules, never its package `__init__`):
# the CLI starts every other surface; the supervisor serves the HTTP API; the API mounts the MCP endpoint, the
# dashboard and answers the hook's question; MCP over HTTP reads the caller's grant from the request scope and
# records turns as the hook does; the hook and the CLI write the MCP server's text; the dashboard signs in
# through the API's access layer.
SURFACE_IMPORTS = {
    "cli": {"service", "mcp", "hooks"},
    "service": {"http"},
    "http": {"mcp", "hooks", "web"},
    "mcp": {"http", "hooks"},
    "hooks": {"mcp"},
    "web": {"http"},
}


@cache
def sources() -> dict[str, ast.Module]:
    """{module name: its parsed source} for every module of the layers, sub-packages included."""
    found = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[module] = ast.parse(path.read_text(), str(path))
    return found


@cache
def imports() -> dict[str, set[str]]:
    """{module: the modules and packages it imports, anywhere in its code}. `from P import m` imports the module
    `P.m` when there is one (not the package P), else P."""
    modules = sources()
    found = {}
    for module, tree in modules.items():
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                inner = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
                names |= inner
                if len(inner) < len(node.names):
                    names.add(node.module)
        found[module] = names
    return found


def rank(module: str) -> int:
    package = module.split(".")[0]
    return LAYERS.index(SAME_LAYER.get(package, package))


def test_imports_point_down_the_layers():
    upward = [(module, name) for module, names in imports().items() for name in names
              if name.split(".")[0] in LAYERS and rank(name) < rank(module)]
    assert upward == []


def test_storage_imports_no_prefect_llm_client_or_torch():
    heavy = [(module, name) for module, names in imports().items() if module.startswith("storage")
             for name in names if name.split(".")[0] in HEAVY]
    assert heavy == []


def test_no_modules_import_each_other_in_a_circle():
    found = imports()
    graph = {module: {name for name in names if name in found} for module, names in found.items()}
    circles, state = [], {}

    def visit(module: str, path: list[str]) -> None:  # depth first; a module met again on the path is a circle
        state[module] = "open"
        for name in sorted(graph[module]):
            if state.get(name) == "open":
                circles.append(path[path.index(name):] + [name])
            elif name not in state:
                visit(name, [*path, name])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def _is_task(decorator: ast.expr) -> bool:
    """`@task` or `@task(...)` (also spelled `prefect.task`)."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "task") or \
        (isinstance(target, ast.Attribute) and target.attr == "task")


SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE TABLE)\b.*\b(FROM|INTO|SET|WHERE)\b", re.S)


def test_tasks_holds_prefect_tasks_only_and_no_sql():
    """tasks/ is the Prefect layer: each module defines tasks; domain logic is in engine/, SQL in storage/."""
    without_tasks, sql = [], []
    for path in sorted((ROOT / "tasks").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), name)
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if path.name != "__init__.py" and not any(_is_task(d) for f in functions for d in f.decorator_list):
            without_tasks.append(name)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] == "duckdb" for n in names):
                    sql.append((name, node.lineno, "imports duckdb"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("execute", "executemany", "sql"):
                sql.append((name, node.lineno, ast.unparse(node.func)))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                sql.append((name, node.lineno, node.value[:40]))
    assert without_tasks == [] and sql == []


IMPORT_ONLY = """
import json, logging, os, sys
from engine.config import settings

read = []
real = settings.Settings.__init__
settings.Settings.__init__ = lambda self, *a, **k: (read.append(1), real(self, *a, **k))[-1]
before = dict(os.environ)
for name in sys.argv[1:]:
    __import__(name)
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
filters = [type(f).__name__ for n in ("prefect.flow_runs", "prefect.task_runs") for f in logging.getLogger(n).filters]
print(json.dumps({"environment changed": changed, "settings read": len(read), "log filters": filters}))
"""


@pytest.mark.e2e
def test_importing_flows_and_tasks_configures_nothing(tmp_path):
    """No work at import: Prefect's environment is configured by what runs flows (engine.config.prefect_env), and
    Dreamflow's settings are read when a run starts, never when a flow or task module is imported."""
    modules = sorted(m for m in imports() if m.split(".")[0] in ("flows", "tasks"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "DO_NOT_TRACK"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", IMPORT_ONLY, *modules], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"environment changed": [], "settings read": 0,
                                                       "log filters": []}
    assert "flows.auto_dream" in modules and "tasks.dream" in modules


def test_no_module_is_imported_by_a_name_string():
    """`importlib.import_module(...)` and `__import__(...)` only with a literal name outside the project: a
    project module is imported by an import statement, so the import graph above sees it."""
    found = []
    for module, tree in sources().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called not in ("import_module", "__import__"):
                continue
            name = node.args[0] if node.args else None
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            if not literal or name.value.split(".")[0] in LAYERS:
                found.append((module, node.lineno))
    assert found == []


def test_no_module_imports_the_package_it_lives_in():
    """A sub-package's `__init__` imports its modules, never the other way round; the layer roots (`dreamflow`,
    `engine`, ...) only declare (a version), so importing them is not a loop."""
    back = [(module, name) for module, names in imports().items() for name in names
            if "." in name and module.startswith(name + ".")]
    assert back == []


def test_surface_packages_import_each_other_only_as_declared():
    def surface(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "dreamflow" and len(parts) > 2 else None

    found = imports()
    assert {surface(m) for m in found} - {None} == SURFACE_IMPORTS.keys()  # every surface package is declared
    crossing = [(module, name) for module, names in found.items() for name in names
                if surface(module) and surface(name) not in (None, surface(module))
                and surface(name) not in SURFACE_IMPORTS[surface(module)]]
    assert crossing == []


def test_every_error_class_and_the_error_envelope_live_in_storage_errors():
    """One errors module: no class elsewhere derives from its errors, and no code elsewhere writes the envelope's
    `{type, message, exit_code}` by hand (`DreamflowError.to_json`, `errors.envelope`)."""
    from storage import errors

    names = {name for name, value in vars(errors).items()
             if isinstance(value, type) and issubclass(value, errors.DreamflowError)}
    elsewhere = []
    for module, tree in sources().items():
        if module == "storage.errors":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and {getattr(b, "id", getattr(b, "attr", None)) for b in node.bases} & names:
                elsewhere.append((module, node.name))
            elif isinstance(node, ast.Dict) and {"type", "message", "exit_code"} <= {
                    k.value for k in node.keys if isinstance(k, ast.Constant)}:
                elsewhere.append((module, node.lineno))
    assert elsewhere == []


def test_the_memories_surfaces_talk_to_have_the_declared_interface(tmp_path):
    """`storage.memory.Memory` and `engine.access.client.RemoteMemory` have what `engine.access.scoped.SurfaceMemory` declares
    and one method per operation, with the `Memory` method's parameters (the remote one's built from them)."""
    import inspect

    from engine import ops
    from engine.access.client import RemoteMemory
    from engine.access.scoped import SurfaceMemory
    from storage.memory import Memory

    def parameters(fn) -> list[str]:
        return [name for name in inspect.signature(fn).parameters if name not in ("self", "progress")]

    memory, remote = Memory(tmp_path / "ws"), RemoteMemory("http://127.0.0.1:9")
    declared = [name for name in vars(SurfaceMemory) if not name.startswith("_")]
    assert declared == ["download_content"]
    for name in declared:
        wanted = parameters(getattr(SurfaceMemory, name))
        assert parameters(getattr(memory, name)) == wanted and parameters(getattr(remote, name)) == wanted, name
    for op in ops.OPS:
        assert parameters(getattr(memory, op.method_name)) == [p.name for p in ops.parameters(op)], op.name
        assert parameters(getattr(remote, op.method_name)) == [p.name for p in ops.surface_parameters(op)], op.name


def test_every_catalog_has_the_declared_interface():
    """The classes that serve workspaces by name have what `engine.access.scoped.Catalog` declares, with its parameters."""
    import inspect

    from dreamflow.http.api import SingleWorkspace
    from dreamflow.mcp.targets import ServiceTarget, WorkspaceTarget
    from dreamflow.service.hosting import Hosts
    from engine.access.scoped import Catalog, LocalCatalog

    declared = {name: list(inspect.signature(getattr(Catalog, name)).parameters)
                for name in ("names", "serves", "reads", "root", "memory")}
    for catalog in (LocalCatalog, Hosts, SingleWorkspace, ServiceTarget, WorkspaceTarget):
        found = {name: list(inspect.signature(getattr(catalog, name)).parameters) if hasattr(catalog, name) else None
                 for name in declared}
        assert found == declared, catalog
