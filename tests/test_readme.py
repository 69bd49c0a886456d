"""The README's walkthrough runs as pasted and leaves a healthy graph; no `--help` listing cuts a sentence."""

import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from dreamflow.cli import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def walkthrough() -> str:
    section = README.split("## 5-minute walkthrough", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.S))


def test_the_walkthrough_runs_as_pasted_and_the_doctor_finds_nothing(tmp_path):
    script = walkthrough().replace("/tmp/", f"{tmp_path}/")  # its own workspace and files, same commands
    assert "dreamflow doctor" in script and "upload" in script
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COLUMNS": "120"}
    env.pop("DREAMFLOW_WORKSPACE", None)
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Memory graph: healthy" in done.stdout
    assert (tmp_path / "itinerary-copy.txt").read_text() == (tmp_path / "itinerary.txt").read_text()


def test_no_help_line_is_cut_mid_sentence():
    runner = CliRunner()
    listing = runner.invoke(cli, ["--help"], terminal_width=80).output
    commands = re.findall(r"^  ([a-z][a-z-]+)  ", listing, flags=re.M)
    assert "dream" in commands and "search" in commands
    for args in [[]] + [[name] for name in commands]:
        text = runner.invoke(cli, [*args, "--help"], terminal_width=80).output
        cut = [line for line in text.splitlines() if line.endswith("...") and not line.startswith("Usage:")]
        assert not cut, (args, cut)


def test_a_misspelt_command_gets_a_suggestion():
    result = CliRunner().invoke(cli, ["serch", "ramen"])
    assert result.exit_code == 2 and "Did you mean search" in result.output
