"""Shared fixtures. Append fixtures here; keep area-specific helpers in their own tests/ modules."""

import gc
import os
import sys

# Bytecode is cached: the suite starts some 150 Python processes (services, Prefect servers and workers, CLI calls) and
# with PYTHONDONTWRITEBYTECODE set each would compile the project's modules again (~0.25 s of CPU a process).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Fewer full garbage collections in pytest's processes (not in the processes the tests start): a worker's heap
# holds Prefect, FastAPI, torch and the packaged model, and each full collection walked all of it (~0.3 s in the
# in-process flows' worker; 9.3 of the fast tier's 189 CPU-s went to collecting). A full collection now waits for
# 100 collections of the middle generation instead of 10 (the fast tier's collecting: 9.3 -> 3.9 CPU-s).
gc.set_threshold(700, 10, 100)

# Quiet, offline defaults for every process the tests start (set before anything imports prefect).
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The xdist workers share the cores: torch's default of a thread per core had the local model's matmuls spin
# against the other workers (test_vectors and test_embeddings: ~20% more CPU, and slower, than with one thread).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from storage.files.workspace import Workspace


@pytest.fixture
def ws(tmp_path) -> Workspace:
    """A fresh workspace with the standard layout."""
    return Workspace(tmp_path / "ws")


# ---- Prefect and the scripted LLM server (memory jobs; reusable by any test) -----------------------------

import atexit  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from engine.config import prefect_env  # noqa: E402
from llm_server import LLMServer  # noqa: E402

# Dreamflow's own folder (workspace registry, tokens) is a temp folder for the test session, never the user's.
os.environ["DREAMFLOW_HOME"] = tempfile.mkdtemp(prefix="dreamflow-test-home-")
atexit.register(shutil.rmtree, os.environ["DREAMFLOW_HOME"], True)

# Prefect's home (its DB and persisted task results) goes to a temp folder for the test session, never ~/.prefect.
if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="dreamflow-test-prefect-")
    atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], True)
prefect_env.configure()
# An empty migrated Prefect database the Prefect servers the tests start copy (service_harness.seed_prefect_database):
# made at most once per session, shared by the xdist workers (they inherit this variable from the controller).
if "DREAMFLOW_TEST_PREFECT_TEMPLATE" not in os.environ:
    os.environ["DREAMFLOW_TEST_PREFECT_TEMPLATE"] = tempfile.mkdtemp(prefix="dreamflow-test-prefect-template-")
    atexit.register(shutil.rmtree, os.environ["DREAMFLOW_TEST_PREFECT_TEMPLATE"], True)


def _seeded_harness_folder(*args, **kwargs) -> str:
    """`mkdtemp` for Prefect's test harness, which makes the folder of its database (`prefect-test.db`) with it:
    the folder, holding a copy of the session's migrated empty database (service_harness.seed_prefect_database),
    so the harness's server skips the migrations (~4.5 CPU-s). Should the harness name its file otherwise, the copy
    lies unused and its server migrates its own, as before."""
    from service_harness import seed_prefect_database

    folder = tempfile.mkdtemp(*args, **kwargs)
    seed_prefect_database(Path(folder) / "prefect-test.db")
    return folder


@pytest.fixture(scope="session")
def prefect_harness(request):
    """A Prefect API for flows run in this process, no service: Prefect's own test harness (a temporary SQLite
    database and a Prefect server subprocess, once per session and xdist worker) with in-process-run settings (no
    flow heartbeat). Request it in any test that runs flows in-process; it gives the folder of that database (a
    test can check what reached Prefect's server). Its server skips registering Prefect's block types (~0.9 s
    of its ~8 s start): in-process runs keep results in an unsaved `LocalFileSystem` and use no block document.
    Nor does it evaluate automations or store events (no test here fires a trigger or reads an event): measured,
    the fast tier spent ~20 of its ~200 CPU-s on them. Nor does it run the periodic services of deployments and
    workers (schedules, late runs, pauses, work pools, leases, cancellation timeouts): the in-process runs and
    tests/test_runner.py's runner use none, and they kept an idle server at ~1.5x the CPU of one without them.
    When the session runs `e2e` tests, whose Prefect servers need the migrated template database anyway, its
    database starts as a copy of that template (`_seeded_harness_folder`); the fast tier builds no template and
    its harness migrates its own (~4.5 CPU-s, less than building the template: ~7)."""
    from prefect.settings import (PREFECT_API_BLOCKS_REGISTER_ON_START, PREFECT_SERVER_DATABASE_CONNECTION_URL,
                                  PREFECT_SERVER_SERVICES_CANCELLATION_CLEANUP_ENABLED,
                                  PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED,
                                  PREFECT_SERVER_SERVICES_FOREMAN_ENABLED, PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED,
                                  PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_ENABLED,
                                  PREFECT_SERVER_SERVICES_REPOSSESSOR_ENABLED,
                                  PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED, PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED,
                                  temporary_settings)
    from prefect.context import SyncClientContext
    from prefect.testing import utilities as harness

    off = (PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED, PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED,
           PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED, PREFECT_SERVER_SERVICES_LATE_RUNS_ENABLED,
           PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_ENABLED, PREFECT_SERVER_SERVICES_FOREMAN_ENABLED,
           PREFECT_SERVER_SERVICES_REPOSSESSOR_ENABLED, PREFECT_SERVER_SERVICES_CANCELLATION_CLEANUP_ENABLED)
    quiet = {PREFECT_API_BLOCKS_REGISTER_ON_START: False, **dict.fromkeys(off, False)}
    with contextlib.ExitStack() as stack:
        if any(item.get_closest_marker("e2e") for item in request.session.items) and hasattr(harness, "mkdtemp"):
            stack.enter_context(pytest.MonkeyPatch.context()).setattr(harness, "mkdtemp", _seeded_harness_folder)
        stack.enter_context(temporary_settings(quiet))
        stack.enter_context(harness.prefect_test_harness(server_startup_timeout=None))
        stack.enter_context(prefect_env.interactive_runs())
        # One Prefect client for the flows the tests run in this thread, as in a CLI process that runs one flow:
        # each run otherwise makes its own, and each client parses certifi's ~150 certificates (~20 ms of CPU).
        stack.enter_context(SyncClientContext.get_or_create())
        yield Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1]).parent


@pytest.fixture(scope="session")
def llm_server():
    """The scripted OpenAI-compatible server on 127.0.0.1 (see tests/llm_server.py), one per session."""
    server = LLMServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def inprocess_llm_server():
    """A second scripted server, for the flows a test runs in this process (`llm`): the shared service is pointed at
    `llm_server`, and its runs (a resource event, a nightly job) may still call it while the next test runs on the
    same worker, so a test reading what its flow sent must not share that server."""
    server = LLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def llm(inprocess_llm_server, monkeypatch):
    """A scripted LLM server of its own (not the shared service's), emptied, with DREAMFLOW_LLM_* pointing at it
    (2 s timeout, no retries, tools auto, response_format auto)."""
    from engine.models.llm import forget_endpoints

    llm_server = inprocess_llm_server
    llm_server.reset()
    forget_endpoints()  # each test probes response_format and tool support afresh
    monkeypatch.setenv("DREAMFLOW_LLM_BASE_URL", llm_server.base_url)
    monkeypatch.setenv("DREAMFLOW_LLM_MODEL", llm_server.model)
    monkeypatch.setenv("DREAMFLOW_LLM_API_KEY", "test-key")
    monkeypatch.setenv("DREAMFLOW_LLM_TIMEOUT", "2")
    monkeypatch.setenv("DREAMFLOW_LLM_MAX_RETRIES", "0")
    for knob in ("TOOLS", "JSON", "MAX_TOKENS", "CONCURRENCY", "TEMPERATURE", "FREQUENCY_PENALTY", "REPEAT_PENALTY"):
        monkeypatch.delenv(f"DREAMFLOW_LLM_{knob}", raising=False)
    yield llm_server
    llm_server.reset()


@pytest.fixture
def no_llm(monkeypatch):
    """No LLM configured."""
    for key in ("DREAMFLOW_LLM_BASE_URL", "DREAMFLOW_LLM_MODEL", "DREAMFLOW_LLM_API_KEY"):
        monkeypatch.delenv(key, raising=False)


# ---- the running service: `dreamflow start` with its own Prefect server, once per session -----------------

@pytest.fixture(scope="session")
def dreamflow_service(tmp_path_factory, llm_server):
    """A real `dreamflow start` (Prefect server, runner, watcher, HTTP API) on free ports over a temp workspace,
    its flows answered by the scripted LLM server; ~20 s to start. A `tests/service_harness.RunningService`."""
    from service_harness import SERVICE_TURNS, RunningService

    service = RunningService.start(
        tmp_path_factory.mktemp("service"), llm=llm_server, turns=SERVICE_TURNS)  # service_harness.PREFECT_SETTINGS
    yield service
    code = service.stop()
    assert code == 0, f"dreamflow start exited with {code} on SIGTERM:\n{service.log()}"


# ---- how `-n N` spreads the tests over xdist workers ------------------------------------------------------
# xdist's own `--dist loadgroup` renames test ids, which this pytest ignores; so the workers write each grouped
# test's group to a file and the controller's scheduler sends a group's tests to one worker, biggest group first.

GROUPS_FILE = pytest.StashKey[Path]()
# Tests that need the shared service run on one worker, which starts it once (each worker would start its own).
SERVICE_GROUP = "service"
# Flows run in this process (Prefect's test harness, one Prefect server per worker that has any): one worker too.
HARNESS_GROUP = "prefect-harness"
# The session fixture each of those groups shares, in the order a test is put in a group (`_group`): on a worker it
# ends after the group's last test (`pytest_runtest_teardown`), not idling to the worker's last test (~60 s).
GROUP_FIXTURE = {SERVICE_GROUP: "dreamflow_service", HARNESS_GROUP: "prefect_harness"}
# Fixtures only a test marked `e2e` may request: the fast tier (`-m "not e2e"`) never starts a service or a browser.
E2E_FIXTURES = {"dreamflow_service", "browser"}
# Modules that load the packaged MiniLM (torch and the model, once per process): one worker loads it.
LOCAL_MODEL_GROUP, LOCAL_MODEL_MODULES = "local-model", {"test_embeddings", "test_vectors"}


def _grouping(config) -> bool:
    """`-n N` without an explicit `--dist` (the README's command)."""
    given = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    return getattr(config.option, "dist", "no") == "load" and not any(arg.startswith("--dist") for arg in given)


def _rewrite_test_modules_once(config) -> None:
    """Writes pytest's cached assert rewrites of the test modules that lack one, before the xdist workers start.
    Every worker imports every test module to collect it: on a fresh checkout each rewrote the asserts of all
    of them (~4.5 of the ~10.5 CPU-s a worker took to collect). An optimisation only, on pytest's private
    helpers: with another pytest that lacks them the workers rewrite the modules themselves, as before."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for module in sorted(Path(__file__).parent.glob("test_*.py")):
            cache = rewrite.get_cache_dir(module)
            pyc = cache / (module.name[:-3] + rewrite.PYC_TAIL)
            if rewrite.try_makedirs(cache) and rewrite._read_pyc(module, pyc, state.trace) is None:
                source_hash, code = rewrite._rewrite_test(module, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
    except (ImportError, AttributeError, KeyError, TypeError):
        return


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    if getattr(config.option, "numprocesses", None) and config.getoption("assertmode") == "rewrite":
        _rewrite_test_modules_once(config)
    if _grouping(config):
        config.stash[GROUPS_FILE] = Path(tempfile.mkdtemp(prefix="dreamflow-test-groups-")) / "groups.json"
        atexit.register(shutil.rmtree, config.stash[GROUPS_FILE].parent, True)


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: absent with -p no:xdist
def pytest_configure_node(node):
    if GROUPS_FILE in node.config.stash:
        node.workerinput["dreamflow_groups"] = str(node.config.stash[GROUPS_FILE])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if GROUPS_FILE not in config.stash:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """xdist's scope scheduling (a unit's tests to one worker, biggest unit first) with the workers' groups as
        units and every other test a unit of its own."""

        groups: dict | None = None

        def add_node_collection(self, node, collection) -> None:
            """Tests sharing one id (schemathesis' cases) stay apart: the n-th repeat is `ID<NUL>n` here."""
            seen: dict[str, int] = {}
            unique = []
            for nodeid in collection:
                unique.append(f"{nodeid}\x00{seen[nodeid]}" if nodeid in seen else nodeid)
                seen[nodeid] = seen.get(nodeid, 0) + 1
            super().add_node_collection(node, unique)

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = json.loads(config.stash[GROUPS_FILE].read_text())
            return self.groups.get(nodeid.split("\x00")[0], nodeid)

    return GroupScheduling(config, log)


def _group(item) -> str | None:
    """The group of the tests one worker runs one after another, if `item` is in one."""
    for group, fixture in GROUP_FIXTURE.items():
        if fixture in item.fixturenames:
            return group
    if item.module.__name__ in LOCAL_MODEL_MODULES:
        return LOCAL_MODEL_GROUP
    if any(d[-1].scope == "module" for d in item._fixtureinfo.name2fixturedefs.values()):
        return item.module.__name__
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Checks that every test needing the service or the browser is marked `e2e`. Groups (`_group`): the shared
    service's tests, in file order, the in-process flows' (the Prefect test harness), the local model's, and each
    module's tests that share a module-scoped fixture (built once). On an xdist worker the other modules with slow
    tests come first, so none is left running alone at the end."""
    unmarked = [item.nodeid for item in items if E2E_FIXTURES & set(item.fixturenames)
                and not item.get_closest_marker("e2e")]
    if unmarked:
        raise pytest.UsageError(f"tests needing {' or '.join(sorted(E2E_FIXTURES))} must be marked "
                                f"@pytest.mark.e2e: {', '.join(unmarked)}")
    groups = getattr(config, "workerinput", {}).get("dreamflow_groups")
    if groups is None:
        return
    group_of = {item.nodeid: group for item in items if (group := _group(item))}
    shared = [item for item in items if group_of.get(item.nodeid) == SERVICE_GROUP]
    others = [item for item in items if group_of.get(item.nodeid) != SERVICE_GROUP]
    slow = {item.module.__name__ for item in others if item.get_closest_marker("slow")}
    others.sort(key=lambda item: item.module.__name__ not in slow)  # stable: file order within each part
    items[:] = shared + others
    tmp = f"{groups}.{os.getpid()}"
    Path(tmp).write_text(json.dumps(group_of))
    os.replace(tmp, groups)  # each worker writes the same map, whole


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a group's last test on this worker, its session fixture is finished (a later request starts it anew)."""
    if nextitem is None or "dreamflow_groups" not in getattr(item.config, "workerinput", {}):
        return
    group = _group(item)
    if group in GROUP_FIXTURE and _group(nextitem) != group:
        item._fixtureinfo.name2fixturedefs[GROUP_FIXTURE[group]][-1].finish(item._request)
