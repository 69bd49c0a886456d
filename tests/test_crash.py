"""Crash safety of multi-file rewrites: a `move` SIGKILLed at random points (over hundreds of linking notes)
leaves no link to a missing file and no temp file once the next command has run (see tests/crash_harness.py;
benchmarks/crash_move.py runs more trials)."""

import random

import pytest
from crash_harness import DST, SRC, build_template, calibrate, dangling, trial

from storage.memory import Memory

TRIALS = 10
LINKING = 300


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_template(tmp_path_factory.mktemp("template") / "ws", linking=LINKING)


def test_killed_moves_leave_no_link_to_a_missing_file(template, tmp_path):
    window = calibrate(template, tmp_path)
    rng = random.Random(11)
    results = [trial(template, tmp_path, n, window, rng, keep=True) for n in range(TRIALS)]
    assert [r["dangling_after"] for r in results] == [0] * TRIALS
    assert [r["temps_after"] for r in results] == [0] * TRIALS
    assert all(r["moved"] for r in results)
    interrupted = [n for n, r in enumerate(results) if r["mid_move"]]
    assert len(interrupted) >= TRIALS // 3, "too few kills landed in the middle of a move"
    root = tmp_path / f"trial-{interrupted[0]}"
    mem = Memory(root)  # the recovered move is indexed too
    assert mem.doctor()["broken_links"] == []
    assert len(mem.stat(DST)["links_in"]) == LINKING * 3
    assert not (root / SRC).exists() and dangling(root) == 0


def test_next_command_through_the_cli_finishes_an_interrupted_move(template, tmp_path):
    results = [trial(template, tmp_path, n, 0.05, random.Random(n), via="cli") for n in range(2)]
    assert [r["dangling_after"] for r in results] == [0, 0]
    assert [r["temps_after"] for r in results] == [0, 0]
