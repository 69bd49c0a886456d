"""Hard boundaries between workspaces on the real service: 3 workspaces x 4 tokens (admin, one read-write, one
read-only, one granting two) x every HTTP route, every MCP tool and resource, job start and status, and the CLI
through the service. Each call is allowed or denied exactly as granted, and a scan of every answer finds no
name, folder, file or text of a workspace the token does not grant. Declared sharing (alpha reads gamma)
returns hits of the shared workspace only to a token that also grants it."""

import json
import os
import re

import anyio
import httpx
import pytest
from service_harness import RunningService, loopback, register

from engine import ops
from engine.config.grants import UNKNOWN_WORKSPACE

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

ADMIN = "admin-secret-for-isolation"
NAMES = ("wsalpha1", "wsbeta2", "wsgamma3")
MARK = {"wsalpha1": "quokkaalpha", "wsbeta2": "quokkabeta", "wsgamma3": "quokkagamma"}
BETA_SCHEDULE = {"timezone": "Asia/Kolkata", "dream_cron": "15 2 * * *"}  # beta's own; the others the service's
QUERY = "lives here"  # in every workspace's page: a hit shows which workspaces a search read
# token -> (workspaces it grants, read-only)
TOKENS = {"admin": (set(NAMES), False), "a": ({"wsalpha1"}, False), "b": ({"wsbeta2"}, True),
          "ab": ({"wsalpha1", "wsbeta2"}, False)}

# Arguments of every operation, per caller (`{m}` a page of the workspace, `{t}` the token's scratch name).
ARGS = {
    "read": {"path": "digest/wiki/{m}-page.md"},
    "write": {"path": "daily/2024-01-01/{t}.md", "content": "scratch"},
    "create": {"path": "daily/2024-01-02/{t}.md", "content": "scratch"},
    "edit": {"path": "daily/2024-01-01/{t}.md", "old": "scratch", "new": "scratch", "replace_all": True},
    "append": {"path": "daily/2024-01-01/{t}.md", "content": "more"},
    "prepend": {"path": "daily/2024-01-01/{t}.md", "content": "before"},
    "delete": {"path": "daily/2024-01-02/{t}.md"},
    "move": {"src": "daily/2024-01-03/{t}-none.md", "dst": "daily/2024-01-03/{t}-moved.md"},
    "stat": {"path": "digest/wiki/{m}-page.md"},
    "list": {"prefix": "digest"},
    "frontmatter_get": {"path": "digest/wiki/{m}-page.md"},
    "frontmatter_update": {"path": "daily/2024-01-01/{t}.md", "metadata": {"seen": 1}},
    "frontmatter_delete_keys": {"path": "daily/2024-01-01/{t}.md", "keys": ["seen"]},
    "tags": {},
    "daily_list": {},
    "daily_reindex": {"date": "2024-01-01"},
    "search": {"query": QUERY},
    "recall": {"query": QUERY, "session": "iso-{t}"},
    "node_search": {"query": QUERY},
    "traverse": {"paths": ["digest/wiki/{m}-page.md"]},
    "trace": {"path": "digest/wiki/{m}-page.md", "fact": "L3"},
    "retract": {"path": "digest/wiki/{m}-page.md", "fact": "f99", "reason": "scratch"},
    "doctor": {},
    "doctor_fix": {},
    "relink": {"target": "digest/none.md", "new_target": "digest/none2.md"},
    "reindex": {},
    "reconcile": {},
    "index_stats": {},
    "optimize": {},
}


def args_for(op: str, workspace: str, token: str) -> dict:
    text = json.dumps(ARGS[op]).replace("{m}", MARK[workspace]).replace("{t}", f"scratch-{token}")
    return json.loads(text)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """The service serving alpha (default), beta and gamma, with the tokens; yields (service, secrets, folders).
    Registered and granted in this process (service_harness.register): the service start is what this module pays
    for."""
    root = tmp_path_factory.mktemp("isolation")
    folders = {"wsgamma3": root / "gamma-store", "wsbeta2": root / "beta-store", "wsalpha1": root / "ws"}
    for name, folder in folders.items():
        page = folder / f"digest/wiki/{MARK[name]}-page.md"
        page.parent.mkdir(parents=True)
        page.write_text(f"# {MARK[name]}\n\n{MARK[name]} lives here, see [[digest/wiki/{MARK[name]}-other.md]].\n")
    secrets = register(root, ADMIN, folders, {token: grant for token, grant in TOKENS.items() if token != "admin"},
                       reads={"wsalpha1": ["wsgamma3"]}, settings={"wsbeta2": BETA_SCHEDULE})
    service = RunningService.start(root, token=ADMIN, env={"DREAMFLOW_MCP_TOOLS": "all"})
    try:
        yield service, secrets, folders
    finally:
        service.stop()


def forbidden_strings(token: str, folders: dict) -> list[str]:
    """Everything that would betray a workspace the token does not grant."""
    found = []
    for name in NAMES:
        if name not in TOKENS[token][0]:
            found += [name, str(folders[name]), MARK[name]]
    return found


def expect(token: str, workspace: str, writes: bool) -> str:
    granted, read_only = TOKENS[token]
    if workspace not in granted:
        return "hidden"
    return "refused" if writes and read_only else "allowed"


def outcome(status: int, body) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if status == 404 and error and error.get("message") == UNKNOWN_WORKSPACE:
        return "hidden"
    if status == 403 and error and error.get("type") == "Forbidden":
        return "refused"
    assert status != 401, body
    return "allowed"


class Checker:
    """Collects every answer a token got and fails on any forbidden string in any of them."""

    def __init__(self, token: str, folders: dict):
        self.token, self.bad, self.answers = token, forbidden_strings(token, folders), 0

    def scan(self, what: str, text: str) -> None:
        self.answers += 1
        leaked = [s for s in self.bad if s in text]
        assert not leaked, f"{what} answered token {self.token} with {leaked}: {text[:500]}"


def test_every_http_route_allows_hides_or_refuses_exactly_as_granted(isolated):
    service, secrets, folders = isolated
    runs = {name: loopback.post(f"{service.url}/workspaces/{name}/flows/reindex", json={}, headers=service.headers,
                                timeout=60).json()["id"] for name in NAMES}
    for token in TOKENS:
        check = Checker(token, folders)
        client = httpx.Client(base_url=service.url, timeout=60, headers={"Authorization": f"Bearer {secrets[token]}"})
        with client:
            for name in NAMES:
                base = f"/workspaces/{name}"
                for op in ops.OPS:
                    if op.host_paths:
                        continue
                    resp = client.post(f"{base}/ops/{op.name}", json=args_for(op.name, name, token))
                    check.scan(f"{op.name} on {name}", resp.text)
                    assert outcome(resp.status_code, resp.json()) == expect(token, name, op.writes), \
                        (token, name, op.name, resp.status_code, resp.text[:300])
                calls = [
                    ("POST", "/ops/upload", {"content": "aGVsbG8=", "name": f"up-{token}.txt", "overwrite": True}, True),
                    ("POST", "/ops/download", {"path": f"digest/wiki/{MARK[name]}-page.md"}, False),
                    ("POST", "/turn", {"session_id": f"iso-{token}", "messages": [{"role": "user", "content": "hi"}]},
                     True),
                    ("GET", "/status", None, False),
                    ("POST", "/proactive", {}, False),
                    ("POST", "/flows/reindex", {}, True),
                ]
                for method, path, body, writes in calls:
                    resp = client.request(method, base + path, json=body)
                    check.scan(f"{path} on {name}", resp.text)
                    parsed = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
                    assert outcome(resp.status_code, parsed) == expect(token, name, writes), \
                        (token, name, path, resp.status_code, resp.text[:300])
                for path in (f"/flows/runs/{runs[name]}", f"/flows/runs/{runs[name]}/logs"):
                    resp = client.get(path)
                    check.scan(path, resp.text)
                    visible = name in TOKENS[token][0]
                    assert (resp.status_code == 200) == visible, (token, name, path, resp.status_code, resp.text)
                    if not visible:
                        assert resp.json()["error"]["message"] == f"no flow run {runs[name]}"
            for path in ("/health", "/workspaces", "/status", "/openapi.json"):
                resp = client.get(path)
                check.scan(path, resp.text)
                assert resp.status_code == 200, (token, path, resp.text)
            listed = {w["name"] for w in client.get("/workspaces").json()}
            assert listed == TOKENS[token][0]
            # unscoped: the default workspace (alpha) when granted, else the token's first
            search = client.post("/ops/search", json={"query": QUERY}).json()
            check.scan("/ops/search", json.dumps(search))
            shared = {"wsalpha1", "wsgamma3"} if token == "admin" else ({"wsalpha1"} & TOKENS[token][0] or {"wsbeta2"})
            assert {hit["workspace"] for hit in search} == shared, (token, search)
        assert check.answers == 3 * (sum(not op.host_paths for op in ops.OPS) + 8) + 5  # nothing skipped


def test_unknown_and_missing_tokens_are_refused_and_prefect_stays_behind_the_admin(isolated):
    service, secrets, _ = isolated
    for headers in ({}, {"Authorization": "Bearer dft_not-a-token"}, {"Authorization": "Basic abc"}):
        for path in ("/health", "/workspaces/wsalpha1/ops/list", "/mcp"):
            resp = loopback.post(service.url + path, headers={**headers, "Content-Type": "application/json"}, json={},
                                 timeout=60)
            assert resp.status_code == 401, (path, headers, resp.text)
            assert "wsalpha1" not in resp.text and "quokka" not in resp.text
    for token in ("a", "b", "ab"):  # a workspace token is no Prefect credential
        resp = loopback.get(f"{service.prefect_api}/flows/", auth=("dreamflow", secrets[token]), timeout=20)
        assert resp.status_code == 401, "Prefect's API must stay behind the admin credentials"


async def _mcp_calls(url: str, secret: str, token: str, folders: dict) -> int:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    check = Checker(token, folders)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                listed = await session.call_tool("workspaces", {})
                check.scan("workspaces", listed.content[0].text)
                rows = listed.structured_content
                rows = rows["results"] if isinstance(rows, dict) else rows  # a list, wrapped for older protocols
                assert {w["name"] for w in rows} == TOKENS[token][0]
                for name in NAMES:
                    for tool, tool_args in [*((op.name, args_for(op.name, name, token)) for op in ops.OPS
                                              if op.name in tools),
                                            ("turn", {"session_id": f"mcp-{token}"}),
                                            ("dream", {}), ("auto_memory", {"session_id": f"mcp-{token}"})]:
                        result = await session.call_tool(tool, {**tool_args, "workspace": name})
                        text = result.content[0].text
                        check.scan(f"{tool} on {name}", text + json.dumps(result.structured_content))
                        writes = not tools[tool].annotations.read_only_hint
                        if result.is_error and text == UNKNOWN_WORKSPACE:
                            got = "hidden"
                        elif result.is_error and "may only read" in text:
                            got = "refused"
                        else:
                            got = "allowed"
                        assert got == expect(token, name, writes), (token, name, tool, text[:300])
                    for uri in (f"dreamflow://digest/wiki/{MARK[name]}-page.md?workspace={name}",):
                        try:
                            page = await session.read_resource(uri)
                        except Exception as exc:  # the SDK raises the server's error
                            check.scan(uri, str(exc))
                            assert name not in TOKENS[token][0] and UNKNOWN_WORKSPACE in str(exc), (token, exc)
                        else:
                            check.scan(uri, page.contents[0].text)
                            assert name in TOKENS[token][0] and MARK[name] in page.contents[0].text
                resources = await session.list_resources()
                check.scan("resources/list", json.dumps([str(r.uri) for r in resources.resources]))
                templates = await session.list_resource_templates()
                check.scan("resources/templates/list", templates.model_dump_json())
    return check.answers


def test_every_mcp_tool_and_resource_allows_hides_or_refuses_exactly_as_granted(isolated):
    service, secrets, folders = isolated
    for token in TOKENS:
        answers = anyio.run(_mcp_calls, f"{service.url}/mcp", secrets[token], token, folders)
        assert answers > 3 * 20


def test_the_cli_through_the_service_sees_only_what_its_token_grants(isolated):
    """The CLI's commands in this process (test_cli.invoke; test_service.py runs the CLI process against a
    service), with the service's environment and the token."""
    from test_cli import invoke

    service, secrets, folders = isolated
    for token in ("a", "b"):
        check = Checker(token, folders)
        env = {**{key: None for key in os.environ if key not in service.env}, **service.env,
               "DREAMFLOW_API_TOKEN": secrets[token]}
        for name in NAMES:
            for args, writes in ((["search", QUERY, "--json"], False),
                                 (["write", f"daily/2024-02-01/cli-{token}.md", "--content", "x", "--json"], True)):
                done = invoke(["--workspace", str(folders[name]), *args], env=env)
                check.scan(f"cli {args[0]} on {name}", done.stdout + done.stderr)
                body = json.loads(done.stdout)
                want = expect(token, name, writes)
                if want == "allowed":
                    assert done.returncode == 0, (token, name, args, done.stdout)
                else:
                    assert body["error"]["type"] == ("NotFound" if want == "hidden" else "Forbidden"), body


def test_jobs_search_their_own_workspace_only_while_agents_get_the_declared_sharing(isolated):
    from engine.access.client import RemoteMemory
    from engine.access.job_memory import JobMemory

    service, _, _ = isolated
    remote = RemoteMemory(service.url, token=ADMIN, workspace="wsalpha1")
    assert {hit["workspace"] for hit in remote.search(QUERY)} == {"wsalpha1", "wsgamma3"}  # alpha reads gamma
    assert {hit["workspace"] for hit in JobMemory(remote).search(QUERY)} == {"wsalpha1"}  # a job links within one


def test_status_shows_each_served_workspace_the_token_may_see(isolated):
    """`GET /status` and `dreamflow status`: every served workspace with its index counts, last dream and next
    dream (from its cron and timezone); a token sees the rows of its workspaces only, never their folders."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from service_harness import wait_for
    from test_cli import invoke

    service, secrets, folders = isolated
    beta = service.deployment("auto-dream/nightly-wsbeta2")  # a dream of beta that ran, as Prefect records one
    dreamt = service.prefect("POST", f"/deployments/{beta['id']}/create_flow_run", {"state": {"type": "RUNNING"}})
    service.prefect("POST", f"/flow_runs/{dreamt['id']}/set_state", {"state": {"type": "COMPLETED"}, "force": True})

    def status(token: str) -> dict:
        return loopback.get(f"{service.url}/status", headers={"Authorization": f"Bearer {secrets[token]}"},
                            timeout=60).json()

    seen: dict = {}

    def scheduled() -> bool:  # Prefect's scheduler plans each nightly deployment's runs soon after it is made
        seen.update(status("admin"))
        return len(seen.get("workspaces", [])) == 3 and all(r["next_dream"] for r in seen["workspaces"])

    try:
        wait_for(scheduled, 120, "a scheduled dream of each workspace")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {seen.get('workspaces')}") from None
    rows = {r["name"]: r for r in seen["workspaces"]}
    assert list(rows) == list(NAMES) and [r["default"] for r in rows.values()] == [True, False, False]
    for name, row in rows.items():
        counts = loopback.post(f"{service.url}/workspaces/{name}/ops/index_stats", json={}, headers=service.headers,
                               timeout=60).json()
        assert row["path"] == str(folders[name]) and row["index"] == {k: counts[k] for k in ("files", "chunks", "links")}
        assert row["index"]["files"] >= 1, row
    assert rows["wsbeta2"]["schedule"] == {"cron": "15 2 * * *", "timezone": "Asia/Kolkata"}
    assert [rows[n]["schedule"]["cron"] for n in ("wsalpha1", "wsgamma3")] == ["0 3 * * *", "14 3 * * *"]  # 7 min apart
    planned = datetime.fromisoformat(rows["wsbeta2"]["next_dream"]["expected_start_time"]).astimezone(
        ZoneInfo("Asia/Kolkata"))
    assert (planned.hour, planned.minute) == (2, 15)
    assert rows["wsbeta2"]["last_dream"]["id"] == dreamt["id"] and rows["wsbeta2"]["last_dream"]["state"] == "Completed"
    assert {rows["wsbeta2"][key]["deployment"] for key in ("last_dream", "next_dream")} == {
        "auto-dream/nightly-wsbeta2"}  # its own deployment's name, not the first workspace's `nightly`
    assert rows["wsalpha1"]["last_dream"] is None and rows["wsgamma3"]["last_dream"] is None

    for token in ("a", "b", "ab"):
        answer = status(token)
        Checker(token, folders).scan("/status", json.dumps(answer))
        assert {r["name"] for r in answer["workspaces"]} == TOKENS[token][0], (token, answer["workspaces"])
        assert not any("path" in r for r in answer["workspaces"])

    env = {**{key: None for key in os.environ if key not in service.env}, **service.env}
    text = invoke(["--workspace", str(folders["wsalpha1"]), "status"], env=env).stdout
    assert "Workspaces  3 served;" in text and f"Dashboard   {service.url}/ui/" in text, text
    for name in NAMES:
        files = rows[name]["index"]["files"]
        assert re.search(rf"\n  {name}( \(default\))? +{re.escape(str(folders[name]))}\n +{files} files, ", text), text
    started = datetime.fromisoformat(rows["wsbeta2"]["last_dream"]["start_time"]).astimezone(ZoneInfo("Asia/Kolkata"))
    assert (f"; last dream {started:%Y-%m-%d %H:%M} Asia/Kolkata (Completed); "
            f"next dream {planned:%Y-%m-%d %H:%M} Asia/Kolkata (cron 15 2 * * *)") in text, text
    narrow = invoke(["--workspace", str(folders["wsalpha1"]), "status", "--json"],
                    env={**env, "DREAMFLOW_API_TOKEN": secrets["a"]})
    assert [r["name"] for r in json.loads(narrow.stdout)["workspaces"]] == ["wsalpha1"], narrow.stdout


def test_a_broken_registry_leaves_the_service_serving_the_one_it_read_before(isolated):
    """Shares this module's service (three workspaces): the registry it re-reads is cut in half by a hand edit."""
    from service_harness import wait_for

    service, _, _ = isolated
    path = service.home / "workspaces.yaml"
    good = path.read_text()
    cut = good[:good.index("wsgamma3:")] + "wsgamma3:\n    pa"  # the file cut in half
    try:
        path.write_text(cut)
        said = f"WARNING: workspace registry {path}:{cut.count(chr(10)) + 1}: the folder of workspace 'wsgamma3' " \
               "must be an absolute folder"
        wait_for(lambda: said in service.log(), 30, "the service to say why it keeps the registry it read before")
        listed = loopback.get(f"{service.url}/workspaces", headers=service.headers, timeout=60).json()
        assert [w["name"] for w in listed] == list(NAMES)
        assert service.log().count(said) == 1, "said once per change, not on every look"
    finally:
        path.write_text(good)


async def _follow_over_mcp(url: str, secret: str) -> tuple[str, str, str, str]:
    """(search text, read text of its gamma hit, recall text, the read of an ungranted workspace's file) over /mcp."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                found = (await session.call_tool("search", {"query": QUERY})).content[0].text
                where = re.search(r"^(wsgamma3:\S+?):\d+-\d+ ", found, re.M).group(1)
                opened = await session.call_tool("read", {"path": where})
                assert not opened.is_error, opened.content[0].text
                recalled = (await session.call_tool("recall", {"query": QUERY})).content[0].text
                denied = await session.call_tool("read", {"path": "wsbeta2:digest/wiki/quokkabeta-page.md",
                                                          "workspace": "wsalpha1"})
                return found, opened.content[0].text, recalled, denied.content[0].text if denied.is_error else ""


def test_a_hit_of_a_read_workspace_names_it_and_every_surface_follows_it(isolated):
    """alpha reads gamma: over HTTP, /mcp, /inject and the CLI through the service, gamma's hits are
    `wsgamma3:path`, read/stat/trace follow that form where the token covers gamma, and never elsewhere."""
    from test_cli import invoke

    service, secrets, folders = isolated
    gamma_page = "digest/wiki/quokkagamma-page.md"

    def post(route: str, body: dict, token: str = "admin") -> httpx.Response:
        return loopback.post(f"{service.url}/workspaces/wsalpha1{route}", json=body, timeout=60,
                             headers={"Authorization": f"Bearer {secrets[token]}"})

    hits = post("/ops/search", {"query": QUERY}).json()
    assert {(h["workspace"], h["address"]) for h in hits} == {
        ("wsalpha1", "digest/wiki/quokkaalpha-page.md"), ("wsgamma3", f"wsgamma3:{gamma_page}")}
    for op, extra in (("read", {}), ("stat", {}), ("trace", {"fact": "L3"})):
        answer = post(f"/ops/{op}", {"path": f"wsgamma3:{gamma_page}", **extra})
        assert answer.status_code == 200 and answer.json()["workspace"] == "wsgamma3", (op, answer.text)
    assert "quokkagamma lives here" in post("/ops/read", {"path": f"wsgamma3:{gamma_page}"}).json()["content"]
    recalled = post("/ops/recall", {"query": QUERY}).json()
    assert {i["workspace"] for i in recalled["items"]} == {"wsalpha1", "wsgamma3"}
    assert f"[wsgamma3:{gamma_page}:" in recalled["text"] and "[digest/wiki/quokkaalpha-page.md:" in recalled["text"]
    # a token of alpha only: gamma is as if it did not exist, in search, recall and a `wsgamma3:` path alike
    assert {h["workspace"] for h in post("/ops/search", {"query": QUERY}, "a").json()} == {"wsalpha1"}
    assert "wsgamma3" not in post("/ops/recall", {"query": QUERY}, "a").text
    hidden = post("/ops/read", {"path": f"wsgamma3:{gamma_page}"}, "a")
    assert hidden.status_code == 404 and hidden.json()["error"]["type"] == "NotFound"
    escape = post("/ops/read", {"path": "wsgamma3:../beta-store/digest/wiki/quokkabeta-page.md"})
    assert escape.status_code == 400 and escape.json()["error"]["type"] == "PathError", escape.text
    written = post("/ops/write", {"path": "wsgamma3:daily/2024-01-09/x.md", "content": "x"})
    assert written.status_code == 400 and not (folders["wsgamma3"] / "daily/2024-01-09").exists()
    assert not (folders["wsalpha1"] / "wsgamma3:daily").exists()

    found, opened, recall_text, denied = anyio.run(_follow_over_mcp, f"{service.url}/mcp", secrets["admin"])
    assert f"wsgamma3:{gamma_page}:" in found and "\ndigest/wiki/quokkaalpha-page.md:" in f"\n{found}"
    assert "quokkagamma lives here" in opened and f"[wsgamma3:{gamma_page}:" in recall_text
    assert denied == ""  # the admin may read beta too: one call in the workspace its path names

    injected = post("/inject", {"event": "UserPromptSubmit", "prompt": "who lives here quokkagamma", "budget": 500,
                                "min_score": 0, "min_relevance": 0, "min_words": 0}).json()["text"]
    assert f"[wsgamma3:{gamma_page}:" in injected, injected
    begun = post("/inject", {"event": "SessionStart", "session": "iso-start", "budget": 800}).json()["text"]
    assert f"[wsgamma3:{gamma_page}:" in begun and "quokkabeta" not in begun, begun
    assert not (folders["wsgamma3"] / "metadata/recall/iso-start.json").exists()  # the record stays in alpha
    assert (folders["wsalpha1"] / "metadata/recall/iso-start.json").exists()

    env = {**{key: None for key in os.environ if key not in service.env}, **service.env}
    text = invoke(["--workspace", str(folders["wsalpha1"]), "search", QUERY], env=env).stdout
    assert f"wsgamma3:{gamma_page}:" in text, text
    read = invoke(["--workspace", str(folders["wsalpha1"]), "read", f"wsgamma3:{gamma_page}"], env=env)
    assert read.returncode == 0 and "quokkagamma lives here" in read.stdout, read.stderr
