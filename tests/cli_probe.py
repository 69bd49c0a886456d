"""Run the `dreamflow` CLI in a fresh Python process and report which modules it imported."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

# The `dreamflow` console script as pyproject.toml declares it, as `python -c` code: what `pip install` writes
# (an install made before the entry point changed still runs the old one).
SCRIPT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]["dreamflow"]
_MODULE, _FUNCTION = SCRIPT.split(":")
ENTRY = f"import sys\nfrom {_MODULE} import {_FUNCTION}\nsys.argv[0] = 'dreamflow'\nsys.exit({_FUNCTION}())\n"

# Prints the sorted module names on stderr's last line when the process exits, whatever the command did.
PROBE = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    "from dreamflow.cli import main\n"
    "sys.argv = ['dreamflow'] + sys.argv[1:]\n"
    "main()\n"
)
ENTRY_PROBE = PROBE.split("from dreamflow.cli")[0] + ENTRY  # the same for the console script

# Prints the process's peak RSS in kB (`maxrss N`) on stderr's last line when it exits.
RSS_PROBE = (
    "import atexit, resource, sys\n"
    "atexit.register(lambda: print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))\n"
    "from dreamflow.cli import main\n"
    "sys.argv = ['dreamflow'] + sys.argv[1:]\n"
    "main()\n"
)


def run_cli(workspace, *args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """(the finished process, the modules it had imported) for `dreamflow --workspace WORKSPACE ARGS...`."""
    proc = subprocess.run([sys.executable, "-c", PROBE, "--workspace", str(workspace), *args],
                          capture_output=True, text=True, input="", timeout=120)
    return proc, set(json.loads(proc.stderr.strip().splitlines()[-1]))
