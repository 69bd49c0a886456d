"""The README's walkthrough runs as pasted and leaves a healthy graph; its links, agent set-up lines and the code
the pages name hold; no `--help` listing cuts a sentence."""

import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dreamflow.cli import cli
from engine.models.torch_check import CPU_INSTALL

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def walkthrough() -> str:
    section = README.split("## 5-minute walkthrough", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.S))


@pytest.mark.e2e
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


ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"cli.md", "http.md", "mcp-tools.md"}  # written by `python -m dreamflow.docs_gen`


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors of a Markdown text (headings inside fenced code are not headings)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", prose, flags=re.M)}


def test_every_link_of_the_readme_and_docs_reaches_a_file_and_heading():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if file.name in GENERATED and not file.exists():
                continue
            assert file.exists(), (page.name, target)
            if anchor:
                assert anchor in anchors(file.read_text()), (page.name, target)


def test_the_readme_points_at_every_docs_page():
    section = README.split("## Where to read more", 1)[1]
    for name in {p.name for p in (ROOT / "docs").glob("*.md")} | GENERATED:
        assert f"(docs/{name})" in section, name


CODE_PACKAGES = r"(?:dreamflow|engine|storage|tasks|flows|deployments)"


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name below a module that is no package
        return False


def named_in_pages() -> list[tuple[str, str, list[str]]]:
    """(page, module, attributes) for each `from module import names` line of the pages' Python blocks and each
    `module.attribute` in their inline code whose module path imports (event names like `dreamflow.resource.x`
    name no module and are left alone)."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks/README.md"]:
        text = page.read_text()
        for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
            for module, names in re.findall(rf"^\s*from ({CODE_PACKAGES}[\w.]*) import ([\w, ]+)", block, flags=re.M):
                found.append((page.name, module, [n.strip() for n in names.split(",")]))
        spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for ref in (ref for span in spans for ref in re.findall(rf"\b({CODE_PACKAGES}(?:\.\w+)+)", span)):
            parts = ref.split(".")
            for cut in range(len(parts), 1, -1):
                if is_module(".".join(parts[:cut])):
                    found.append((page.name, ".".join(parts[:cut]), parts[cut:cut + 1]))
                    break
    return found


def test_every_module_and_name_the_pages_give_exists():
    """What a reader copies (`from engine.access.turns import record_turn`) imports: no page names a function
    that has moved."""
    found = named_in_pages()
    assert any(module == "engine.access.turns" for _, module, _ in found)  # the scan sees the pages' code
    for page, module, names in found:
        loaded = importlib.import_module(module)
        for name in names:
            assert hasattr(loaded, name), f"{page} names {module}.{name}, which does not exist"


def claude_mcp_add(line: str) -> tuple[str, dict[str, str], list[str]]:
    """Name, env and the rest of a `claude mcp add` line, parsed as its CLI (commander) parses it: `-e` and
    `--header` take every value up to the next option, so a name right after them is taken as a value."""
    words = shlex.split(line)[3:]
    variadic, single = {"-e", "--env", "-H", "--header"}, {"-t", "--transport", "-s", "--scope"}
    positional, env, i = [], {}, 0
    while i < len(words):
        word = words[i]
        if word == "--":
            positional += words[i + 1:]
            break
        if word in single:
            i += 2
            continue
        if word in variadic:
            i += 1
            while i < len(words) and not words[i].startswith("-"):
                if word in ("-e", "--env"):
                    assert "=" in words[i], f"claude would refuse {words[i]!r} as an environment variable"
                    key, _, value = words[i].partition("=")
                    env[key] = value
                i += 1
            continue
        positional.append(word)
        i += 1
    return positional[0], env, positional[1:]


def test_the_claude_mcp_add_lines_use_two_names_and_the_stdio_one_passes_the_token():
    for text in (README, (ROOT / "docs" / "agents.md").read_text()):
        lines = [line for line in text.splitlines() if line.startswith("claude mcp add")]
        parsed = [claude_mcp_add(line) for line in lines]
        assert len(lines) == 2 and len({name for name, _, _ in parsed}) == 2, lines
        (name, env, command), = [p for p in parsed if p[2][0] == "dreamflow"]
        assert command[-1] == "mcp" and env == {"DREAMFLOW_API_TOKEN": "$DREAMFLOW_API_TOKEN"}
        # a personal memory in every folder: without a scope Claude Code registers for the current folder only
        assert all(shlex.split(line)[3:5] == ["-s", "user"] for line in lines), lines


def test_the_uninstall_lists_the_workspaces_before_removing_what_lists_them():
    section = README.split("## Clean up and uninstall", 1)[1].split("\n## ", 1)[0]
    commands = [line.split("#")[0].strip() for line in section.split("```bash\n", 1)[1].split("```")[0].splitlines()]
    commands = [c for c in commands if c]
    listed = commands.index("dreamflow workspace list")
    home, = [i for i, c in enumerate(commands) if c.startswith("rm -rf") and "DREAMFLOW_HOME" in c]
    assert listed < home and commands[-1] == "pip uninstall -y dreamflow", commands
    removed = [c for c in commands if c.startswith("claude mcp remove")]
    assert removed and all("-s user" in c for c in removed)


def test_the_readme_hook_block_is_the_documented_one():
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", README, flags=re.S)]
    documented = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", (ROOT / "docs" / "agents.md").read_text(),
                                                     flags=re.S)]
    hooks = [b for b in blocks if "hooks" in b]
    assert len(hooks) == 1 and hooks[0] in documented


def test_the_settings_page_lists_every_environment_variable_the_code_reads():
    code = "\n".join(p.read_text() for part in ("dreamflow", "engine", "flows", "tasks", "storage", "deployments")
                     for p in (ROOT / part).rglob("*.py"))
    names = set(re.findall(r"[\"'](DREAMFLOW_[A-Z0-9_]*[A-Z0-9])[\"']", code))
    assert {"DREAMFLOW_HOME", "DREAMFLOW_LOCK_TIMEOUT", "DREAMFLOW_LLM_MODEL"} <= names
    table = (ROOT / "docs" / "settings.md").read_text()
    assert not [name for name in sorted(names) if f"`{name}`" not in table]


def torch_line() -> list[str]:
    """The set-up's torch line as words, its PyTorch index's host made unresolvable (`.invalid` never resolves).
    The pin is the one pyproject.toml and .ci/run install, and the line is what `status` says on a CUDA build."""
    line, = [line for line in README.splitlines() if line.startswith("pip install torch")]
    words = shlex.split(line)
    assert "torch==2.13.0+cpu" in words and '"torch==2.13.0"' in (ROOT / ".ci/run").read_text()
    assert '"torch==2.13.0"' in (ROOT / "pyproject.toml").read_text()
    assert CPU_INSTALL.format(version="2.13.0").startswith(line + " ")
    url = words[words.index("--extra-index-url") + 1]
    assert url.startswith("https://download.pytorch.org/") and "--index-url" not in words
    words[words.index(url)] = url.replace("download.pytorch.org", "download.pytorch.invalid")
    return words


def pip(words: list[str], dest: Path, **config: str) -> subprocess.CompletedProcess:
    """`pip download` of the line's requirement with `config` as pip's configuration (PIP_INDEX_URL, ...),
    nothing else of this machine's: what a user whose pip is configured so would get."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull} | config
    return subprocess.run([sys.executable, "-m", "pip", "download", "--dest", str(dest), *words[2:]],
                          env=env, capture_output=True, text=True, timeout=120)


def wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel of `name` `version` requiring `requires`."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                     + "".join(f"Requires-Dist: {r}\n" for r in requires))
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")


@pytest.mark.e2e
def test_the_torch_line_gives_up_in_seconds_when_its_indexes_are_unreachable(tmp_path):
    """An offline machine (PyTorch's index and the configured one unresolvable): one retry per index, then the
    error every pip prints (what it says of the lookup differs: pip 23.2, a fresh Python 3.11 venv's, does not
    name the host), instead of five retries with backoff (1-2 minutes where lookups time out). Never a CUDA build
    instead: the requirement is the CPU build's own version."""
    started = time.perf_counter()
    done = pip(torch_line(), tmp_path, PIP_INDEX_URL="https://pypi.invalid/simple")
    elapsed = time.perf_counter() - started
    assert done.returncode != 0 and "No matching distribution found for torch==2.13.0+cpu" in done.stderr, done.stderr
    assert done.stderr.count("Retrying") <= 2 and elapsed < 30, (elapsed, done.stderr)


@pytest.mark.e2e
def test_the_torch_line_takes_torch_from_find_links_and_its_dependencies_from_the_configured_index(tmp_path):
    """pip configured with an index and a find-links folder holding torch's CPU wheel, PyTorch's index out of
    reach: the line installs torch from find-links and its dependency from the index (`--index-url` would have
    replaced the index: "No matching distribution found" for the dependency)."""
    links, index, dest = tmp_path / "links", tmp_path / "index", tmp_path / "dest"
    for folder in (links, index / "tinydep", dest):
        folder.mkdir(parents=True)
    wheel(links, "torch", "2.13.0+cpu", requires=("tinydep",))
    wheel(index / "tinydep", "tinydep", "1.0")
    (index / "tinydep" / "index.html").write_text('<a href="tinydep-1.0-py3-none-any.whl">tinydep-1.0</a>')
    done = pip(torch_line(), dest, PIP_INDEX_URL=index.as_uri(), PIP_FIND_LINKS=str(links))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["tinydep-1.0-py3-none-any.whl",
                                                     "torch-2.13.0+cpu-py3-none-any.whl"]