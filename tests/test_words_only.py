"""Without the `local` extra (sentence-transformers not installed) and the default DREAMFLOW_EMBEDDER, one
behaviour: search goes by keyword, the dream compares facts by their words (its units do not fail), and the
run's log, its summary, `dreamflow status` (text and --json) and the service's GET /status say so once.

The package is made missing without uninstalling it: `sys.modules['sentence_transformers'] = None` makes its
import fail and `importlib.util.find_spec` answer None, in this process (monkeypatch) or, for subprocesses, from a
`sitecustomize.py` on their PYTHONPATH."""

import json
import logging
import os
import subprocess
import sys

import pytest

from engine.models import embedders
from flows.auto_dream import auto_dream
from llm_server import json_reply
from service_harness import DREAMFLOW, RunningService
from storage.memory import Memory
from storage.text import facts

COMPARE = "You keep a memory of facts up to date"
SAID = "facts are compared by their words only: local embeddings need the `local` extra"


@pytest.fixture
def without_local_extra(monkeypatch):
    from tasks import dream

    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "local")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setattr(embedders, "_local_model", None)
    dream._similarity.cache_clear()
    yield
    dream._similarity.cache_clear()


@pytest.fixture
def blocked_env(tmp_path) -> dict:
    """The environment of a subprocess in which sentence-transformers is missing."""
    block = tmp_path / "no-local-extra"
    block.mkdir()
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['sentence_transformers'] = None\n")
    path = os.pathsep.join(filter(None, [str(block), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "DREAMFLOW_EMBEDDER": "local"}


def card(memory: Memory, day: str, name: str, text: str, session: str) -> str:
    fact = facts.Fact(text, id="f1", about="user", sources=(f"session/dialog/{session}.jsonl#L1",),
                      labels=(f"{day} 18:00",))
    body = facts.add(f"# {name}\n", fact)
    path = f"daily/{day}/{name.lower()}.md"
    memory.write(path, body, name=name, description=name, metadata={"session_id": session})
    return path


def lisbon_then_porto(ws, llm, moved: str = "The user lives in Porto now.") -> Memory:
    """Lisbon dreamt on 11-02, then a card of 11-05 saying `moved`, which the model answers `replaces` (the
    11-05 dream is left to the test)."""
    memory = Memory(ws.root)
    card(memory, "2026-11-02", "Home", "The user lives in Lisbon.", "s")
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-05", "Moved", moved, "t")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))
    return memory


def test_a_dream_without_the_local_extra_compares_by_words(prefect_harness, llm, ws, without_local_extra, caplog):
    assert embedders.unavailable() == embedders.LOCAL_MISSING
    memory = lisbon_then_porto(ws, llm)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root))

    assert summary["failed"] == [] and [a["action"] for a in summary["actions"]] == ["replaced"]
    assert summary["words_only"] == embedders.LOCAL_MISSING
    assert [r.getMessage() for r in caplog.records if "compared by their words" in r.getMessage()] == [
        f"facts are compared by their words only: {embedders.LOCAL_MISSING}"]
    user = {f.text: f for f in facts.parse(memory.read("digest/personal/user.md", numbered=False)["content"])}
    assert user["The user lives in Porto now."].current and not user["The user lives in Lisbon."].current


def test_the_dream_command_says_it_under_its_summary(prefect_harness, llm, ws, without_local_extra):
    from click.testing import CliRunner

    from dreamflow.cli import cli

    lisbon_then_porto(ws, llm)
    result = CliRunner().invoke(cli, ["--workspace", str(ws.root), "dream", "--date", "2026-11-05", "--scan-days", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "replaced" in result.output and " ".join(result.output.split()).count(
        "facts compared by their words only: local embeddings need the `local` extra") == 1


def test_an_embedder_failing_mid_run_compares_by_words_and_says_so_once(prefect_harness, llm, ws, monkeypatch,
                                                                         caplog):
    """An embeddings endpoint that answers 500 (the scripted server without an embedder): the units land."""
    from tasks import dream

    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "openai")
    monkeypatch.setenv("DREAMFLOW_EMBED_BASE_URL", llm.base_url)
    monkeypatch.setenv("DREAMFLOW_EMBED_MODEL", "scripted-embedder")
    dream._similarity.cache_clear()
    try:
        lisbon_then_porto(ws, llm, "The user lives in Porto now, not Lisbon.")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            summary = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root))
    finally:
        dream._similarity.cache_clear()
    assert summary["failed"] == [] and summary["words_only"].startswith("embedding endpoint")
    assert len([r for r in caplog.records if "compared by their words" in r.getMessage()]) == 1


@pytest.mark.e2e
def test_status_says_the_dream_compares_by_words(ws, blocked_env):
    done = subprocess.run([DREAMFLOW, "--workspace", str(ws.root), "status", "--json"], capture_output=True,
                          text=True, env=blocked_env, timeout=120)
    assert done.returncode == 0, done.stderr
    [warning] = [w for w in json.loads(done.stdout)["warnings"] if "local" in w]
    assert warning.startswith(embedders.LOCAL_MISSING) and "compares facts by their words" in warning
    text = subprocess.run([DREAMFLOW, "--workspace", str(ws.root), "status"], capture_output=True, text=True,
                          env=blocked_env, timeout=120).stdout
    assert f"Warning     {warning}" in text
    fine = subprocess.run([DREAMFLOW, "--workspace", str(ws.root), "status", "--json"], capture_output=True,
                          text=True, env={**blocked_env, "DREAMFLOW_EMBEDDER": "none"}, timeout=120)
    assert not [w for w in json.loads(fine.stdout)["warnings"] if "local" in w]


@pytest.mark.e2e
def test_the_service_says_it_at_start_and_in_status(tmp_path, dreamflow_service, blocked_env):
    env = {"PYTHONPATH": blocked_env["PYTHONPATH"], "DREAMFLOW_EMBEDDER": "local"}
    svc = RunningService.start(tmp_path, prefect_api=dreamflow_service.prefect_api, runner=False, env=env)
    try:
        status = svc.memory.status()
        [warning] = [w for w in status["warnings"] if "local" in w]
        assert warning.startswith(embedders.LOCAL_MISSING) and svc.log().count(warning) == 1
        hits = svc.memory.search("anything")  # keyword search answers
        assert isinstance(hits, list)
    finally:
        assert svc.stop() == 0
