"""auto_dream end to end: real Prefect flow runs (test harness), the scripted LLM server, a real workspace."""

import os

import pytest

from deployments.launch import run_status
from engine.llm import LLMNotConfigured
from flows.auto_dream import auto_dream
from llm_server import Reply, json_reply, misbehave, tool_reply
from results_scan import holding
from storage import dream_log
from storage.memory import Memory
from storage.workspace import Workspace
from tasks import checkpoints, usage
from tasks.context import RESULTS
from tasks.dream import UnitsFailed

EXTRACT = "You consolidate a person's memory"
DAY = "2024-05-08"


def unit_route(name: str) -> str:
    return f"Unit: {name}\n"


def text(memory: Memory, path: str) -> str:
    return memory.read(path, numbered=False)["content"]


def dream_files(ws) -> dict:
    return checkpoints.load(ws, "dream").get("files", {})


def user_message(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


@pytest.fixture
def memory(ws) -> Memory:
    m = Memory(ws.root)
    m.write("digest/wiki/portugal.md", "Portugal: Lisbon is its capital, famous for pastel de nata.",
            name="Portugal", description="The country")
    m.write(f"daily/{DAY}/call-with-ana.md", "Ana told me she moved to Lisbon in May and works at a bakery.",
            name="Call with Ana", description="Ana's news")
    m.write(f"daily/{DAY}/sourdough.md", "Feed the sourdough starter every 12 hours with equal flour and water.",
            name="Sourdough", description="Starter routine")
    return m


def read_artifact(key: str) -> str:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return next(a.data for a in client.read_latest_artifacts() if a.key == key)


def test_full_dream_create_then_corroborate(prefect_harness, llm, memory, ws):
    ana = f"daily/{DAY}/call-with-ana.md"
    llm.on(EXTRACT, json_reply({
        "units": [
            {"name": "Ana lives in Lisbon", "bucket": "personal", "summary": "Ana moved to Lisbon in May 2024.",
             "paths": [ana]},
            {"name": "Sourdough feeding", "bucket": "procedures?", "summary": "Feed the starter every 12 hours.",
             "paths": [f"daily/{DAY}/sourdough.md"]},
        ],
        "topics": [{"title": "Visit Ana in Lisbon", "reason": "She just moved", "paths": [ana]}],
    }))
    llm.on(unit_route("Ana lives in Lisbon"), json_reply({
        "action": "CREATE", "target": "digest/personal/ana.md", "name": "Ana", "description": "Ana, a friend",
        "content": "Ana lives in Lisbon (see [[digest/wiki/portugal.md]]) and works at a bakery.\n\n## Sources\n\n"
                   f"- {DAY}: Ana told me about her move ([[{ana}]]).\n"}))
    llm.on(unit_route("Sourdough feeding"),
           tool_reply("node_search", {"query": "sourdough"}),
           json_reply({"action": "CREATE", "target": None, "name": "Sourdough starter",
                       "description": "How to keep a starter", "content": "Feed it every 12 hours."}))

    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))

    assert summary["scanned"] == 2 and summary["changed"] == 2 and summary["units"] == 2
    assert sorted((a["action"], a["target"]) for a in summary["actions"]) == [
        ("CREATE", "digest/personal/ana.md"), ("CREATE", "digest/wiki/sourdough-starter.md")]
    node = text(memory, "digest/personal/ana.md")
    assert "[[digest/wiki/portugal.md]]" in node and f"[[{ana}]]" in node
    assert memory.frontmatter_get("digest/personal/ana.md")["frontmatter"]["name"] == "Ana"
    starter = text(memory, "digest/wiki/sourdough-starter.md")  # unknown bucket -> wiki; sources added by code
    assert f"## Sources\n\n- {DAY}: Feed the starter every 12 hours ([[daily/{DAY}/sourdough.md]])." in starter
    integrate_ana = next(r for r in llm.requests if unit_route("Ana lives in Lisbon") in user_message(r))
    assert "digest/wiki/portugal.md" in user_message(integrate_ana)  # node_search offered the related node
    tools = {t["function"]["name"] for t in integrate_ana["tools"]}
    assert "write" in tools and "delete" not in tools
    topics = text(memory, f"daily/{DAY}/interests.yaml")
    assert "Visit Ana in Lisbon" in topics and "topic_count: 1" in topics
    assert set(dream_files(ws)) >= {ana, f"daily/{DAY}/sourdough.md", f"daily/{DAY}.md"}
    assert summary["usage"]["calls"] == 4 and summary["usage"]["total_tokens"] > 0
    report = read_artifact(f"dream-{DAY}")
    assert "Ana lives in Lisbon" in report and "digest/personal/ana.md" in report

    # A later day: only the new file is sent, and the unit corroborates the same node.
    llm.reset()
    lunch = "daily/2024-05-09/lunch.md"
    memory.write(lunch, "Lunch with Ana: she confirmed she lives in Lisbon now.", name="Lunch")
    llm.on(EXTRACT, json_reply({"units": [{"name": "Ana lives in Lisbon", "bucket": "personal",
                                           "summary": "Ana confirmed she lives in Lisbon.", "paths": [lunch]}],
                                "topics": [{"title": "visit ana in lisbon!", "reason": "again"}]}))
    llm.on(unit_route("Ana lives in Lisbon"),
           json_reply({"action": "CORROBORATE", "target": "digest/personal/ana.md", "content": None}))

    summary = auto_dream(date="2024-05-09", scan_days=2, workspace=str(ws.root))

    extract_request = user_message(llm.requests[0])
    assert lunch in extract_request and ana not in extract_request
    assert summary["actions"][0]["action"] == "CORROBORATE" and summary["topics"] == 0  # near-duplicate topic
    node = text(memory, "digest/personal/ana.md")
    assert f"[[{lunch}]]" in node and f"[[{ana}]]" in node and "[[digest/wiki/portugal.md]]" in node


def test_failed_units_stay_unchecked_and_are_retried(prefect_harness, llm, memory, ws, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_TIMEOUT", "3")
    paths = {n: f"daily/{DAY}/{n}.md" for n in ("ok", "badjson", "slow", "dropper")}
    for name, path in paths.items():
        memory.write(path, f"Notes about {name}.", name=name)
    memory.write("digest/wiki/dropper.md", "Dropper node, see [[digest/wiki/portugal.md]].", name="Dropper")
    llm.on(EXTRACT, json_reply({"units": [
        {"name": n, "bucket": "wiki", "summary": f"About {n}.", "paths": [p]} for n, p in paths.items()]}))
    llm.on(unit_route("ok"), json_reply({"action": "CREATE", "name": "OK node", "content": "Fine."}))
    llm.on(unit_route("badjson"), Reply(content="{broken"), Reply(content="still not json"))
    llm.on(unit_route("slow"), json_reply({"action": "CREATE", "content": "late"}, delay=8))
    llm.on(unit_route("dropper"), json_reply({"action": "REFINE", "target": "digest/wiki/dropper.md",
                                              "content": "Dropper node, rewritten without its link."}))

    state = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root), return_state=True)

    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, UnitsFailed)
    failed = {f["name"]: f["error"] for f in error.summary["failed"]}
    assert set(failed) == {"badjson", "slow", "dropper"}
    assert "after one repair" in failed["badjson"] and "timed out" in failed["slow"]
    assert "drop the links" in failed["dropper"]
    assert "[[digest/wiki/portugal.md]]" in text(memory, "digest/wiki/dropper.md")
    done = dream_files(ws)
    assert paths["ok"] in done and not {paths["badjson"], paths["slow"], paths["dropper"]} & set(done)
    assert "**FAILED**" in read_artifact(f"dream-{DAY}")
    assert error.summary["usage"]["calls"] == 6  # extract, ok, badjson twice, slow (timed out), dropper
    [decided] = dream_log.for_day(ws, DAY)  # what the dashboard's day page shows, per unit
    assert decided["run_id"] == str(state.state_details.flow_run_id)
    units = {u["name"]: u for u in decided["units"]}
    assert units["ok"]["action"] == "CREATE" and units["ok"]["target"] == "digest/wiki/ok-node.md"
    assert units["dropper"]["action"] == "FAILED" and "drop the links" in units["dropper"]["error"]

    # Retrying the run the way the UI does (same flow run, AwaitingRetry) re-runs only the failed units.
    llm.reset()
    llm.on(unit_route("badjson"), json_reply({"action": "CREATE", "name": "Bad JSON", "content": "Fixed."}))
    llm.on(unit_route("slow"), json_reply({"action": "CREATE", "name": "Slow", "content": "On time."}))
    llm.on(unit_route("dropper"), json_reply({"action": "REFINE", "target": "digest/wiki/dropper.md",
                                              "content": "Still no link."}))
    state = retry_from_ui(state)
    asked = [user_message(r) for r in llm.requests]
    assert not any(EXTRACT in r["messages"][0]["content"] for r in llm.requests)  # extraction reused
    assert not any(unit_route("ok") in m for m in asked)  # the completed unit is cached
    assert state.is_failed() and [f["name"] for f in state.result(raise_on_failure=False).summary["failed"]] == ["dropper"]
    [decided] = dream_log.for_day(ws, DAY)  # the retried run's record replaces its first one
    assert [u["name"] for u in decided["units"] if u["action"] == "FAILED"] == ["dropper"]
    done = dream_files(ws)
    assert {paths["ok"], paths["badjson"], paths["slow"]} <= set(done) and paths["dropper"] not in done

    # The next run sends only the still-failed unit's file.
    llm.reset()
    llm.on(EXTRACT, json_reply({"units": [{"name": "again", "bucket": "wiki", "summary": "Retried.",
                                           "paths": [paths["dropper"]]}]}))
    llm.on(unit_route("again"), json_reply({"action": "CREATE", "name": "Retried", "content": "Now fine."}))

    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))

    sent = user_message(llm.requests[0])
    assert paths["dropper"] in sent and not any(paths[n] in sent for n in ("ok", "badjson", "slow"))
    assert summary["failed"] == [] and paths["dropper"] in dream_files(ws)


def retry_from_ui(state):
    """What the UI's Retry does (force AwaitingRetry on the same flow run), then run it as a runner would."""
    from prefect import get_client
    from prefect.flow_engine import run_flow_sync
    from prefect.states import AwaitingRetry

    with get_client(sync_client=True) as client:
        run_id = state.state_details.flow_run_id
        client.set_flow_run_state(run_id, AwaitingRetry(message="Retry from the UI"), force=True)
        flow_run = client.read_flow_run(run_id)
    return run_flow_sync(auto_dream, flow_run=flow_run, parameters=flow_run.parameters, return_type="state")


def test_two_units_on_one_node_keep_both_sources(prefect_harness, llm, memory, ws):
    a, b = f"daily/{DAY}/call-with-ana.md", f"daily/{DAY}/sourdough.md"
    llm.on(EXTRACT, json_reply({"units": [
        {"name": "Lisbon one", "bucket": "wiki", "summary": "Lisbon fact one.", "paths": [a]},
        {"name": "Lisbon two", "bucket": "wiki", "summary": "Lisbon fact two.", "paths": [b]}]}))
    for name in ("Lisbon one", "Lisbon two"):
        llm.on(unit_route(name), json_reply({"action": "CORROBORATE", "target": "digest/wiki/portugal.md"}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["CORROBORATE", "CORROBORATE"]
    node = text(memory, "digest/wiki/portugal.md")
    assert f"[[{a}]]" in node and f"[[{b}]]" in node and node.count("## Sources") == 1


def test_nothing_changed_is_a_quiet_success(prefect_harness, llm, ws):
    summary = auto_dream(date=DAY, workspace=str(ws.root))
    assert (summary["changed"], summary["units"], summary["actions"]) == (0, 0, [])
    assert llm.requests == []


def test_no_llm_fails_at_once_and_checkpoints_nothing(prefect_harness, no_llm, memory, ws):
    with pytest.raises(LLMNotConfigured, match="DREAMFLOW_LLM_BASE_URL"):
        auto_dream(date=DAY, workspace=str(ws.root))
    assert checkpoints.load(ws, "dream") == {}


def test_small_model_guards_paths_schema_and_no_tools(prefect_harness, llm, memory, ws, monkeypatch):
    """What a small local model needs: paths it was not given are dropped (its unit kept if any remain),
    the schema sent names the given files and the listed nodes, and with tools off no tool is sent."""
    monkeypatch.setenv("DREAMFLOW_LLM_TOOLS", "off")
    ana, dough = f"daily/{DAY}/call-with-ana.md", f"daily/{DAY}/sourdough.md"
    invented = "daily/2024-05-08/trip.md"
    llm.on(EXTRACT, json_reply({"units": [
        {"name": "Ana lives in Lisbon", "bucket": "personal", "summary": "Ana moved to Lisbon.",
         "paths": [f"[[{ana}]]", invented]},
        {"name": "A trip", "bucket": "wiki", "summary": "Made up.", "paths": [invented]}],
        "topics": [{"title": "Visit Ana", "reason": "She moved", "paths": [invented, ana]}]}))
    llm.on(unit_route("Ana lives in Lisbon"), json_reply({
        "action": "CORROBORATE", "target": "digest/wiki/portugal.md", "content": None}))

    summary = auto_dream(date=DAY, scan_days=1, max_units=4, workspace=str(ws.root))

    assert summary["units"] == 1 and summary["actions"][0]["target"] == "digest/wiki/portugal.md"
    node = text(memory, "digest/wiki/portugal.md")
    assert f"[[{ana}]]" in node and invented not in node
    extract_body, integrate_body = llm.requests[:2]
    schema = extract_body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["units"]["maxItems"] == 4
    assert schema["$defs"]["Unit"]["properties"]["paths"]["items"]["enum"] == [ana, dough]
    assert schema["$defs"]["Unit"]["properties"]["bucket"]["enum"] == ["personal", "procedure", "wiki"]
    assert extract_body["max_tokens"] > 0 and "personal|procedure|wiki" not in extract_body["messages"][0]["content"]
    assert "tools" not in integrate_body and "tools" not in extract_body
    decision = integrate_body["response_format"]["json_schema"]["schema"]["properties"]
    assert decision["action"]["enum"] == ["CREATE", "CORROBORATE", "REFINE", "CORRECT", "SUPERSEDE"]
    assert decision["target"]["anyOf"][0]["enum"][0] == "digest/wiki/portugal.md"
    assert "Portugal: Lisbon is its capital" in user_message(integrate_body)  # candidate's text in the prompt
    assert "Ana told me she moved" in user_message(integrate_body)  # and the source's
    assert "Visit Ana" in text(memory, f"daily/{DAY}/interests.yaml") and invented not in text(
        memory, f"daily/{DAY}/interests.yaml")
    kinds = summary["usage"]["kinds"]
    assert kinds["extract"]["first_try"] == 1 and kinds["integrate"]["calls"] == 1
    assert "| integrate | 1 | 1/1 |" in read_artifact(f"dream-{DAY}")
    assert "| extract |" in read_artifact("auto-dream-usage")
    assert usage.recent(str(ws.root))[0]["job"] == "auto-dream"


def test_without_candidates_the_only_action_is_create(prefect_harness, llm, ws, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_TOOLS", "off")
    Memory(ws.root).write(f"daily/{DAY}/piano.md", "Sam takes piano lessons on Tuesdays.", name="Piano")
    llm.on(EXTRACT, json_reply({"units": [{"name": "Piano", "bucket": "personal", "summary": "Sam's lessons.",
                                           "paths": [f"daily/{DAY}/piano.md"]}]}))
    llm.on(unit_route("Piano"), json_reply({"action": "CREATE", "target": None, "name": "Piano lessons",
                                            "content": "Sam takes piano lessons on Tuesdays."}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert summary["actions"][0]["target"] == "digest/personal/piano-lessons.md"
    decision = llm.requests[1]["response_format"]["json_schema"]["schema"]["properties"]
    assert decision["action"]["enum"] == ["CREATE"] and decision["target"] == {"type": "null"}


# ---- quality gates and node names ---------------------------------------------------------------------------

@pytest.mark.parametrize("copied", [None, "decision"])
def test_integrate_never_writes_the_repair_turns_example(prefect_harness, llm, memory, ws, copied):
    """Prose first, then the example copied: the unit fails, no node is written, the dream ends Failed (exit 9)
    and the next run sends the unit's file again."""
    ana = f"daily/{DAY}/call-with-ana.md"
    unit = {"name": "Ana lives in Lisbon", "bucket": "personal", "summary": "Ana moved to Lisbon.", "paths": [ana]}
    llm.on(EXTRACT, json_reply({"units": [unit]}))
    misbehave(llm, unit_route("Ana lives in Lisbon"), copied)
    nodes = {e["path"] for e in memory.list("digest", recursive=True)["entries"]}

    state = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root), return_state=True)

    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, UnitsFailed) and error.exit_code == 9
    assert [f["name"] for f in error.summary["failed"]] == ["Ana lives in Lisbon"]
    assert {e["path"] for e in memory.list("digest", recursive=True)["entries"]} == nodes
    assert ana not in dream_files(ws)
    if copied:
        assert "rule `ungrounded`" in error.summary["failed"][0]["error"]
        assert error.summary["usage"]["gates"] == {"ungrounded": 2}
        assert "ungrounded 2" in read_artifact(f"dream-{DAY}")

    llm.reset()
    llm.on(EXTRACT, json_reply({"units": [unit]}))
    llm.on(unit_route("Ana lives in Lisbon"), json_reply({
        "action": "CREATE", "name": "Ana", "content": "Ana moved to Lisbon and works at a bakery."}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert ana in user_message(llm.requests[0]) and summary["actions"][0]["target"] == "digest/personal/ana.md"
    assert ana in dream_files(ws)


def test_a_create_naming_an_existing_node_updates_it(prefect_harness, llm, memory, ws, monkeypatch):
    """No `portugal-2.md`, and no second `portugal.md` in another bucket: a CREATE named after an existing
    node becomes a REFINE of it when its body keeps the node's links, else a CORROBORATE (sources added)."""
    monkeypatch.setenv("DREAMFLOW_LLM_TOOLS", "off")
    ana, dough = f"daily/{DAY}/call-with-ana.md", f"daily/{DAY}/sourdough.md"
    llm.on(EXTRACT, json_reply({"units": [
        {"name": "Lisbon", "bucket": "personal", "summary": "Ana moved to Lisbon.", "paths": [ana]}]}))
    llm.on(unit_route("Lisbon"), json_reply({"action": "CREATE", "name": "Portugal",
                                             "content": "Ana moved to Lisbon, in Portugal."}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert summary["actions"][0]["action"] == "REFINE" and summary["actions"][0]["target"] == "digest/wiki/portugal.md"
    assert "Ana moved to Lisbon" in text(memory, "digest/wiki/portugal.md")
    assert [e["path"] for e in memory.list("digest", recursive=True)["entries"] if e["type"] == "file"] == [
        "digest/wiki/portugal.md"]

    memory.write("digest/wiki/portugal.md", "Portugal, see [[digest/wiki/lisbon.md]].", name="Portugal")
    memory.write(dough, "Ana bakes in Portugal now.", name="Sourdough")
    llm.reset()
    llm.on(EXTRACT, json_reply({"units": [
        {"name": "Bakes", "bucket": "wiki", "summary": "Ana bakes in Portugal.", "paths": [dough]}]}))
    llm.on(unit_route("Bakes"), json_reply({"action": "CREATE", "target": "digest/wiki/portugal.md",
                                            "name": "Portugal", "content": "Ana bakes in Portugal."}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert summary["actions"][0]["action"] == "CORROBORATE"  # the new body would drop the node's link
    node = text(memory, "digest/wiki/portugal.md")
    assert "[[digest/wiki/lisbon.md]]" in node and f"[[{dough}]]" in node and not ws.exists("digest/wiki/portugal-2.md")


def test_a_refine_that_keeps_the_body_is_a_corroboration(prefect_harness, llm, memory, ws, monkeypatch):
    """A REFINE or CORRECT whose body is the node's body unchanged (what a real 1.5B model answered) claims
    no refinement: it lands as a CORROBORATE, the sources added and no `refined` History line."""
    monkeypatch.setenv("DREAMFLOW_LLM_TOOLS", "off")
    ana = f"daily/{DAY}/call-with-ana.md"
    before = text(memory, "digest/wiki/portugal.md")
    for action in ("REFINE", "CORRECT"):
        memory.write(ana, f"Ana moved to Lisbon in May ({action}).", name="Call with Ana")
        llm.reset()
        llm.on(EXTRACT, json_reply({"units": [
            {"name": "Ana", "bucket": "wiki", "summary": "Ana moved to Lisbon.", "paths": [ana]}]}))
        llm.on(unit_route("Ana"), json_reply({"action": action, "target": "digest/wiki/portugal.md",
                                              "content": "Portugal:  Lisbon is its capital,\nfamous for pastel de nata.\n"}))
        summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
        assert summary["actions"][0]["action"] == "CORROBORATE"
    node = text(memory, "digest/wiki/portugal.md")
    assert "Lisbon is its capital, famous for pastel de nata." in node and f"[[{ana}]]" in node
    assert "## History" not in node and "## History" not in before

    llm.reset()
    memory.write(ana, "Ana moved to Lisbon in May and bakes.", name="Call with Ana")
    llm.on(EXTRACT, json_reply({"units": [
        {"name": "Ana", "bucket": "wiki", "summary": "Ana moved to Lisbon.", "paths": [ana]}]}))
    llm.on(unit_route("Ana"), json_reply({"action": "REFINE", "target": "digest/wiki/portugal.md",
                                          "content": "Portugal: Lisbon is its capital. Ana moved there in May."}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert summary["actions"][0]["action"] == "REFINE" and "refined: Ana moved to Lisbon" in text(memory, "digest/wiki/portugal.md")


def test_an_update_without_a_target_gets_a_repair_turn(prefect_harness, llm, memory, ws, monkeypatch):
    """A REFINE that names no node (what the real 1.5B model answered) is not a failed unit at once: the model is
    told the update needs its node's path and answers again."""
    monkeypatch.setenv("DREAMFLOW_LLM_TOOLS", "off")
    ana = f"daily/{DAY}/call-with-ana.md"
    llm.on(EXTRACT, json_reply({"units": [
        {"name": "Ana", "bucket": "wiki", "summary": "Ana moved to Lisbon.", "paths": [ana]}]}))
    llm.on(unit_route("Ana"),
           json_reply({"action": "REFINE", "target": "", "content": "Portugal: Lisbon. Ana moved there in May."}),
           json_reply({"action": "REFINE", "target": "digest/wiki/portugal.md",
                       "content": "Portugal: Lisbon is its capital. Ana moved there in May."}))
    summary = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root))
    assert summary["failed"] == [] and summary["actions"][0]["action"] == "REFINE"
    assert "needs `target`" in llm.requests[-1]["messages"][-1]["content"]
    assert "Ana moved there in May" in text(memory, "digest/wiki/portugal.md")


# ---- persisted results stay in their workspace ------------------------------------------------------------

def test_persisted_results_stay_in_their_own_workspace(prefect_harness, dreamflow_service, llm, tmp_path):
    """Everything a dream persists (the extraction, each unit, the run's summary) lands in its workspace's
    metadata/, never in Prefect's or Dreamflow's home; two workspaces keep their own; the summary reads back."""
    secrets = {}
    for name in ("alpha", "beta"):
        ws = Workspace(tmp_path / name)
        secret = f"{name} keeps bees on the roof of the quartz-heron-{name} building"
        Memory(ws.root).write(f"daily/{DAY}/bees.md", f"Notes: {secret}.", name="Bees")
        llm.on(EXTRACT, json_reply({"units": [{"name": f"Bees {name}", "bucket": "personal",
                                               "summary": f"{secret}.", "paths": [f"daily/{DAY}/bees.md"]}]}))
        llm.on(unit_route(f"Bees {name}"), json_reply({"action": "CREATE", "name": f"Bees {name}",
                                                       "content": f"{secret}, since May."}))
        state = auto_dream(date=DAY, scan_days=1, workspace=str(ws.root), return_state=True)
        assert state.is_completed()
        secrets[name] = (ws, secret, str(state.state_details.flow_run_id))

    homes = [os.environ["PREFECT_HOME"], os.environ["DREAMFLOW_HOME"]]  # this process's: results only
    for name, (ws, secret, run_id) in secrets.items():
        for home in [*homes, dreamflow_service.home]:  # also the Prefect server's database (runs, logs, artifacts)
            assert holding(home, secret) == [], f"{name}'s memory text outside its workspace"
        for home in homes:
            assert holding(home, f"Bees {name}") == [], f"{name}'s results outside its workspace"
        assert len(holding(ws.root / RESULTS, secret)) == 1  # the extraction
        assert len(holding(ws.root / RESULTS, f"Bees {name}")) == 3  # + the unit, the summary
        other = next(o for o in secrets.values() if o[0] is not ws)
        assert holding(other[0].root / RESULTS, secret) == []  # two workspaces, one process: each keeps its own
        summary = run_status(run_id)["summary"]  # read back from the workspace, as the service does
        assert summary["actions"] == [{"unit": "u1", "name": f"Bees {name}", "action": "CREATE",
                                       "target": f"digest/personal/bees-{name}.md"}]
        hits = {h["path"] for h in Memory(ws.root).search(secret)}  # never indexed as memory
        assert hits and not any(p.startswith("metadata/") for p in hits)
