"""The repository stands on its own: no tracked file outside tests/ names a folder of the machine it was written on,
and the LoCoMo benchmarks take their data as an argument (the public release or a folder of conversations),
saying where to get it when none is given."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A path only one machine has: a sibling of the checkout, the development machine's folders, someone's home or
# virtual environment. `/home/me/...` is the documentation's placeholder; `~/...` is any user's home.
MACHINE_PATH = re.compile(r"""
      \.\./shared\b                                   # a folder beside the checkout
    | \bshared/(?:data|notes|tools|hooks)\b           # ... named without its ../
    | /\s*["']shared["']                              # ... built in code: ROOT.parent / "shared"
    | (?<![\w.~-])/(?:work|root)/                       # the development machine's folders
    | (?<![\w.~-])/(?:home|Users)/(?!me/)[\w.-]+/     # someone's home folder
    | (?<![\w.~-])/(?:[\w.-]+/)*\.?venv[\w.-]*/bin\b  # an absolute virtual environment
""", re.X)


def tracked_files() -> list[Path]:
    """The repository's files outside tests/ (git's list; a copy without .git: every file but dot folders)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0:
        names = [n for n in listed.stdout.split("\0") if n]
    else:
        names = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()
                 and not any(part.startswith(".") or part in ("build", "__pycache__") for part in
                             p.relative_to(ROOT).parts[:-1])]
    return [ROOT / n for n in names if not n.startswith("tests/")]


@pytest.mark.e2e
def test_no_tracked_file_outside_tests_names_a_machine_path():
    files = tracked_files()
    assert ROOT / "README.md" in files and ROOT / "benchmarks/locomo.py" in files and len(files) > 100
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {m.group(0)!r} in {line.strip()[:120]}"
                      for m in MACHINE_PATH.finditer(line)]
    assert not found, "\n".join(found)


def test_the_scan_sees_each_kind_of_machine_path():
    for named in ("see ../shared/tools/local-llm.sh", "(shared/notes/prefect.md)", 'ROOT.parent / "shared" / "data"',
                  "/work/venv/bin/python", "/root/.cache/x", "/home/alice/src", "/opt/venv/bin/python",
                  "/Users/bob/memory"):
        assert MACHINE_PATH.search(named), named
    for fine in ("dreamflow --workspace /home/me/memory mcp", "~/memory", ". .venv/bin/activate", "/tmp/demo-memory",
                 "the shared service", "~/.local/state/dreamflow", "https://github.com/snap-research/locomo"):
        assert not MACHINE_PATH.search(fine), fine


LOCOMO_BENCHMARKS = ("locomo.py", "locomo_hybrid.py", "locomo_learned.py", "recall.py", "inject.py", "cli_search.py",
                     "mcp.py", "service.py", "vectors.py")


def run_benchmark(script: str, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_LOCOMO"} | {"DREAMFLOW_EMBEDDER": "none"}
    return subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.e2e
def test_every_locomo_benchmark_without_data_says_where_to_get_it():
    running = {script: run_benchmark(script) for script in LOCOMO_BENCHMARKS}
    for script, proc in running.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and "Traceback" not in err, (script, out, err)
        assert "https://github.com/snap-research/locomo" in err and "--data" in err, (script, err)


def conversation(speakers: tuple[str, str], topic: str, day: int) -> dict:
    """A small LoCoMo conversation: two sessions, a question of category 4 on each (what the benchmarks ask)."""
    a, b = speakers
    conv = {"speaker_a": a, "speaker_b": b}
    for n in (1, 2):
        conv[f"session_{n}_date_time"] = f"1:56 pm on {day + n} May, 2023"
        conv[f"session_{n}"] = [
            {"speaker": a, "dia_id": f"D{n}:1", "text": f"I spent the weekend on {topic} number {n}."},
            {"speaker": b, "dia_id": f"D{n}:2", "text": f"Nice, tell me more about the {topic} plan {n}."}]
    conv["qa"] = [{"question": f"What did {a} spend weekend {n} on?", "answer": topic, "evidence": [f"D{n}:1"],
                   "category": 4} for n in (1, 2)]
    return conv


@pytest.mark.e2e
def test_the_locomo_benchmark_reads_the_public_release_and_a_folder_of_conversations_alike(tmp_path):
    convs = {"conv-1": conversation(("Ann", "Bo"), "pottery", 1), "conv-2": conversation(("Cy", "Di"), "sailing", 5)}
    public = tmp_path / "locomo" / "data" / "locomo10.json"  # a clone of the public repository
    public.parent.mkdir(parents=True)
    public.write_text(json.dumps([{"qa": c["qa"], "conversation": {k: v for k, v in c.items() if k != "qa"},
                                   "event_summary": {}, "observation": {}, "session_summary": {}, "sample_id": cid}
                                  for cid, c in convs.items()]))
    folder = tmp_path / "conversations"
    folder.mkdir()
    for cid, c in convs.items():
        (folder / f"{cid}.json").write_text(json.dumps(c))
    runs = [run_benchmark("locomo.py", "--data", str(data)) for data in (public, public.parents[1], folder)]
    runs.append(run_benchmark("locomo.py", "--data", str(public), "--conversations", "conv-2"))
    outputs = []
    for proc in runs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append([line for line in out.splitlines() if not line.startswith(("workspace", "reindex"))
                        and "search_p50_ms" not in line])
    assert outputs[0] == outputs[1] == outputs[2]
    assert "4 questions (categories 1-4), each searched over all 2 conversations" in outputs[0][0]
    assert "2 questions (categories 1-4), each searched over all 1 conversations" in outputs[3][0]
