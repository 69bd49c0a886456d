"""The registry and the tokens changing under a running `dreamflow start` (no LLM configured), seen from outside:
the first `token create` keeps the local CLI working, `workspace add --default` reaches the service (its
default and its nightly schedules), a workspace just added has nothing "changed while the service was down" and
no job that needs the missing LLM is started, `workspace remove` cancels the workspace's runs, a served folder
deleted with `rm -rf` is noticed and never re-created, and an emptied registry keeps the last good one."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest
from service_harness import DREAMFLOW, RunningService, loopback, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


def cli(svc, *args, check=True):
    done = subprocess.run([DREAMFLOW, *args], env=svc.env, capture_output=True, text=True, timeout=120)
    assert not check or done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def admin_headers(svc) -> dict:
    admin = svc.home / "admin-token"
    return {"Authorization": f"Bearer {admin.read_text().strip()}"} if admin.is_file() else {}


def get(svc, path):
    resp = loopback.get(f"{svc.url}{path}", headers=admin_headers(svc), timeout=30)
    assert resp.status_code == 200, (path, resp.status_code, resp.text)
    return resp.json()


class Unnamed(RunningService):
    """`dreamflow start` named no workspace (run in `root`: ./.dreamflow), so it follows the registry's default."""

    def launch(self, timeout: float = 300) -> None:
        self.workspace = self.root / ".dreamflow"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([DREAMFLOW, "start", "--port", str(self.port), *self.args], env=self.env,
                                         cwd=self.root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self._ready, timeout, f"the service to be ready (log: {self.log_path})", interval=0.2)
        self.prefect_api = json.loads((self.workspace / "metadata/service.json").read_text())["prefect_api"]


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    root = tmp_path_factory.mktemp("live-registry")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMFLOW_LLM_")}
    env.update(DREAMFLOW_HOME=str(root / "home"), DREAMFLOW_EMBEDDER="none")
    env.pop("DREAMFLOW_WORKSPACE", None)
    env.pop("DREAMFLOW_API_TOKEN", None)
    for name in ("alpha", "gamma"):
        subprocess.run([DREAMFLOW, "workspace", "add", name, str(root / name)], env=env, check=True,
                       capture_output=True)
        subprocess.run([DREAMFLOW, "-w", name, "write", f"digest/wiki/{name}.md", "--content",
                        f"# {name}\n\n{name} keeps its own note.\n"], env=env, check=True, capture_output=True)
    service = Unnamed.start(root, env={"DREAMFLOW_LLM_BASE_URL": "", "DREAMFLOW_LLM_MODEL": ""})
    yield service
    service.stop()


def test_workspace_add_default_reaches_the_running_service_with_its_schedules_and_no_catch_up(svc):
    beta = svc.root / "beta"
    (beta / "resource").mkdir(parents=True)
    (beta / "resource/old-notes.md").write_text("# Notes\n\nwritten before beta was registered\n")
    cli(svc, "workspace", "add", "beta", str(beta), "--default")
    status = wait_for(lambda: (s := get(svc, "/status"))["service"]["name"] == "beta" and s, 30,
                      "the running service to take beta as its default")
    assert status["service"]["workspace"] == str(beta)
    # nightly schedules for a workspace added while the service runs, without a restart
    rows = wait_for(lambda: {r["name"]: r for r in get(svc, "/status")["workspaces"]
                             if r["name"] == "beta" and r["next_dream"]}, 240, "beta's next dream to be scheduled")
    assert rows["beta"]["schedule"]["cron"]
    text = cli(svc, "status").stdout
    assert re.search(r"\n  beta \(default\) .*\n +.*; next dream \d", text), text
    # a file written into beta now: auto-resource needs the LLM, so it is not started (said once), nothing red
    (beta / "resource/new-notes.md").write_text("# New\n\nwritten while served\n")
    wait_for(lambda: "auto-resource not started: no LLM configured" in svc.log(), 30, "the service to say why")
    time.sleep(3)
    log = svc.log()
    assert "changed in beta while the service was down" not in log
    assert log.count("auto-resource not started") == 1
    assert any("are not started until DREAMFLOW_LLM_BASE_URL" in w for w in get(svc, "/status")["warnings"])
    runs = svc.prefect("POST", "/flow_runs/filter", {"limit": 50})
    started = [r for r in runs if r["state"]["type"] != "SCHEDULED"]  # beta's nightly ones wait for tonight
    assert not started, started


def scheduled(svc, flow="auto-dream") -> dict[str, dict]:
    """`flow`'s scheduled deployments by name (`nightly`, `nightly-NAME`)."""
    return {d["name"]: d for d in svc.prefect("POST", "/deployments/filter", {"flows": {"name": {"any_": [flow]}}})
            if d["schedules"]}


def start_run(svc, deployment: dict) -> str:
    return svc.prefect("POST", f"/deployments/{deployment['id']}/create_flow_run", {})["id"]


def ended(svc, run_id: str):
    run = svc.prefect("GET", f"/flow_runs/{run_id}")
    return run if run["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") else None


def test_after_the_default_changes_each_nightly_dream_runs_on_its_own_served_workspace(svc):
    """The service named no workspace, so it served the unregistered ./.dreamflow as `default`; after `workspace
    add beta --default` (above) `auto-dream/nightly` is the new default's, the folder served since start keeps
    its own nightly under the name it is served by (named by its folder, as runs launched for it are), and a run
    of every nightly deployment gets past its workspace (no "no workspace 'default'"): Skipped, no LLM here."""
    folder = str(svc.workspace.resolve())
    expected = {"nightly": "beta", "nightly-default": folder, "nightly-alpha": "alpha", "nightly-gamma": "gamma"}
    wait_for(lambda: len(scheduled(svc)) == 4, 120, "a nightly dream deployment for each of the 4 served workspaces")
    runs = {name: start_run(svc, d) for name, d in scheduled(svc).items()}
    finals = {name: wait_for(lambda i=i: ended(svc, i), 240, f"the run of auto-dream/{name} to end")
              for name, i in runs.items()}
    states = {name: (r["state"]["type"], r["state"]["name"], r["state"]["message"]) for name, r in finals.items()}
    assert all(s[:2] == ("CANCELLED", "Skipped") for s in states.values()), states
    tags = {name: sorted(t for t in r["tags"] if t.startswith("workspace:")) for name, r in finals.items()}
    assert tags == {name: [f"workspace:{w if w != folder else 'default'}"] for name, w in expected.items()}, tags
    for flow in ("auto-dream", "optimize"):
        found = scheduled(svc, flow)
        assert {name: d["parameters"]["workspace"] for name, d in found.items()} == expected, flow
        assert found["nightly"]["tags"] == ["dreamflow", "workspace:beta"]


def test_without_an_llm_a_nightly_dream_ends_skipped_not_failed_and_the_overview_says_why(svc):
    """A run of the nightly dream (what the schedule starts at 03:00) with no LLM: ended at once as Skipped (a
    Cancelled state, grey, no retry offered), the reason in its log; the dashboard's overview says why once."""
    nightly = next(d for d in svc.prefect("POST", "/deployments/filter", {"flows": {"name": {"any_": ["auto-dream"]}}})
                   if d["schedules"] and (d["parameters"] or {}).get("workspace") == "gamma")
    run = svc.prefect("POST", f"/deployments/{nightly['id']}/create_flow_run", {})
    final = wait_for(lambda: (r := svc.prefect("GET", f"/flow_runs/{run['id']}"))["state"]["type"]
                     in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") and r, 180, "the nightly run to end")
    assert (final["state"]["type"], final["state"]["name"]) == ("CANCELLED", "Skipped"), final["state"]["message"]
    assert "no LLM configured" in final["state"]["message"]
    wait_for(lambda: any("Skipped: no LLM configured: set DREAMFLOW_LLM_BASE_URL" in log["message"] for log in
                         svc.prefect("POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run["id"]]}}})),
             30, "the reason in the run's log")
    page = loopback.get(f"{svc.url}/ui/", headers=admin_headers(svc), timeout=30)
    assert page.status_code == 200
    assert page.text.count("No LLM configured: no conversation or resource cards, dreams or graph edits are made") == 1
    assert "DREAMFLOW_LLM_BASE_URL and DREAMFLOW_LLM_MODEL" in page.text


def test_the_first_token_create_keeps_the_local_cli_working_without_a_restart(svc):
    made = cli(svc, "token", "create", "--name", "laptop", "--workspace", "gamma", "--json")
    answer = json.loads(made.stdout)
    assert any("every HTTP request now needs one" in line for line in answer["changed"]), answer
    assert any(str(svc.home / "admin-token") in line for line in answer["changed"]), answer
    # this machine's CLI sends the admin token the command made; the running service takes it at once
    found = cli(svc, "-w", "gamma", "search", "note", "--json")
    assert [h["path"] for h in json.loads(found.stdout)] == ["digest/wiki/gamma.md"]
    assert loopback.get(f"{svc.url}/workspaces", timeout=10).status_code == 401
    laptop = {"Authorization": f"Bearer {answer['token']}"}
    assert [r["name"] for r in loopback.get(f"{svc.url}/workspaces", headers=laptop, timeout=10).json()] == ["gamma"]


def test_workspace_remove_cancels_the_workspace_runs_and_says_so_in_their_log(svc):
    flow = svc.prefect("POST", "/flows/", {"name": "auto-dream"})
    run = svc.prefect("POST", "/flow_runs/", {"flow_id": flow["id"], "name": "a-dream-of-alpha",
                                              "tags": ["dreamflow", "workspace:alpha"],
                                              "parameters": {"workspace": "alpha"},
                                              "state": {"type": "RUNNING", "name": "Running"}})
    cli(svc, "workspace", "remove", "alpha")
    state = wait_for(lambda: (s := svc.prefect("GET", f"/flow_runs/{run['id']}")["state"]["type"])
                     in ("CANCELLING", "CANCELLED") and s, 60, "alpha's run to be cancelled")
    logs = svc.prefect("POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run["id"]]}}})
    assert any("Cancelled: workspace alpha was removed from the registry" in log["message"] for log in logs), logs
    assert state in ("CANCELLING", "CANCELLED")
    wait_for(lambda: "Workspace   alpha: cancelled 1 run(s)" in svc.log(), 30, "the service to log the cancel")
    # once the runner follows, no deployment names the removed workspace (its nightly ones are deleted)
    wait_for(lambda: not [d["name"] for d in svc.prefect("POST", "/deployments/filter", {"limit": 200})
                          if (d["parameters"] or {}).get("workspace") == "alpha"], 240,
             "alpha's nightly deployments to be deleted")
    assert set(scheduled(svc)) == {"nightly", "nightly-default", "nightly-gamma"}


def test_a_served_folder_deleted_is_noticed_and_never_re_created(svc):
    gamma = svc.root / "gamma"
    shutil.rmtree(gamma)
    wait_for(lambda: "workspace gamma: its folder" in svc.log(), 30, "the service to notice the deleted folder")
    assert any("workspace gamma: its folder was deleted" in w for w in get(svc, "/status")["warnings"])
    row = next(r for r in get(svc, "/status")["workspaces"] if r["name"] == "gamma")
    assert "deleted" in row["index"]["error"]
    resp = loopback.post(f"{svc.url}/workspaces/gamma/ops/write", headers=admin_headers(svc), timeout=10,
                         json={"path": "digest/wiki/new.md", "content": "x"})
    assert resp.status_code == 410 and resp.json()["error"]["type"] == "WorkspaceGone", resp.text
    written = cli(svc, "-w", "gamma", "write", "digest/wiki/new.md", "--content", "x", check=False)
    assert written.returncode == 3 and "does not exist" in written.stderr, written.stderr
    time.sleep(2)
    assert not gamma.exists(), "neither the service nor the CLI re-creates a deleted workspace"


def test_an_emptied_or_deleted_registry_keeps_the_service_serving_the_last_good_one(svc):
    path = svc.home / "workspaces.yaml"
    good = path.read_bytes()
    try:
        path.write_bytes(b"")
        wait_for(lambda: f"the workspace registry {path} is empty" in svc.log(), 30, "the warning about the registry")
        path.unlink()
        wait_for(lambda: f"the workspace registry {path} is gone" in svc.log(), 30, "the warning about the registry")
        assert "beta" in [r["name"] for r in get(svc, "/workspaces")]
        assert get(svc, "/status")["service"]["name"] == "beta"
        assert "beta: removed from the registry" not in svc.log()
    finally:
        path.write_bytes(good)
