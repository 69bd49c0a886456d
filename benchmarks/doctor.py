"""`dreamflow doctor` on a generated memory graph: how long the health report and `--fix` take.

The workspace has N digest nodes (default 5,000) and 2N daily cards. Each node has a name and description of
pseudo-words, three paragraphs linking three other nodes (some with line anchors) and a `## Sources` section
citing two cards. Faults are planted at known rates: links to missing nodes (1%), anchors past the end (1%),
orphans (0.5%), nodes without sources (1%), near-duplicate pairs (N/250), bad frontmatter (10 files). After
indexing, files are moved (N/250) and edited (N/250) behind the index's back. Prints the time of the report
(median of 3), of `--fix`, and the counts found against the counts planted.

    python benchmarks/doctor.py [--nodes 5000] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.files.workspace import Workspace  # noqa: E402
from storage.index import doctor, indexer as index  # noqa: E402
from storage.index.db import IndexDB  # noqa: E402

BUCKETS = ("personal", "procedure", "wiki")


def write(ws: Workspace, rel: str, text: str) -> None:
    """Plain write (no fsync): generating the workspace, not testing atomic writes."""
    path = ws.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def words(rng: random.Random, vocabulary: list[str], n: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def generate(ws: Workspace, n: int, rng: random.Random) -> dict:
    """Write the workspace; returns what was planted."""
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    vocabulary = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(8000)})
    nodes = [f"digest/{BUCKETS[i % 3]}/n{i}.md" for i in range(n)]
    linkable = [p for i, p in enumerate(nodes) if i % 200 != 7]  # orphans get no inbound links either
    cards = [f"daily/2024-{1 + j % 12:02d}-{1 + j % 28:02d}/c{j}.md" for j in range(2 * n)]
    for card in cards:
        write(ws, card, f"---\nname: {words(rng, vocabulary, 3)}\n---\n"
                      + "".join(words(rng, vocabulary, 12) + "\n" for _ in range(10)))
    planted = {"broken_links": 0, "broken_anchors": 0, "orphans": 0, "missing_sources": 0, "near_duplicates": 0}
    names = {}
    for i, path in enumerate(nodes):
        name, description = words(rng, vocabulary, 3), words(rng, vocabulary, 8)
        if i % 250 == 1:  # a near-duplicate of the previous node: same name, one description word changed
            name = names[nodes[i - 1]][0]
            description = names[nodes[i - 1]][1].rsplit(" ", 1)[0] + " " + rng.choice(vocabulary)
            planted["near_duplicates"] += 1
        names[path] = (name, description)
        orphan = i % 200 == 7
        body = []
        for _ in range(3):
            link = "" if orphan else f" [[{rng.choice(linkable)}]]"
            body.append(words(rng, vocabulary, 40) + link + ".")
        if i % 100 == 3:
            body.append(f"See [[digest/wiki/missing-{i}.md]].")
            planted["broken_links"] += 1
        if i % 100 == 5:
            body.append(f"Exactly [[{rng.choice(linkable)}#L400-L410]].")
            planted["broken_anchors"] += 1
        text = "\n\n".join(body) + "\n"
        if orphan:
            planted["orphans"] += 1
            planted["missing_sources"] += 1
        elif i % 100 == 9:
            planted["missing_sources"] += 1
        else:
            text += "\n## Sources\n\n" + "".join(
                f"- 2024: noted ([[{rng.choice(cards)}#L{k + 4}-L{k + 5}]]).\n" for k in range(2))
        write(ws, path, f"---\nname: {name}\ndescription: {description}\n---\n{text}")
    for k in range(10):
        write(ws, f"daily/2024-12-31/bad{k}.md", "---\nname: [oops\n---\nbody\n")
    return {"nodes": nodes, "cards": cards, "planted": planted}


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="dreamflow-doctor-"))
    rng = random.Random(7)
    try:
        ws = Workspace(root / "ws")
        made, seconds = timed(lambda: generate(ws, args.nodes, rng))
        print(f"generated {len(made['nodes'])} nodes + {len(made['cards'])} cards in {seconds:.1f} s")
        db = IndexDB(ws)
        with db.session() as con:
            stats, seconds = timed(lambda: index.rebuild(con, ws))
            print(f"indexed {stats['files']} files, {stats['links']} links in {seconds:.1f} s")
            runs = [timed(lambda: doctor.check(con, ws)) for _ in range(3)]
            report = runs[-1][0]
            print(f"doctor (report): median {statistics.median(s for _, s in runs):.2f} s over 3 runs "
                  f"({report['digest_nodes']} digest nodes, {report['links']} links checked)")
            for key, count in made["planted"].items():
                print(f"  {key:16s} planted {count:5d}  found {report['counts'][key]:5d}")
            print(f"  {'bad_frontmatter':16s} planted {10:5d}  found {report['counts']['bad_frontmatter']:5d}")
            changes = max(args.nodes // 250, 1)
            for k, path in enumerate(rng.sample(made["nodes"], 2 * changes)):
                if k < changes:  # moved behind the index's back
                    new = path.replace("digest/", "digest/moved/", 1)
                    os.makedirs(ws.resolve(new).parent, exist_ok=True)
                    os.rename(ws.resolve(path), ws.resolve(new))
                else:
                    ws.write_text(path, ws.read_text(path) + "\nEdited by hand.\n")
            before, seconds_report = timed(lambda: doctor.check(con, ws))
            print(f"after {changes} moves + {changes} edits: report {seconds_report:.2f} s, drift "
                  f"{before['counts']['drift']}, moved {before['counts']['moved']}, broken links "
                  f"{before['counts']['broken_links']}")
            fixed, seconds = timed(lambda: doctor.check(con, ws, fix=True))
            relinked = sum(len(r["rewritten"]) for r in fixed["fixed"]["retargeted"])
            print(f"doctor --fix: {seconds:.2f} s: re-indexed {len(fixed['fixed']['reindexed'])} files, retargeted "
                  f"{len(fixed['fixed']['retargeted'])} moved files in {relinked} linking files; broken links now "
                  f"{fixed['counts']['broken_links']}, drift {fixed['counts']['drift']}")
            again, seconds = timed(lambda: doctor.check(con, ws, fix=True))
            print(f"doctor --fix again: {seconds:.2f} s, fixed {len(again['fixed']['reindexed'])} + "
                  f"{len(again['fixed']['retargeted'])} (idempotent)")
        db.close()
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
