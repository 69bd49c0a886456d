"""The workspaces one service serves (dreamflow/service/hosting.py), in this process: each its own index and watcher,
at most `max_open_indexes` indexes open between calls, the registry re-read while running, one owner each."""

import threading
import time

import pytest

from dreamflow.service.hosting import Hosts, WorkspaceOwned
from engine.config.registry import Registry
from engine.config.settings import Settings
from storage.files.workspace import Workspace
from storage.index.db import IndexDB


@pytest.fixture
def registry(tmp_path, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "none")
    reg = Registry.load()
    for i in range(4):
        root = tmp_path / f"w{i}"
        reg.add(f"w{i}", root)
        page = root / "digest/wiki/page.md"
        page.parent.mkdir(parents=True)
        page.write_text(f"# Page {i}\n\nmarker{i} is only in w{i}.\n")
    reg.save()
    return reg


@pytest.fixture
def serve(registry):
    """serve(settings) -> (Hosts serving the registry with w0 the default, the lines it said); closed after the test."""
    served = []

    def start(settings: Settings | None = None) -> tuple[Hosts, list[str]]:
        said: list[str] = []
        hosts = Hosts("w0", settings or Settings(), say=said.append)
        served.append(hosts)
        hosts.open(lambda name, paths: None)
        return hosts, said

    yield start
    for hosts in served:
        hosts.close()


def open_count(hosts: Hosts) -> int:
    return sum(h.memory.db._state.con is not None for h in hosts.hosted.values())


def test_every_registered_workspace_is_served_with_at_most_the_cap_of_open_indexes(registry, tmp_path):
    hosts = Hosts("w0", Settings(max_open_indexes=2), say=lambda text: None)
    hosts.open(lambda name, paths: None)
    try:
        assert hosts.names() == ["w0", "w1", "w2", "w3"] and hosts.default_name == "w0"
        for _ in range(2):
            for i in range(4):
                memory = hosts.memory(f"w{i}")
                memory.reconcile()
                assert [h["path"] for h in memory.search(f"marker{i}")] == ["digest/wiki/page.md"]
                assert not any(memory.search(f"marker{j}") for j in range(4) if j != i)
                assert open_count(hosts) <= 2
        # a change on disk reaches its own index through the shared watcher
        (tmp_path / "w3/daily/2024-01-01").mkdir(parents=True)
        (tmp_path / "w3/daily/2024-01-01/new.md").write_text("# New\n\nfreshword lands in w3.\n")
        deadline = time.monotonic() + 20
        while not hosts.memory("w3").search("freshword") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert hosts.memory("w3").search("freshword") and not hosts.memory("w2").search("freshword")
    finally:
        hosts.close()


def test_releasing_an_index_never_waits_for_its_running_session(registry, tmp_path):
    db = IndexDB(Workspace(tmp_path / "w1"), keep_open=True)
    inside, leave = threading.Event(), threading.Event()

    def long_session():
        with db.session():
            inside.set()
            leave.wait(10)

    worker = threading.Thread(target=long_session)
    worker.start()
    inside.wait(10)
    started = time.monotonic()
    db.release()
    assert time.monotonic() - started < 1, "release must not wait for a running session"
    leave.set()
    worker.join(10)
    assert db._state.con is None, "the session's end closes what was released"


def test_the_registry_is_re_read_while_serving_and_an_owned_workspace_is_left_alone(registry, tmp_path):
    first = Hosts("w0", Settings(), say=lambda text: None, only=["w1"])
    first.open(lambda name, paths: None)
    said = []
    second = Hosts("w2", Settings(), say=said.append)
    try:
        assert first.names() == ["w0", "w1"]
        second.open(lambda name, paths: None)
        assert second.names() == ["w2", "w3"], "w0 and w1 are owned by the first"
        assert any("another Dreamflow service owns" in line for line in said)
        with pytest.raises(WorkspaceOwned):
            Hosts("w1", Settings(), say=lambda text: None).open(lambda name, paths: None)

        reg = Registry.load()
        reg.add("w4", tmp_path / "w4")
        reg.remove("w3")
        time.sleep(0.01)
        reg.save()
        added = second.refresh()
        assert [h.name for h in added] == ["w4"] and second.names() == ["w2", "w4"]
        assert (tmp_path / "w3/digest/wiki/page.md").is_file(), "no longer served, never deleted"
    finally:
        second.close()
        first.close()



def test_a_broken_registry_keeps_the_last_good_one_served_and_says_why_once(serve, tmp_path):
    hosts, said = serve()
    path = tmp_path / "home/workspaces.yaml"
    good = path.read_text()
    for broken, line in (("workspaces: 5\n", 1), (good + f"  w9:\n    path: {tmp_path / 'w9'}\n    reads: [nobody]\n",
                                                    good.count("\n") + 3),
                         (good.replace("  w3:", "  w1:"), good.split("\n").index("  w3:") + 1)):
        said.clear()
        time.sleep(0.01)
        path.write_text(broken)
        assert hosts.refresh() == [] and hosts.refresh() == []
        assert hosts.names() == ["w0", "w1", "w2", "w3"] and sorted(hosts.registry.entries) == ["w0", "w1", "w2", "w3"]
        assert len(said) == 1 and f"workspace registry {path}:{line}: " in said[0], said  # once, with the line
        assert "keeps the registry it read before, serving w0, w1, w2, w3" in said[0]
        assert [h["path"] for h in hosts.memory("w3").search("marker3")] == ["digest/wiki/page.md"]
    time.sleep(0.01)
    (tmp_path / "w4").mkdir()
    path.write_text(good.replace("  w3:", "  w4:").replace("/w3", "/w4"))  # fixed: read at once
    assert [h.name for h in hosts.refresh()] == ["w4"] and hosts.names() == ["w0", "w1", "w2", "w4"]


def test_a_registry_deleted_or_emptied_while_serving_keeps_the_last_good_one(serve, tmp_path):
    hosts, said = serve()
    path = tmp_path / "home/workspaces.yaml"
    good = path.read_text()
    for cut in (b"", good.encode()[:30], b"\n  \n"):  # a write cut short, or cut inside the comment header
        said.clear()
        time.sleep(0.01)
        path.write_bytes(cut)
        assert hosts.refresh() == [] and hosts.names() == ["w0", "w1", "w2", "w3"]
        assert len(said) == 1 and f"the workspace registry {path} is empty" in said[0], said
        assert "keeps the registry it read before" in said[0]
    said.clear()
    path.unlink()  # deleted: not "no workspaces" either
    assert hosts.refresh() == [] and hosts.refresh() == [] and hosts.names() == ["w0", "w1", "w2", "w3"]
    assert len(said) == 1 and "is gone" in said[0] and "keeps the registry it read before" in said[0], said
    assert [h["path"] for h in hosts.memory("w2").search("marker2")] == ["digest/wiki/page.md"]
    path.write_text(good)
    assert hosts.refresh() == [] and hosts.names() == ["w0", "w1", "w2", "w3"]


def test_the_registry_default_is_followed_by_a_service_started_without_a_workspace(registry, tmp_path):
    said = []
    reg = Registry.load()
    reg.default = "w0"
    reg.save()
    hosts = Hosts(tmp_path / "w0", Settings(), say=said.append, follow_default=True)
    pinned = Hosts(tmp_path / "w0", Settings(), say=lambda text: None)  # `start -w w0`: w0 stays the default
    hosts.open(lambda name, paths: None)
    try:
        time.sleep(0.01)
        reg.default = "w2"  # `dreamflow workspace default w2` (or `workspace add w2 ... --default`)
        reg.save()
        hosts.refresh()
        assert hosts.default_name == "w2" and any("Default     now w2" in line for line in said), said
        assert pinned.default_name == "w0"
        time.sleep(0.01)
        reg.remove("w0")  # the workspace the service started with stays served
        reg.save()
        hosts.refresh()
        assert "w0" in hosts.names() and hosts.default_name == "w2"
    finally:
        hosts.close()


def test_a_folder_deleted_under_the_service_is_noticed_never_re_created_and_served_again_when_back(serve, tmp_path):
    import shutil

    from storage.errors import NotFound, WorkspaceGone

    hosts, said = serve()
    hosts.memory("w3").write("digest/wiki/more.md", "# More\n\nkept\n")
    shutil.rmtree(tmp_path / "w3")
    assert [h.name for h in hosts.check_folders()] == ["w3"] and hosts.check_folders() == []
    assert sum("workspace w3: its folder" in line and "deleted" in line for line in said) == 1, said
    assert hosts.gone == [("w3", tmp_path / "w3", f"its folder {tmp_path / 'w3'} was deleted or moved away")]
    with pytest.raises(WorkspaceGone, match="was deleted or moved away while the service ran"):
        hosts.memory("w3").write("digest/wiki/again.md", "x")
    time.sleep(1)  # the watcher, the vectors and the index write nothing into the deleted folder
    assert not (tmp_path / "w3").exists()
    from engine.config.grants import ADMIN

    assert any("workspace w3: its folder was deleted" in p for p in hosts.problems(ADMIN))
    # the CLI's way in refuses it too: no second index the service never sees
    from engine.config.registry import resolve

    with pytest.raises(NotFound, match="does not exist"):
        resolve("w3")
    (tmp_path / "w3/metadata").mkdir(parents=True)  # restored
    hosts.check_folders()
    assert not hosts.hosted["w3"].vanished and hosts.memory("w3").search("marker3") == []


def test_jobs_that_need_an_llm_are_not_started_without_one_and_that_is_said_once(serve, tmp_path):
    from deployments.runner import Runner
    from dreamflow.service.jobs import Jobs

    settings = Settings(llm_base_url=None, llm_model=None)
    hosts, said = serve(settings)
    (tmp_path / "w1/resource/notes.md").write_text("# Notes\n\nto be carded\n")
    runner = Runner(settings, lambda: "w1", said.append)  # this service runs the jobs (not started here)
    jobs = Jobs(hosts, settings, runner=runner, prefect_ready=threading.Event(), say=said.append)
    started = time.monotonic()
    for _ in range(2):  # Prefect is not even up: nothing waits for it, nothing is emitted
        jobs.resources_changed("w1", ["resource/notes.md"])
        jobs.catch_up_resources(hosts.hosted["w1"])
    assert time.monotonic() - started < 5
    assert not any("changed in w1 while the service was down" in line for line in said), said
    assert [line for line in said if "auto-resource not started: no LLM configured" in line] == [said[0]], said


@pytest.mark.e2e
def test_the_service_cleans_the_temp_file_a_killed_job_left_in_metadata(serve, tmp_path):
    import subprocess
    import sys

    hosts, said = serve()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a dream process killed while it wrote its usage line
    (tmp_path / f"w1/metadata/journal/writer-{pid}").touch()
    temp = tmp_path / f"w1/metadata/.usage.jsonl.{pid}-0badcafe.tmp"
    temp.write_text('{"job": "auto_dream"')
    hosts.clean_temps()
    assert not temp.exists() and any("temp file(s) a killed job left in w1" in line for line in said), said


def test_a_job_on_a_workspace_deleted_under_it_stops_instead_of_going_on_from_nothing(registry, tmp_path):
    import shutil

    from engine.access.client import local_memory
    from engine.access.job_memory import JobMemory
    from storage.errors import NotFound, WorkspaceGone

    memory = JobMemory(local_memory(tmp_path / "w1"))
    memory.write("digest/personal/user.md", "# User\n\n- lives in Lisbon ^f1\n")
    with pytest.raises(NotFound):  # a node that does not exist yet: a plain NotFound while the workspace is there
        memory.read("digest/personal/other.md")
    shutil.rmtree(tmp_path / "w1")
    # a dream unit reading its node now stops (before: None, an empty node, then KeyError from facts.retire)
    with pytest.raises(WorkspaceGone, match="deleted or moved away"):
        memory.read("digest/personal/user.md")
    with pytest.raises(WorkspaceGone):
        memory.write("digest/personal/user.md", "# User\n")
    assert not (tmp_path / "w1").exists(), "nothing of the deleted workspace is re-created"
