"""Near-duplicate detection of `dreamflow doctor`, measured on a crafted set of digest node names and
descriptions: 53 nodes in 17 topics, 17 labelled duplicate pairs (paraphrased titles, reordered words, plural
vs singular, Chinese), the rest hard negatives (same person or tool, another aspect: "Ana lives in Lisbon" vs
"Ana's bakery job"). Prints precision, recall and F1 over all 1,378 pairs per threshold, for the measure the
doctor uses (`storage.index.doctor.similarity`) and two simpler ones, and checks that the prefix-filtering join
finds exactly the pairs a brute-force comparison finds.

    python benchmarks/near_duplicates.py
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.index.doctor import DUP_THRESHOLD, features, similar_pairs, similarity  # noqa: E402
from storage.index.tokenize import terms  # noqa: E402

# (id, name, description); ids sharing a letter are about the same subject
NODES = [
 ("a1", "Ana lives in Lisbon", "Ana moved to Lisbon in May 2024"),
 ("a2", "Ana moved to Lisbon", "Where Ana lives now: Lisbon, since May"),
 ("a3", "Ana's bakery job", "Ana works at a bakery in Lisbon"),
 ("a4", "Ana's sister Marta", "Marta, Ana's younger sister, a nurse"),
 ("b1", "Sourdough starter feeding", "How often to feed the sourdough starter"),
 ("b2", "Feeding the sourdough starter", "Feed the starter every 12 hours with equal flour and water"),
 ("b3", "Sourdough bread baking schedule", "Timeline for baking a sourdough loaf over two days"),
 ("c1", "Caroline's adoption plans", "Caroline plans to adopt children as a single parent"),
 ("c2", "Caroline plans to adopt", "Caroline's plan to adopt a child on her own"),
 ("c3", "Caroline's painting hobby", "Caroline paints landscapes on weekends"),
 ("c4", "Caroline's LGBTQ support group", "Caroline attends a support group for transgender people"),
 ("d1", "Python packaging with uv", "Building and publishing Python packages using uv"),
 ("d2", "Packaging Python projects using uv", "How to package and publish a Python project with uv"),
 ("d3", "Python testing with pytest", "Writing and running Python tests with pytest fixtures"),
 ("d4", "Python virtual environments", "Creating venvs for Python projects"),
 ("e1", "Melanie's pottery class", "Melanie took a pottery class in July"),
 ("e2", "Melanie pottery classes", "The pottery classes Melanie signed up for"),
 ("e3", "Melanie's camping trip", "Melanie went camping with her kids in the mountains"),
 ("f1", "Kubernetes deployment checklist", "Steps before deploying a service to Kubernetes"),
 ("f2", "Checklist for Kubernetes deployments", "What to verify before a k8s deploy"),
 ("f3", "Kubernetes cluster upgrade", "How to upgrade the Kubernetes cluster version"),
 ("g1", "Morning running routine", "I run 5 km every morning before work"),
 ("g2", "Daily morning run", "Routine: a 5 km run each morning"),
 ("g3", "Marathon training plan", "Training weeks towards the October marathon"),
 ("h1", "Favourite coffee: flat white", "Prefers a flat white with oat milk"),
 ("h2", "Coffee preference", "Likes flat whites made with oat milk"),
 ("h3", "Tea preference", "Drinks green tea in the afternoon"),
 ("i1", "Project Atlas deadline", "Atlas must ship by the end of Q3"),
 ("i2", "Atlas project deadline", "Deadline for the Atlas project: end of Q3"),
 ("i3", "Project Atlas team", "Who works on Atlas: Ben, Chloe and Dev"),
 ("j1", "Allergy to peanuts", "Severe peanut allergy, carries an EpiPen"),
 ("j2", "Peanut allergy", "Allergic to peanuts; EpiPen always at hand"),
 ("j3", "Allergy to cats", "Mild allergy to cats"),
 ("k1", "Jon's dance studio", "Jon opened a dance studio after losing his job"),
 ("k2", "Jon opens a dance studio", "The dance studio Jon started"),
 ("k3", "Jon's job loss", "Jon lost his banking job in January"),
 ("l1", "Git rebase workflow", "Interactive rebase to clean up commits before merging"),
 ("l2", "Rebasing with git", "How we use git rebase -i to tidy history before a merge"),
 ("l3", "Git branching model", "Feature branches and release branches"),
 ("m1", "东京旅行计划", "2024年春天去东京旅行的安排"),
 ("m2", "东京旅行安排", "春天东京旅行的计划"),
 ("m3", "京都寺庙", "京都的寺庙和庭园"),
 ("n1", "Weekly team meeting", "Tuesdays at 10 with the platform team"),
 ("n2", "Team meeting", "Weekly platform team sync on Tuesday mornings"),
 ("n3", "Weekly one-on-one with manager", "Fridays with Sara"),
 ("o1", "Home address", "Lives at Rua Augusta 12, Lisbon"),
 ("o2", "Address", "Home: Rua Augusta 12 in Lisbon"),
 ("p1", "Bob", "Bob, a colleague from the Atlas project"),
 ("p2", "Bob (colleague)", "Bob works with me on Atlas"),
 ("p3", "Bobby (nephew)", "Bobby, my sister's son"),
 ("q1", "Docker cleanup commands", ""),
 ("q2", "Cleaning up Docker", "Commands to prune docker images and volumes"),
 ("q3", "Docker compose setup", "Services defined in compose.yaml"),
]

# A person's own notes in a project folder (digest/project/): often no frontmatter, so the name is the file's
# stem (`vite-config.md` -> "vite config") and there is no description. Topics r..z and A..D: the first two
# of each are one note written twice; the others are related but distinct ("vite config" vs "vitest config").
NOTES = [
 ("r1", "vite build", ""), ("r2", "building with vite", ""), ("r3", "vitest", ""), ("r4", "vitest config", ""),
 ("r5", "vite config", ""),
 ("s1", "deploy to staging", ""), ("s2", "staging deploy", ""), ("s3", "deploy to production", ""),
 ("t1", "postgres backup", "How to back up the postgres database"),
 ("t2", "Backing up Postgres", "pg_dump the database every night"),
 ("t3", "postgres upgrade", "Upgrading postgres from 15 to 16"),
 ("u1", "release checklist", ""), ("u2", "checklist for a release", ""), ("u3", "release notes", ""),
 ("v1", "ssh config", "Hosts and keys in ~/.ssh/config"), ("v2", "SSH configuration", "ssh config: hosts, keys"),
 ("v3", "git config", "user.name, aliases, pull.rebase"),
 ("w1", "code review guidelines", ""), ("w2", "guidelines for code review", ""), ("w3", "code style", ""),
 ("x1", "web app build", ""), ("x2", "building the web app", ""), ("x3", "web app tests", ""),
 ("y1", "eslint setup", ""), ("y2", "setting up eslint", ""), ("y3", "prettier setup", ""),
 ("z1", "frontend build", ""), ("z2", "build of the frontend", ""), ("z3", "backend build", ""),
 ("A1", "api authentication", "Tokens for the public API"), ("A2", "API auth", "How the public API authenticates"),
 ("A3", "api rate limits", "Requests per minute of the public API"),
 ("B1", "python tests", ""), ("B2", "running the python tests", ""), ("B3", "javascript tests", ""),
 ("C1", "local dev setup", "Getting the app running locally"), ("C2", "local setup", "Run the app locally"),
 ("C3", "ci setup", "GitHub Actions workflows"),
 ("D1", "on-call runbook", ""), ("D2", "runbook for on-call", ""), ("D3", "incident postmortems", ""),
]
SETS = {"people and topics (LoCoMo-like)": NODES, "a person's project notes": NOTES,
        "both together": NODES + NOTES}
DUPS = {(f"{g}1", f"{g}2") for g in "abcdefghijklmnopqrstuvwxyzABCD"}  # the first two of each topic
THRESHOLDS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6)
WATCHED = [("r5", "r4"), ("r1", "r3"), ("x1", "x3"), ("s1", "s3"), ("z1", "z3"), ("y1", "y3"), ("u1", "u3"),
           ("B1", "B3"), ("C1", "C2"), ("A1", "A2")]  # pairs printed with their score


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _trigrams(text: str) -> set[str]:
    text = " " + " ".join("".join(c if c.isalnum() else " " for c in text.lower()).split()) + " "
    return {text[i:i + 3] for i in range(len(text) - 2)}


MEASURES = {
    "doctor: terms of name+description, name terms twice": similarity,
    "terms of name+description": lambda a, b: _jaccard(set(terms(" ".join(a))), set(terms(" ".join(b)))),
    "character trigrams of the name": lambda a, b: _jaccard(_trigrams(a[0]), _trigrams(b[0])),
}


def measure(nodes: list, measure) -> list[tuple[float, float, float, int, int]]:
    """(threshold, precision, recall, false positives, duplicates) over every pair of `nodes`."""
    pairs = list(itertools.combinations(nodes, 2))
    scored = [(measure(a[1:], b[1:]), (a[0], b[0]) in DUPS) for a, b in pairs]
    dups = sum(d for _, d in scored)
    rows = []
    for threshold in THRESHOLDS:
        tp = sum(1 for s, d in scored if s >= threshold and d)
        fp = sum(1 for s, d in scored if s >= threshold and not d)
        rows.append((threshold, tp / (tp + fp) if tp + fp else 1.0, tp / dups, fp, dups))
    return rows


def main() -> None:
    for title, nodes in SETS.items():
        pairs = len(nodes) * (len(nodes) - 1) // 2
        print(f"\n== {title}: {len(nodes)} nodes, {pairs} pairs, "
              f"{sum(1 for a, b in itertools.combinations(nodes, 2) if (a[0], b[0]) in DUPS)} duplicates")
        for label, fn in MEASURES.items():
            print(f"{label}\n  threshold  precision  recall  F1    false pos.")
            for threshold, precision, recall, fp, _ in measure(nodes, fn):
                f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
                mark = "  <- default" if label.startswith("doctor") and threshold == DUP_THRESHOLD else ""
                print(f"  {threshold:9.2f}  {precision:9.2f}  {recall:6.2f}  {f1:.2f}  {fp:5d}{mark}")
    by_id = {n[0]: n[1:] for n in NODES + NOTES}
    print("\nrelated but distinct, and duplicates (doctor's measure):")
    for a, b in WATCHED:
        print(f"  {by_id[a][0]!r:28} vs {by_id[b][0]!r:28} {similarity(by_id[a], by_id[b]):.3f}"
              f"  {'duplicate' if (a, b) in DUPS else 'distinct'}")
    items = {n[0]: features(n[1], n[2]) for n in NODES + NOTES}
    every = list(itertools.combinations(NODES + NOTES, 2))
    started = time.perf_counter()
    joined = {tuple(sorted(p[:2])) for p in similar_pairs(items, DUP_THRESHOLD)}
    brute = {tuple(sorted((a[0], b[0]))) for a, b in every if similarity(a[1:], b[1:]) >= DUP_THRESHOLD}
    print(f"\nprefix-filtering join == brute force: {joined == brute} ({len(joined)} pairs, "
          f"{(time.perf_counter() - started) * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
