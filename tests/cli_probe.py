"""Run the `dreamflow` CLI in a fresh Python process and report which modules it imported."""

import json
import subprocess
import sys

# Prints the sorted module names on stderr's last line when the process exits, whatever the command did.
PROBE = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    "from dreamflow.cli import main\n"
    "sys.argv = ['dreamflow'] + sys.argv[1:]\n"
    "main()\n"
)

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
