"""Several services, one Prefect server: two `dreamflow start` (each owning its registered workspace, one shared
registry, `--prefect-api URL --no-runner --serve NAME`, each with its own admin token) and one process worker
(`prefect worker start --pool dreamflow`, deployments from prefect.yaml) running the dreams of both, which reach
each workspace's owning service over HTTP with one token granting both workspaces.

Real processes on loopback: a Prefect server, two services, a worker and its flow-run subprocesses, the scripted
LLM server. Plus the fast checks of what such a set-up relies on: a deployment run that names no workspace is
refused (never `./.dreamflow` of the worker's folder), and a service of another machine sharing a workspace folder
is found through its service.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from service_harness import PrefectServer, RunningService, stop_process, wait_for

pytestmark = pytest.mark.timeout(900)
BOOT = 400  # seconds a Prefect server or service may take to start on 2 cores shared with other work (load 13)

ROOT = Path(__file__).resolve().parents[1]
DAY = "2024-07-01"
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
# workspace -> (its card's stem, whom its fact is about (the node's name), the fact)
PLAN = {
    "alpha": ("oslo", "Ana", "Ana moved to Oslo in June."),
    "beta": ("kyoto", "Ben", "Ben spent April in Kyoto."),
}


def node_path(name: str) -> str:
    return f"digest/personal/{PLAN[name][1].lower()}.md"


def card(stem: str, about: str, fact: str) -> str:
    """A card as auto-memory writes it (its fact lands in a new node: the dream asks the LLM nothing)."""
    return f"# {stem.title()}\n\n## Facts\n\n- {fact} (about:: {about}) (source:: [[session/dialog/s.jsonl#L1]]) ^f1\n"


def lock_holders(path: Path) -> set[int]:
    """Pids holding a lock on `path` (Linux /proc/locks: `1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> ...`)."""
    inode = os.stat(path).st_ino
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" in fields:  # a waiter, not a holder
            continue
        if len(fields) > 5 and fields[5].rsplit(":", 1)[-1] == str(inode):
            holders.add(int(fields[4]))
    return holders


def worker_deployments(folder: Path, workdir: Path) -> Path:
    """prefect.yaml with only auto-dream's deployments (deploying all 13 takes minutes on a busy machine), their
    flow runs working in `workdir`."""
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    config["deployments"] = [d for d in config["deployments"] if d["entrypoint"] == "flows.auto_dream.auto_dream"]
    config["pull"][0]["prefect.deployments.steps.set_working_directory"]["directory"] = str(workdir)
    path = folder / "prefect.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def prefect_cli(*args, env: dict, timeout: float = 180) -> str:
    done = subprocess.run([sys.executable, "-m", "prefect", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads who holds the index lock from /proc/locks")
def test_two_services_share_a_prefect_server_and_a_worker_runs_dreams_for_both(tmp_path, llm_server, monkeypatch):
    started = time.monotonic()
    home = tmp_path / "home"  # the one registry (and token file) both services and the worker read
    prefect = PrefectServer(tmp_path)
    monkeypatch.setenv("DREAMFLOW_HOME", str(home))
    monkeypatch.setenv("DREAMFLOW_API_TOKEN", "admin-of-alpha")  # token create: no admin-token file made
    from engine.config import grants
    from engine.config.registry import Registry

    registry = Registry.load()
    for name in PLAN:
        (tmp_path / name).mkdir()
        registry.add(name, tmp_path / name / "ws")
    registry.save()
    worker_token = grants.create("worker", list(PLAN))

    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DREAMFLOW_"))}
    # a user's shell at the project root, as docs/service.md says, without DREAMFLOW_WORKSPACE (two services)
    shell = {**base, "PREFECT_API_URL": prefect.api, "PREFECT_HOME": str(tmp_path / "cli-prefect"),
             "DREAMFLOW_TIMEZONE": "UTC", "DO_NOT_TRACK": "1"}
    workdir = tmp_path / "worker-cwd"
    workdir.mkdir()

    worker_log = tmp_path / "worker.log"
    worker_env = {**base, "PREFECT_API_URL": prefect.api, "PREFECT_HOME": str(tmp_path / "worker-prefect"),
                  "PREFECT_WORKER_QUERY_SECONDS": "1", "DO_NOT_TRACK": "1",
                  "DREAMFLOW_HOME": str(home), "DREAMFLOW_API_TOKEN": worker_token,
                  "DREAMFLOW_LLM_BASE_URL": llm_server.base_url, "DREAMFLOW_LLM_MODEL": llm_server.model,
                  "DREAMFLOW_LLM_API_KEY": "test-key", "DREAMFLOW_LLM_TIMEOUT": "20", "DREAMFLOW_LLM_MAX_RETRIES": "0",
                  "DREAMFLOW_LOCK_TIMEOUT": "1"}  # a flow run opening an index itself would fail at once

    def deploy_and_start_worker() -> subprocess.Popen:
        prefect.wait(BOOT)
        prefect_cli("work-pool", "create", "dreamflow", "--type", "process", env=shell)
        prefect_cli("--no-prompt", "deploy", "--all", "--prefect-file", str(worker_deployments(tmp_path, workdir)),
                    env=shell)
        with open(worker_log, "ab") as log:
            return subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", "dreamflow"],
                                    cwd=ROOT, env=worker_env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT)

    def service(name: str) -> RunningService:  # waits for the Prefect server itself (it boots meanwhile)
        return RunningService.start(tmp_path / name, prefect_api=prefect.api, runner=False, token=f"admin-of-{name}",
                                    env={"DREAMFLOW_HOME": str(home), "DREAMFLOW_PREFECT_START_TIMEOUT": str(BOOT)},
                                    serve=(name,), timeout=BOOT)

    services: dict[str, RunningService] = {}
    worker = None
    try:
        with ThreadPoolExecutor(3) as pool:
            deployed = pool.submit(deploy_and_start_worker)
            futures = {name: pool.submit(service, name) for name in PLAN}
        # all have finished: keep what started (so `finally` stops it), then raise what failed
        services.update({name: f.result() for name, f in futures.items() if f.exception() is None})
        worker = deployed.result() if deployed.exception() is None else None
        for future in (deployed, *futures.values()):
            future.result()
        print(f"\nservices, deployments and worker up at {time.monotonic() - started:.1f} s")

        runs = {}
        for name, svc in services.items():
            svc.memory.write(f"daily/{DAY}/{PLAN[name][0]}.md", content=card(*PLAN[name]))
            runs[name] = svc.memory.launch("auto_dream", {"date": DAY, "scan_days": 1})["id"]
        # the nightly deployment as prefect.yaml declares it, deployed without DREAMFLOW_WORKSPACE: no workspace
        alpha = services["alpha"]
        nightly = alpha.prefect("POST", f"/deployments/{alpha.deployment('auto-dream/nightly')['id']}/create_flow_run",
                                {})["id"]

        def finished():
            states = {name: services[name].memory.run_status(run) for name, run in runs.items()}
            states["nightly"] = alpha.memory.run_status(nightly)
            return states if all(s["state_type"] in FINAL for s in states.values()) else None

        try:
            states = wait_for(finished, BOOT, "both dreams to finish on the worker", interval=0.5)
        except AssertionError:
            raise AssertionError(f"worker log:\n{worker_log.read_text(errors='replace')[-4000:]}") from None

        assert states["nightly"]["state_type"] == "FAILED", states["nightly"]
        assert "this run names no workspace" in states["nightly"]["message"], states["nightly"]
        assert not list(workdir.iterdir()), "a run without a workspace made one in the worker's folder"
        for name, svc in services.items():
            other = next(n for n in PLAN if n != name)
            status = states[name]
            assert status["state_type"] == "COMPLETED", (status, worker_log.read_text(errors="replace")[-4000:])
            assert status["summary"]["actions"][0]["node"] == node_path(name), status["summary"]
            run = svc.prefect("GET", f"/flow_runs/{runs[name]}")
            assert run["work_pool_name"] == "dreamflow" and run["parameters"]["workspace"] == name
            assert f"workspace:{name}" in run["tags"] and f"workspace:{other}" not in run["tags"]

            # each node in its own workspace only: on disk and in each service's index
            digest = {p.relative_to(svc.workspace).as_posix() for p in (svc.workspace / "digest").rglob("*.md")}
            assert digest == {node_path(name)}, digest
            assert [h["path"] for h in svc.memory.search(PLAN[name][2], path_prefix="digest/")] == [node_path(name)]
            assert not svc.memory.search(PLAN[other][1]), f"{other}'s node reached {name}"

            # the worker went through the service: its index stayed locked by the service the whole time
            assert lock_holders(svc.workspace / "metadata/index.lock") == {svc.proc.pid}
        print(f"\ntwo services + worker, two dreams: {time.monotonic() - started:.1f} s")
    finally:
        if worker is not None:
            stop_process(worker, timeout=3)  # its runs are over; it may not exit on one SIGTERM
        for svc in services.values():
            svc.stop()
        prefect.stop()


def test_a_deployment_run_naming_no_workspace_is_refused_not_given_the_workers_folder(tmp_path, monkeypatch):
    from engine.access.job_workspace import workspace_root
    from engine.config.registry import Registry
    from storage.errors import InvalidInput

    monkeypatch.setenv("DREAMFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "5f2ad41c-0000-4000-8000-000000000001")  # a worker's run
    monkeypatch.setenv("DREAMFLOW_WORKSPACE", "")  # prefect.yaml's `{{ $DREAMFLOW_WORKSPACE }}`, deployed unset
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match="this run names no workspace"):
        workspace_root(None)
    assert not (tmp_path / ".dreamflow").exists()

    registry = Registry.load()
    registry.add("alpha", tmp_path / "alpha")
    registry.save()
    assert workspace_root("alpha") == str(tmp_path / "alpha")  # a name: what services launch
    monkeypatch.setenv("DREAMFLOW_WORKSPACE", "alpha")
    assert workspace_root(None) == str(tmp_path / "alpha")  # deployed with DREAMFLOW_WORKSPACE=alpha
    monkeypatch.setenv("DREAMFLOW_WORKSPACE", "")
    registry.default = "alpha"
    registry.save()
    assert workspace_root(None) == str(tmp_path / "alpha")  # the registry's default


@pytest.mark.e2e
def test_a_service_of_another_machine_sharing_the_folder_is_found_by_its_service_file(tmp_path):
    import json
    import socket

    from dreamflow.service.supervisor import advertised_host
    from engine.access.client import service_info

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process of this machine has
    (tmp_path / "metadata").mkdir()
    info = {"url": "http://memory-host:8420", "pid": gone.pid, "name": "alpha"}
    for host, found in (("memory-host", True), (socket.gethostname(), False), (None, False)):
        written = {**info, "host": host} if host else info  # no host: a file of an older service
        (tmp_path / "metadata/service.json").write_text(json.dumps(written))
        assert (service_info(tmp_path) is not None) is found, host
    # a service on all interfaces gives clients this machine's name, not 0.0.0.0
    assert advertised_host("0.0.0.0") == socket.gethostname() and advertised_host("127.0.0.1") == "127.0.0.1"
