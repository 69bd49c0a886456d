"""The shape docs/architecture.md promises holds in the code: imports point one way down the layers, no modules
import each other in a circle, and storage/ stays plain Python. Imports inside functions count too."""

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["dreamflow", "deployments", "flows", "tasks", "engine", "storage"]  # each imports only those below it
SAME_LAYER = {"deployments": "flows"}  # the deployments declare the flows they run: one layer in the docs' picture
HEAVY = ("prefect", "openai", "torch", "sentence_transformers")


@cache
def imports() -> dict[str, set[str]]:
    """{module: the modules and packages it imports, anywhere in its code}."""
    found = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):  # sub-packages too (dreamflow/web)
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            names = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
                    if node.module.split(".")[0] in LAYERS:  # `from storage import index` imports storage.index
                        names |= {f"{node.module}.{alias.name}" for alias in node.names}
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
