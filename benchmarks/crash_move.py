"""SIGKILL `dreamflow move` at random points over a workspace with hundreds of linking notes, then run one
command and count links to a missing file (the docs/reliability.md figures; tests/test_crash.py runs fewer).

    python benchmarks/crash_move.py [--trials 50] [--linking 300] [--via cli|fork] [--seed 1]

Each trial: copy the template, start the move, wait for the rename, sleep a random part of the rewrite
window, SIGKILL, run `dreamflow list` (or open a Memory with --via fork), scan every file. Prints how many
kills landed mid-move (links to the old path left on disk) and how many trials still had a dangling link or
a temp file after the next command.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from crash_harness import build_template, calibrate, trial  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--linking", type=int, default=300)
    parser.add_argument("--via", choices=("cli", "fork"), default="cli")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dreamflow-crash-") as tmp:
        work = Path(tmp)
        template = build_template(work / "template", linking=args.linking)
        window = calibrate(template, work, via=args.via)
        results = [trial(template, work, n, window, rng, via=args.via) for n in range(args.trials)]
    mid = [r for r in results if r["mid_move"]]
    print(f"{args.trials} SIGKILLed moves ({args.via}) over {args.linking} linking notes, "
          f"rewrite window {window:.2f} s, {time.monotonic() - started:.0f} s in all")
    print(f"  kills mid-move (links to the old path on disk): {len(mid)}"
          f" (up to {max((r['dangling_before'] for r in mid), default=0)} dangling links each)")
    print(f"  trials with a dangling link after the next command: {sum(r['dangling_after'] > 0 for r in results)}")
    print(f"  trials with a temp file left after the next command: {sum(r['temps_after'] > 0 for r in results)}")
    print(f"  moves completed by recovery or by the move itself: {sum(r['moved'] for r in results)}")


if __name__ == "__main__":
    main()
