"""Where the graph page draws a file's neighbourhood (`Memory.traverse`): a layered layout computed here, drawn
as SVG by the template, so the page needs no script and no library.

The file sits in the middle column; the files it links to go to the right, one column per hop, the files that
link to it to the left, so arrows read left to right along the links. Each file is a box holding its name
(wrapped on up to two lines), so no label runs over another or over a node. A column is ordered by where the
files that reached it sit, so links mostly run straight; a column with more than MAX_ROWS files is dealt into
side-by-side sub-columns, staggered, so it stays short. Every box is placed on a grid: boxes never overlap, by
construction. Typed links (`uses:: [[x]]`) carry their predicate as a label.
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath

from storage.files.workspace import ARCHIVE, BUCKETS

LINE_CHARS = 20  # of a label line; a label has at most two
CHAR_WIDTH = 6.8  # px, a generous estimate of a 12px sans-serif character (the template's font size)
LABEL_CHAR_WIDTH = 6.4  # px, of an 11px one (a link's predicate)
LABEL_HEIGHT = 13  # px
LINE_HEIGHT = 15  # px
PAD_X, PAD_Y = 10, 6  # px inside a box around its text
MIN_BOX = 64  # px: the narrowest box
ROW_GAP = 14  # px between boxes one above the other
COLUMN_GAP = 86  # px between columns: room for the arrows and their predicates
SUB_GAP = 22  # px between the sub-columns of one hop
MAX_ROWS = 12  # files in one column before it is dealt into sub-columns
MAX_SUBCOLUMNS = 3
MARGIN = 16  # px around the drawing
BEND = 5  # px two arrows between the same files, one each way, are set apart


def layout(center: str, traversed: dict) -> dict:
    """`{box, width, height, nodes: [{path, label, lines, baselines, title, x, y, w, h, kind, depth, exists}],
    edges: [{d, predicate, lx, ly, shown, curve}]}` for `traversed` (`traverse`'s answer) around `center`: `box` is the
    SVG viewBox, `width`/`height` its size in px, `x, y` a node's box centre, `w, h` its size, `baselines` the y
    of each line of its label, `d` each link's path."""
    info = {n["path"]: n for n in traversed["nodes"]}
    depth_of = {n["path"]: n["depth"] for n in traversed["nodes"]}
    depth_of.setdefault(center, 0)
    side = _sides(center, depth_of, traversed["edges"])
    names = [info.get(p, {}).get("name") for p in depth_of]
    nodes = {}
    for path in depth_of:
        node = info.get(path, {})
        name = node.get("name")
        label = name if name and names.count(name) == 1 else PurePosixPath(path).stem  # two "Ana": their files
        lines = wrap(label)
        width = max(MIN_BOX, math.ceil(max(len(line) for line in lines) * CHAR_WIDTH + 2 * PAD_X))
        nodes[path] = {"path": path, "label": " ".join(lines), "lines": lines, "title": f"{name or path} ({path})",
                       "w": width, "h": len(lines) * LINE_HEIGHT + 2 * PAD_Y, "depth": depth_of[path],
                       "kind": "center" if path == center else kind_of(path, node.get("exists", True)),
                       "exists": node.get("exists", True)}
    columns: dict[int, list[str]] = {}
    for path in depth_of:
        columns.setdefault(side[path] * depth_of[path], []).append(path)
    _order(columns, traversed["edges"])
    _place(columns, nodes)
    for node in nodes.values():  # where each line of its label sits
        node["baselines"] = [round(node["y"] - node["h"] / 2 + PAD_Y + LINE_HEIGHT * (i + 1) - 3.5, 1)
                             for i in range(len(node["lines"]))]
    pairs = {(e["source"], e["target"]) for e in traversed["edges"]}
    edges, drawn = [], set()
    for edge in traversed["edges"]:
        key = (edge["source"], edge["target"], edge.get("predicate"))
        if key in drawn or edge["source"] == edge["target"] or not {edge["source"], edge["target"]} <= nodes.keys():
            continue  # one arrow per pair and predicate (a node cites a card in History and Sources)
        drawn.add(key)
        edges.append(_arrow(nodes[edge["source"]], nodes[edge["target"]], edge.get("predicate"),
                            (edge["target"], edge["source"]) in pairs))
    _unclutter(edges, nodes.values())
    left = min(n["x"] - n["w"] / 2 for n in nodes.values()) - MARGIN
    right = max(n["x"] + n["w"] / 2 for n in nodes.values()) + MARGIN
    top = min(n["y"] - n["h"] / 2 for n in nodes.values()) - MARGIN
    bottom = max(n["y"] + n["h"] / 2 for n in nodes.values()) + MARGIN
    for e in edges:  # a same-column arc bulges out of the columns (its control points bound it)
        xs = [x for x, _ in e["curve"]] + ([label_box(e)[0], label_box(e)[0] + label_box(e)[2]] if e["shown"] else [])
        left, right = min(left, min(xs) - MARGIN), max(right, max(xs) + MARGIN)
    ordered = sorted(nodes.values(), key=lambda n: (n["depth"], n["path"]))
    return {"box": f"{left:.0f} {top:.0f} {right - left:.0f} {bottom - top:.0f}", "width": round(right - left),
            "height": round(bottom - top), "nodes": ordered, "edges": edges}


def wrap(label: str) -> list[str]:
    """A label as one or two lines of at most LINE_CHARS, broken between words (a longer word where it must),
    the rest cut with an ellipsis."""
    pieces = [word[i:i + LINE_CHARS] for word in label.split() for i in range(0, len(word), LINE_CHARS)]
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 1 + len(piece) <= LINE_CHARS:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    if len(lines) > 2:
        lines = [lines[0], lines[1][:LINE_CHARS - 1] + "…"]
    return lines or ["?"]


def _sides(center: str, depth_of: dict, edges: list[dict]) -> dict[str, int]:
    """Each file's side: +1 (right) when the file that reached it links to it, -1 (left) when it links to that
    file; a file keeps the side of the file that reached it."""
    side = {center: 0}
    for ring in range(1, max(depth_of.values(), default=0) + 1):
        for edge in edges:
            for near, far, way in ((edge["source"], edge["target"], 1), (edge["target"], edge["source"], -1)):
                if far not in side and depth_of.get(far) == ring and depth_of.get(near) == ring - 1 and near in side:
                    side[far] = side[near] or way
        for path, depth in depth_of.items():  # reached by no link drawn here (traverse's limit): the right
            if depth == ring and path not in side:
                side[path] = 1
    return side


def _order(columns: dict[int, list[str]], edges: list[dict]) -> None:
    """Sorts each column, outwards from the middle, by the mean position of its files' neighbours in the column
    nearer the middle (then by path), so links cross as little as a sort can make them."""
    near: dict[str, set[str]] = {}
    for edge in edges:
        near.setdefault(edge["source"], set()).add(edge["target"])
        near.setdefault(edge["target"], set()).add(edge["source"])
    for column in sorted(columns, key=abs):
        if column == 0:
            continue
        inner = columns.get(column - (1 if column > 0 else -1), [])
        rank = {p: i / max(1, len(inner) - 1) for i, p in enumerate(inner)}

        def key(path: str) -> tuple[float, str]:
            seen = [rank[p] for p in near.get(path, ()) if p in rank]
            return (sum(seen) / len(seen) if seen else 1.0, path)

        columns[column].sort(key=key)


def _place(columns: dict[int, list[str]], nodes: dict[str, dict]) -> None:
    """Sets each node's `x, y` (its box's centre): columns left to right, each centred on y = 0; a long column
    dealt round-robin into staggered sub-columns."""
    spans = {}
    for column, paths in columns.items():
        subs = min(MAX_SUBCOLUMNS, max(1, math.ceil(len(paths) / MAX_ROWS)))
        widths = [max((nodes[p]["w"] for p in paths[s::subs]), default=MIN_BOX) for s in range(subs)]
        spans[column] = (subs, widths)
    x = 0.0
    for column in sorted(columns):
        paths, (subs, widths) = columns[column], spans[column]
        slot = max(nodes[p]["h"] for p in paths) + ROW_GAP  # one sub-column's pitch
        step = slot / subs
        height = (len(paths) - 1) * step
        starts = [x + sum(widths[:s]) + s * SUB_GAP for s in range(subs)]
        for i, path in enumerate(paths):
            sub = i % subs
            nodes[path]["x"] = round(starts[sub] + widths[sub] / 2, 1)
            nodes[path]["y"] = round(i * step - height / 2, 1)
        x += sum(widths) + (subs - 1) * SUB_GAP + COLUMN_GAP
    middle = next((n["x"] for n in nodes.values() if n["kind"] == "center"), 0.0)
    for node in nodes.values():
        node["x"] = round(node["x"] - middle, 1)


def _arrow(start: dict, end: dict, predicate: str | None, both_ways: bool) -> dict:
    """A link's SVG path from the side of `start`'s box facing `end` to `end`'s box (an arc beside the column
    when both are in it), its curve's points, and where its label goes."""
    shift = BEND if both_ways else 0.0
    (x1, y1), (x2, y2) = (start["x"], start["y"] - shift), (end["x"], end["y"] - shift)
    apart = abs(x2 - x1) > (start["w"] + end["w"]) / 2
    if apart:
        way = 1 if x2 > x1 else -1
        sx, ex = x1 + way * start["w"] / 2, x2 - way * end["w"] / 2
        pull = (ex - sx) / 2
        c1x, c2x = sx + pull, ex - pull
    else:  # one above the other: an arc on the outer side
        way = -1 if x1 < 0 else 1
        sx, ex = x1 + way * start["w"] / 2, x2 + way * end["w"] / 2
        bulge = 30 + abs(y2 - y1) / 4
        c1x, c2x = sx + way * bulge, ex + way * bulge
    curve = ((sx, y1), (c1x, y1), (c2x, y2), (ex, y2))
    lx, ly = _at(curve, 0.5)
    return {"d": f"M {sx:.1f} {y1:.1f} C {c1x:.1f} {y1:.1f} {c2x:.1f} {y2:.1f} {ex:.1f} {y2:.1f}",
            "predicate": predicate, "lx": round(lx, 1), "ly": round(ly - 4, 1), "curve": curve, "shown": False}


def _at(curve: tuple, t: float) -> tuple[float, float]:
    """The point of a cubic Bézier curve at `t`."""
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = curve
    a, b, c, d = (1 - t) ** 3, 3 * t * (1 - t) ** 2, 3 * t * t * (1 - t), t ** 3
    return a * x0 + b * x1 + c * x2 + d * x3, a * y0 + b * y1 + c * y2 + d * y3


def label_box(edge: dict) -> tuple[float, float, float, float]:
    """The box a link's predicate takes: (left, top, width, height)."""
    width = len(edge["predicate"] or "") * LABEL_CHAR_WIDTH + 4
    return edge["lx"] - width / 2, edge["ly"] - LABEL_HEIGHT + 3, width, LABEL_HEIGHT


def overlap(a: tuple, b: tuple) -> bool:
    """Whether two boxes (left, top, width, height) overlap."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def _unclutter(edges: list[dict], nodes) -> None:
    """Moves a predicate that would cover a box or an earlier predicate: along its link (the middle, then
    towards either end) and a line up or down there, until it covers none; one that finds no room is not drawn
    (`shown` false: its link says it on hover)."""
    taken = [(n["x"] - n["w"] / 2, n["y"] - n["h"] / 2, n["w"], n["h"]) for n in nodes]
    for edge in (e for e in edges if e["predicate"]):
        for t, move in ((t, move) for t in (0.5, 0.7, 0.3, 0.85, 0.15) for move in (0, -1, 1, -2, 2)):
            x, y = _at(edge["curve"], t)
            edge["lx"], edge["ly"] = round(x, 1), round(y - 4 + move * LABEL_HEIGHT, 1)
            edge["shown"] = not any(overlap(label_box(edge), box) for box in taken)
            if edge["shown"]:
                taken.append(label_box(edge))
                break


def kind_of(path: str, exists: bool = True) -> str:
    """A file's kind for its colour: missing, archive, personal, procedure, wiki, own (a digest folder of your
    own), daily, resource, session, other."""
    if not exists:
        return "missing"
    parts = path.split("/")
    if parts[0] == "digest" and len(parts) > 2:
        return parts[1] if parts[1] in (ARCHIVE, *BUCKETS) else "own"
    return parts[0] if parts[0] in ("daily", "resource", "session") else "other"
