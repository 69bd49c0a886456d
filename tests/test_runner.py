"""The built-in runner (deployments/runner.py) on Prefect's test harness: it registers the deployments and runs a
launched run here, in this process's memory; a run cancelled while it runs ends cancelled and writes nothing more, and
a run still going when the runner stops is marked Crashed. Real Prefect runs, the scripted LLM server."""

import os
import shutil
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
from llm_server import Reply, answer_by_message, fact
from service_harness import wait_for

from deployments.launch import cancel_runs, launch, run_status
from deployments.runner import CRASHED, Runner
from engine.access import stopped_runs
from engine.config.registry import Registry
from engine.config.settings import Settings
from tasks.sessions import unsummarised

DAY = "2026-11-05"
STORY = [{"role": "user", "content": "I moved to Porto yesterday.", "created_at": f"{DAY}T18:00:00"},
         {"role": "assistant", "content": "Congratulations!", "created_at": f"{DAY}T18:01:00"}]


@pytest.fixture(scope="module")
def git_log(tmp_path_factory) -> Path:
    """A `git` first on PATH for the module that notes each time it is run in the file this returns, then runs git."""
    root = tmp_path_factory.mktemp("git")
    shim = root / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$@" >> {root / "git.log"}\nexec {shutil.which("git")} "$@"\n')
    shim.chmod(0o755)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
        yield root / "git.log"


@pytest.fixture(scope="module")
def runner(prefect_harness, git_log, tmp_path_factory):
    """One runner for the module, serving workspace `alpha` (registered in a Dreamflow home of its own), polling
    every 0.2 s and looking for cancelled runs nothing runs every 0.5 s; the last test stops it."""
    root = tmp_path_factory.mktemp("runner")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DREAMFLOW_HOME", str(root / "home"))
        registry = Registry.load()
        registry.add("alpha", root / "alpha")
        registry.save()
        runner = Runner(Settings(), lambda: "alpha", lambda line: None, poll=0.2, sweep=0.5)
        runner.build({"alpha": "alpha"})
        runner.register()
        runner.start()
        yield runner
        runner.stop(grace=5)


@pytest.fixture
def alpha(runner, llm, monkeypatch) -> Path:
    """alpha's folder, its conversations' cards cleared; the scripted model answering the runs, waited for up to
    60 s (an answer a test holds comes when the test says)."""
    monkeypatch.setenv("DREAMFLOW_LLM_TIMEOUT", "60")
    folder = Path(Registry.load().get("alpha").path)
    shutil.rmtree(folder / "daily", ignore_errors=True)
    return folder


def launched(flow: str, **parameters) -> str:
    return launch(flow, parameters)["id"]


def asking_the_model(runner, llm, session_id: str, answer: threading.Event) -> str:
    """A run of auto_memory for alpha, taken by the runner, waiting for the model's answer until `answer` is set:
    its id."""
    llm.on("list the facts worth remembering", Reply(
        '{"title": "Moving", "facts": [{"text": "The user moved to Porto.", "source": [1]}]}', held=answer))
    run_id = launched("auto_memory", session_id=session_id, messages=STORY, workspace="alpha")
    runner.wake()
    wait_for(lambda: llm.requests, 30, "the run to ask the model")
    return run_id


def final(run_id: str) -> dict:
    return wait_for(lambda: (s := run_status(run_id))["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
                    and s, 60, f"run {run_id} to end")


def test_the_nightly_runs_are_planned_when_the_deployments_are_registered(runner):
    """Prefect's scheduler does not run on this server (conftest `prefect_harness`): the next nightly dreams come
    from the registration itself, so the service's status names the next dream as soon as it is up."""
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with get_client(sync_client=True) as client:
        planned = {}
        for name in ("auto-dream/nightly", "optimize/nightly", "auto-dream/manual"):
            deployment = client.read_deployment_by_name(name)
            ours = DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
            runs = client.read_flow_runs(deployment_filter=ours)
            planned[name] = [r.expected_start_time for r in runs if r.state_type.value == "SCHEDULED"]
    now = datetime.now(timezone.utc)
    assert planned["auto-dream/nightly"] and all(at > now for at in planned["auto-dream/nightly"])
    assert planned["optimize/nightly"] and planned["auto-dream/manual"] == []  # a run started by hand: no schedule


def test_the_deployments_are_versioned_by_their_flows_without_asking_git(runner, git_log):
    """A deployment's version is its flow's (Prefect's hash of the flow's source). Prefect would otherwise read
    it from the git repository of whatever folder the service was started in (which says nothing about
    Dreamflow's flows), running 4 `git` commands a deployment (91 for the runner's) at every start."""
    from prefect import get_client

    from deployments.serve import DEPLOYMENTS, load_flow

    assert not git_log.exists(), git_log.read_text()
    flows = {d.flow_name: load_flow(flow) for flow, d in DEPLOYMENTS.items()}
    with get_client(sync_client=True) as client:
        for built in runner.deployments:
            assert client.read_deployment_by_name(built.full_name).version == flows[built.flow_name].version


def test_a_launched_run_runs_here_and_names_no_workspace_means_the_default(runner, llm, alpha):
    answer_by_message(llm, "Moving to Porto", ("moved to Porto", fact("The user moved to Porto yesterday.")))
    run_id = launched("auto_memory", session_id="s1", messages=STORY)  # no workspace: the runner's default
    runner.wake()
    status = final(run_id)
    assert status["state_type"] == "COMPLETED", status
    assert status["summary"]["card"] == f"daily/{DAY}/moving-to-porto.md"
    assert (alpha / status["summary"]["card"]).is_file()  # written by this process, in alpha
    wait_for(lambda: runner.running() == 0, 30, "the run's thread to end")
    assert runner.alive


def test_a_run_cancelled_while_it_runs_ends_cancelled_and_writes_nothing_more(runner, llm, alpha):
    answer = threading.Event()
    run_id = asking_the_model(runner, llm, "s2", answer)
    assert cancel_runs("alpha", ("alpha",), "a test cancelled it") == [run_id]
    assert final(run_id)["state_type"] == "CANCELLED"
    answer.set()
    wait_for(lambda: runner.running() == 0, 30, "the run's thread to end")
    assert run_status(run_id)["state_type"] == "CANCELLED"
    # the model's answer came after the cancel: no card, no day page, the messages still to be summarised
    assert not list((alpha / "daily").rglob("*.md"))
    assert unsummarised(str(alpha), "s2")["records"], "the messages are still to be summarised"


def test_a_run_ended_cancelled_elsewhere_while_it_runs_here_stops_too(runner, llm, alpha):
    """Another runner on the same Prefect server (its sweep) or the API may end a run going here Cancelled outright,
    skipping Cancelling: it stops here all the same, writing nothing more."""
    from prefect import get_client
    from prefect.states import Cancelled

    answer = threading.Event()
    run_id = asking_the_model(runner, llm, "s4", answer)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run_id, Cancelled(message="ended by another runner"), force=True)
    wait_for(lambda: run_id in stopped_runs._stopped, 30, "the runner to ask the run to stop")  # at its next poll
    answer.set()
    wait_for(lambda: runner.running() == 0, 30, "the run's thread to end")
    status = run_status(run_id)
    assert status["state_type"] == "CANCELLED" and status["message"] == "ended by another runner"
    assert not list((alpha / "daily").rglob("*.md"))
    assert unsummarised(str(alpha), "s4")["records"], "the messages are still to be summarised"


def test_a_run_nothing_runs_any_more_ends_cancelled_when_asked(runner):
    """A run of our deployments left Running by a service that died, then cancelled in the UI (Cancelling): nothing
    runs it, so the runner ends it, as Prefect's own runner does."""
    from prefect import get_client
    from prefect.states import Cancelling, Running

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("proactive/manual")
        run = client.create_flow_run_from_deployment(deployment.id, state=Running())
        client.set_flow_run_state(run.id, Cancelling(message="not wanted after all"), force=True)
    status = final(str(run.id))
    assert status["state_type"] == "CANCELLED" and status["message"] == "not wanted after all"
    assert runner.running() == 0  # ended, never run here


# ---- keep last: stops the module's runner

def test_a_run_still_going_when_the_runner_stops_is_marked_crashed(runner, llm, alpha):
    answer = threading.Event()
    run_id = asking_the_model(runner, llm, "s3", answer)
    runner.stop(grace=0.1)
    status = run_status(run_id)
    assert status["state_type"] == "CRASHED" and status["message"] == CRASHED
    assert not runner.alive
    answer.set()
    wait_for(lambda: runner.running() == 0, 30, "the run's thread to end")
    assert run_status(run_id)["state_type"] == "CRASHED"
    assert not list((alpha / "daily").rglob("*.md"))
    assert unsummarised(str(alpha), "s3")["records"], "a Retry summarises them"
