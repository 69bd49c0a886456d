"""The graph health report behind `dreamflow doctor`: what is broken or suspicious, with paths. No LLM.

Problems (each a list of rows; any row makes the report not ok):
- `broken_links`: wikilinks whose target file does not exist (but for conversation records, see below)
- `broken_anchors`: line anchors (`#L3-L9`) reaching past the end of their target (or malformed, `#L5-L2`),
  heading anchors (`#Setup`, `#setup-steps`, `#Parent#Child`) naming no heading of their Markdown target, and
  block anchors (`#^f2`: a fact's `source` or `replaced_by`) naming no block id of it
- `orphans`: digest nodes the jobs wrote (`by_job`) with no inbound and no outbound link
- `missing_sources`: digest nodes the jobs wrote without a `## Sources` section, whose section cites nothing,
  or whose sources are all missing
- `near_duplicates`: pairs of current digest nodes whose name and description are alike (see `similarity`; a
  superseded node and its successor share a name by design)
- `same_names`: one node file name in two or more buckets (`digest/personal/x.md` and `digest/wiki/x.md`)
- `supersession`: broken validity (storage/text/validity.chain_problems): a successor missing, a chain that
  loops, `valid_to` before `valid_from`, a node still current after its expiry day
- `facts`: broken validity of single facts (storage/text/validity.fact_problems): a `replaced_by` naming no fact,
  a fact under `## History` without `until`, `until` before `since`, a fact outside History whose `until` has
  come or that names a `replaced_by`, a block id twice in one file, replacements that loop
- `bad_frontmatter`: files whose YAML frontmatter does not parse, or holds a bad value (e.g. `date: 2024-13-45`)
- `drift`: files added, changed or deleted behind the index's back
- `special_files`: FIFOs, sockets, devices, symlink loops, dangling symlinks and symlinks leaving the workspace
  or into metadata/: skipped everywhere (never opened, never indexed), listed here to be removed by hand

A note a person wrote is theirs to shape: it needs no sources, and nothing linking to it is no problem (it is
listed among the notes as `unlinked`, what `link-mine` could connect). What the jobs wrote is recognised by
`by_job`: frontmatter the jobs write (`JOB_KEYS`: the dream's `about`, merge's `merged_from`, split's
`split_from`/`split_into`) or a fact line citing its source (`(source:: [[...]])`, storage/text/facts.py).

Notes (inputs of the governance flows, not problems): `unlinked` (above), `moved` (a missing link target whose content now lives
at exactly one other path, by content hash), `stale` (digest nodes nobody links to, not updated for
`stale_days`: archive candidates), `expired` (digest nodes whose `expires` or `valid_to` day has come, or
marked expired: archive candidates) and `overlong` (digest nodes over `overlong_lines` lines: split candidates);
and `absent_conversations`: links to a conversation record (`session/dialog/`) that is not on this machine, as in
a clone of a repository's memory (records stay out of git: storage/files/workspace.GITIGNORES), nothing to repair.
Links written in raw material (resource/, session/) are not checked: it is never rewritten. Archived nodes
(digest/archive/) are checked for broken links only.

`fix=True` first repairs what is mechanical and safe, then reports: drifted files are re-indexed, and links
to moved files are retargeted (anchors, aliases and predicates kept). Nothing else is written, except
`metadata/doctor.json`, the content hashes of link targets, by which a later run still recognises a target
moved outside the tools after the index has forgotten it. Running it twice changes nothing the second time.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import duckdb

from storage.arguments import OVERLONG_LINES, STALE_DAYS
from storage.errors import DreamflowError
from storage.files.workspace import Workspace, content_hash, read_regular
from storage.index import indexer as index
from storage.index.tokenize import terms
from storage.text import facts, graph_edit, markdown, validity

PROBLEMS = ("broken_links", "broken_anchors", "orphans", "missing_sources", "near_duplicates", "same_names",
            "supersession", "facts", "bad_frontmatter", "drift", "special_files")
NOTES = ("unlinked", "moved", "stale", "expired", "overlong", "absent_conversations")
JOB_KEYS = ("about", "merged_from", "split_from", "split_into")  # frontmatter only the jobs write
RECORDS = "session/dialog/"  # conversation records: kept out of git unless a team decides otherwise
LEDGER = "metadata/doctor.json"
DUP_THRESHOLD = 0.35  # chosen on 94 labelled nodes (4,371 pairs): benchmarks/near_duplicates.py
_DIGEST = "starts_with(f.path, 'digest/') AND NOT starts_with(f.path, 'digest/archive/') AND f.kind = 'markdown'"


def check(con: duckdb.DuckDBPyConnection, ws: Workspace, fix: bool = False, dup_threshold: float = DUP_THRESHOLD,
          stale_days: int = STALE_DAYS, overlong_lines: int = OVERLONG_LINES, today: dt.date | None = None) -> dict:
    """The health report (after repairs with `fix`): {ok, counts, <finding>: [rows], fixed?, seconds}."""
    started = time.perf_counter()
    today = today or dt.date.today()
    fixed = repair(con, ws) if fix else None
    scan = _scan(con, ws)
    links = _links(con, scan.disk)
    report: dict = {"ok": True, "counts": {}, "files": len(scan.disk), "links": len(links)}
    missing = [k for k in links if k["target"] not in scan.disk]
    report["broken_links"] = [_link_row(k) for k in missing if not k["target"].startswith(RECORDS)]
    report["absent_conversations"] = [_link_row(k) for k in missing if k["target"].startswith(RECORDS)]
    report["broken_anchors"] = _broken_anchors(con, ws, links, scan.disk)
    nodes = _digest_nodes(con, ws, scan.disk)
    report["digest_nodes"] = len(nodes)
    isolated = _isolated(con, scan.disk)
    jobs = {n["path"] for n in nodes if n["by_job"]}
    report["orphans"] = [row for row in isolated if row["path"] in jobs]
    report["unlinked"] = [row for row in isolated if row["path"] not in jobs]
    report["missing_sources"] = _missing_sources(ws, [n for n in nodes if n["by_job"]], scan.disk, links)
    metas = _validity(con, scan.disk)
    current = [n for n in nodes if validity.status(metas.get(n["path"], {}), today) == validity.CURRENT]
    report["near_duplicates"] = _near_duplicates(con, current, dup_threshold)  # a node and its successor are history
    report["same_names"] = same_names(nodes)
    report["supersession"] = validity.chain_problems(metas, today)
    report["facts"] = _fact_problems(con, ws, scan.disk, today)
    report["bad_frontmatter"] = _bad_frontmatter(con, scan.disk)
    report["drift"] = scan.drift
    report["special_files"] = scan.special
    report["moved"] = [{"from": old, "to": new} for old, new in _moves(scan, links).items()]
    report["stale"] = _stale(con, scan.disk, stale_days, today)
    report["expired"] = [{"path": p} for p, m in sorted(metas.items())
                         if validity.status(m, today) == validity.EXPIRED]
    report["overlong"] = [{"path": n["path"], "name": n["name"], "lines": n["lines"]}
                          for n in nodes if n["lines"] > overlong_lines]
    report["counts"] = {key: len(report[key]) for key in PROBLEMS + NOTES}
    report["ok"] = not any(report[key] for key in PROBLEMS)
    if fixed is not None:
        report["fixed"] = fixed
    _save_ledger(con, ws, scan.disk)
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def repair(con: duckdb.DuckDBPyConnection, ws: Workspace, known: dict[str, str] | None = None) -> dict:
    """Re-index drifted files, then retarget links to files moved outside the tools (unambiguous by hash).

    `known`: moves learnt elsewhere ({old: new}, e.g. from a damaged journal entry), used for a linked path
    that no longer exists when the hashes do not place it and `new` is a file. Returns {reindexed: [paths],
    retargeted: [{from, to, rewritten: [{path, links}]}]}.
    """
    scan = _scan(con, ws)
    if scan.drift:
        index.reconcile(con, ws)
    links = _links(con, scan.disk)
    linked = {k["target"] for k in links}
    moves = {old: new for old, new in (known or {}).items() if old in linked and old not in scan.disk
             and new in scan.disk}
    moves.update(_moves(scan, links))
    retargeted = []
    for old, new in sorted(moves.items()):
        retargeted.append({"from": old, "to": new, "rewritten": graph_edit.relink(con, ws, old, new)["rewritten"]})
    return {"reindexed": [d["path"] for d in scan.drift], "retargeted": retargeted}


def _validity(con: duckdb.DuckDBPyConnection, disk) -> dict[str, dict]:
    """{path: its validity frontmatter keys} of the live digest nodes on disk."""
    keys = ", ".join(f"json_extract_string(f.frontmatter, '$.{k}')" for k in validity.KEYS)
    rows = con.execute(f"SELECT f.path, {keys} FROM files f WHERE {_DIGEST}").fetchall()
    return {r[0]: dict(zip(validity.KEYS, r[1:])) for r in rows if r[0] in disk}


def _fact_problems(con: duckdb.DuckDBPyConnection, ws: Workspace, disk: dict, today: dt.date) -> list[dict]:
    """validity.fact_problems over the files the index holds facts of (archived nodes and raw material left out)."""
    paths = [r[0] for r in con.execute(
        "SELECT DISTINCT path FROM chunks WHERE search_text IS NOT NULL AND NOT starts_with(path, 'resource/') "
        "AND NOT starts_with(path, 'session/') ORDER BY path").fetchall()]
    texts = {}
    for path in paths:
        if path in disk:
            try:
                texts[path] = read_regular(os.path.join(str(ws.root), path)).decode("utf-8", errors="replace")
            except (OSError, DreamflowError):
                continue
    rows = validity.fact_problems(texts, disk, today)
    return [row for row in rows if not row["path"].startswith("digest/archive/")]


def describe(key: str, row: dict) -> str:
    """One finding row as a line of text (artifact and CLI)."""
    if "source" in row:
        anchor = f"#{row['anchor']}" if row.get("anchor") else ""
        extra = f" (target has {row['target_lines']} lines)" if "target_lines" in row else ""
        return f"`{row['source']}:{row['line']}` → `{row['target']}{anchor}`{extra}"
    if key == "near_duplicates":
        return f"`{row['paths'][0]}` ≈ `{row['paths'][1]}` ({row['score']})"
    if key == "same_names":
        return " = ".join(f"`{p}`" for p in row["paths"])
    if key == "moved":
        return f"`{row['from']}` → `{row['to']}`"
    if key == "supersession":
        return f"`{row['path']}`: {row['problem']}: {row['detail']}"
    if key == "facts":
        return f"`{row['path']}:{row['line']}` ^{row['id']}: {row['problem']}: {row['detail']}"
    detail = (row.get("reason") or row.get("error") or row.get("state") or row.get("kind") or row.get("updated")
              or row.get("lines") or "")
    return f"`{row['path']}`" + (f": {detail}" if detail != "" else "")


# ---- files on disk vs the index ------------------------------------------------------------------------

@dataclass
class _Scan:
    disk: dict[str, tuple[float, int]]  # path -> (mtime, size) of every indexable file on disk
    hashes: dict[str, str]               # content hash of files on disk (index, or computed when drifted)
    gone: dict[str, str]                 # content hash a missing file last had (stale index row or ledger)
    drift: list[dict]                    # [{path, state: added|modified|deleted}]
    special: list[dict]                  # [{path, kind}] entries that are not regular files (never opened)


def _scan(con: duckdb.DuckDBPyConnection, ws: Workspace) -> _Scan:
    disk, special = {}, []
    root = str(ws.root)
    for rel in ws.iter_files(skipped=special):
        if not index.is_indexed_path(rel):
            continue
        try:
            st = os.stat(os.path.join(root, rel))
        except OSError:
            continue
        disk[rel] = (st.st_mtime, st.st_size)
    indexed = {r[0]: r[1:] for r in con.execute("SELECT path, mtime, size, hash FROM files").fetchall()}
    hashes, drift = {}, []
    for rel, (mtime, size) in disk.items():
        row = indexed.get(rel)
        if row is not None and (row[0], row[1]) == (mtime, size):
            hashes[rel] = row[2]
            continue
        try:
            hashes[rel] = content_hash(read_regular(os.path.join(root, rel)))
        except (OSError, DreamflowError):
            continue
        if row is None or row[2] != hashes[rel]:
            drift.append({"path": rel, "state": "added" if row is None else "modified"})
    gone = {p: h for p, h in _load_ledger(ws).items() if p not in disk}
    for rel, row in indexed.items():
        if rel not in disk:
            drift.append({"path": rel, "state": "deleted"})
            if row[2]:
                gone[rel] = row[2]
    drift.sort(key=lambda d: d["path"])
    return _Scan(disk, hashes, gone, drift, special)


def _moves(scan: _Scan, links: list[dict]) -> dict[str, str]:
    """{missing link target: the one file on disk with the content it had}."""
    by_hash = defaultdict(list)
    for rel, digest in scan.hashes.items():
        by_hash[digest].append(rel)
    moves = {}
    for target in sorted({k["target"] for k in links if k["target"] not in scan.disk}):
        found = by_hash.get(scan.gone.get(target, ""), [])
        if len(found) == 1:
            moves[target] = found[0]
    return moves


def _load_ledger(ws: Workspace) -> dict[str, str]:
    try:
        data = json.loads((ws.root / LEDGER).read_text(encoding="utf-8"))
        return {str(k): str(v) for k, v in data.get("hashes", {}).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _save_ledger(con: duckdb.DuckDBPyConnection, ws: Workspace, disk: dict) -> None:
    """Remember the content hash of every link target: its current one, or for a missing target the one it
    had, until no link points at it any more (written only when it changed)."""
    old = _load_ledger(ws)
    rows = con.execute("""SELECT t.target, f.hash FROM (SELECT DISTINCT target FROM links) t
                          LEFT JOIN files f ON f.path = t.target ORDER BY t.target""").fetchall()
    hashes = {}
    for target, digest in rows:
        if target in disk and digest:
            hashes[target] = digest
        elif target not in disk and target in old:
            hashes[target] = old[target]
    if hashes != old:
        ws.write_text(LEDGER, json.dumps({"hashes": hashes}, indent=0, sort_keys=True))


# ---- links ----------------------------------------------------------------------------------------------

def _links(con: duckdb.DuckDBPyConnection, disk: dict) -> list[dict]:
    """Every link written in a file that exists, outside raw material."""
    rows = con.execute(
        """SELECT source, line, target, anchor, alias, predicate FROM links
           WHERE NOT starts_with(source, 'resource/') AND NOT starts_with(source, 'session/')
           ORDER BY source, line, target"""
    ).fetchall()
    keys = ("source", "line", "target", "anchor", "alias", "predicate")
    return [dict(zip(keys, r)) for r in rows if r[0] in disk]


def _link_row(link: dict) -> dict:
    return {k: link[k] for k in ("source", "line", "target", "anchor", "predicate")}


def _broken_anchors(con: duckdb.DuckDBPyConnection, ws: Workspace, links: list[dict], disk: dict) -> list[dict]:
    lengths = dict(con.execute("SELECT path, line_count FROM files").fetchall())
    titles: dict[str, set[str]] = {}  # target -> its headings, as written and as slugs (read once per target)
    blocks: dict[str, set[str]] = {}  # target -> its block ids (read once per target)
    out = []
    for link in links:
        anchor, target = link["anchor"], link["target"]
        if not anchor or target not in disk:
            continue
        if anchor.startswith("^"):
            if target not in blocks:
                blocks[target] = _block_ids(ws, target)
            if anchor[1:] not in blocks[target]:
                out.append({**_link_row(link), "target_lines": lengths.get(target) or 0})
            continue
        ranges = graph_edit.line_ranges(anchor)
        if ranges is not None:
            length = lengths.get(target) or 0
            if any(first < 1 or last < first or last > length for first, last in ranges):
                out.append({**_link_row(link), "target_lines": length})
        elif target.endswith(".md"):
            if target not in titles:
                titles[target] = _heading_keys(ws, target)
            if any(_anchor_key(part) not in titles[target] for part in anchor.split("#") if part.strip()):
                out.append({**_link_row(link), "target_lines": lengths.get(target) or 0})
    return out


def _block_ids(ws: Workspace, path: str) -> set[str]:
    """The block ids (`... ^f2` at a line's end) of a Markdown file; none for other files."""
    if not path.endswith(".md"):
        return set()
    try:
        return markdown.block_ids(ws.read_text(path))
    except (OSError, DreamflowError):
        return set()


def _anchor_key(text: str) -> str:
    return " ".join(text.lower().split())


def _heading_keys(ws: Workspace, path: str) -> set[str]:
    """A Markdown file's headings as `[[file#Heading]]` (any case) or `[[file#heading-slug]]` may name them."""
    try:
        found = markdown.headings(ws.read_text(path))
    except (OSError, DreamflowError):
        return set()
    return {_anchor_key(h) for h in found} | {markdown.heading_slug(h) for h in found}


# ---- digest nodes ---------------------------------------------------------------------------------------

def _digest_nodes(con: duckdb.DuckDBPyConnection, ws: Workspace, disk: dict) -> list[dict]:
    """The live digest nodes on disk: {path, name, description, lines, by_job}."""
    keys = " OR ".join(f"json_extract(f.frontmatter, '$.{k}') IS NOT NULL" for k in JOB_KEYS)
    rows = con.execute(f"SELECT path, name, description, line_count, coalesce({keys}, false) FROM files f "
                       f"WHERE {_DIGEST} ORDER BY path").fetchall()
    return [{"path": p, "name": n or _stem_name(p), "description": d or "", "lines": lines or 0,
             "by_job": bool(keyed) or _cites_sources(ws, p)} for p, n, d, lines, keyed in rows if p in disk]


def by_job(meta: dict, text: str) -> bool:
    """Whether a digest node is the jobs' writing (it must cite its sources) rather than a person's own note:
    frontmatter only the jobs write (`JOB_KEYS`), or a fact line citing its source."""
    return any(meta.get(k) is not None for k in JOB_KEYS) or any(f.sources for f in facts.parse(text))


def _cites_sources(ws: Workspace, path: str) -> bool:
    """`by_job` for a node whose frontmatter does not say: a fact line of it citing its source."""
    try:
        text = read_regular(os.path.join(str(ws.root), path)).decode("utf-8", errors="replace")
    except (OSError, DreamflowError):
        return False
    return "source::" in text and by_job({}, text)


def _stem_name(path: str) -> str:
    return re.sub(r"[-_]+", " ", path.rsplit("/", 1)[-1].rsplit(".", 1)[0])


def same_names(nodes: list[dict]) -> list[dict]:
    """`{name, paths}` for each node file name (`x.md`) found in more than one bucket (`digest/<bucket>/`)."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        by_name[node["path"].rsplit("/", 1)[-1]].append(node["path"])
    return [{"name": name, "paths": paths} for name, paths in sorted(by_name.items()) if len(paths) > 1]


def _isolated(con: duckdb.DuckDBPyConnection, disk: dict) -> list[dict]:
    """Digest nodes with no link in and none out (orphans when the jobs wrote them, else `unlinked`)."""
    rows = con.execute(f"""
        SELECT f.path, f.name FROM files f
        WHERE {_DIGEST}
          AND NOT EXISTS (SELECT 1 FROM links l WHERE l.target = f.path AND l.source <> f.path)
          AND NOT EXISTS (SELECT 1 FROM links l WHERE l.source = f.path AND l.target <> f.path)
        ORDER BY f.path""").fetchall()
    return [{"path": p, "name": n} for p, n in rows if p in disk]


def _stale(con: duckdb.DuckDBPyConnection, disk: dict, days: int, today: dt.date) -> list[dict]:
    """Digest nodes nobody else links to whose `updated` (else `date`, else mtime) is older than `days`."""
    rows = con.execute(f"""
        SELECT path, name, strftime(updated, '%Y-%m-%d') FROM (
            SELECT f.path, f.name,
                   coalesce(try_cast(json_extract_string(f.frontmatter, '$.updated') AS DATE), f.date,
                            to_timestamp(f.mtime)::DATE) AS updated
            FROM files f
            WHERE {_DIGEST}
              AND NOT EXISTS (SELECT 1 FROM links l WHERE l.target = f.path AND l.source <> f.path))
        WHERE updated < $cutoff ORDER BY updated, path""", {"cutoff": today - dt.timedelta(days=days)}).fetchall()
    return [{"path": p, "name": n, "updated": u} for p, n, u in rows if p in disk]


def _missing_sources(ws: Workspace, nodes: list[dict], disk: dict, links: list[dict]) -> list[dict]:
    """Nodes whose `## Sources` section is missing, cites nothing, or cites only missing files. The section's
    lines are found in the file; its citations are the indexed links on those lines (no Markdown parsing)."""
    cited_at = defaultdict(list)
    for link in links:
        cited_at[link["source"]].append((link["line"], link["target"]))
    out = []
    root = str(ws.root)
    for node in nodes:
        try:
            text = read_regular(os.path.join(root, node["path"])).decode("utf-8", errors="replace")
        except (OSError, DreamflowError):
            continue
        section = graph_edit.section_lines(text, "Sources")
        if section is None:
            out.append({"path": node["path"], "reason": "no ## Sources section"})
            continue
        heading, end = section[0] + 1, section[1]  # 1-based line of the heading, last line of the section
        cited = {target for line, target in cited_at[node["path"]] if heading < line <= end}
        if not cited:
            out.append({"path": node["path"], "reason": "## Sources cites nothing"})
        elif not cited & disk.keys():
            out.append({"path": node["path"], "reason": f"all {len(cited)} sources are missing"})
    return out


def _bad_frontmatter(con: duckdb.DuckDBPyConnection, disk: dict) -> list[dict]:
    rows = con.execute("SELECT path, errors FROM files WHERE len(errors) > 0 ORDER BY path").fetchall()
    out = []
    for path, errors in rows:
        bad = [e for e in errors if _about_frontmatter(e)]
        if bad and path in disk:
            out.append({"path": path, "error": bad[0]})
    return out


def _about_frontmatter(error: str) -> bool:
    """A parse error about the frontmatter block or one of its values (storage.text.markdown's messages name it
    in their first clause: malformed YAML, not a mapping, a bad `date` value...)."""
    return "frontmatter" in error.split(";", 1)[0].lower()


# ---- near-duplicates ------------------------------------------------------------------------------------

def features(name: str, description: str) -> set[str]:
    """What two nodes are compared on: stemmed terms of name and description, plus the name's terms again
    (marked), so a shared name weighs more than shared description words."""
    return set(terms(f"{name}\n{description}")) | {"#" + t for t in terms(name)}


def similarity(a: tuple[str, str], b: tuple[str, str]) -> float:
    """Jaccard similarity of the `features` of two (name, description) pairs, 0..1."""
    fa, fb = features(*a), features(*b)
    return len(fa & fb) / len(fa | fb) if fa | fb else 0.0


def similar_pairs(items: dict[str, set[str]], threshold: float) -> list[tuple[str, str, float]]:
    """Pairs of keys whose feature sets have Jaccard >= threshold, best first (prefix-filtering join: only
    features among each set's rarest `n - ceil(threshold * n) + 1` are indexed, which no qualifying pair can
    miss), so large graphs are not compared all against all."""
    threshold = max(threshold, 1e-9)
    df = Counter(f for feats in items.values() for f in feats)
    postings: dict[str, list[str]] = defaultdict(list)
    found = []
    for key in sorted(items, key=lambda k: len(items[k])):
        feats = items[key]
        if not feats:
            continue
        ordered = sorted(feats, key=lambda f: (df[f], f))
        prefix = ordered[:len(feats) - math.ceil(threshold * len(feats)) + 1]
        seen = set()
        for f in prefix:
            for other in postings[f]:
                if other in seen:
                    continue
                seen.add(other)
                inter = len(feats & items[other])
                score = inter / (len(feats) + len(items[other]) - inter)
                if score >= threshold:
                    found.append((other, key, score))
            postings[f].append(key)
    return sorted(found, key=lambda x: (-x[2], x[0], x[1]))


def _near_duplicates(con: duckdb.DuckDBPyConnection, nodes: list[dict], threshold: float) -> list[dict]:
    """Near-duplicate pairs, the node to keep first (more inbound links, then more lines, then path)."""
    if threshold > 1:
        return []
    info = {n["path"]: n for n in nodes}
    pairs = similar_pairs({p: features(n["name"], n["description"]) for p, n in info.items()}, threshold)
    if not pairs:
        return []
    inbound = dict(con.execute(
        """SELECT target, count(DISTINCT source) FROM links
           WHERE source <> target AND NOT starts_with(source, 'resource/') AND NOT starts_with(source, 'session/')
           GROUP BY target""").fetchall())
    out = []
    for a, b, score in pairs:
        keep, other = sorted((a, b), key=lambda p: (-inbound.get(p, 0), -info[p]["lines"], p))
        out.append({"paths": [keep, other], "names": [info[keep]["name"], info[other]["name"]],
                    "score": round(score, 3)})
    return out
