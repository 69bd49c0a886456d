"""auto_dream end to end: real Prefect flow runs (test harness), the scripted LLM server, a real workspace.

Dreams over facts: a card's facts land in their subject's node; the model answers only small questions, code
writes what holds now and the history."""

import json
import os
import re

import pytest

from deployments.launch import run_status
from engine.access.job_workspace import RESULTS
from engine.models.llm import LLMNotConfigured
from flows.auto_dream import auto_dream
from llm_server import Reply, json_reply, text_of
from results_scan import holding
from storage.errors import UnitsFailed
from storage.files import checkpoints, dream_log
from storage.files.workspace import Workspace
from storage.memory import Memory
from storage.text import facts
from storage.text.markdown import split_frontmatter

COMPARE = "You keep a memory of facts up to date"
FACTS = "list the facts worth remembering"


@pytest.fixture
def memory(ws, monkeypatch) -> Memory:
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "none")  # candidates by their words (one test scripts an embedder)
    return Memory(ws.root)


def card(memory: Memory, day: str, name: str, *lines: tuple, session: str = "s") -> str:
    """A card as auto_memory writes it: (kind, about, text[, date]) facts, each citing message n of the session."""
    body = f"# {name}\n"
    for n, (kind, about, text, *when) in enumerate(lines, 1):
        body = facts.add(body, facts.Fact(text, id=f"f{n}", kind=kind, about=about, date=when[0] if when else None,
                                          sources=(f"session/dialog/{session}.jsonl#L{n}",), labels=(f"{day} 18:0{n}",)))
    path = f"daily/{day}/{name.lower().replace(' ', '-')}.md"
    memory.write(path, body, name=name, description=name, metadata={"session_id": session})
    return path


def body(memory: Memory, path: str) -> str:
    return split_frontmatter(memory.read(path, numbered=False)["content"]).body


def node_facts(memory: Memory, path: str) -> dict[str, facts.Fact]:
    return {f.text: f for f in facts.parse(memory.read(path, numbered=False)["content"])}


def picking(relation: str, words: str):
    """A responder answering `relation` with the number of the listed fact holding `words`, wherever it is."""
    def respond(body: dict) -> Reply | None:
        listed = re.findall(r"^(\d+)\. (.+)$", text_of(body), re.M)
        return json_reply({"relation": relation, "fact": next(int(n) for n, text in listed if words in text)})
    return respond


def compares(llm) -> list[dict]:
    return [r for r in llm.requests if "messages" in r and COMPARE in r["messages"][0]["content"]]


def test_a_first_dream_files_each_fact_under_its_subject_without_asking(prefect_harness, llm, memory, ws):
    day = "2026-11-02"
    path = card(memory, day, "New flat", ("fact", "user", "The user lives in Lisbon."),
                ("fact", "Ana", "Ana works at a bakery in Alfama."), ("preference", "the user", "The user likes green tea."))
    summary = auto_dream(date=day, scan_days=1, workspace=str(ws.root))

    assert llm.requests == [] and summary["facts"] == 3 and summary["failed"] == []
    assert {(a["node"], a["action"]) for a in summary["actions"]} == {
        ("digest/personal/user.md", "created"), ("digest/personal/user.md", "added"),
        ("digest/personal/ana.md", "created")}
    user = node_facts(memory, "digest/personal/user.md")
    lives = user["The user lives in Lisbon."]
    assert lives.current and lives.since == day and lives.sources == (f"{path}#^f1",)
    assert user["The user likes green tea."].kind == "preference"
    text = body(memory, "digest/personal/user.md")
    assert text.startswith("# The user\n") and f"## Sources\n\n- {day}: [[{path}]]" in text
    meta = memory.frontmatter_get("digest/personal/user.md")["frontmatter"]
    assert (meta["name"], meta["about"], meta["status"], str(meta["valid_from"])) == ("The user", "user", "current", day)
    assert checkpoints.load(ws, "dream")["files"][path]

    again = auto_dream(date=day, scan_days=1, workspace=str(ws.root))  # nothing new: no fact twice
    assert again["facts"] == 0 and len(node_facts(memory, "digest/personal/user.md")) == 2


def test_a_fact_that_replaces_another_keeps_it_as_history(prefect_harness, llm, memory, ws):
    first = card(memory, "2026-11-02", "Home", ("fact", "user", "The user lives in Lisbon."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    moved = card(memory, "2026-11-05", "Moved", ("fact", "user", "The user lives in Porto now.", "2026-11-04"),
                 session="t")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))

    summary = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root))

    assert [a["action"] for a in summary["actions"]] == ["replaced"]
    assert summary["actions"][0]["replaced"] == "The user lives in Lisbon."
    asked = compares(llm)[0]["messages"][1]["content"]
    assert "The user lives in Porto now." in asked and "1. The user lives in Lisbon. (since 2026-11-02)" in asked
    user = node_facts(memory, "digest/personal/user.md")
    now, was = user["The user lives in Porto now."], user["The user lives in Lisbon."]
    assert now.current and now.since == "2026-11-04" and now.sources == (f"{moved}#^f1",)
    assert not was.current and (was.since, was.until) == ("2026-11-02", "2026-11-04")
    assert was.replaced_by == f"digest/personal/user.md#^{now.id}" and was.sources == (f"{first}#^f1",)
    text = body(memory, "digest/personal/user.md")
    assert text.index("## Facts") < text.index("Porto") < text.index("## History") < text.index("Lisbon")


def test_a_refinement_keeps_the_start_and_the_older_wording(prefect_harness, llm, memory, ws):
    card(memory, "2026-11-02", "Job", ("fact", "user", "The user works at Acme Robotics."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-06", "Job detail", ("fact", "user", "The user works at Acme Robotics as a robotics engineer."),
         session="t")
    llm.on(COMPARE, json_reply({"relation": "refines", "fact": 1}))
    summary = auto_dream(date="2026-11-06", scan_days=1, workspace=str(ws.root))

    assert [a["action"] for a in summary["actions"]] == ["refined"]
    user = node_facts(memory, "digest/personal/user.md")
    new, old = user["The user works at Acme Robotics as a robotics engineer."], user["The user works at Acme Robotics."]
    assert new.current and new.since == "2026-11-02"
    assert (old.current, old.until) == (False, "2026-11-06") and old.replaced_by.endswith(f"#^{new.id}")


def test_the_same_fact_again_only_gains_a_source(prefect_harness, llm, memory, ws):
    first = card(memory, "2026-11-02", "Tea", ("preference", "user", "The user likes green tea."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    second = card(memory, "2026-11-03", "Tea again", ("preference", "user", "The user likes green tea."), session="t")
    summary = auto_dream(date="2026-11-03", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["same"] and compares(llm) == []
    tea = node_facts(memory, "digest/personal/user.md")["The user likes green tea."]
    assert tea.sources == (f"{first}#^f1", f"{second}#^f1") and tea.current


def test_a_new_subject_gets_its_own_node_and_an_answer_naming_no_fact_is_checked(prefect_harness, llm, memory, ws):
    """The 0.5B model answered `replaces` with fact 0: code takes the fact the words point at, here none."""
    card(memory, "2026-11-02", "Ana", ("fact", "Ana", "Ana works at a bakery in Alfama."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-03", "Ana again", ("fact", "Ana", "Ana bakes bread at the bakery every morning."),
         ("fact", "Mia", "Mia teaches piano in Porto."), session="t")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 0}))
    summary = auto_dream(date="2026-11-03", scan_days=1, workspace=str(ws.root))

    assert {(a["fact"], a["action"], a["node"]) for a in summary["actions"]} == {
        ("Ana bakes bread at the bakery every morning.", "added", "digest/personal/ana.md"),
        ("Mia teaches piano in Porto.", "created", "digest/personal/mia.md")}
    assert len(compares(llm)) == 1  # Ana's fact, without a repair turn (Mia's has nothing to compare with)
    assert all(f.current for f in node_facts(memory, "digest/personal/ana.md").values())


def test_a_failed_unit_keeps_its_cards_unchecked_and_the_rest_lands(prefect_harness, llm, memory, ws):
    card(memory, "2026-11-02", "Home", ("fact", "user", "The user lives in Lisbon."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    moved = card(memory, "2026-11-05", "Moved", ("fact", "user", "The user lives in Porto now."), session="t")
    other = card(memory, "2026-11-05", "Ana", ("fact", "Ana", "Ana works at a bakery in Alfama."), session="u")
    llm.on(COMPARE, Reply(status=500, content="model down"))
    state = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root), return_state=True)

    assert state.is_failed()
    summary = state.result(raise_on_failure=False).summary
    assert [f["paths"] for f in summary["failed"]] == [[moved]] and "model down" in summary["failed"][0]["error"]
    files = checkpoints.load(ws, "dream")["files"]
    assert moved not in files and other in files
    assert "Ana works at a bakery in Alfama." in node_facts(memory, "digest/personal/ana.md")
    assert "The user lives in Porto now." not in node_facts(memory, "digest/personal/user.md")


@pytest.fixture
def embedder(llm, monkeypatch):
    """`embedder(meaning)`: the scripted embeddings endpoint plays the embedder, each text getting the vector of
    the first key of `meaning` it contains."""
    from tasks import dream

    def play(meaning: dict[str, list[float]]) -> None:
        llm.embedder = lambda texts: [next((v for k, v in meaning.items() if k in t), [0.0, 1.0, 0.0]) for t in texts]
        monkeypatch.setenv("DREAMFLOW_EMBEDDER", "openai")
        monkeypatch.setenv("DREAMFLOW_EMBED_BASE_URL", llm.base_url)
        monkeypatch.setenv("DREAMFLOW_EMBED_MODEL", "scripted-embedder")
        dream._similarity.cache_clear()

    yield play
    dream._similarity.cache_clear()


def test_an_embedder_shows_facts_of_the_subject_that_share_no_word(prefect_harness, llm, memory, ws, embedder):
    """`moved to Porto` shares no word with `lives in Lisbon`: the subject's node facts closest in meaning are
    shown too."""
    embedder({"Porto": [1.0, 0.2, 0.0], "Lisbon": [0.9, 0.3, 0.0], "tea": [0.0, 0.0, 1.0]})
    card(memory, "2026-11-02", "Home", ("fact", "user", "The user lives in Lisbon."),
         ("preference", "user", "The user likes green tea."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-05", "Moved", ("event", "user", "The user moved to Porto."), session="t")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))
    summary = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root))
    asked = compares(llm)[0]["messages"][1]["content"]
    assert "1. The user lives in Lisbon." in asked and "green tea" not in asked
    assert summary["actions"][0]["action"] == "replaced"
    assert not node_facts(memory, "digest/personal/user.md")["The user lives in Lisbon."].current


def test_a_change_sharing_one_word_replaces_the_fact_it_means(prefect_harness, llm, memory, ws, embedder):
    """`My daughter changed schools to Riverside` shares one word with `My daughter goes to Oak Primary`; the
    1.5B model called it new. Code reads the change by meaning: the one listed fact close in sense, with no
    other as close, is replaced; a fact that says no change, or two facts as close, stay new."""
    embedder({"school": [1.0, 0.1, 0.0], "Oak Primary": [0.9, 0.3, 0.0], "ballet": [0.6, 0.6, 0.5],
              "seven": [0.3, 0.8, 0.4], "violin": [0.7, 0.4, 0.0], "Golf": [0.0, 0.0, 1.0]})
    card(memory, "2026-11-02", "Family", ("fact", "my daughter", "My daughter goes to Oak Primary."),
         ("fact", "my daughter", "My daughter is seven."), ("fact", "user", "I drive a Golf."))
    llm.on(COMPARE, json_reply({"relation": "new", "fact": 0}))  # `seven` and `Oak Primary`, near in sense
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-06", "School", ("event", "my daughter", "My daughter changed schools to Riverside."),
         ("fact", "my daughter", "My daughter started ballet."), session="t")
    llm.on(COMPARE, *[json_reply({"relation": "new", "fact": 0})] * 2)
    summary = auto_dream(date="2026-11-06", scan_days=1, workspace=str(ws.root))
    assert sorted((a["fact"], a["action"], a["replaced"] or "") for a in summary["actions"]) == [
        ("My daughter changed schools to Riverside.", "replaced", "My daughter goes to Oak Primary."),
        ("My daughter started ballet.", "added", "")]
    daughter = node_facts(memory, "digest/personal/my-daughter.md")
    assert daughter["My daughter is seven."].current and not daughter["My daughter goes to Oak Primary."].current

    card(memory, "2026-11-09", "Lessons", ("event", "my daughter", "My daughter now takes violin lessons."), session="u")
    llm.on(COMPARE, json_reply({"relation": "new", "fact": 0}))  # as close to the school as to ballet: no guess
    summary = auto_dream(date="2026-11-09", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["added"]


def test_the_model_s_pick_is_checked_against_the_words_and_the_sense(prefect_harness, llm, memory, ws, embedder):
    """The 0.5B model answered fact 2 whatever the list: a denial `refines` the deadline, a new landlord
    `replaces` the move to Porto. Code takes the fact the words tie it to, and none when nothing does."""
    embedder({"Porto": [1.0, 0.0, 0.0], "Lisbon": [0.9, 0.3, 0.0], "landlord": [0.4, 0.9, 0.2],
              "Atlas": [0.0, 0.0, 1.0]})
    card(memory, "2026-11-02", "Week", ("fact", "user", "I live in Lisbon, close to the river."),
         ("fact", "user", "The Atlas deadline is 2026-12-15."))
    llm.on(COMPARE, json_reply({"relation": "new", "fact": 0}))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-05", "Porto", ("event", "user", "I moved to Porto on 2026-11-04, I don't live in Lisbon anymore."),
         session="t")
    llm.responder = picking("refines", "Atlas")
    summary = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root))
    assert [(a["action"], a["replaced"]) for a in summary["actions"]] == [
        ("replaced", "I live in Lisbon, close to the river.")]

    llm.responder = None
    card(memory, "2026-11-07", "Flat", ("fact", "user", "My landlord is now Ms. Costa."), session="u")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))
    summary = auto_dream(date="2026-11-07", scan_days=1, workspace=str(ws.root))
    asked = compares(llm)[-1]["messages"][1]["content"]
    assert "1. I moved to Porto" in asked  # shown for its sense, which is not close enough to be the one meant
    assert [a["action"] for a in summary["actions"]] == ["added"]
    assert all(f.current for f in node_facts(memory, "digest/personal/user.md").values()
               if "Lisbon, close" not in f.text)


def test_a_ui_retry_reruns_only_the_failed_unit(prefect_harness, llm, memory, ws, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_LLM_TIMEOUT", "3")
    card(memory, "2026-11-02", "Start", ("fact", "user", "The user lives in Lisbon."),
         ("fact", "Ana", "Ana works at a bakery in Alfama."), ("fact", "Mia", "Mia teaches piano in Porto."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    day = "2026-11-05"
    paths = {"user": card(memory, day, "Home", ("fact", "user", "The user lives in Porto now."), session="a"),
             "ana": card(memory, day, "Ana", ("fact", "Ana", "Ana works at a cafe in Alfama now."), session="b"),
             "mia": card(memory, day, "Mia", ("fact", "Mia", "Mia teaches piano in Braga now."), session="c")}
    llm.on(lambda b: "messages" in b and "Porto now" in text_of(b),
           json_reply({"relation": "replaces", "fact": 1}))
    llm.on(lambda b: "messages" in b and "cafe" in text_of(b),
           Reply(content="{broken"), Reply(content="still not json"))
    llm.on(lambda b: "messages" in b and "Braga" in text_of(b),
           json_reply({"relation": "replaces", "fact": 1}, delay=8))

    state = auto_dream(date=day, scan_days=1, workspace=str(ws.root), return_state=True)

    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, UnitsFailed) and error.exit_code == 9
    failed = {f["name"]: f["error"] for f in error.summary["failed"]}
    assert set(failed) == {"Ana", "Mia"}
    assert "after one repair" in failed["Ana"] and "timed out" in failed["Mia"]
    done = checkpoints.load(ws, "dream")["files"]
    assert paths["user"] in done and paths["ana"] not in done and paths["mia"] not in done
    assert "**FAILED**" in read_artifact(f"dream-{day}")
    [decided] = dream_log.for_day(ws, day)  # what the dashboard's day page shows, per fact
    assert decided["run_id"] == str(state.state_details.flow_run_id)
    units = {u["name"]: u for u in decided["units"]}
    assert units["The user"]["action"] == "replaced" and units["The user"]["target"] == "digest/personal/user.md"
    assert units["The user"]["fact"] == "The user lives in Porto now." and units["The user"]["replaced"]
    assert units["Ana"]["action"] == "FAILED" and "after one repair" in units["Ana"]["error"]

    # Retrying the run the way the UI does (same flow run, AwaitingRetry) re-runs only the failed units.
    llm.reset()
    llm.on(lambda b: "messages" in b and "cafe" in text_of(b),
           json_reply({"relation": "replaces", "fact": 1}))
    llm.on(lambda b: "messages" in b and "Braga" in text_of(b),
           json_reply({"relation": "replaces", "fact": 1}))
    state = retry_from_ui(state)
    asked = [r["messages"][-1]["content"] for r in llm.requests if "messages" in r]
    assert len(asked) == 2 and not any("Porto now" in a for a in asked)  # the finished unit is cached
    assert state.is_completed()
    assert {paths["ana"], paths["mia"]} <= set(checkpoints.load(ws, "dream")["files"])
    assert not node_facts(memory, "digest/personal/ana.md")["Ana works at a bakery in Alfama."].current
    assert len(node_facts(memory, "digest/personal/user.md")) == 2  # the cached unit wrote nothing twice
    [decided] = dream_log.for_day(ws, day)  # the retried run's record replaces its first one
    assert not [u for u in decided["units"] if u["action"] == "FAILED"]


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


def read_artifact(key: str) -> str:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return next(a.data for a in client.read_latest_artifacts() if a.key == key)


def test_an_old_prose_card_is_read_for_its_facts_once(prefect_harness, llm, memory, ws):
    """A card written before cards were facts: its facts are extracted (citing its lines) and consolidated."""
    day = "2024-05-08"
    memory.write(f"daily/{day}/call-with-ana.md", "# Call with Ana\n\nAna told me she moved to Lisbon in May.\n"
                 "She works at a bakery.\n", name="Call with Ana")
    llm.on(FACTS, json_reply({"title": "Ana", "facts": [
        {"text": "Ana moved to Lisbon in May.", "about": "Ana", "kind": "event", "source": [1]}]}))
    summary = auto_dream(date=day, scan_days=1, workspace=str(ws.root))
    ana = node_facts(memory, "digest/personal/ana.md")["Ana moved to Lisbon in May."]
    assert ana.sources == (f"daily/{day}/call-with-ana.md#L6-L7",) and summary["facts"] == 1  # its two lines
    lines = memory.read(f"daily/{day}/call-with-ana.md", start_line=6, end_line=7, numbered=False)["content"]
    assert lines.startswith("Ana told me")
    assert "Ana told me" in memory.read(f"daily/{day}/call-with-ana.md", numbered=False)["content"]  # kept as is
    llm.reset()
    memory.append(f"daily/{day}/call-with-ana.md", "\nShe likes pastel de nata.\n")
    llm.on(FACTS, json_reply({"title": "Ana", "facts": [
        {"text": "Ana moved to Lisbon in May.", "about": "Ana", "kind": "event", "source": [1]},
        {"text": "Ana likes pastel de nata.", "about": "Ana", "kind": "preference", "source": [2]}]}))
    again = auto_dream(date=day, scan_days=1, workspace=str(ws.root))
    assert [a["fact"] for a in again["actions"]] == ["Ana likes pastel de nata."]  # the first is consolidated


def test_nothing_changed_is_a_quiet_success(prefect_harness, llm, ws):
    summary = auto_dream(date="2026-11-02", workspace=str(ws.root))
    assert (summary["changed"], summary["units"], summary["actions"]) == (0, 0, [])
    assert llm.requests == []


def test_no_llm_fails_at_once_and_checkpoints_nothing(prefect_harness, no_llm, memory, ws):
    with pytest.raises(LLMNotConfigured, match="DREAMFLOW_LLM_BASE_URL"):
        auto_dream(date="2026-11-02", workspace=str(ws.root))
    assert checkpoints.load(ws, "dream") == {}


def test_persisted_results_stay_in_their_own_workspace(prefect_harness, llm, tmp_path, monkeypatch):
    """Everything a dream persists (the gathering, each unit, the run's summary) lands in its workspace's
    metadata/, never in Prefect's or Dreamflow's home; two workspaces keep their own; the summary reads back."""
    monkeypatch.setenv("DREAMFLOW_EMBEDDER", "none")
    secrets, day = {}, "2024-05-08"
    for name in ("alpha", "beta"):
        ws = Workspace(tmp_path / name)
        secret = f"{name} keeps bees on the roof of the quartz-heron-{name} building"
        path = card(Memory(ws.root), day, "Bees", ("fact", f"Bees {name}", f"The user {secret}."))
        state = auto_dream(date=day, scan_days=1, workspace=str(ws.root), return_state=True)
        assert state.is_completed()
        secrets[name] = (ws, secret, str(state.state_details.flow_run_id), path)

    homes = [os.environ["PREFECT_HOME"], os.environ["DREAMFLOW_HOME"]]  # this process's: results only
    for name, (ws, secret, run_id, path) in secrets.items():
        for home in [*homes, prefect_harness]:  # also the Prefect server's database (runs, logs, artifacts)
            assert holding(home, secret) == [], f"{name}'s memory text outside its workspace"
        for home in homes:
            assert holding(home, f"Bees {name}") == [], f"{name}'s results outside its workspace"
        assert len(holding(ws.root / RESULTS, secret)) == 3  # the gathering, the unit, the summary
        other = next(o for o in secrets.values() if o[0] is not ws)
        assert holding(other[0].root / RESULTS, secret) == []  # two workspaces, one process: each keeps its own
        summary = run_status(run_id)["summary"]  # read back from the workspace, as the service does
        assert [(a["action"], a["node"]) for a in summary["actions"]] == [("created", f"digest/personal/bees-{name}.md")]
        hits = {h["path"] for h in Memory(ws.root).search(secret)}  # never indexed as memory
        assert hits and not any(p.startswith("metadata/") for p in hits)


def test_a_refinement_that_keeps_none_of_the_words_is_a_new_fact(prefect_harness, llm, memory, ws):
    """A small model called `works at Acme` a refinement of `lives in Lisbon`: code keeps both as they are."""
    card(memory, "2026-11-02", "Home", ("fact", "user", "The user lives in Lisbon."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-03", "Work", ("fact", "user", "The user works in Lisbon at Acme Robotics."), session="t")
    llm.on(COMPARE, json_reply({"relation": "refines", "fact": 1}))
    summary = auto_dream(date="2026-11-03", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["added"] and len(compares(llm)) == 1
    assert all(f.current for f in node_facts(memory, "digest/personal/user.md").values())


def test_facts_said_in_one_message_never_replace_each_other(prefect_harness, llm, memory, ws):
    """`Sam and I broke up. My partner is now Alex.`: two facts of one message are one change, not two."""
    body = "# Breakup\n"
    for n, text in enumerate(("The user and Sam broke up.", "The user's partner is now Alex, not Sam."), 1):
        body = facts.add(body, facts.Fact(text, id=f"f{n}", about="user", sources=("session/dialog/s.jsonl#L1",)))
    memory.write("daily/2026-11-07/breakup.md", body, name="Breakup")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))
    summary = auto_dream(date="2026-11-07", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["created", "added"] and compares(llm) == []


def test_a_refinement_that_restates_the_fact_anew_replaces_it(prefect_harness, llm, memory, ws):
    """The 1.5B model called `my coffee order is a flat white` a refinement of `... an espresso`: it shares the
    words of what it is about but not the value, so it replaces it."""
    card(memory, "2026-11-02", "Coffee", ("preference", "user", "My usual coffee order is an espresso."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-08", "Coffee now", ("preference", "user", "My coffee order is a flat white."), session="t")
    llm.on(COMPARE, json_reply({"relation": "refines", "fact": 1}))
    summary = auto_dream(date="2026-11-08", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["replaced"]
    old = node_facts(memory, "digest/personal/user.md")["My usual coffee order is an espresso."]
    assert (old.current, old.until) == (False, "2026-11-08")


def test_a_refinement_that_denies_the_old_value_replaces_it(prefect_harness, llm, memory, ws):
    """`My coffee order is a flat white, not an espresso` keeps most words of `... an espresso` and the 1.5B
    model called it a refinement: it denies the old value, so it replaces it from the day it was said."""
    card(memory, "2026-11-04", "Coffee", ("preference", "user", "My usual coffee order is an espresso."))
    auto_dream(date="2026-11-04", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-08", "Coffee now", ("preference", "user", "My coffee order is a flat white, not an espresso."),
         session="t")
    llm.on(COMPARE, json_reply({"relation": "refines", "fact": 1}))
    summary = auto_dream(date="2026-11-08", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["replaced"]
    now = node_facts(memory, "digest/personal/user.md")
    assert now["My coffee order is a flat white, not an espresso."].since == "2026-11-08"
    assert now["My usual coffee order is an espresso."].until == "2026-11-08"


def test_a_new_fact_that_says_its_value_changed_replaces_the_closest(prefect_harness, llm, memory, ws):
    """The 0.5B model answered `new` for most changes: code sees the change in the words."""
    card(memory, "2026-11-02", "Week", ("plan", "user", "I train at the gym on Mondays."),
         ("fact", "user", "Sam and I hike on Sundays."), ("fact", "user", "I live in Lisbon."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-07", "Gym", ("plan", "user", "I moved my gym sessions from Mondays to Thursdays."),
         ("fact", "user", "I like walking in Lisbon."), session="t")
    llm.on(COMPARE, *[json_reply({"relation": "new", "fact": 0})] * 2)
    summary = auto_dream(date="2026-11-07", scan_days=1, workspace=str(ws.root))
    assert sorted(a["action"] for a in summary["actions"]) == ["added", "replaced"]
    user = node_facts(memory, "digest/personal/user.md")
    assert user["I train at the gym on Mondays."].until == "2026-11-07"
    assert user["I live in Lisbon."].current and user["Sam and I hike on Sundays."].current


def test_a_replacement_names_the_fact_that_shares_its_words(prefect_harness, llm, memory, ws):
    """The 0.5B model replaced `The flat was sold` with a coffee order: code takes the coffee fact instead."""
    card(memory, "2026-11-04", "Week", ("preference", "user", "My usual coffee order is an espresso."),
         ("fact", "user", "The flat was sold."))
    auto_dream(date="2026-11-04", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-08", "Coffee", ("preference", "user", "My coffee order is a flat white."), session="t")
    llm.responder = picking("replaces", "flat was")
    summary = auto_dream(date="2026-11-08", scan_days=1, workspace=str(ws.root))
    assert [(a["action"], a["replaced"]) for a in summary["actions"]] == [
        ("replaced", "My usual coffee order is an espresso.")]
    assert node_facts(memory, "digest/personal/user.md")["The flat was sold."].current


def test_a_date_two_facts_share_does_not_make_them_the_same_subject(prefect_harness, llm, memory, ws):
    """`I moved to Porto on 2026-11-04` shares the day, not the subject, with `my first day at Globex was
    2026-11-04`: it replaces the Lisbon fact it shares words with."""
    card(memory, "2026-11-04", "Week", ("fact", "user", "I live in Lisbon."),
         ("event", "user", "My first day at Globex Labs was 2026-11-04."))
    auto_dream(date="2026-11-04", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-05", "Porto", ("event", "user", "I moved to Porto on 2026-11-04, I don't live in Lisbon anymore."),
         session="t")
    llm.on(COMPARE, json_reply({"relation": "new", "fact": 0}))
    summary = auto_dream(date="2026-11-05", scan_days=1, workspace=str(ws.root))
    assert [(a["action"], a["replaced"]) for a in summary["actions"]] == [("replaced", "I live in Lisbon.")]


def test_a_fact_is_not_replaced_on_the_day_it_began(prefect_harness, llm, memory, ws):
    """The 1.5B model chained facts of one day into replacements: both are kept, current."""
    card(memory, "2024-05-08", "Call", ("plan", "Ana", "Visit planned for 14-20 June; flights not booked yet."))
    auto_dream(date="2024-05-08", scan_days=1, workspace=str(ws.root))
    card(memory, "2024-05-08", "Flights", ("plan", "Ana", "Book flights for the June visit before Friday."), session="t")
    llm.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))
    summary = auto_dream(date="2024-05-08", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == ["added"]
    assert all(f.current for f in node_facts(memory, "digest/personal/ana.md").values())


def test_a_change_word_alone_does_not_retire_an_unrelated_fact(prefect_harness, llm, memory, ws):
    """On an unseen story a house move retired a new piano teacher the week before: `moved` is all they share."""
    card(memory, "2026-11-02", "Piano", ("fact", "user", "My daughter moved to a new piano teacher, Mr. Olsen."))
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-09", "House", ("event", "user", "We moved to Birch Lane."), session="t")
    llm.responder = picking("replaces", "piano")
    summary = auto_dream(date="2026-11-09", scan_days=1, workspace=str(ws.root))
    assert [(a["action"], a["replaced"]) for a in summary["actions"]] == [("added", None)]
    assert all(f.current for f in node_facts(memory, "digest/personal/user.md").values())


STILL = "You check whether a remembered fact still holds"


@pytest.mark.parametrize("holds, action", [(False, "replaced"), (True, "added")])
def test_a_change_sharing_only_a_name_is_asked_about_that_fact_alone(prefect_harness, llm, memory, ws, holds,
                                                                      action):
    """The 1.5B model called `Dorota moved to Wroclaw` new beside the Gdansk fact: asked of that fact alone
    whether it still holds, its answer decides."""
    card(memory, "2026-11-16", "Week", ("fact", "user", "My sister Dorota lives in Gdansk, we talk every Sunday."),
         ("plan", "user", "I train at the gym on Mondays."))
    auto_dream(date="2026-11-16", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-21", "Move", ("event", "user", "Dorota moved to Wroclaw for her new job."), session="t")
    llm.on(COMPARE, json_reply({"relation": "new", "fact": 0}))
    llm.on(STILL, json_reply({"still_true": holds}))
    summary = auto_dream(date="2026-11-21", scan_days=1, workspace=str(ws.root))
    assert [a["action"] for a in summary["actions"]] == [action]
    [asked] = [r for r in llm.requests if STILL in r["messages"][0]["content"]]
    assert "Dorota lives in Gdansk" in text_of(asked) and "gym" not in text_of(asked)
    user = node_facts(memory, "digest/personal/user.md")
    assert user["My sister Dorota lives in Gdansk, we talk every Sunday."].current is holds
    assert user["I train at the gym on Mondays."].current


def test_a_postponed_date_replaces_the_plan_it_moves(prefect_harness, llm, memory, ws):
    """`got postponed to April 26` says a change (the 1.5B model called it new): it replaces the April 12 plan."""
    card(memory, "2026-11-18", "Race", ("plan", "user", "I signed up for the Lakeside half marathon on April 12."))
    auto_dream(date="2026-11-18", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-22", "Bridge", ("plan", "user", "The Lakeside half marathon got postponed to April 26."),
         session="t")
    llm.on(COMPARE, json_reply({"relation": "new", "fact": 0}))
    summary = auto_dream(date="2026-11-22", scan_days=1, workspace=str(ws.root))
    assert [(a["action"], a["replaced"]) for a in summary["actions"]] == [
        ("replaced", "I signed up for the Lakeside half marathon on April 12.")]
    assert not [r for r in llm.requests if STILL in r["messages"][0]["content"]]


@pytest.mark.parametrize("correction, answer", [
    ("Forget what I said about the dentist appointment, it is on Friday.", "new"),
    ("The dentist appointment is actually on Friday, not Thursday.", "new"),
    ("Sorry, I meant the dentist appointment is on Friday.", "replaces"),
])
def test_a_correction_said_in_words_replaces_what_it_corrects(prefect_harness, llm, memory, ws, correction, answer):
    """`it's actually X, not Y` and `forget what I said about X` replace what they correct, the same day too."""
    card(memory, "2026-11-03", "Dentist", ("plan", "user", "The dentist appointment is on Thursday."))
    auto_dream(date="2026-11-03", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-03", "Fix", ("plan", "user", correction), session="t")
    llm.responder = picking(answer, "dentist")
    summary = auto_dream(date="2026-11-03", scan_days=1, workspace=str(ws.root))
    assert [(a["action"], a["replaced"]) for a in summary["actions"]] == [
        ("replaced", "The dentist appointment is on Thursday.")]
    user = node_facts(memory, "digest/personal/user.md")
    assert not user["The dentist appointment is on Thursday."].current and user[correction].current


@pytest.mark.parametrize("first, then, current", [
    ("a", "u", "My landlord is Ms. Varga."),            # the user's statement replaces the assistant's wording
    ("u", "a", "My landlord is Ms. Varga."),            # an echo after it only adds a source
])
def test_the_users_statement_wins_over_the_assistants_echo(prefect_harness, llm, memory, ws, first, then, current):
    words = {"a": "Ms. Varga is the user's landlord.", "u": "My landlord is Ms. Varga."}
    for session, role in (("a", "assistant"), ("u", "user")):
        path = ws.root / "session" / "dialog" / f"{session}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"role": role, "content": words[session]}) + "\n")
    card(memory, "2026-11-02", "Flat", ("fact", "user", words[first]), session=first)
    auto_dream(date="2026-11-02", scan_days=1, workspace=str(ws.root))
    card(memory, "2026-11-04", "Flat again", ("fact", "user", words[then]), session=then)
    auto_dream(date="2026-11-04", scan_days=1, workspace=str(ws.root))
    user = node_facts(memory, "digest/personal/user.md")
    assert [t for t, f in user.items() if f.current] == [current]
