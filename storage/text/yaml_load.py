"""Bounded YAML loading for text people and agents write (frontmatter, interests.yaml, the workspace registry):
hostile YAML never hangs.

PyYAML's safe loader keeps an alias (`*a`) as a reference to the anchored value, so loading is linear, but
anything that walks the result (JSON for the index and the API, pydantic, the dumper) expands every
reference: a ~400-byte document of 9 nested anchors (`b: &b [*a, *a, ...]`) becomes 9^9 values. `load`
composes the node graph (libyaml, which also caps nesting depth), counts what aliases would add when
expanded, and refuses the document before constructing anything when that exceeds `ALIAS_BUDGET` values or
an alias refers to a value that contains it. Values YAML recognises but cannot construct (`2024-13-45` as a
date, an integer too long for Python) are kept as their text and reported, so one bad value loses nothing.
`compose` stops before constructing: the checked node graph, for a reader that names the line of what is wrong.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

ALIAS_BUDGET = 10_000  # values that aliases may add to a document once expanded


class AliasBombError(yaml.YAMLError):
    """The document's aliases expand past `ALIAS_BUDGET` values, or an alias refers to its own container."""


class _BoundedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (libyaml when available) that keeps scalars failing to construct as their text."""

    def __init__(self, stream: str, first_line: int):
        super().__init__(stream)
        self.first_line = first_line
        self.problems: list[str] = []


def _kept_as_text(construct):
    """`construct` (a scalar constructor) falling back to the scalar's text, with the failure noted."""

    def constructor(loader: _BoundedLoader, node: Node):
        try:
            return construct(loader, node)
        except ValueError as exc:  # e.g. month 13, an int past Python's 4,300-digit limit
            kind = node.tag.rsplit(":", 1)[-1].replace("timestamp", "date")
            shown = node.value if len(node.value) <= 40 else node.value[:37] + "..."
            loader.problems.append(f"{shown!r} at line {node.start_mark.line + loader.first_line} is not a "
                                   f"valid {kind} ({exc}); kept as text")
            return str(node.value)

    return constructor


for _tag in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:int"):
    _BoundedLoader.add_constructor(_tag, _kept_as_text(yaml.SafeLoader.yaml_constructors[_tag]))


def _expanded_size(root: Node, limit: int) -> int:
    """Values in the tree `root` stands for with every alias expanded, counting stops past `limit`.

    Iterative (no recursion limit), memoised per node, so the cost is the size of the node graph.
    Raises AliasBombError for a node reachable from itself (a recursive anchor)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children), limit + 1)
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise AliasBombError("an alias refers to a value that contains it (a recursive anchor)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return node.value
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _distinct_nodes(root: Node) -> int:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(_children(node))
    return len(seen)


def load(text: str, first_line: int = 1) -> tuple[Any, list[str]]:
    """(data, problems) of one YAML document, bounded in time and memory by the document's size.

    Raises yaml.YAMLError for malformed YAML, AliasBombError (a YAMLError) when aliases would expand past
    `ALIAS_BUDGET` values or recurse. `problems`: values kept as text because they could not be constructed,
    with line numbers counted from `first_line` (the document's first line in its file)."""
    loader = _BoundedLoader(text, first_line)
    try:
        node = _checked_node(loader, text)
        return (None, []) if node is None else (loader.construct_document(node), loader.problems)
    except RecursionError:  # PyYAML without libyaml composes and builds recursively
        raise yaml.YAMLError("values nested too deeply") from None
    finally:
        loader.dispose()


def compose(text: str) -> Node | None:
    """The node graph of one YAML document (None when it has none), checked as `load` checks it but not built
    into values: for a reader that says where each value is (`node.start_mark.line`, from 0) and what YAML
    read it as (`node.tag`). Raises what `load` raises."""
    loader = _BoundedLoader(text, 1)
    try:
        return _checked_node(loader, text)
    except RecursionError:
        raise yaml.YAMLError("values nested too deeply") from None
    finally:
        loader.dispose()


def _checked_node(loader: _BoundedLoader, text: str) -> Node | None:
    node = loader.get_single_node()
    if node is not None and "*" in text:  # no alias without a `*`: skip the count for the common document
        own = _distinct_nodes(node)
        if _expanded_size(node, own + ALIAS_BUDGET) > own + ALIAS_BUDGET:
            raise AliasBombError(f"its aliases expand to more than {ALIAS_BUDGET:,} values (an alias bomb?)")
    return node
