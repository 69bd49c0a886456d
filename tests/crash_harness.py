"""SIGKILL a `move` at random points, or at a point the child announces, and check what the next command leaves
(tests/test_crash.py, and benchmarks/crash_move.py for more trials).

A template workspace has one target node and `linking` notes that link to it. Each trial copies it, starts a
move of the target (a CLI subprocess, or a forked process calling `Memory.move`, which starts faster), waits
until the file has been renamed, sleeps a random part of the time the link rewriting takes, and SIGKILLs it; or
(`kill_at_rewrite`, what the tests use) the forked child says over a pipe that it has rewritten n notes, and waits
there for its SIGKILL.
Then one command runs (`dreamflow list`, or opening the workspace for writing in this process,
`storage.memory.recover`) and the files are scanned:
every link must name an existing file, and no temp file may be left.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from storage.memory import Memory, recover
from storage.text.markdown import parse_links

SRC, DST = "digest/wiki/target.md", "digest/wiki/moved.md"
TEMP = re.compile(r"^\..+\.tmp$")


def build_template(root: Path, linking: int = 300) -> Path:
    """A workspace with SRC and `linking` notes linking it (plain, aliased, anchored, typed); indexed."""
    mem = Memory(root)
    mem.write(SRC, "# Target\n\nline two\nline three\n", name="Target", description="what everyone links")
    for i in range(linking):
        body = (f"Note {i} cites [[{SRC}]] and [[{SRC}|the target]].\n\n"
                f"related:: [[{SRC}#L3]]\n\n" + "filler line\n" * (i % 20))
        mem.ws.write_text(f"digest/wiki/note-{i:04d}.md", f"---\nname: Note {i}\ndescription: cites it\n---\n{body}")
    mem.reindex()
    return root


def dangling(root: Path) -> int:
    """Links, in every Markdown file of the workspace, to a file that does not exist."""
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "metadata"]
        for name in filenames:
            if name.endswith(".md") and not name.startswith("."):
                text = Path(dirpath, name).read_text(encoding="utf-8", errors="replace")
                count += sum(not (root / link.target).is_file() for link in parse_links(text))
    return count


def temp_files(root: Path) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if TEMP.match(n)]


def _move_in_child(root: str, stop_after: int | None = None, announce: int | None = None) -> None:
    if stop_after is not None:
        _stop_after_rewrites(stop_after, announce)
    Memory(root).move(SRC, DST)


def _stop_after_rewrites(count: int, announce: int) -> None:
    """The kill point: once the move has rewritten `count` linking notes, write one byte to the pipe `announce`
    and wait there for the parent's SIGKILL (never returning to the move)."""
    from storage.text import graph_edit

    real, done = graph_edit.write_text, [0]

    def write_text(ws, rel, text):
        if done[0] == count:
            os.write(announce, b"k")
            while True:
                time.sleep(60)
        real(ws, rel, text)
        done[0] += 1

    graph_edit.write_text = write_text


def kill_at_rewrite(root: Path, count: int, timeout: float = 120.0) -> None:
    """Move SRC in a forked child that announces (over a pipe) when it has rewritten `count` linking notes, the
    rename done and the rest not, and SIGKILL it right there: the same kill point on any machine, however slow."""
    read_end, write_end = os.pipe()
    child = multiprocessing.get_context("fork").Process(target=_move_in_child, args=(str(root), count, write_end))
    child.start()
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], timeout)
        announced = bool(ready) and os.read(read_end, 1) == b"k"  # b"" if the child ended without reaching it
    finally:
        os.close(read_end)
    _kill(child.pid, child.join, 0)
    if not announced:
        raise AssertionError(f"the move never reached its kill point (rewrite {count}; exit code {child.exitcode})")


def _start(root: Path, via: str):
    if via == "cli":
        env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_WORKSPACE"}
        proc = subprocess.Popen([sys.executable, "-m", "dreamflow", "--workspace", str(root), "move", SRC, DST],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return proc.pid, proc.wait
    child = multiprocessing.get_context("fork").Process(target=_move_in_child, args=(str(root),))
    child.start()
    return child.pid, child.join


def _wait_for_rename(root: Path, timeout: float = 30.0) -> float:
    """Wall-clock time (time.time) at which the move's rename was seen."""
    deadline = time.monotonic() + timeout
    while (root / SRC).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the move did not rename the file in time")
        time.sleep(0.0002)
    return time.time()


def calibrate(template: Path, work: Path, via: str = "fork") -> float:
    """Seconds from the rename to the last linking note rewritten by an uninterrupted move: the window kills
    are spread over (re-indexing afterwards is left out, so most kills land mid-rewrite)."""
    root = work / "calibrate"
    shutil.copytree(template, root)
    pid, wait = _start(root, via)
    renamed = _wait_for_rename(root)
    wait()
    last = max(p.stat().st_mtime for p in (root / "digest" / "wiki").glob("note-*.md"))
    shutil.rmtree(root)
    return max(last - renamed, 0.01)


def kill_mid_move(root: Path, window: float, rng: random.Random, via: str = "fork") -> None:
    """Start the move in `root`, wait for its rename, SIGKILL it a random part of `window` later."""
    pid, wait = _start(root, via)
    _wait_for_rename(root)
    _kill(pid, wait, rng.uniform(0, window))


def _kill(pid: int, wait, after: float) -> None:
    time.sleep(after)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    wait()


def kill_during_close(root: Path, rng: random.Random, window: float = 0.05, via: str = "fork") -> None:
    """Start the move in `root`, wait until its journal entry is dropped (the work is done, DuckDB is closing
    and checkpointing), SIGKILL it a random part of `window` later: the moment a fault run found that could
    leave an index broken for good. A forked move says over a pipe when it has dropped the entry (no polling
    beside it for the 2 cores); a CLI one is watched in its journal folder."""
    if via == "fork":
        read_end, write_end = os.pipe()
        child = multiprocessing.get_context("fork").Process(target=_move_announcing_its_finish,
                                                            args=(str(root), write_end))
        child.start()
        os.close(write_end)
        try:
            ready, _, _ = select.select([read_end], [], [], 120)
            assert ready and os.read(read_end, 1) == b"k", f"the move never dropped its journal entry ({child.exitcode})"
        finally:
            os.close(read_end)
        _kill(child.pid, child.join, rng.uniform(0, window))
        return
    journal_dir = root / "metadata" / "journal"
    pid, wait = _start(root, via)
    deadline, seen = time.monotonic() + 60, False
    while time.monotonic() < deadline:
        entries = list(journal_dir.glob(f"{pid}-*.json")) if journal_dir.exists() else []
        if entries:
            seen = True
        elif seen:
            break
        time.sleep(0.0002)
    _kill(pid, wait, rng.uniform(0, window))


def _move_announcing_its_finish(root: str, announce: int) -> None:
    """`Memory.move` that writes one byte to the pipe `announce` once its journal entry is dropped."""
    from storage.files import journal

    real = journal.finish

    def finish(entry):
        real(entry)
        os.write(announce, b"k")

    journal.finish = finish
    Memory(root).move(SRC, DST)


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`dreamflow --workspace root ARGS` as a subprocess (DREAMFLOW_WORKSPACE unset), output captured."""
    env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_WORKSPACE"}
    return subprocess.run([sys.executable, "-m", "dreamflow", "--workspace", str(root), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def trial(template: Path, work: Path, n: int, window: float, rng: random.Random, via: str = "fork",
          keep: bool = False, at_rewrite: int | None = None) -> dict:
    """One SIGKILLed move and the next command: {mid_move, dangling_before, dangling_after, temps_after,
    moved}; the trial's workspace `work/trial-<n>` is removed unless `keep`. The kill lands a random part of
    `window` after the rename (a move started as `via` says), or, with `at_rewrite`, at that kill point of a forked
move (`kill_at_rewrite`); the next command runs as `via` says."""
    root = work / f"trial-{n}"
    shutil.copytree(template, root)
    if at_rewrite is None:
        kill_mid_move(root, window, rng, via)
    else:
        kill_at_rewrite(root, at_rewrite)
    before = dangling(root)
    if via == "cli":
        done = cli(root, "list", "digest", "--json")
        assert done.returncode == 0, done.stderr
    else:
        recover(Memory(root))
    result = {"mid_move": before > 0, "dangling_before": before, "dangling_after": dangling(root),
              "temps_after": len(temp_files(root)), "moved": (root / DST).is_file()}
    if not keep:
        shutil.rmtree(root)
    return result
