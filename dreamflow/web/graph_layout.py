"""Where the graph page draws a file's neighbourhood (`Memory.traverse`): a radial layout computed here, drawn
as SVG by the template, so the page needs no script and no library.

The file sits in the middle, the files one hop away on the first ring, two hops on the second, and so on;
each ring's files are ordered by the angle of the file that reached them, so links mostly run outwards
instead of across the picture. Typed links (`uses:: [[x]]`) carry their predicate as a label.
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath

from storage.workspace import ARCHIVE, BUCKETS

RING = 130  # px between rings
NODE_RADIUS = 7
LABEL_CHARS = 28
LABEL_ROOM = 190  # px left and right of the outermost files for their labels
EDGE_ROOM = 30  # px above and below
BEND = 18  # px a link bends aside when the files also link the other way


def layout(center: str, traversed: dict) -> dict:
    """`{box, radius, nodes: [{path, label, title, x, y, kind, depth, exists, anchor}], edges: [{d, predicate,
    lx, ly}]}` for `traversed` (`traverse`'s answer) around `center`: `box` is the SVG viewBox, `d` each
    link's path."""
    depth_of = {n["path"]: n["depth"] for n in traversed["nodes"]}
    info = {n["path"]: n for n in traversed["nodes"]}
    depth_of.setdefault(center, 0)
    parents: dict[str, str] = {}
    for edge in traversed["edges"]:
        for near, far in ((edge["source"], edge["target"]), (edge["target"], edge["source"])):
            if depth_of.get(far, -1) == depth_of.get(near, -1) + 1:
                parents.setdefault(far, near)
    angle = {center: 0.0}
    rings = max(depth_of.values(), default=0)
    for ring in range(1, rings + 1):
        members = [p for p, d in depth_of.items() if d == ring]
        members.sort(key=lambda p: (angle.get(parents.get(p, center), 0.0), p))
        for i, path in enumerate(members):
            angle[path] = 2 * math.pi * (i + 0.5) / len(members) - math.pi / 2
    position = {p: (round(RING * depth_of[p] * math.cos(angle[p]), 1), round(RING * depth_of[p] * math.sin(angle[p]), 1))
                for p in depth_of}
    names = [info.get(p, {}).get("name") for p in depth_of]
    nodes = []
    for path, depth in sorted(depth_of.items(), key=lambda item: (item[1], item[0])):
        x, y = position[path]
        node = info.get(path, {})
        name = node.get("name")
        label = name if name and names.count(name) == 1 else PurePosixPath(path).stem  # two "Ana": their files
        nodes.append({"path": path, "label": label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…",
                      "title": f"{name or path} ({path})", "x": x, "y": y, "depth": depth,
                      "kind": "center" if path == center else kind_of(path, node.get("exists", True)),
                      "exists": node.get("exists", True), "anchor": "end" if x < -1 else "start"})
    pairs = {(e["source"], e["target"]) for e in traversed["edges"]}
    edges, drawn = [], set()
    for edge in traversed["edges"]:
        key = (edge["source"], edge["target"], edge.get("predicate"))
        if key in drawn or edge["source"] == edge["target"]:
            continue  # one arrow per pair and predicate (a node cites a card in History and Sources)
        drawn.add(key)
        edges.append(_arrow(position[edge["source"]], position[edge["target"]], edge.get("predicate"),
                            (edge["target"], edge["source"]) in pairs))
    xs, ys = [x for x, _ in position.values()], [y for _, y in position.values()]
    box = (min(xs) - LABEL_ROOM, min(ys) - EDGE_ROOM, max(xs) - min(xs) + 2 * LABEL_ROOM,
           max(ys) - min(ys) + 2 * EDGE_ROOM)
    return {"box": " ".join(str(round(v)) for v in box), "nodes": nodes, "edges": edges, "radius": NODE_RADIUS}


def _arrow(start: tuple[float, float], end: tuple[float, float], predicate: str | None, both_ways: bool) -> dict:
    """A link's SVG path from `start` to the rim of the file at `end` (bent aside when the files link both ways,
    so the two arrows and their labels do not overlap) and where its label goes."""
    (x1, y1), (x2, y2) = start, end
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    nx, ny = -(y2 - y1) / length, (x2 - x1) / length  # the normal, to the left of the link
    bend = BEND if both_ways else 0.0
    cx, cy = (x1 + x2) / 2 + nx * bend * 2, (y1 + y2) / 2 + ny * bend * 2
    tx, ty = x2 - cx, y2 - cy
    cut = (NODE_RADIUS + 3) / (math.hypot(tx, ty) or 1.0)  # the arrow ends at the node's rim
    ex, ey = x2 - tx * cut, y2 - ty * cut
    return {"d": f"M {x1:.1f} {y1:.1f} Q {cx:.1f} {cy:.1f} {ex:.1f} {ey:.1f}", "predicate": predicate,
            "lx": round((x1 + x2) / 2 + nx * bend, 1), "ly": round((y1 + y2) / 2 + ny * bend - 3, 1)}


def kind_of(path: str, exists: bool = True) -> str:
    """A file's kind for its colour: missing, archive, personal, procedure, wiki, own (a digest folder of your
    own), daily, resource, session, other."""
    if not exists:
        return "missing"
    parts = path.split("/")
    if parts[0] == "digest" and len(parts) > 2:
        return parts[1] if parts[1] in (ARCHIVE, *BUCKETS) else "own"
    return parts[0] if parts[0] in ("daily", "resource", "session") else "other"
