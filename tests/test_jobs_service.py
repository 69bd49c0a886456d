"""Jobs started from the CLI or HTTP while the service runs are runs of their deployments: they show with their
deployment and parameters, use the service's settings, and the UI's Retry re-runs only their failed units.

Uses the shared service (conftest `dreamflow_service`); the CLI runs in a subprocess WITHOUT any LLM settings.
"""

import json
import os
import re
import subprocess

import pytest
from llm_server import Reply, json_reply, text_of
from results_scan import holding
from service_harness import DREAMFLOW, loopback, wait_for

from deployments.serve import DEPLOYMENTS
from engine.access.job_workspace import RESULTS

pytestmark = pytest.mark.timeout(300)

FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def shell_env() -> dict:
    """A user's shell: no LLM settings, no Prefect API; it finds the service through metadata/service.json."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("DREAMFLOW_LLM_", "PREFECT_API"))}


def cli(svc, *args) -> subprocess.CompletedProcess:
    return subprocess.run([DREAMFLOW, "--workspace", str(svc.workspace), *args], capture_output=True, text=True,
                          env=shell_env(), timeout=180)


def llm_calls(server, since: int) -> list[str]:
    return [text_of(body) for body in server.requests[since:]]


def run_by(svc, deployment: str, **params) -> dict:
    runs = [r for r in svc.flow_runs(deployment) if all(r["parameters"].get(k) == v for k, v in params.items())]
    assert len(runs) == 1, runs
    return runs[0]


def ui_retry(svc, run_id: str, what: str) -> dict:
    """The UI's Retry button, exactly (AwaitingRetry, forced); returns the run once its retry has finished."""
    svc.prefect("POST", f"/flow_runs/{run_id}/set_state", {
        "state": {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}, "force": True})
    return wait_for(lambda: (lambda r: r if r["state_type"] in FINAL and r["run_count"] > 1 else None)(
        svc.prefect("GET", f"/flow_runs/{run_id}")), 120, f"the retried {what} to finish")


def fact_card(svc, path: str, about: str, text: str) -> None:
    """A card as auto-memory writes it: one fact citing a message."""
    svc.memory.write(path, content=f"# {about}\n\n## Facts\n\n- {text} (about:: {about}) "
                                   "(source:: [[session/dialog/s.jsonl#L1]]) ^f1\n")


@pytest.mark.e2e
def test_cli_dream_is_a_deployment_run_and_a_ui_retry_reruns_only_the_failed_unit(dreamflow_service, llm_server):
    svc, day = dreamflow_service, "2024-07-01"
    svc.memory.write("digest/personal/ana.md", content="# Ana\n\n## Facts\n\n- Ana lives in Bergen. "
                     "(since:: 2024-01-01) ^f1\n", metadata={"about": "ana"})
    svc.memory.write("digest/personal/bo.md", content="# Bo\n\n## Facts\n\n- Bo paddles a canoe. "
                     "(since:: 2024-01-01) ^f1\n", metadata={"about": "bo"})
    fact_card(svc, f"daily/{day}/oslo.md", "Ana", "Ana lives in Oslo now.")
    fact_card(svc, f"daily/{day}/kayak.md", "Bo", "Bo paddles a sea kayak now.")
    llm_server.reset()
    llm_server.on(lambda b: "messages" in b and "Oslo" in text_of(b), json_reply({"relation": "replaces", "fact": 1}))
    llm_server.on(lambda b: "messages" in b and "kayak" in text_of(b), Reply(status=500, content="model overloaded"))
    before = len(llm_server.requests)

    dream = cli(svc, "dream", "--date", day, "--scan-days", "1")

    # a planned failure: summary printed, Failed run, the documented exit code (not 1, not a traceback)
    assert dream.returncode == 9, dream.stdout + dream.stderr
    assert "FAILED" in dream.stdout and "1 failed" in dream.stdout and "digest/personal/ana.md" in dream.stdout
    assert f"daily/{day}/oslo.md#^f1: replaced in digest/personal/ana.md" in dream.stderr  # streamed
    assert "auto-dream/manual: Failed" in dream.stderr
    assert "Traceback" not in dream.stderr and "unexpected exception" not in dream.stderr
    run = run_by(svc, "auto-dream/manual", date=day)
    assert run["state_type"] == "FAILED" and run["state"]["message"].startswith("1 of 2 units failed")
    assert run["parameters"]["workspace"] == str(svc.workspace) and run["parameters"]["scan_days"] == 1
    assert len(llm_calls(llm_server, before)) == 2  # a question per unit: the service's LLM, not the shell's
    status = loopback.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()
    assert status["deployment"] == "auto-dream/manual" and status["state_type"] == "FAILED"
    assert status["summary"]["failed"][0]["name"] == "Bo" and status["ui_url"].endswith(run["id"])

    llm_server.on(lambda b: "messages" in b and "kayak" in text_of(b), json_reply({"relation": "replaces", "fact": 1}))
    before = len(llm_server.requests)
    done = ui_retry(svc, run["id"], "dream")
    assert done["state_type"] == "COMPLETED", done["state"]
    calls = llm_calls(llm_server, before)
    assert len(calls) == 1 and "kayak" in calls[0]  # Ana's unit not re-run
    assert "Bo paddles a sea kayak now." in svc.memory.read("digest/personal/bo.md")["content"]
    status = loopback.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()
    assert status["state"] == "Completed" and status["summary"]["failed"] == []
    # the run's results (the gathering the retry reused, the units, the summaries read above) are the
    # workspace's: none in the service's home, neither in Prefect's result storage nor in its database
    results = svc.workspace / RESULTS
    assert holding(results, "Ana lives in Oslo now.") and len(holding(results, "kayak")) >= 3
    assert holding(svc.home, "Ana lives in Oslo now.") == [] and holding(svc.home / "prefect/storage", "kayak") == []


@pytest.mark.e2e
def test_a_ui_retry_of_a_merge_reruns_only_the_failed_pair(dreamflow_service, llm_server):
    svc = dreamflow_service
    for name in ("tea", "green-tea", "stove", "old-stove"):
        svc.memory.write(f"digest/wiki/{name}.md", content=f"# {name}\n\nAbout {name}.\n", name=name)
    pairs = [["digest/wiki/tea.md", "digest/wiki/green-tea.md"], ["digest/wiki/stove.md", "digest/wiki/old-stove.md"]]
    llm_server.reset()
    llm_server.on("About green-tea.", json_reply({"name": "Tea", "description": "Tea.", "content": "Tea, green too."}))
    llm_server.on("About old-stove.", Reply(status=500, content="model overloaded"))
    before = len(llm_server.requests)
    # the same route as the UI's Run
    started = loopback.post(f"{svc.url}/flows/merge", json={"pairs": pairs}, timeout=60).json()
    run = wait_for(lambda: (lambda r: r if r["state_type"] in FINAL else None)(
        svc.prefect("GET", f"/flow_runs/{started['id']}")), 90, "the merge")
    assert run["state_type"] == "FAILED" and run["state"]["message"] == "1 of 2 items failed", run["state"]
    assert run["parameters"]["pairs"] == pairs and len(llm_calls(llm_server, before)) == 2
    assert loopback.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()["summary"]["usage"]["calls"] == 2

    llm_server.on("About old-stove.", json_reply({"name": "Stove", "description": "Stove.", "content": "A stove."}))
    before = len(llm_server.requests)
    done = ui_retry(svc, run["id"], "merge")
    assert done["state_type"] == "COMPLETED", done["state"]
    calls = llm_calls(llm_server, before)
    assert len(calls) == 1 and "About old-stove." in calls[0]  # the finished pair is not merged again
    left = {e["path"] for e in svc.memory.list("digest/wiki", limit=100)["entries"]}
    assert {"digest/wiki/tea.md", "digest/wiki/stove.md"} <= left
    assert not {"digest/wiki/green-tea.md", "digest/wiki/old-stove.md"} & left
    summary = loopback.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()["summary"]
    assert summary["failed"] == [] and len(summary["outcomes"]) == 2


@pytest.mark.e2e
def test_no_wait_prints_the_run_and_json_waits_for_the_summary(dreamflow_service):
    svc = dreamflow_service
    started = cli(svc, "reindex", "--no-wait")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split(": ")[1].split()[0]
    assert f"/runs/flow-run/{run_id}" in started.stdout
    topics = cli(svc, "proactive", "--date", "2024-07-09")  # meanwhile; the same table as in-process
    assert topics.returncode == 0 and "no topics" in topics.stdout and "proactive/manual" in topics.stderr
    wait_for(lambda: loopback.get(f"{svc.url}/flows/runs/{run_id}", timeout=60).json()["state_type"] in FINAL, 90,
             "the reindex")
    assert loopback.get(f"{svc.url}/flows/runs/{run_id}", timeout=60).json()["deployment"] == "reindex/manual"
    waited = cli(svc, "reindex", "--json")
    assert waited.returncode == 0 and json.loads(waited.stdout)["files"] >= 0, waited.stdout + waited.stderr
    assert loopback.get(f"{svc.url}/flows/runs/not-a-uuid", timeout=60).status_code == 400
    assert loopback.get(f"{svc.url}/flows/runs/00000000-0000-0000-0000-000000000000", timeout=60).status_code == 404


@pytest.mark.e2e
@pytest.mark.slow
def test_each_governance_flow_is_deployed_and_runs_from_its_deployment(dreamflow_service):
    svc = dreamflow_service
    for flow in ("doctor", "link_mine", "merge", "split", "archive"):
        d = DEPLOYMENTS[flow]
        deployed = svc.deployment(d.full_name)
        assert deployed["entrypoint"] == f"flows.governance.{flow}", deployed["entrypoint"]
        assert "workspace" in deployed["parameter_openapi_schema"]["properties"]
    svc.memory.write("digest/wiki/old-stove.md", content="# Old stove\n\nGas stove.\n\n## Sources\n\n- none\n")

    # all started at once, the runner runs them side by side: doctor --fix from the CLI without waiting, the LLM
    # flows like the UI's "Run" with parameters (given nothing to do), then archive from the CLI, waiting
    doctor = cli(svc, "doctor", "--fix", "--no-wait", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    runs = {"doctor": json.loads(doctor.stdout)["id"]}
    for flow, params in (("link_mine", {"max_nodes": 0}), ("merge", {"pairs": []}), ("split", {"paths": []})):
        deployment = svc.deployment(DEPLOYMENTS[flow].full_name)["id"]
        runs[flow] = svc.prefect("POST", f"/deployments/{deployment}/create_flow_run",
                                 {"parameters": {**params, "workspace": str(svc.workspace)}})["id"]
    archived = cli(svc, "archive", "digest/wiki/old-stove.md", "--json")
    assert archived.returncode == 0, archived.stdout + archived.stderr
    assert any(p.startswith("digest/archive/") for p in json.loads(archived.stdout)["changed"]), archived.stdout
    assert run_by(svc, "archive/manual", paths=["digest/wiki/old-stove.md"])["state_type"] == "COMPLETED"
    for flow, run_id in runs.items():
        done = wait_for(lambda: (lambda r: r if r["state_type"] in FINAL else None)(
            svc.prefect("GET", f"/flow_runs/{run_id}")), 90, f"the {flow} run")
        assert done["state_type"] == "COMPLETED", (flow, done["state"]["message"])
        status = loopback.get(f"{svc.url}/flows/runs/{run_id}", timeout=60).json()
        assert status["deployment"] == DEPLOYMENTS[flow].full_name, status
        assert "counts" in status["summary"] if flow == "doctor" else status["summary"]["failed"] == [], status
    assert svc.prefect("GET", f"/flow_runs/{runs['doctor']}")["parameters"]["fix"] is True

@pytest.mark.e2e
def test_a_service_run_that_fails_exits_with_the_code_of_its_error(dreamflow_service, llm_server):
    """The same failure exits the same way through the service as in-process: a bad path 2, the LLM 7 (not 1)."""
    svc, day = dreamflow_service, "2024-07-20"
    bad = cli(svc, "auto-resource", "../outside.md", "--json")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    error = json.loads(bad.stdout)["error"]
    assert error["type"] == "PathError" and "escapes the workspace" in error["message"] and "/runs/flow-run/" in \
        error["message"]
    run = run_by(svc, "auto-resource/on-change", path="../outside.md")
    status = loopback.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()
    assert status["state_type"] == "FAILED" and status["summary"] is None
    assert status["error"]["type"] == "PathError" and status["error"]["exit_code"] == 2, status
    assert "escapes the workspace" in status["error"]["message"]

    llm_server.reset()
    llm_server.on("list the facts worth remembering", Reply(status=500, content="model down"))
    messages = json.dumps([{"role": "user", "content": "Ana drinks green tea.", "created_at": f"{day}T09:00:00"}])
    down = cli(svc, "auto-memory", "--session-id", "tea", "--messages", messages)
    assert down.returncode == 7, down.stdout + down.stderr
    assert "model down" in down.stderr and "Traceback" not in down.stderr


@pytest.mark.e2e
def test_a_caller_cannot_point_a_flow_at_another_folder_of_the_host(dreamflow_service, tmp_path):
    svc, elsewhere = dreamflow_service, tmp_path / "not-the-workspace"
    elsewhere.mkdir()
    for flow in ("reindex", "doctor", "archive"):
        refused = loopback.post(f"{svc.url}/flows/{flow}", json={"workspace": str(elsewhere)}, timeout=60)
        assert refused.status_code == 422 and "workspace" in refused.json()["error"]["message"], refused.text
    negative = loopback.post(f"{svc.url}/flows/auto_dream", json={"scan_days": -1}, timeout=60)  # counts as on the CLI
    assert negative.status_code == 422 and "scan_days" in negative.json()["error"]["message"], negative.text
    schema = loopback.get(f"{svc.url}/openapi.json", timeout=60).json()["components"]["schemas"]
    assert not [name for name, s in schema.items() if name.endswith("Parameters") and "workspace" in
                s.get("properties", {})]
    assert list(elsewhere.iterdir()) == []


@pytest.mark.e2e
def test_status_shows_what_a_user_needs_and_verbose_the_internals(dreamflow_service):
    svc = dreamflow_service
    plain = cli(svc, "status")
    assert plain.returncode == 0, plain.stderr
    assert f"API         {svc.url}   (docs: {svc.url}/docs)" in plain.stdout and "Prefect UI  http" in plain.stdout
    # the shared service's workspace may hold a file another test made unparseable: the line then says so
    assert re.search(r"Index       \d+ files, \d+ chunks, \d+ links(, \d+ files could not be parsed \(indexed as "
                     r"text\))?\n", plain.stdout)
    assert "postings" not in plain.stdout and "Warning" not in plain.stdout
    assert re.search(r"Service     running for [^\n]*\n", plain.stdout) and "Service     running for" in plain.stdout
    assert not re.search(r"Service [^\n]*pid", plain.stdout)
    verbose = cli(svc, "status", "--verbose")
    assert "postings" in verbose.stdout and "unsorted_postings" in verbose.stdout
    assert re.search(r"runner +running, \d+ of 4 runs going\n", verbose.stdout)


def test_a_service_without_an_llm_refuses_llm_jobs_before_creating_a_run(tmp_path, no_llm):
    from dreamflow.service.supervisor import Options, Service
    from engine.models.llm import LLMNotConfigured
    from engine.config.settings import Settings

    service = Service(Options(tmp_path / "ws", settings=Settings()), say=lambda text: None)
    with pytest.raises(LLMNotConfigured, match="the service has no LLM configured") as refused:
        service.jobs.launch("auto_dream", {"date": "2024-07-01"})
    assert refused.value.exit_code == 6


def test_the_doctor_is_scheduled_only_when_asked(monkeypatch):
    from deployments.serve import crons
    from engine.config.settings import Settings

    monkeypatch.delenv("DREAMFLOW_DOCTOR_CRON", raising=False)
    assert "doctor" not in crons(Settings())
    monkeypatch.setenv("DREAMFLOW_DOCTOR_CRON", "0 6 * * 1")
    assert crons(Settings())["doctor"] == "0 6 * * 1"
