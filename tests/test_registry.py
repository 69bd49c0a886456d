"""Named workspaces without the service: the registry and its commands, `--workspace NAME`, declared sharing in
search, tokens, the Claude Code hook picking the workspace by the session's folder, and Dreamflow's own folder
never being a workspace (engine/config/registry.py, engine/access/scoped.py, engine/config/grants.py)."""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_cli import invoke
from test_hooks import FIXTURE, SESSION, dialog

from engine.config.registry import HEADER, Registry, resolve
from storage.errors import InvalidInput


def run(*args, env: dict, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`dreamflow ARGS...` in this process (test_cli.invoke) with exactly the environment `env`, in `cwd`."""
    changes = {**{key: None for key in os.environ if key not in env}, **env}
    return invoke(args, input=stdin, env=changes, cwd=cwd)


@pytest.fixture
def home(tmp_path):
    """An environment with its own Dreamflow folder (registry, tokens) and no workspace set."""
    env = {k: v for k, v in os.environ.items() if k not in ("DREAMFLOW_WORKSPACE", "DREAMFLOW_API_TOKEN")}
    env.update(DREAMFLOW_HOME=str(tmp_path / "home"), DREAMFLOW_EMBEDDER="none")
    return env


def registered(tmp_path, env) -> dict[str, Path]:
    """personal, web (reads personal, sessions under src/web) and api, each with a note of its own."""
    folders = {name: tmp_path / name for name in ("personal", "web", "api")}
    assert run("workspace", "add", "personal", str(folders["personal"]), "--default", env=env).returncode == 0
    assert run("workspace", "add", "web", str(folders["web"]), "--reads", "personal",
               "--folder", str(tmp_path / "src/web"), env=env).returncode == 0
    assert run("workspace", "add", "api", str(folders["api"]), env=env).returncode == 0
    notes = {"personal": "I take my coffee as an oat flat white.",
             "web": "The web app builds with vite; the coffee machine is in room 4.",
             "api": "The api answers in 40 ms; coffee orders go through it."}
    for name, text in notes.items():
        done = run("--workspace", name, "write", f"digest/wiki/{name}-note.md", "--content", text, env=env)
        assert done.returncode == 0, done.stderr
    return folders


def hits(done: subprocess.CompletedProcess) -> list[tuple[str, str]]:
    assert done.returncode == 0, done.stderr
    return [(h["workspace"], h["path"]) for h in json.loads(done.stdout)]


def test_registry_commands_name_folders_and_remove_never_deletes_files(tmp_path, home):
    folders = registered(tmp_path, home)
    listed = json.loads(run("workspace", "list", "--json", env=home).stdout)
    assert [(w["name"], w["path"], w["default"]) for w in listed] == [
        ("api", str(folders["api"]), False), ("personal", str(folders["personal"]), True),
        ("web", str(folders["web"]), False)]
    text = (tmp_path / "home/workspaces.yaml").read_text()
    assert "reads:\n    - personal" in text or "reads: [personal]" in text, text  # a file people can edit

    gone = run("workspace", "remove", "web", "--json", env=home)
    assert gone.returncode == 0 and json.loads(gone.stdout)["removed"] == "web"
    assert (folders["web"] / "digest/wiki/web-note.md").is_file(), "remove must never delete a workspace's files"
    assert [w["name"] for w in json.loads(run("workspace", "list", "--json", env=home).stdout)] == ["api", "personal"]


def test_overlapping_folders_and_bad_names_are_refused(tmp_path, home):
    registered(tmp_path, home)
    for args, why in [(["inner", str(tmp_path / "web/sub")], "overlaps workspace 'web'"),
                      (["outer", str(tmp_path)], "overlap"),
                      (["state", str(tmp_path / "home/x")], "Dreamflow's own folder"),
                      (["Bad Name", str(tmp_path / "x")], "must be 1-63 lower-case"),
                      (["loop", str(tmp_path / "loop"), "--reads", "nobody"], "no workspace 'nobody'"),
                      (["tz", str(tmp_path / "tz"), "--timezone", "Mars/Base"], "is not an IANA timezone"),
                      (["cron", str(tmp_path / "cron"), "--dream-cron", "nightly"], "is not a cron schedule")]:
        done = run("workspace", "add", *args, env=home)
        assert done.returncode != 0 and why in " ".join(done.stderr.split()), (args, done.stderr)
    assert len(Registry.load(tmp_path / "home/workspaces.yaml").entries) == 3


def test_a_hand_edited_registry_is_read_and_a_broken_one_is_a_clear_error(tmp_path, home):
    (tmp_path / "home").mkdir()
    (tmp_path / "home/workspaces.yaml").write_text(
        f"default: notes\nworkspaces:\n  notes: {tmp_path / 'notes'}\n"
        f"  work:\n    path: {tmp_path / 'work'}\n    reads: [notes]\n    timezone: Europe/Lisbon\n")
    registry = Registry.load(tmp_path / "home/workspaces.yaml")
    assert registry.default == "notes" and registry.entries["work"].reads == ["notes"]
    assert registry.entries["work"].settings == {"timezone": "Europe/Lisbon"}
    # a registered folder that does not exist is never made by a command (it may have been deleted under a service)
    missing = run("write", "digest/a.md", "--content", "default goes to notes", "--json", env=home)
    message = json.loads(missing.stdout)["error"]["message"]
    assert missing.returncode == 3 and f"the folder {tmp_path / 'notes'} of workspace 'notes' does not exist" in message
    assert "dreamflow workspace add notes" in message and not (tmp_path / "notes").exists()
    (tmp_path / "notes").mkdir()
    assert run("write", "digest/a.md", "--content", "default goes to notes", env=home).returncode == 0
    assert (tmp_path / "notes/digest/a.md").is_file()

    (tmp_path / "home/workspaces.yaml").write_text("workspaces:\n  notes:\n    path: /x\n    colour: red\n")
    done = run("list", env=home)
    said = " ".join(done.stderr.split())
    assert done.returncode == InvalidInput.exit_code and "unknown key 'colour'" in said and "Traceback" not in said


A, B = "/srv/memory/a", "/srv/memory/b"
# what a hand edit leaves -> (the line the error names, what it says)
BROKEN = {
    "workspaces: 5\n": (1, "`workspaces` must be a mapping of names, not a number"),
    "- a\n- b\n": (1, "the registry must be a mapping with `workspaces:`"),
    "null\nworkspaces: {}\n": (2, "not valid YAML: mapping values are not allowed"),
    "workspaces: [a, b]\n": (1, "`workspaces` must be a mapping of names, not a list"),
    f"workspaces:\n  a: {A}\n  b:\n": (3, "workspace 'b' needs a `path` (its folder), not empty"),
    f"workspaces:\n  a:\n    reads: []\n": (2, "workspace 'a' needs a `path`"),
    f"workspaces:\n  a:\n    path: {A}\n  b:\n    pa": (5, "the folder of workspace 'b' must be an absolute folder"),
    f"workspaces:\n  a:\n    path: {A}\n    reads: [b": (5, "not valid YAML: while parsing a flow sequence (line 4)"),
    f'workspaces:\n  a:\n    path: "{A}\n': (4, "not valid YAML: while scanning a quoted scalar (line 3)"),
    "workspaces:\n  a: /\n": (2, "the folder / of workspace 'a' overlaps Dreamflow's own folder"),
    "workspaces:\n  a: notes\n": (2, "must be an absolute folder (or start with ~), not 'notes'"),
    f"workspaces:\n  a: {A}\n  b: {A}/inner\n": (3, f"the folder {A}/inner of workspace 'b' overlaps workspace 'a'"),
    f"workspaces:\n  a:\n    path: {A}\n    reads: [nobody]\n": (4, "workspace 'a' reads 'nobody', which is not in"),
    f"workspaces:\n  a:\n    path: {A}\n    reads: [a]\n": (4, "workspace 'a' reads itself anyway"),
    f"workspaces:\n  a: {A}\n  a: {B}\n": (3, "'a' appears twice in `workspaces` (first at line 2)"),
    f"workspaces:\n  a: {A}\nworkspaces:\n  b: {B}\n": (3, "'workspaces' appears twice in the registry"),
    f"default: zz\nworkspaces:\n  a: {A}\n": (1, "the default workspace 'zz' is not in `workspaces`"),
    f"default: 5\nworkspaces:\n  a: {A}\n": (1, "`default` must be text, not a number"),
    f"workspaces:\n  123: {A}\n": (2, "a key in `workspaces` must be text, not a number ('123': put it in quotes"),
    f"workspaces:\n  on: {A}\n": (2, "must be text, not true/false ('on'"),
    f"workspaces:\n  Web App: {A}\n": (2, "workspace name 'Web App' must be 1-63 lower-case letters"),
    f"workspaces:\n  a:\n    path: {A}\n    folders: /src\n": (4, "`folders` of workspace 'a' must be a list"),
    f"workspaces:\n  a:\n    path: {A}\n    folders: [src]\n": (4, "must be an absolute folder"),
    f"workspace:\n  a: {A}\n": (1, "unknown key 'workspace' (known here: default, workspaces)"),
    f"workspaces:\n  a:\n    path: {A}\n    folder: [/src]\n": (4, "unknown key 'folder' (known here: path, reads"),
    f"workspaces:\n  a:\n    path: {A}\n    timezone: Europe/Berln\n": (4, "timezone 'Europe/Berln' is not an IANA"),
    f"workspaces:\n  a:\n    path: {A}\n    dream_cron: 3am\n": (4, "dream_cron '3am' is not a cron schedule"),
    "workspaces: {}\n---\nworkspaces: {}\n": (2, "not valid YAML: expected a single document"),
    "workspaces:\n\ta: /x\n": (2, "not valid YAML"),
}


@pytest.mark.parametrize("text", BROKEN)
def test_every_shape_a_hand_edit_leaves_is_an_error_naming_the_file_and_line(tmp_path, home, monkeypatch, text):
    monkeypatch.setenv("DREAMFLOW_HOME", home["DREAMFLOW_HOME"])
    path = tmp_path / "home/workspaces.yaml"
    path.parent.mkdir()
    path.write_text(text)
    line, said = BROKEN[text]
    with pytest.raises(InvalidInput) as refused:
        Registry.load(path)
    assert str(refused.value).startswith(f"workspace registry {path}:{line}: ") and said in str(refused.value), \
        str(refused.value)


def test_a_registry_that_is_empty_binary_huge_or_an_alias_bomb(tmp_path, home, monkeypatch):
    monkeypatch.setenv("DREAMFLOW_HOME", home["DREAMFLOW_HOME"])
    path = tmp_path / "home/workspaces.yaml"
    path.parent.mkdir()
    for empty in ("workspaces:\n", "workspaces: {}\n", "# a header\nworkspaces: {}\n"):
        path.write_text(empty)
        assert Registry.load(path).entries == {}, repr(empty)  # no workspaces, not an error
    # Dreamflow never writes a registry without `workspaces:`: a write cut short, not "no workspaces"
    for cut in ("", "\n\n", "  \n", "# only a comment\n", HEADER[:40], HEADER, "~\n", "\ufeff"):
        path.write_text(cut)
        with pytest.raises(InvalidInput, match=re.escape(f"the workspace registry {path} is empty")) as refused:
            Registry.load(path)
        assert "dreamflow workspace add" in str(refused.value) and "backup" in str(refused.value)
    refusals = {
        "workspaces:\n  a: /srv/caf\xe9\n".encode("latin-1"): f"workspace registry {path}:2: not UTF-8 text (byte 0xe9)",
        b"# padding\n" * 120_000: "is larger than 1024 KiB",
        ("workspaces:\n" + "".join(f"  w{i}: &w{i} [{', '.join([f'*w{i - 1}'] * 9) if i else 'x'}]\n"
                                     for i in range(9))).encode(): "its aliases expand to more than 10,000 values",
    }
    for data, said in refusals.items():
        path.write_bytes(data)
        with pytest.raises(InvalidInput, match=re.escape(said)):
            Registry.load(path)


def test_every_command_says_what_is_wrong_with_the_registry_and_exits_2(tmp_path, home):
    (tmp_path / "home").mkdir()
    (tmp_path / "home/workspaces.yaml").write_text("# my workspaces\nworkspaces: 5\n")
    said = f"workspace registry {tmp_path / 'home/workspaces.yaml'}:2: `workspaces` must be a mapping of names"
    for command in (["list"], ["search", "tea"], ["status"], ["write", "a.md", "--content", "x"], ["workspace", "list"],
                    ["workspace", "add", "x", str(tmp_path / "x")], ["token", "create", "--name", "t", "--workspace", "x"]):
        done = run(*command, "--json", env=home)
        assert done.returncode == InvalidInput.exit_code and "Traceback" not in done.stderr, (command, done.stderr)
        assert json.loads(done.stdout)["error"]["message"].startswith(said), (command, done.stdout)
    for command in (["start", "--port", "1"], ["mcp"]):  # refused before anything listens
        done = run(*command, env=home, stdin="")
        assert done.returncode == InvalidInput.exit_code, done.stderr
        assert "".join(said.split()) in "".join(done.stderr.split()), done.stderr  # the terminal may fold the path
    hook = run("hook", "claude-code", env=home, stdin=json.dumps({"session_id": "s", "hook_event_name": "Stop",
                                                                   "cwd": str(tmp_path)}))
    assert hook.returncode == 0 and said in " ".join(hook.stderr.split()), hook.stderr  # a hook never fails its host


def test_an_empty_registry_is_an_error_never_no_registry(tmp_path, home):
    # a 0-byte workspaces.yaml (a write cut short) used to read as "no registry": `-w alpha` became ./alpha
    (tmp_path / "home").mkdir()
    (tmp_path / "home/workspaces.yaml").write_bytes(b"")
    for command in (["-w", "alpha", "search", "x"], ["workspace", "list"], ["status"]):
        done = run(*command, "--json", env=home, cwd=tmp_path)
        assert done.returncode == InvalidInput.exit_code == 2, (command, done.stdout, done.stderr)
        message = json.loads(done.stdout)["error"]["message"]
        assert str(tmp_path / "home/workspaces.yaml") in message and "dreamflow workspace add" in message
    assert not (tmp_path / "alpha").exists()


def test_workspace_by_name_by_folder_by_cwd_and_by_environment(tmp_path, home):
    folders = registered(tmp_path, home)
    registry = Registry.load(tmp_path / "home/workspaces.yaml")
    assert resolve("web", registry=registry) == ("web", folders["web"])
    assert resolve(str(folders["api"]), registry=registry) == ("api", folders["api"])  # a registered folder
    assert resolve(str(tmp_path / "loose"), registry=registry) == ("default", tmp_path / "loose")
    (tmp_path / "src/web/pkg").mkdir(parents=True)
    assert resolve(None, cwd=tmp_path / "src/web/pkg", registry=registry) == ("web", folders["web"])
    assert resolve(None, cwd=tmp_path, registry=registry) == ("personal", folders["personal"])  # the default

    here = run("read", "digest/wiki/web-note.md", "--json", env=home, cwd=tmp_path / "src/web/pkg")
    assert here.returncode == 0 and "vite" in json.loads(here.stdout)["content"]
    named = run("read", "digest/wiki/api-note.md", "--json", env={**home, "DREAMFLOW_WORKSPACE": "api"})
    assert named.returncode == 0 and "40 ms" in json.loads(named.stdout)["content"]


def test_searches_read_declared_workspaces_and_nothing_else(tmp_path, home):
    registered(tmp_path, home)
    # web declares it reads personal: its searches find both, each hit naming its workspace, never api's
    assert sorted(hits(run("--workspace", "web", "search", "coffee", "--json", env=home))) == [
        ("personal", "digest/wiki/personal-note.md"), ("web", "digest/wiki/web-note.md")]
    # personal reads nothing: only its own
    assert hits(run("--workspace", "personal", "search", "coffee", "--json", env=home)) == [
        ("personal", "digest/wiki/personal-note.md")]
    # on purpose: several named at once, merged by score; the limit holds across them
    chosen = hits(run("--workspace", "web", "search", "coffee", "--workspaces", "api", "--workspaces", "web",
                      "--json", env=home))
    assert sorted(chosen) == [("api", "digest/wiki/api-note.md"), ("web", "digest/wiki/web-note.md")]
    assert len(hits(run("search", "coffee", "--workspaces", "api", "--workspaces", "web", "--workspaces",
                        "personal", "--limit", "2", "--json", env=home))) == 2
    unknown = run("search", "coffee", "--workspaces", "nope", "--json", env=home)
    assert unknown.returncode == 3 and json.loads(unknown.stdout)["error"]["type"] == "NotFound"
    # writes go to exactly one workspace
    assert run("--workspace", "web", "write", "digest/wiki/new.md", "--content", "x", env=home).returncode == 0
    assert (tmp_path / "web/digest/wiki/new.md").is_file() and not (tmp_path / "personal/digest/wiki/new.md").exists()


def test_a_hit_of_a_read_workspace_names_it_and_read_stat_trace_and_recall_follow_it(tmp_path, home):
    folders = registered(tmp_path, home)
    text = run("--workspace", "web", "search", "coffee", env=home).stdout
    assert "personal:digest/wiki/personal-note.md:1-1" in text and "\ndigest/wiki/web-note.md:1-1" in f"\n{text}"
    rows = json.loads(run("--workspace", "web", "search", "coffee", "--json", env=home).stdout)
    assert {(h["workspace"], h["address"]) for h in rows} == {
        ("personal", "personal:digest/wiki/personal-note.md"), ("web", "digest/wiki/web-note.md")}
    assert "personal:digest/wiki/personal-note.md" in run("--workspace", "web", "node-search", "coffee",
                                                          env=home).stdout
    for args in (["read"], ["stat", "--json"], ["trace", "L1", "--json"]):
        done = run("--workspace", "web", args[0], "personal:digest/wiki/personal-note.md", *args[1:], env=home)
        assert done.returncode == 0, done.stderr
        assert ("oat flat white" in done.stdout) if args == ["read"] else (
            json.loads(done.stdout)["workspace"] == "personal"), done.stdout
    for bad, code, why in (("nobody:digest/x.md", 3, "no such workspace"),
                           ("personal:../api/digest/wiki/api-note.md", 2, "escapes the workspace")):
        done = run("--workspace", "web", "read", bad, env=home)
        assert done.returncode == code and why in " ".join(done.stderr.split()), done.stderr
    wrote = run("--workspace", "web", "write", "personal:digest/wiki/x.md", "--content", "x", env=home)
    assert wrote.returncode == 2 and "a write goes to the workspace of the call" in " ".join(wrote.stderr.split())
    assert not (folders["personal"] / "digest/wiki/x.md").exists() and not (folders["web"] / "personal:digest").exists()

    # recall reads what search reads: one budget, pieces ranked together, each naming its workspace
    answer = json.loads(run("--workspace", "web", "recall", "coffee", "--session", "s1", "--json", env=home).stdout)
    assert {i["workspace"] for i in answer["items"]} == {"web", "personal"}
    assert "[personal:digest/wiki/personal-note.md:1]" in answer["text"] and "api" not in answer["text"]
    again = json.loads(run("--workspace", "web", "recall", "coffee", "--session", "s1", "--json", env=home).stdout)
    assert again["items"] == [] and again["withheld"] == 2  # the session's record (in web) covers both
    assert not (folders["personal"] / "metadata/recall").exists()
    small = json.loads(run("--workspace", "web", "recall", "coffee", "--budget", "50", "--json", env=home).stdout)
    assert small["tokens"] <= 50 and sum(i["tokens"] for i in small["items"]) <= 50  # one budget for both
    own = json.loads(run("--workspace", "personal", "recall", "coffee", "--json", env=home).stdout)
    assert [i["workspace"] for i in own["items"]] == ["personal"] and "[digest/wiki/personal-note.md:1]" in own["text"]


def test_tokens_are_printed_once_stored_as_hashes_and_revocable(tmp_path, home):
    registered(tmp_path, home)
    made = run("token", "create", "--name", "laptop", "--workspace", "web", "--read-only", "--json", env=home)
    assert made.returncode == 0, made.stderr
    secret = json.loads(made.stdout)["token"]
    stored = (tmp_path / "home/tokens.json").read_text()
    assert secret not in stored and "laptop" in stored
    assert oct((tmp_path / "home/tokens.json").stat().st_mode & 0o777) == "0o600"
    admin = tmp_path / "home/admin-token"  # without DREAMFLOW_API_TOKEN this machine's CLI gets an admin token
    assert admin.is_file() and oct(admin.stat().st_mode & 0o777) == "0o600"
    # the first token says what changed: HTTP needs a token now, the dashboard asks to sign in, where the admin token is
    said = json.loads(made.stdout)["changed"]
    assert any("every HTTP request now needs one" in line and "dashboard asks to sign in" in line for line in said)
    assert any(str(admin) in line for line in said), said
    second = run("token", "create", "--name", "phone", "--workspace", "web", env=home)
    assert second.returncode == 0 and "first token" not in second.stdout  # said once, with the first
    assert run("token", "revoke", "phone", env=home).returncode == 0
    listed = json.loads(run("token", "list", "--json", env=home).stdout)
    assert listed == [{"name": "laptop", "workspaces": ["web"], "read_only": True, "created": listed[0]["created"]}]
    assert run("token", "create", "--name", "x", "--workspace", "nope", env=home).returncode == 3
    assert run("token", "revoke", "laptop", env=home).returncode == 0
    assert json.loads(run("token", "list", "--json", env=home).stdout) == []


def test_the_hook_sends_each_repository_session_to_its_workspace(tmp_path, home):
    folders = registered(tmp_path, home)
    (tmp_path / "src/web").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    for session, cwd in (("web-session", tmp_path / "src/web"), ("other-session", tmp_path / "elsewhere")):
        transcript = tmp_path / f"{session}.jsonl"
        transcript.write_text(FIXTURE.read_text().replace(SESSION, session).replace("/home/ana/trip-planner", str(cwd)))
        payload = {"session_id": session, "transcript_path": str(transcript), "cwd": str(cwd),
                   "hook_event_name": "Stop"}
        done = run("hook", "claude-code", "--verbose", env=home, cwd=tmp_path, stdin=json.dumps(payload))
        assert done.returncode == 0 and "message(s)" in done.stderr, done.stderr
    assert dialog(folders["web"], "web-session") and not dialog(folders["personal"], "web-session")
    assert dialog(folders["personal"], "other-session") and not dialog(folders["web"], "other-session")
    assert not dialog(folders["api"], "web-session") and not dialog(folders["api"], "other-session")


def test_dreamflow_home_and_a_workspace_never_share_a_folder(tmp_path, home, monkeypatch):
    # a new user in their home folder: the default workspace ./.dreamflow is not where Dreamflow keeps Prefect
    user = tmp_path / "user"
    user.mkdir()
    env = {k: v for k, v in home.items() if k not in ("DREAMFLOW_HOME", "XDG_STATE_HOME")}
    env["HOME"] = str(user)
    done = run("write", "daily/2024-01-01/a.md", "--content", "hello", env=env, cwd=user)
    assert done.returncode == 0, done.stderr
    status = json.loads(run("status", "--json", env=env, cwd=user).stdout)
    assert status["service"]["workspace"] == str(user / ".dreamflow")
    assert not status["logs"].startswith(str(user / ".dreamflow"))
    # an explicit overlap is refused with a clear error, before anything is indexed
    clash = {**env, "DREAMFLOW_HOME": str(user / ".dreamflow")}
    refused = run("search", "server", env=clash, cwd=user)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == InvalidInput.exit_code and "overlap" in said and "DREAMFLOW_HOME" in said, said
    monkeypatch.setenv("DREAMFLOW_HOME", str(tmp_path / "w/state"))
    with pytest.raises(InvalidInput, match="overlap"):
        resolve(str(tmp_path / "w"))


def test_status_without_the_service_shows_every_registered_workspace(tmp_path, home):
    from storage.files import checkpoints
    from storage.files.workspace import Workspace

    folders = registered(tmp_path, home)
    checkpoints.save(Workspace(folders["web"]), "dream", {"last_run": {
        "date": "2024-07-01", "at": "2024-07-02T03:00:05+00:00", "units": 4, "failed": 1}})
    assert run("workspace", "add", "unused", str(tmp_path / "unused"), env=home).returncode == 0
    status = json.loads(run("status", "--json", env=home).stdout)
    rows = {r["name"]: r for r in status["workspaces"]}
    assert list(rows) == ["api", "personal", "unused", "web"] and rows["personal"]["default"]
    assert [rows[n]["index"]["files"] for n in rows] == [1, 1, 0, 1] and rows["web"]["path"] == str(folders["web"])
    assert rows["web"]["last_dream"] == {"start_time": "2024-07-02T03:00:05+00:00",
                                         "state": "of 2024-07-01: 4 units, 1 failed"}
    assert rows["api"]["last_dream"] is None and all(r["next_dream"] is None for r in rows.values())
    assert not any((tmp_path / "unused").iterdir()), "status makes nothing in a workspace nobody used yet"
    text = run("status", env=home).stdout
    assert "Workspaces  4 registered, none served while no service runs;" in text, text
    assert re.search(rf"\n  web +{re.escape(str(folders['web']))}\n +1 files, 1 chunks, 0 links; last dream "
                     r"2024-07-02T03:00\+00:00 \(of 2024-07-01: 4 units, 1 failed\); next dream when a service runs",
                     text), text


def test_a_running_service_takes_the_admin_token_the_first_token_create_makes(tmp_path, home, monkeypatch):
    from engine.config import grants
    from engine.config.grants import ADMIN, Tokens

    monkeypatch.delenv("DREAMFLOW_API_TOKEN", raising=False)
    monkeypatch.setenv("DREAMFLOW_HOME", home["DREAMFLOW_HOME"])
    (tmp_path / "home").mkdir()
    tokens = Tokens(None)  # what `dreamflow start` checks when no token existed as it started
    assert not tokens.required and tokens.grant(None) is ADMIN
    laptop = grants.create("laptop", ["default"])
    admin = (tmp_path / "home/admin-token").read_text().strip()
    # at once, without a restart: HTTP needs a token, this machine's admin token (CLI, jobs, stdio MCP) is taken
    assert tokens.required and tokens.grant(None) is None and tokens.grant("dft_wrong") is None
    assert tokens.grant(admin) is ADMIN and tokens.grant(laptop).workspaces == frozenset({"default"})
    assert Tokens("fixed-admin").grant(admin) is None  # a service given DREAMFLOW_API_TOKEN keeps that one
