"""The console script's exit (dreamflow/entry.py): its codes, output and atexit handlers, and threads still
running are waited for."""

import subprocess
import sys

import pytest

PRELUDE = "import atexit, sys, threading, time\natexit.register(lambda: print('atexit ran', flush=True))\n"


def run_entry(args: list[str], before: str = "") -> subprocess.CompletedProcess:
    code = PRELUDE + before + f"sys.argv = ['dreamflow', *{args!r}]\nfrom dreamflow.entry import main\nmain()\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.e2e
def test_output_codes_and_atexit_survive_the_exit(tmp_path):
    ws = str(tmp_path / "ws")
    done = run_entry(["--workspace", ws, "write", "notes/a.md", "--content", "Bees on the roof"])
    assert done.returncode == 0, done.stderr
    found = run_entry(["--workspace", ws, "search", "bees", "--json"])
    assert found.returncode == 0 and '"notes/a.md"' in found.stdout and found.stdout.rstrip().endswith("atexit ran")
    missing = run_entry(["--workspace", ws, "read", "nope.md"])
    assert missing.returncode == 3 and "no such file" in missing.stderr and "atexit ran" in missing.stdout


@pytest.mark.e2e
def test_a_thread_still_running_is_waited_for():
    late = ("def late():  # still running when the command is done\n"
            "    while threading.main_thread().is_alive():\n        time.sleep(0.01)\n"
            "    print('thread done', flush=True)\nthreading.Thread(target=late).start()\n")
    done = run_entry(["--version"], before=late)
    assert done.returncode == 0 and done.stdout.splitlines()[-2:] == ["thread done", "atexit ran"], done.stdout
