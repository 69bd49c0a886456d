"""`dreamflow hook claude-code` on SessionStart and UserPromptSubmit (dreamflow/hooks/context.py), fed the JSON
Claude Code sends: recall for a prompt, cited, never repeated within a session, nothing for a prompt memory has
nothing on; the session-start digest; a service that does not answer; a session routed to one of two workspaces."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_probe import ENTRY, SCRIPT
from cli_probe import ENTRY_PROBE as PROBE
from test_hooks import SESSION
from test_registry import registered

from storage.files.workspace import Workspace
from storage.index import indexer as index
from storage.index.db import IndexDB
from storage.search import recall

pytestmark = pytest.mark.timeout(120)

HEAVY = ("click", "prefect", "openai", "torch", "sentence_transformers", "fastapi", "pydantic", "rich")

CWD = "/home/ana/trip-planner"
TRANSCRIPTS = "/home/ana/.claude/projects/-home-ana-trip-planner"
ANY_MATCH = {"DREAMFLOW_INJECT_MIN_SCORE": "0", "DREAMFLOW_INJECT_MIN_RELEVANCE": "0",
             "DREAMFLOW_INJECT_MIN_WORDS": "0"}  # any keyword match is injected
CARD = """# Lisbon with Ana

Ana booked Casa do Largo in Alfama for 150 EUR a night.
The flight is TAP 1357 on 9 May, leaving at 06:05.

Tram 28E goes from Baixa up to Alfama.
"""


def prompt(text: str, session: str = SESSION, cwd: str = CWD) -> dict:
    """UserPromptSubmit's input as Claude Code sends it."""
    return {"session_id": session, "transcript_path": f"{TRANSCRIPTS}/{session}.jsonl",
            "cwd": cwd, "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": text}


def start(source: str = "startup", session: str = SESSION, cwd: str = CWD) -> dict:
    """SessionStart's input as Claude Code sends it."""
    return {"session_id": session, "transcript_path": f"{TRANSCRIPTS}/{session}.jsonl",
            "cwd": cwd, "hook_event_name": "SessionStart", "source": source}


def hook(payload: dict, workspace=None, env: dict | None = None, probe: bool = False) -> subprocess.CompletedProcess:
    """`dreamflow [--workspace W] hook claude-code` as Claude Code runs it (the console script)."""
    command = [sys.executable, "-c", PROBE if probe else ENTRY]
    where = ["--workspace", str(workspace)] if workspace is not None else []
    return subprocess.run([*command, *where, "hook", "claude-code"], input=json.dumps(payload), capture_output=True,
                          text=True, timeout=60, env={**os.environ, "DREAMFLOW_EMBEDDER": "none", **(env or {})})


def imported(done: subprocess.CompletedProcess) -> set[str]:
    """The top-level packages a `probe=True` hook imported."""
    return {m.split(".")[0] for m in json.loads(done.stderr.strip().splitlines()[-1])}


def injected(done: subprocess.CompletedProcess, event: str) -> str | None:
    """The additionalContext the hook answered (None: it printed nothing), checking the answer's shape."""
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "":
        return None
    answer = json.loads(done.stdout)
    assert list(answer) == ["hookSpecificOutput"] and answer["hookSpecificOutput"]["hookEventName"] == event
    assert set(answer["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
    return answer["hookSpecificOutput"]["additionalContext"]


def note(name: str, description: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


@pytest.fixture(scope="module")
def trip_template(tmp_path_factory):
    """A workspace of trip notes among 40 work notes (term weights as in a memory in use), indexed once."""
    ws = Workspace(tmp_path_factory.mktemp("trip") / "ws")
    for n in range(40):
        ws.write_text(f"daily/2024-04-{n % 28 + 1:02d}/note-{n}.md", note(
            f"Note {n}", "Work log", f"# Note {n}\n\nAna reviewed pull request {n} of the payments service with Bo.\n"
                                     f"The build ran {n} tests; lint passed; the night was quiet.\n"))
    ws.write_text("daily/2024-05-08/lisbon-with-ana.md", note("Lisbon with Ana", "Trip plans, hotel, flight, trams", CARD))
    ws.write_text("digest/personal/ana.md", note("Ana", "The user, travel preferences",
                                                 "# Ana\n\nPrefers window seats and early flights.\nVegetarian.\n"))
    ws.write_text("digest/wiki/lisbon.md", note("Lisbon", "City notes", "# Lisbon\n\nAlfama is the old quarter.\n"))
    ws.write_text("digest/procedure/booking.md", note("Booking", "How Ana books",
                                                      "# Booking\n\nBook hotels with free cancellation.\n"))
    with IndexDB(ws).session() as con:
        index.rebuild(con, ws)
    return ws.root


@pytest.fixture
def trip(trip_template, tmp_path):
    return Path(shutil.copytree(trip_template, tmp_path / "ws"))


@pytest.mark.e2e
def test_a_prompt_gets_cited_recall_once_per_session(trip):
    first = injected(hook(prompt("Which hotel did Ana book in Alfama, and for how much?"), trip), "UserPromptSubmit")
    assert first is not None and "Casa do Largo" in first and "150 EUR" in first
    assert "[daily/2024-05-08/lisbon-with-ana.md:" in first  # cited with its lines, so the agent can read on

    again = hook(prompt("Which hotel did Ana book in Alfama, and for how much?"), trip)
    assert injected(again, "UserPromptSubmit") is None  # the session has it already: nothing repeated

    other = injected(hook(prompt("Which hotel did Ana book in Alfama, and for how much?", session="another-session"),
                          trip), "UserPromptSubmit")
    assert other is not None and "Casa do Largo" in other  # another session was given nothing yet


@pytest.mark.e2e
@pytest.mark.parametrize("text", ["thanks, looks good", "Run the test suite and fix the failing lint errors",
                                  "What is the capital of Peru?", "   "])
def test_a_prompt_memory_has_nothing_on_injects_nothing(trip, text):
    done = hook(prompt(text), trip)
    assert injected(done, "UserPromptSubmit") is None and done.stderr == "", done.stderr


ALLERGY = "The user is allergic to peanuts since March 2025; avoid peanut butter in any recipe.\n"
SNACK = "Can you suggest a snack recipe with peanut butter for me?"
SMALL_TALK = ("thanks!", "run the tests", "fix the typo in line 3", "What is the capital of Peru?")


def memory_of(root: Path, notes: dict[str, str]) -> Path:
    """A workspace of `notes` {path: text}, written as an editor would (no fsync each) and indexed in one rebuild."""
    ws = Workspace(root)
    for path, text in notes.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    with IndexDB(ws).session() as con:
        index.rebuild(con, ws)
    return ws.root


@pytest.mark.e2e
def test_a_two_note_memory_gets_its_match_and_nothing_for_small_talk(tmp_path):
    ws = memory_of(tmp_path / "ws", {  # BM25 over 2 notes weighs a word in one of them 0.69: no match reached 4
        "digest/personal/allergy.md": note("Peanut allergy", "Food the user must avoid", ALLERGY),
        "digest/wiki/lisbon.md": note("Lisbon", "City notes", "Thanks to Bo: tram line 28E goes up to Alfama.\n")})
    text = injected(hook(prompt(SNACK), ws), "UserPromptSubmit")
    assert text is not None and "[digest/personal/allergy.md:" in text and "avoid peanut butter" in text
    for n, talk in enumerate(SMALL_TALK):  # "thanks" and "line" are in a note: one shared word is not a match
        assert injected(hook(prompt(talk, session=f"talk-{n}"), ws), "UserPromptSubmit") is None, talk


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """2,000 work notes (one chunk each), the allergy note and one note that thanks someone: a memory where a
    word in one note weighs 7.6, more than the threshold alone."""
    notes = {f"daily/2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}/log-{n}.md":
             f"# Log {n}\n\nAna reviewed pull request {n} of the payments service with Bo; the build ran the tests "
             f"and line {n % 7} of the report was rewritten.\n" for n in range(2000)}
    notes["digest/personal/allergy.md"] = note("Peanut allergy", "Food the user must avoid", ALLERGY)
    notes["daily/2024-05-02/review.md"] = "# Review\n\nThanks to Carla for the quick review.\n"
    return memory_of(tmp_path_factory.mktemp("large") / "ws", notes)


@pytest.mark.e2e
def test_a_large_memory_gets_the_same_match_and_nothing_for_one_shared_word(large):
    text = injected(hook(prompt(SNACK), large), "UserPromptSubmit")
    assert text is not None and "[digest/personal/allergy.md:" in text and "avoid peanut butter" in text
    for n, talk in enumerate(SMALL_TALK):  # "thanks" is in one note of 2,000: rare, yet one word
        assert injected(hook(prompt(talk, session=f"talk-{n}"), large), "UserPromptSubmit") is None, talk


@pytest.mark.e2e
def test_session_start_digest_cites_nodes_personal_first_then_recent_cards(trip):
    text = injected(hook(start(), trip), "SessionStart")
    assert text is not None
    order = [text.index(p) for p in ("[digest/personal/ana.md:", "[digest/procedure/booking.md:",
                                     "[digest/wiki/lisbon.md:", "[daily/2024-05-08/lisbon-with-ana.md:")]
    assert order == sorted(order), text
    assert "[digest/procedure/booking.md:7] Booking: How Ana books\nBook hotels" in text
    assert "Prefers window seats" in text and "The user, travel preferences" in text
    assert "[digest/personal/ana.md:7-8] Ana: The user, travel preferences" in text  # the lines `read` numbers

    small = injected(hook(start("compact"), trip, env={"DREAMFLOW_INJECT_START_TOKENS": str(40 + recall.FRAMED)}), "SessionStart")
    assert "digest/personal/ana.md" in small and "lisbon-with-ana" not in small  # the budget holds the first only

    off = hook(start(), trip, env={"DREAMFLOW_INJECT_START": "0"})
    assert injected(off, "SessionStart") is None
    off = hook(prompt("Which hotel did Ana book?"), trip, env={"DREAMFLOW_INJECT_PROMPT": "off"})
    assert injected(off, "UserPromptSubmit") is None


@pytest.mark.e2e
def test_session_start_digest_shows_the_digest_folders_of_your_own_after_the_standard_ones(trip):
    ws = Workspace(trip)
    ws.write_text("digest/project/build.md", "# Build\n\n`npm run build` writes dist/.\n")  # no frontmatter
    ws.write_text("digest/areas/garden.md", note("Garden", "Beds and watering", "# Garden\n\nWater at dawn.\n"))
    ws.write_text("digest/inbox.md", "# Inbox\n\nCall the plumber.\n")  # right in digest/
    ws.write_text("digest/archive/wiki/old.md", "# Old\n\nArchived, never shown.\n")
    text = injected(hook(start(), trip), "SessionStart")
    order = [text.index(p) for p in ("[digest/personal/ana.md:", "[digest/procedure/booking.md:",
                                     "[digest/wiki/lisbon.md:", "[digest/areas/garden.md:",
                                     "[digest/project/build.md:", "[digest/inbox.md:",
                                     "[daily/2024-05-08/lisbon-with-ana.md:")]
    assert order == sorted(order), text
    assert "`npm run build` writes dist/." in text and "Water at dawn." in text
    assert "digest/archive/" not in text


@pytest.mark.e2e
def test_session_start_leaves_out_what_no_longer_holds(trip):
    ws = Workspace(trip)
    ws.write_text("digest/personal/ana-s-flat.md", note("Ana's flat", "Where Ana lived", "Ana rented in Graça.\n")
                  .replace("---\n#", "---\n#").replace("description: Where Ana lived", "description: Where Ana lived\n"
                  "status: superseded\nvalid_to: 2024-05-01\nsuperseded_by: '[[digest/personal/ana.md]]'"))
    ws.write_text("digest/personal/visa.md", note("Visa", "Ana's visa", "Valid for Brazil.\n").replace(
        "description: Ana's visa", "description: Ana's visa\nexpires: 2024-01-01"))
    text = injected(hook(start(), trip), "SessionStart")
    assert "digest/personal/ana.md" in text and "ana-s-flat" not in text and "visa.md" not in text


@pytest.mark.e2e
def test_session_start_on_an_empty_workspace_says_nothing(tmp_path):
    done = hook(start(), tmp_path / "empty")
    assert injected(done, "SessionStart") is None and done.stderr == ""


def silent_server() -> tuple[socket.socket, int]:
    """A socket that accepts connections and never answers (a hung service)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(8)], daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.e2e
def test_a_service_that_does_not_answer_injects_nothing_and_never_blocks(trip):
    server, port = silent_server()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()
    try:
        for url in (f"http://127.0.0.1:{port}", f"http://127.0.0.1:{refused_port}"):
            (trip / "metadata/service.json").write_text(json.dumps({"pid": os.getpid(), "url": url, "name": None}))
            for payload in (prompt("Which hotel did Ana book in Alfama?"), start()):
                began = time.monotonic()
                done = hook(payload, trip, env={"DREAMFLOW_INJECT_TIMEOUT": "0.5"})
                assert injected(done, payload["hook_event_name"]) is None, done.stdout
                assert len(done.stderr.strip().splitlines()) == 1 and "ServiceUnavailable" in done.stderr, done.stderr
                assert time.monotonic() - began < 30  # process start on a loaded machine; the wait itself is 0.5 s
    finally:
        server.close()
    (trip / "metadata/service.json").unlink()  # gone for good: in-process again
    assert "Casa do Largo" in injected(hook(prompt("Which hotel did Ana book in Alfama?"), trip), "UserPromptSubmit")


@pytest.mark.e2e
def test_a_routed_session_gets_its_workspace_and_what_it_reads(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DREAMFLOW_WORKSPACE", "DREAMFLOW_API_TOKEN")}
    env.update(DREAMFLOW_HOME=str(tmp_path / "home"), DREAMFLOW_EMBEDDER="none")
    folders = registered(tmp_path, env)  # web reads personal (declared sharing); api apart; all about coffee
    (tmp_path / "src/web/pkg").mkdir(parents=True)
    cwd = str(tmp_path / "src/web/pkg")
    for n, text in enumerate(("Where is the coffee machine?", "coffee flat white vite api orders")):
        done = subprocess.run([sys.executable, "-c", ENTRY, "hook", "claude-code"],
                              input=json.dumps(prompt(text, f"s-{n}", cwd)), capture_output=True, text=True,
                              timeout=60, env={**env, **ANY_MATCH})
        got = injected(done, "UserPromptSubmit")
        assert got is not None and "[digest/wiki/web-note.md:" in got, got  # its own: as `read` there takes it
        assert "[personal:digest/wiki/personal-note.md:1]\nI take my coffee as an oat flat white." in got, got
        assert "40 ms" not in got and "api-note" not in got
    begun = subprocess.run([sys.executable, "-c", ENTRY, "hook", "claude-code"], input=json.dumps(start(cwd=cwd)),
                           capture_output=True, text=True, timeout=60, env=env)
    got = injected(begun, "SessionStart")
    assert "[digest/wiki/web-note.md:" in got and "[personal:digest/wiki/personal-note.md:" in got, got
    assert "api-note" not in got
    assert not (folders["personal"] / "metadata/recall").exists()  # the sessions' records stay in web
    assert not (folders["api"] / "metadata/recall").exists()


@pytest.mark.e2e
def test_the_prompt_hook_imports_no_prefect_openai_or_torch(trip):
    done = hook(prompt("Which hotel did Ana book in Alfama?"), trip, probe=True)
    lines = done.stdout.strip()
    assert done.returncode == 0 and "Casa do Largo" in json.loads(lines)["hookSpecificOutput"]["additionalContext"]
    assert not imported(done) & set(HEAVY)  # without a service: the storage layer and duckdb, not the CLI


@pytest.mark.e2e
def test_the_console_script_takes_the_hook_straight_and_all_else_to_the_cli(trip):
    from dreamflow.entry import hook_call

    assert SCRIPT == "dreamflow.entry:main"
    assert hook_call(["hook", "claude-code"]) == (None, False)
    assert hook_call(["--workspace", "web", "hook", "claude-code", "--verbose"]) == ("web", True)
    assert hook_call(["-w", "/tmp/ws", "hook", "claude-code", "-v"]) == ("/tmp/ws", True)
    assert hook_call(["--workspace=web", "hook", "claude-code"]) == ("web", False)
    for args in (["hook", "claude-code", "--help"], ["hook"], ["search", "x"], ["--workspace"], [],
                 ["hook", "claude-code", "extra"], ["--version"]):
        assert hook_call(args) is None, args
    helped = subprocess.run([sys.executable, "-c", ENTRY, "hook", "claude-code", "--help"], capture_output=True,
                            text=True, timeout=60)
    assert helped.returncode == 0 and "Usage: dreamflow hook claude-code" in helped.stdout
    # a capture event through the same entry: recorded as before (the transcript's turn in the session's dialog)
    transcript = trip / "t.jsonl"
    transcript.write_text(json.dumps({"type": "user", "uuid": "u1", "sessionId": SESSION, "timestamp":
                                      "2026-12-02T01:00:00Z", "message": {"role": "user", "content": "Book Alfama"}})
                          + "\n")
    stop = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": CWD, "hook_event_name": "Stop"}
    done = hook(stop, trip)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == ""
    assert any("Book Alfama" in p.read_text() for p in (trip / "session").rglob("*") if p.is_file())


@pytest.mark.e2e
def test_what_session_start_gave_is_not_given_again_by_a_prompt(trip):
    asked = "Does Ana prefer window seats and early flights?"
    fresh = injected(hook(prompt(asked, session="no-start"), trip, env=ANY_MATCH), "UserPromptSubmit")
    assert fresh is not None and "Prefers window seats and early flights." in fresh  # recall finds the node's line

    begun = injected(hook(start(session="started"), trip), "SessionStart")
    assert "[digest/personal/ana.md:7-8] Ana: The user, travel preferences\nPrefers window seats" in begun
    [logged] = recall.log(Workspace(trip), "started")  # what the dashboard shows the session was given
    assert logged["kind"] == "session-start" and logged["query"] is None
    assert {"path": "digest/personal/ana.md", "start_line": 7, "end_line": 8} in logged["items"]
    after = injected(hook(prompt(asked, session="started"), trip, env=ANY_MATCH), "UserPromptSubmit")
    assert after is None or "Prefers window seats" not in after  # the session has it from its start
    assert after is None or "digest/personal/ana.md:7" not in after


# the service's answer waited for as long as a loaded machine may take (never blocking: the test above)
PATIENT = {**ANY_MATCH, "DREAMFLOW_INJECT_TIMEOUT": "30"}


@pytest.mark.e2e
@pytest.mark.timeout(400)  # the service starts once per session (~20 s, minutes on a loaded machine)
def test_a_prompt_through_the_running_service(dreamflow_service):
    svc = dreamflow_service
    svc.memory.write("daily/2024-06-02/porto-ferry.md", "# Porto\n\nThe Douro ferry to Afurada leaves at 09:40 "
                       "from Cais da Estiva.\n", name="Porto ferry", description="Day trip")
    session = "inject-through-service"
    text = injected(hook(prompt("When does the Douro ferry to Afurada leave?", session), svc.workspace, env=PATIENT),
                    "UserPromptSubmit")
    assert text is not None and "09:40" in text and "[daily/2024-06-02/porto-ferry.md:" in text
    assert (svc.workspace / f"metadata/recall/{session}.json").exists()  # the service kept the session's record
    again = hook(prompt("When does the Douro ferry to Afurada leave?", session), svc.workspace, env=PATIENT)
    assert injected(again, "UserPromptSubmit") is None
    begun = injected(hook(start(session=session), svc.workspace, env=PATIENT), "SessionStart")
    assert begun is not None and "[daily/2024-06-02/porto-ferry.md:" in begun

    # a new session: its start shows the card, so its prompt on it does not repeat it (the shared service's
    # workspace may hold other weak matches); the process imports neither the CLI nor duckdb (one request)
    begun = injected(hook(start(session="started-" + session), svc.workspace, env=PATIENT), "SessionStart")
    assert "09:40 from Cais da Estiva" in begun
    done = hook(prompt("When does the Douro ferry to Afurada leave?", "started-" + session), svc.workspace,
                env=PATIENT, probe=True)
    after = injected(done, "UserPromptSubmit")
    assert after is None or ("09:40" not in after and "porto-ferry.md" not in after), after
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert not imported(done) & {*HEAVY, "duckdb"} and not modules & {"storage.memory", "storage.index.db", "engine.ops"}
