"""`dreamflow start` for real: its Prefect server in a process of its own, runner, watcher and HTTP API in the
service, over a temp workspace, flows answered by the scripted LLM server. The shared service (conftest
`dreamflow_service`) starts once; token and crash tests start a second, lighter service on the same Prefect server
(`--no-runner`).

`test_prefect_yaml_deploys_against_a_process_pool` deploys prefect.yaml over the served deployments, then puts
them back as the service registered them.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_probe import run_cli
from llm_server import answer_each_item, text_of
from service_harness import DREAMFLOW, SERVICE_TURNS, RunningService, loopback, wait_for

from deployments.serve import local_timezone
from dreamflow.service.children import Child, http_ok
from dreamflow.service.supervisor import Options, Service, ServiceError
from engine.access.client import connect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def runs_for(service, deployment: str, **params) -> list[dict]:
    return [r for r in service.flow_runs(deployment) if all(r["parameters"].get(k) == v for k, v in params.items())]


def finished(service, deployment: str, count: int, **params):
    runs = runs_for(service, deployment, **params)
    done = [r for r in runs if r["state_type"] in TERMINAL]
    return runs if len(runs) >= count and len(done) == len(runs) else None


def cli(*args, env=None, workspace=None, input=None) -> subprocess.CompletedProcess:
    return subprocess.run([DREAMFLOW, "--workspace", str(workspace), *args], capture_output=True, text=True,
                          env=env or os.environ, input=input, timeout=60)


# ---- start-up --------------------------------------------------------------------------------------------

def test_start_prints_where_everything_is_and_writes_service_json(dreamflow_service):
    svc = dreamflow_service
    log = svc.log()
    for line in ("Workspace", str(svc.workspace.resolve()), "API", svc.url, "Prefect UI", "Dreamflow is running"):
        assert line in log
    info = json.loads((svc.workspace / "metadata/service.json").read_text())
    assert info["url"] == svc.url and info["pid"] == svc.proc.pid and info["token_required"] is False
    assert (svc.home / "prefect" / "prefect.db").is_file(), "the Prefect database belongs under DREAMFLOW_HOME"
    assert connect(svc.workspace) is not None
    spec = loopback.get(f"{svc.url}/openapi.json", timeout=60).json()
    assert {"/turn", "/status", "/health", "/flows/auto_dream", "/flows/auto_memory", "/ops/search"} <= set(spec["paths"])
    dream = spec["paths"]["/flows/auto_dream"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "scan_days" in spec["components"]["schemas"][dream["$ref"].rsplit("/", 1)[1]]["properties"]


# ---- file events -----------------------------------------------------------------------------------------

def test_a_saved_daily_file_is_searchable_and_edits_and_deletes_follow(dreamflow_service):
    svc, memory = dreamflow_service, dreamflow_service.memory
    path = svc.workspace / "daily/2024-05-02/gardening.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Garden\n\nPlanted zucchinixq seedlings today.\n")  # as an editor saves it
    hits = wait_for(lambda: memory.search("zucchinixq"), 5, "the saved file to be searchable")
    assert hits[0]["path"] == "daily/2024-05-02/gardening.md"
    path.write_text("# Garden\n\nPlanted tomatillozq seedlings today.\n")
    wait_for(lambda: memory.search("tomatillozq") and not memory.search("zucchinixq"), 5, "the edit to be indexed")
    path.unlink()
    wait_for(lambda: not memory.search("tomatillozq"), 5, "the deleted file to leave the index")


def test_a_bulk_change_is_indexed_too(dreamflow_service):
    svc, memory = dreamflow_service, dreamflow_service.memory
    folder = svc.workspace / "digest/wiki/imported"
    folder.mkdir(parents=True)
    for i in range(250):  # more than one batch of single-file updates: the service reconciles
        (folder / f"page-{i}.md").write_text(f"# Page {i}\n\nbulkword{i}y\n")
    wait_for(lambda: memory.search("bulkword249y") and memory.search("bulkword0y"), 15, "the bulk import")
    assert len(memory.list("digest/wiki/imported", limit=1000)["entries"]) == 250


def test_concurrent_writers_through_the_service_lose_nothing(dreamflow_service):
    svc, memory = dreamflow_service, dreamflow_service.memory
    errors = []

    def writer(k):
        try:
            for i in range(15):
                memory.write(f"digest/personal/writer-{k}-{i}.md", f"concword{k}x{i}y")
                assert memory.search(f"concword{k}x{i}y"), "read-your-writes"
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    outside = [cli("append", f"digest/personal/cli-{i}.md", "--content", f"cliword{i}y", workspace=svc.workspace)
               for i in range(2)]
    for t in threads:
        t.join(60)
    assert errors == [] and all(p.returncode == 0 for p in outside), (errors, [p.stderr for p in outside])
    names = {e["path"] for e in memory.list("digest/personal", limit=1000)["entries"]}
    assert {f"digest/personal/writer-{k}-{i}.md" for k in range(4) for i in range(15)} <= names
    assert memory.search("cliword1y")[0]["path"] == "digest/personal/cli-1.md"


def test_the_cli_goes_through_the_running_service(dreamflow_service):
    svc = dreamflow_service
    svc.memory.write("digest/wiki/quokka.md", "Quokkas live on Rottnest Island.", name="Quokka")
    found = cli("search", "Rottnest quokka", "--json", workspace=svc.workspace)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["path"] == "digest/wiki/quokka.md"
    # a call that only forwards to the service loads no database engine (duckdb) and no model
    proc, modules = run_cli(svc.workspace, "search", "quokka", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["path"] == "digest/wiki/quokka.md"
    assert not modules & {"duckdb", "torch", "prefect", "openai", "storage.search.search", "storage.index.db"}
    status = cli("status", "--json", workspace=svc.workspace)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True and data["index"]["files"] >= 1
    assert {c["name"]: c["running"] for c in data["children"]} == {"prefect server": True}
    assert data["runner"]["running"] is True and data["runner"]["limit"] == 4  # the runner runs in the service


def test_a_dropped_resource_runs_auto_resource_exactly_once(dreamflow_service, llm_server):
    svc = dreamflow_service
    llm_server.reset()
    answer_each_item(llm_server, "Wombat droppings")
    path = svc.workspace / "resource/2024-05-03/wombat.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:  # created, then modified twice: one write as a slow program makes it
        fh.write("# wombatfacts\n")
        fh.flush()
        time.sleep(0.1)
        fh.write("Wombats have cube-shaped droppings.\n")
        fh.flush()
        time.sleep(0.1)
        fh.write("They are marsupials.\n")
    rel = "resource/2024-05-03/wombat.md"
    runs = wait_for(lambda: finished(svc, "auto-resource/on-change", 1, path=rel), 90, "the auto_resource run")
    assert [r["state_type"] for r in runs] == ["COMPLETED"], runs
    card = svc.workspace / "daily/2024-05-03/wombat-droppings.md"
    assert card.is_file() and "source_resource" in card.read_text()
    time.sleep(3)  # a duplicate run would have been created by now (watcher quiet window 1 s)
    assert len(runs_for(svc, "auto-resource/on-change", path=rel)) == 1


def test_turns_launch_auto_memory_every_n_turns_and_no_turn_is_summarised_twice(dreamflow_service, llm_server):
    svc, memory, n = dreamflow_service, dreamflow_service.memory, SERVICE_TURNS
    llm_server.reset()
    answer_each_item(llm_server, "Planning the trip")
    session = "trip-planning"
    results = [
        memory.turn(session, [{"role": "user", "content": f"question{i}x about the trip budget"},
                              {"role": "assistant", "content": f"answer{i}x about the hotel"}])
        for i in range(2 * n + 1)
    ]
    launched = [r["launched"] for r in results if r["launched"]]
    assert len(launched) == 2 and results[n - 1]["launched"] and results[2 * n - 1]["launched"]
    assert results[-1]["pending"] == 1 and results[-1]["turns"] == 2 * n + 1
    lines = (svc.workspace / f"session/dialog/{session}.jsonl").read_text().splitlines()
    assert len(lines) == 2 * (2 * n + 1), "every turn is appended at once"
    runs = wait_for(lambda: finished(svc, "auto-memory/turns", 2, session_id=session), 120, "two auto_memory runs")
    assert len(runs) == 2 and all(r["state_type"] == "COMPLETED" for r in runs), runs
    prompts = [text_of(body) for body in llm_server.requests]
    for i in range(2 * n):  # each of the 2N turns went to the LLM exactly once
        assert sum(f"question{i}x" in p for p in prompts) == 1, f"turn {i}"
    checkpoint = json.loads((svc.workspace / f"metadata/checkpoints/sessions/{session}.json").read_text())
    assert checkpoint["records"] >= 2 * 2 * n
    counted = svc.memory.status()["turns"]["sessions"][session]
    assert counted["runs"] == 2 and counted["turns"] == 2 * n + 1


def test_turn_cli_and_bad_input(dreamflow_service):
    svc = dreamflow_service
    done = cli("turn", "--session-id", "cli-chat", "--messages", '[{"role": "user", "content": "hello"}]', "--json",
               workspace=svc.workspace)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["turns"] == 1
    bad = cli("turn", "--session-id", "../escape", "--messages", "[]", workspace=svc.workspace)
    assert bad.returncode == 2 and "session id" in bad.stderr
    resp = loopback.post(f"{svc.url}/turn", json={"session_id": "x", "messages": "not a list"}, timeout=60)
    assert resp.status_code == 422 and resp.json()["error"]["type"] == "InvalidInput"


def test_turn_prints_the_ui_link_of_the_run_it_starts(dreamflow_service, llm_server):
    svc = dreamflow_service
    llm_server.reset()
    answer_each_item(llm_server, "UI link chat")
    done = cli("turn", "--session-id", "ui-link-chat", "--compact", "--messages",
               '[{"role": "user", "content": "uilinkchat about the trip"}]', workspace=svc.workspace)
    assert done.returncode == 0, done.stderr
    run_id = re.search(r"auto_memory run started: (\S+)", done.stdout).group(1)
    assert f"follow it in the Prefect UI: {svc.prefect_api.removesuffix('/api')}/runs/flow-run/{run_id}" in done.stdout
    runs = wait_for(lambda: finished(svc, "auto-memory/turns", 1, session_id="ui-link-chat"), 90, "the run")
    assert runs[0]["state_type"] == "COMPLETED", runs


def test_status_says_where_the_logs_are(dreamflow_service):
    status = cli("status", workspace=dreamflow_service.workspace)
    assert f"Logs        {dreamflow_service.home / 'logs'}" in status.stdout
    assert "no LLM configured" not in status.stdout and "no LLM configured" not in dreamflow_service.log()


# ---- deployments -----------------------------------------------------------------------------------------

def test_nightly_deployments_exist_with_their_schedules(dreamflow_service):
    svc = dreamflow_service
    for name, cron in (("auto-dream/nightly", "0 3 * * *"), ("optimize/nightly", "30 4 * * *")):
        deployment = svc.deployment(name)
        schedule = deployment["schedules"][0]["schedule"]
        assert schedule["cron"] == cron and schedule["timezone"] == local_timezone(), name
        assert deployment["paused"] is False
    scheduled = wait_for(lambda: [r for r in svc.flow_runs("auto-dream/nightly") if r["state_type"] == "SCHEDULED"],
                         30, "the nightly dream to be planned")
    assert "T03:00:00" in scheduled[0]["expected_start_time"] or local_timezone() != "UTC"
    for name in ("auto-memory/turns", "auto-resource/on-change", "proactive/manual", "reindex/manual"):
        assert svc.deployment(name)["name"] == name.split("/")[1]
    for name in ("auto-dream/manual", "optimize/manual"):  # what runs started by hand are runs of: no schedule
        assert svc.deployment(name)["schedules"] == [], name


def test_a_crashed_prefect_server_is_restarted_and_the_runner_takes_runs_again(dreamflow_service):
    """The Prefect server is the service's child: killed, it is restarted, and the runner (a thread of the service,
    deployments/runner.py) takes the runs launched next."""
    svc, memory = dreamflow_service, dreamflow_service.memory
    server = next(c for c in memory.status()["children"] if c["name"] == "prefect server")
    os.kill(server["pid"], signal.SIGKILL)
    restarted = wait_for(
        lambda: next((c for c in memory.status()["children"]
                      if c["name"] == "prefect server" and c["running"] and c["pid"] != server["pid"]), None),
        30, "the service to restart the Prefect server")
    assert restarted["restarts"] == server["restarts"] + 1
    assert "prefect server exited with code" in svc.log()
    wait_for(lambda: http_ok(f"{svc.prefect_api}/health"), 60, "the restarted Prefect server to answer")
    run = memory.launch("proactive", {"date": "2024-05-02"})
    assert run["deployment"] == "proactive/manual"
    wait_for(lambda: finished(svc, "proactive/manual", 1, date="2024-05-02"), 60, "the launched proactive run")
    assert runs_for(svc, "proactive/manual", date="2024-05-02")[0]["state_type"] == "COMPLETED"
    resp = loopback.post(f"{svc.url}/flows/proactive", json={"date": "2024-05-02", "bogus": 1}, timeout=60)
    assert resp.status_code == 422


# ---- more services on the same Prefect server: token, SIGTERM, kill -9, restart ----------------------------

def mcp_tools(url: str, token: str) -> list[str] | None:
    """Tool names of the service's /mcp through the SDK's client with this bearer token, None when refused."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def names():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            return [t.name for t in (await client.list_tools()).tools]

    try:
        return anyio.run(names)
    except Exception as exc:  # the client reports the 401 as an error group
        assert "401" in repr(exc) or "Unauthorized" in repr(exc) or "error response" in repr(exc), exc
        return None


def test_token_is_enforced_everywhere_no_llm_is_reported_and_sigterm_stops_cleanly(dreamflow_service, tmp_path):
    """One extra service (a token, no LLM) for two checks that each need a service of their own but not two."""
    svc = RunningService.start(tmp_path, prefect_api=dreamflow_service.prefect_api, runner=False, token="s3cret")
    env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_API_TOKEN" and not k.startswith("DREAMFLOW_LLM_")}
    with_token = {**env, "DREAMFLOW_API_TOKEN": "s3cret"}
    try:
        for method, route in (("GET", "/health"), ("GET", "/docs"), ("POST", "/ops/index_stats"), ("GET", "/status"),
                              ("POST", "/mcp"), ("GET", "/mcp")):
            assert loopback.request(method, f"{svc.url}{route}", json={}, timeout=60).status_code == 401, route
        ok = loopback.post(f"{svc.url}/ops/index_stats", json={}, headers={"Authorization": "Bearer s3cret"}, timeout=60)
        assert ok.status_code == 200
        for header in ("bearer s3cret", "BEARER s3cret"):  # the auth scheme is case-insensitive (RFC 7235)
            assert loopback.post(f"{svc.url}/mcp", headers={"Authorization": header}, timeout=60).status_code != 401
        for header in ("Bearer", "Bearer s3cretx", "Basic s3cret", "s3cret", "Bearer s3cret x", "Bearers3cret"):
            assert loopback.post(f"{svc.url}/ops/index_stats", json={}, headers={"Authorization": header},
                                 timeout=60).status_code == 401
        assert mcp_tools(svc.url, "wrong") is None and "search" in mcp_tools(svc.url, "s3cret")
        denied = cli("list", env=env, workspace=svc.workspace)
        assert denied.returncode == 8 and "bearer token" in denied.stderr
        allowed = cli("list", "--json", env=with_token, workspace=svc.workspace)
        assert allowed.returncode == 0, allowed.stderr

        # start and status say when no LLM is configured
        for text in (svc.log(), cli("status", env=with_token, workspace=svc.workspace).stdout):
            warning = next(line for line in text.splitlines() if "no LLM configured" in line)
            assert "auto-dream, auto-memory, auto-resource" in warning, warning
            assert "DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL" in warning, warning
        assert f"Logs        {svc.home / 'logs'}" in svc.log()
    finally:
        code = svc.stop()
    assert code == 0
    assert not (svc.workspace / "metadata/service.json").exists()
    assert connect(svc.workspace) is None
    stopped = cli("status", env=env, workspace=svc.workspace).stdout
    assert "not running" in stopped and "no LLM configured" in stopped and "in this shell" in stopped


@pytest.fixture(scope="module")
def spare(dreamflow_service, llm_server, tmp_path_factory):
    """A second service for its own workspace on the shared Prefect server, without a runner: its runs are
    executed by the shared service's runner (the workspace travels as a run parameter)."""
    svc = RunningService.start(tmp_path_factory.mktemp("spare"), llm=llm_server, turns=SERVICE_TURNS,
                               prefect_api=dreamflow_service.prefect_api, runner=False)
    yield svc
    assert svc.stop() == 0


@pytest.mark.slow
def test_kill_9_in_the_middle_of_indexing_then_restart_gives_a_consistent_index(spare):
    svc = spare
    day = svc.workspace / "daily/2024-06-01"
    day.mkdir(parents=True)
    for i in range(200):
        (day / f"note-{i}.md").write_text(f"# Note {i}\n\nkeyword{i}z appears in note {i}.\n")
    time.sleep(0.2)  # the watcher is busy indexing the burst (200 single-file transactions)
    svc.kill()
    assert connect(svc.workspace) is None, "a dead service's stale service.json must be ignored"
    svc.launch()
    caught_up = re.findall(r"Index +up to date \(added (\d+)", svc.log())[-1]
    assert int(caught_up) > 0, "the kill came after indexing finished: nothing was left to repair"
    memory = svc.memory
    files = sum(1 for p in svc.workspace.rglob("*") if p.is_file() and "metadata" not in p.parts
                and not p.name.startswith("."))  # dot files (the workspace's .gitignore files) are never memory
    assert memory.index_stats()["files"] == files
    assert memory.search("keyword199z")[0]["path"] == "daily/2024-06-01/note-199.md"
    assert memory.search("keyword0z")[0]["path"] == "daily/2024-06-01/note-0.md"


@pytest.mark.slow
def test_work_that_arrives_while_the_service_is_down_runs_after_restart(spare, dreamflow_service, llm_server):
    svc, n = spare, SERVICE_TURNS
    llm_server.reset()
    answer_each_item(llm_server, "While away")
    turn = [{"role": "user", "content": "offline question about the trip"}]
    assert svc.memory.turn("restart-chat", turn)["pending"] == 1
    assert svc.stop() == 0
    for _ in range(n - 1):  # counted in-process: the summary waits for the service
        done = cli("turn", "--session-id", "restart-chat", "--messages", json.dumps(turn), "--json",
                   workspace=svc.workspace, env=svc.env)
        assert done.returncode == 0, done.stderr
    assert "dreamflow start" in json.loads(done.stdout)["waiting"]
    dropped = svc.workspace / "resource/2024-05-04/offline.md"
    dropped.parent.mkdir(parents=True, exist_ok=True)
    dropped.write_text("# Offline notes\n\nWritten while the service was stopped.\n")
    svc.launch()
    workspace = str(svc.workspace.resolve())
    shared = dreamflow_service  # its runner executes the spare's runs
    runs = wait_for(lambda: finished(shared, "auto-memory/turns", 1, session_id="restart-chat", workspace=workspace),
                    90, "the due auto_memory run")
    assert runs[0]["state_type"] == "COMPLETED", runs
    runs = wait_for(lambda: finished(shared, "auto-resource/on-change", 1, path="resource/2024-05-04/offline.md",
                                     workspace=workspace), 90, "the auto_resource run of the resource dropped while down")
    assert runs[0]["state_type"] == "COMPLETED", runs
    counted = svc.memory.status()["turns"]["sessions"]["restart-chat"]
    assert counted["turns"] == n and counted["pending"] == 0 and counted["runs"] == 1
    assert (svc.workspace / "daily/2024-05-04/while-away.md").is_file()
    assert not (dreamflow_service.workspace / "daily/2024-05-04/while-away.md").exists()


# ---- supervision details ---------------------------------------------------------------------------------

def test_children_die_with_the_service_even_on_kill_9(tmp_path):
    script = (
        "import sys, time; from pathlib import Path; from dreamflow.service.children import Child\n"
        f"c = Child('sleeper', [sys.executable, '-c', 'import time; time.sleep(60)'], None, Path({str(tmp_path / 'c.log')!r}))\n"
        "c.start(); print(c.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    time.sleep(0.3)  # the child has exec'd past its die-with-parent set-up
    parent.kill()
    parent.wait(5)

    def gone():
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{child_pid}/stat") as fh:  # a zombie waiting for init counts as gone
            return fh.read().split()[2] == "Z"

    wait_for(gone, 5, "the child to die with its parent")


def test_a_child_that_keeps_crashing_stops_the_service_with_a_clear_message(tmp_path):
    service = Service(Options(tmp_path / "ws"), say=lambda text: None)
    flaky = Child("flaky", [sys.executable, "-c", "print('boom: no database'); raise SystemExit(3)"], None,
                  tmp_path / "flaky.log")
    flaky.start()
    service.children.append(flaky)
    with pytest.raises(ServiceError) as exc:
        service.supervise()
    message = str(exc.value)
    assert "flaky exited with code 3" in message and "giving up" in message and "boom: no database" in message
    assert exc.value.exit_code == 8


def test_a_second_service_for_the_same_workspace_is_refused(dreamflow_service):
    svc = dreamflow_service
    second = subprocess.run([DREAMFLOW, "--workspace", str(svc.workspace), "start", "--port", "1"],
                            capture_output=True, text=True, timeout=60, env=svc.env)
    assert second.returncode == 8 and "already runs" in second.stdout + second.stderr


# ---- prefect.yaml: the same deployments for Prefect workers -------------------------------------------------

@pytest.mark.slow
def test_prefect_yaml_deploys_against_a_process_pool(dreamflow_service):
    svc = dreamflow_service
    automations = {a["id"] for a in svc.prefect("POST", "/automations/filter", {})}
    try:
        deployed_to_a_pool(svc)
    finally:  # the shared service's deployments as it registered them: out of the pool (its runner leaves a pool's
        # runs to workers), without the deploy's automations (each would launch a second run per resource event)
        for deployment in svc.prefect("POST", "/deployments/filter", {}):
            svc.prefect("PATCH", f"/deployments/{deployment['id']}", {"work_pool_name": None})
        for automation in svc.prefect("POST", "/automations/filter", {}):
            if automation["id"] not in automations:
                svc.prefect("DELETE", f"/automations/{automation['id']}")


def deployed_to_a_pool(svc) -> None:
    """prefect.yaml's deployments, deployed over the service's: each in the process pool, its workspace in the job
    environment; a Prefect worker on the pool runs one."""
    from deployments.serve import DEPLOYMENTS

    env = {**svc.env, "PREFECT_API_URL": svc.prefect_api, "DREAMFLOW_WORKSPACE": str(svc.workspace),
           "DREAMFLOW_TIMEZONE": "Europe/Berlin", "PWD": str(Path.cwd())}
    root = Path(__file__).resolve().parents[1]
    env["PWD"] = str(root)
    prefect = [sys.executable, "-m", "prefect"]
    pool = subprocess.run([*prefect, "work-pool", "create", "dreamflow", "--type", "process"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert pool.returncode == 0, pool.stdout + pool.stderr
    deploy = subprocess.run([*prefect, "--no-prompt", "deploy", "--all"], cwd=root, env=env, capture_output=True,
                            text=True, timeout=180)
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr

    for name, d in ((name, d) for d in DEPLOYMENTS.values() for name in d.full_names):
        deployed = svc.deployment(name)
        assert deployed["work_pool_name"] == "dreamflow" and deployed["entrypoint"] == d.entrypoint, name
        assert deployed["job_variables"]["env"]["DREAMFLOW_WORKSPACE"] == str(svc.workspace)
    dream = svc.deployment("auto-dream/nightly")["schedules"][0]["schedule"]
    assert dream == {**dream, "cron": "0 3 * * *", "timezone": "Europe/Berlin"}
    automations = svc.prefect("POST", "/automations/filter", {})
    resource = [a for a in automations if a["trigger"].get("expect") == ["dreamflow.resource.changed"]]
    assert resource and resource[-1]["trigger"]["threshold"] == 1

    # a Prefect worker on the pool runs a deployed flow (pull step, entrypoint, workspace from the job env); the
    # built-in runner serves the same deployments but leaves a run of a deployment in a work pool to its workers
    run = svc.prefect("POST", f"/deployments/{svc.deployment('optimize/nightly')['id']}/create_flow_run", {})
    worker = subprocess.run([*prefect, "worker", "start", "--pool", "dreamflow", "--run-once"], cwd=root,
                            env={**env, "PREFECT_WORKER_QUERY_SECONDS": "1"}, capture_output=True, text=True,
                            timeout=180)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    # --run-once returns when the runs it took have finished; a run the built-in runner took would have no process
    ran = svc.prefect("GET", f"/flow_runs/{run['id']}")
    assert ran["state"]["type"] == "COMPLETED" and ran["infrastructure_pid"], worker.stdout


def test_a_turn_through_the_service_is_recorded_once(dreamflow_service):
    """With the service running, another process's memory is the service (engine/access/client.py) and a turn is
    recorded once there: its records in the dialog once, the counter one turn on, however often it is sent."""
    from engine.access.client import RemoteMemory, open_memory

    svc, session = dreamflow_service, "seam-once"
    memory = open_memory(svc.workspace)
    assert isinstance(memory, RemoteMemory), "the service owns the index: this process talks to it"
    turn = [{"role": "user", "content": "seamonce question", "id": "u1"},
            {"role": "assistant", "content": "seamonce answer", "id": "a1"}]
    first = memory.turn(session, turn, turn_id="u1")
    again = memory.turn(session, turn, turn_id="u1")
    assert (first["appended"], first["turns"]) == (2, 1) and (again["appended"], again["turns"]) == (0, 1)
    lines = (svc.workspace / f"session/dialog/{session}.jsonl").read_text().splitlines()
    assert [json.loads(line)["content"] for line in lines] == ["seamonce question", "seamonce answer"]
    assert svc.memory.status()["turns"]["sessions"][session]["turns"] == 1
