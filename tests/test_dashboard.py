"""The dashboard (`/ui`, dreamflow/web/) driven in a real headless Chromium (Playwright over the system's
Chromium): sign in, the overview, search, a hit opened at its lines, a wikilink followed, a superseded node's
history, the graph, a day's dream decisions, what a session was given, an edit found by search; a read-only
token refused, a token for one workspace that never sees the other's names or files, a cross-site POST refused,
nothing loaded from outside 127.0.0.1; and, on the shared service, a failed dream seen on its day and retried.

One browser for the module. The token-protected service serves two workspaces and borrows the shared service's
Prefect server (`--prefect-api`, no runner), so it starts in seconds; the retry runs on the shared service.
"""

import os
import re
from pathlib import Path

import httpx
import pytest
from llm_server import Reply, json_reply
from service_harness import RunningService, ThreadedServer, register, wait_for
from test_api import ApiServer

from storage import dream_log
from storage.memory import Memory

pytestmark = pytest.mark.timeout(400)

CHROMIUM = os.environ.get("DREAMFLOW_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
ADMIN = "admin-secret-for-the-dashboard"
ALPHA, BETA = "wsalpha", "wsbeta"
SECRET_OF_BETA = "zebrabetasecret"  # a word only beta's files hold
OLD, NEW = "digest/personal/ana-s-city.md", "digest/personal/ana-s-city-2024-05-08.md"
CARD = "daily/2024-05-08/call-with-ana.md"


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' brings Playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (README, 'Tests')")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def note(name: str, description: str, body: str, **meta) -> str:
    extra = "".join(f"{k}: {v}\n" for k, v in meta.items())
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}"


def write_alpha(root: Path) -> None:
    files = {
        CARD: note("Call with Ana", "Ana's news", "# Call with Ana\n\nAna told me she moved to Lisbon in May and "
                                                  "works at a bakery in Alfama.\n"),
        "daily/2024-03-01/ana-berlin.md": note("Ana in Berlin", "Older news", "Ana lives in Berlin.\n"),
        "digest/wiki/portugal.md": note("Portugal", "The country", "# Portugal\n\nLisbon is its capital, famous for "
                                        "pastel de nata.\n\n## Sources\n\n- 2024-05-08: call ([[" + CARD + "]])\n"),
        OLD: note("Ana's city", "Where Ana lives", "Ana lives in Berlin.\n\n## History\n\n- 2024-05-08: superseded "
                  f"by [[{NEW}]]\n\n## Sources\n\n- 2024-03-01: ([[daily/2024-03-01/ana-berlin.md]])\n",
                  status="superseded", valid_from="2024-03-01", valid_to="2024-05-08", superseded_by=f"'[[{NEW}]]'"),
        NEW: note("Ana's city", "Where Ana lives", "Ana lives in Lisbon (see [[digest/wiki/portugal.md]]) and "
                  "works at a bakery.\n\nworks_at:: [[digest/wiki/alfama-bakery.md]]\n\n## History\n\n- 2024-05-08: "
                  f"replaces [[{OLD}]]\n\n## Sources\n\n- 2024-05-08: the move ([[{CARD}#L7]])\n",
                  status="current", valid_from="2024-05-08", supersedes=f"'[[{OLD}]]'"),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, dreamflow_service):
    """A token-protected service serving alpha (default) and beta, on the shared service's Prefect server;
    yields (service, {token name: secret})."""
    root = tmp_path_factory.mktemp("dashboard")
    folders = {ALPHA: root / "ws", BETA: root / "beta-store"}
    write_alpha(folders[ALPHA])
    secret_page = folders[BETA] / f"digest/wiki/{SECRET_OF_BETA}.md"
    secret_page.parent.mkdir(parents=True)
    secret_page.write_text(note(SECRET_OF_BETA, "beta only", f"{SECRET_OF_BETA} lives in Lisbon too.\n"))
    dream_log.record(Memory(folders[BETA]).ws, {"date": "2024-05-08", "actions": [
        {"name": SECRET_OF_BETA, "action": "CREATE", "target": f"digest/wiki/{SECRET_OF_BETA}.md"}], "failed": []})
    dream_log.record(Memory(folders[ALPHA]).ws, {"date": "2024-05-08", "actions": [
        {"name": "Ana lives in Lisbon", "action": "SUPERSEDE", "target": NEW, "superseded": OLD}],
        "failed": [{"name": "Bakery hours", "error": "refused: ungrounded (opening hours are not in the cards)"}]})
    secrets = register(root, ADMIN, folders, {"a": ([ALPHA], False), "a-read": ([ALPHA], True)})
    service = RunningService.start(root, token=ADMIN, prefect_api=dreamflow_service.prefect_api, runner=False)
    try:
        yield service, secrets
    finally:
        service.stop()


class Visit:
    """A browser context signed in with one token, recording every URL it requests."""

    def __init__(self, browser, url: str, token: str | None):
        self.url, self.requested = url, []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.on("request", lambda request: self.requested.append(request.url))
        self.page = self.context.new_page()
        if token is not None:
            self.page.goto(f"{url}/ui/")
            assert "/ui/login" in self.page.url  # the page asks for the token, once
            self.page.fill("#token", token)
            self.page.click("button[type=submit]")
            self.page.wait_for_url(f"{url}/ui/")

    def go(self, path: str):
        response = self.page.goto(self.url + path)
        self.page.wait_for_load_state("networkidle")
        return response

    def foreign(self) -> list[str]:
        """Requests that went anywhere but this service."""
        return [u for u in self.requested if not u.startswith(self.url + "/")]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.context.close()


@pytest.mark.slow  # a browser, a service
def test_overview_search_a_hit_a_wikilink_history_graph_day_and_sessions(browser, guarded):
    svc, secrets = guarded
    assert f"Dashboard   {svc.url}/ui/" in svc.log()  # the start banner names it
    svc.memory.recall("where does Ana live", budget=300, session="claude-7f3a")  # an agent was given memory
    with Visit(browser, svc.url, secrets["admin"]) as visit:
        page = visit.page
        cookie = next(c for c in visit.context.cookies() if c["name"].startswith("dreamflow_ui"))
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        assert secrets["admin"] not in " ".join(visit.requested)  # never in a URL

        # the overview: each workspace with its counts and last dream; health and jobs load after it
        card = page.locator(f"#ws-{ALPHA}")
        assert "digest/personal" in card.inner_text() and "Dream of 2024-05-08" in card.inner_text()
        page.wait_for_selector(f"#ws-{ALPHA} .health")
        health = card.locator(".health").inner_text()
        assert "broken links" in health and "alfama-bakery" in health  # the typed link to a missing node
        page.wait_for_selector(f"#ws-{ALPHA} .jobs")
        assert "No job has run for this workspace yet" in card.locator(".jobs").inner_text()

        # search from the navigation bar: hits highlighted, the node opens at its lines
        page.fill("header input[name=q]", "lisbon bakery")
        page.press("header input[name=q]", "Enter")
        page.wait_for_selector("ol.hits")
        assert page.locator("ol.hits mark").count() >= 2
        assert SECRET_OF_BETA not in page.content()  # alpha does not declare it reads beta
        page.locator("ol.hits .hit", has_text=NEW).locator(".hit-head a.file").click()
        assert re.search(r"lines=\d+-\d+", page.url) and "#L" in page.url
        assert page.locator(".markdown .block.hit").count() >= 1
        assert page.locator(".markdown mark").count() >= 1

        # the node: frontmatter as fields, sources, backlinks, its history chain with dates
        side = page.locator(".file-side").inner_text()
        assert "valid_from" in side and "2024-05-08" in side and "Call with Ana" in side
        chain = page.locator("ol.chain li")
        assert chain.count() == 2
        assert "superseded" in chain.nth(0).inner_text() and "2024-03-01 → 2024-05-08" in chain.nth(0).inner_text()
        assert "current" in chain.nth(1).inner_text() and "2024-05-08 → now" in chain.nth(1).inner_text()
        page.locator(".file-side section:has(h2:text('Sources')) a", has_text="Call with Ana").click()
        page.wait_for_url(re.compile(r"call-with-ana\.md\?lines=7-7#L7$"))  # where it came from, at the line
        assert "moved to Lisbon" in page.locator(".markdown .block.hit").inner_text()
        page.go_back()
        chain = page.locator("ol.chain li")
        chain.nth(0).locator("a").click()  # to the node it replaced
        page.wait_for_url(re.compile(re.escape(OLD) + "$"))
        assert "Ana lives in Berlin" in page.locator(".markdown").inner_text()

        # a wikilink, followed
        visit.go(f"/ui/w/{ALPHA}/file/{NEW}")
        page.locator(".markdown a.wikilink", has_text="Portugal").click()
        page.wait_for_url(re.compile(r"digest/wiki/portugal\.md"))
        assert "pastel de nata" in page.locator(".markdown").inner_text()
        visit.go(f"/ui/w/{ALPHA}/file/{NEW}")
        missing = page.locator(".markdown a.wikilink.missing")
        assert missing.count() == 1 and "alfama-bakery" in missing.get_attribute("href")

        # the graph: drawn, typed links labelled, a click centres it on another file
        page.locator(".file-actions a", has_text="Graph").click()
        page.wait_for_selector("svg .node")
        assert page.locator("svg .edge-label", has_text="works_at").count() == 1
        assert page.locator("svg .edge-label", has_text="supersedes").count() == 1
        page.locator("svg a.node", has_text="Portugal").click()
        page.wait_for_url(re.compile(r"/graph/digest/wiki/portugal\.md"))
        assert "Graph around Portugal" in page.locator("h1").inner_text()

        # the day: its cards and what the dream decided, per unit
        visit.go(f"/ui/w/{ALPHA}/day/2024-05-08")
        assert "Call with Ana" in page.locator("ul.cards").inner_text()
        decided = page.locator("table.units").inner_text()
        assert "superseded" in decided and NEW in decided and OLD in decided
        assert "Bakery hours" in decided and "ungrounded" in decided

        # what the agent session was given, with the lines' text
        page.locator("nav a", has_text="Given to agents").click()
        page.locator("a", has_text="claude-7f3a").click()
        given = page.locator("main").inner_text()
        assert "where does Ana live" in given and "Ana lives in Lisbon" in given

        assert visit.foreign() == [], "the dashboard loaded something from elsewhere"
        assert {u.split("/")[3] for u in visit.requested} == {"ui"}

        page.locator("header button", has_text="Sign out").click()  # the session ends: the token is asked again
        page.wait_for_url(re.compile(r"/ui/login"))
        visit.go("/ui/")
        assert "/ui/login" in page.url


@pytest.mark.slow  # a browser, a service
def test_an_edit_is_saved_through_write_and_found_by_search(browser, guarded):
    svc, secrets = guarded
    with Visit(browser, svc.url, secrets["a"]) as visit:
        page = visit.page
        visit.go(f"/ui/w/{ALPHA}/file/digest/wiki/portugal.md")
        page.locator(".file-actions a", has_text="Edit").click()
        frontmatter = page.input_value("#frontmatter")
        assert "name: Portugal" in frontmatter
        page.fill("#frontmatter", frontmatter.replace("description: The country\n", "") + "tags: [travel]\n")
        page.fill("#body", page.input_value("#body").replace("pastel de nata", "pastel de nata and quetzalbread"))
        page.click("button:has-text('Save')")
        page.wait_for_selector("text=Saved.")
        assert "quetzalbread" in page.locator(".markdown").inner_text()
        meta = svc.memory.frontmatter_get("digest/wiki/portugal.md")["frontmatter"]
        assert meta["tags"] == ["travel"] and "description" not in meta and meta["name"] == "Portugal"

        visit.go("/ui/search?q=quetzalbread")
        hits = page.locator("ol.hits .hit")
        assert hits.count() == 1 and "digest/wiki/portugal.md" in hits.inner_text()

        # saving over a file changed meanwhile is refused, the text typed kept
        visit.go(f"/ui/w/{ALPHA}/edit/digest/wiki/portugal.md")
        svc.memory.append("digest/wiki/portugal.md", "Changed by an agent meanwhile.")
        page.fill("#body", "my edit")
        page.click("button:has-text('Save')")
        assert "changed since it was read" in page.locator("p.error").inner_text()
        assert page.input_value("#body") == "my edit"
        assert "Changed by an agent" in svc.memory.read("digest/wiki/portugal.md")["content"]
        assert visit.foreign() == []


@pytest.mark.slow  # a browser, a service
def test_a_read_only_token_reads_but_every_change_is_refused(browser, guarded):
    svc, secrets = guarded
    with Visit(browser, svc.url, secrets["a-read"]) as visit:
        page = visit.page
        before = svc.memory.read(NEW)["content"]
        visit.go(f"/ui/w/{ALPHA}/file/{NEW}")
        actions = page.locator(".file-actions").inner_text()
        assert "Graph" in actions and "Edit" not in actions and "Forget" not in actions
        assert "read-only" in page.locator("header .who").inner_text()
        response = visit.go(f"/ui/w/{ALPHA}/edit/{NEW}")
        assert response.status == 403 and "may only read" in page.locator("p.error").inner_text()
        # the forms posted anyway, with the session's own CSRF token: still refused
        visit.go("/ui/")
        csrf = page.locator("header input[name=csrf]").input_value()
        for path, form in ((f"/ui/w/{ALPHA}/edit/{NEW}", {"body": "defaced", "hash": "x", "csrf": csrf}),
                           (f"/ui/w/{ALPHA}/forget/{NEW}", {"csrf": csrf})):
            answer = page.request.post(svc.url + path, form=form, headers={"Origin": svc.url})
            assert answer.status == 403 and "may only read" in answer.text(), (path, answer.text()[:300])
        assert svc.memory.read(NEW)["content"] == before


@pytest.mark.slow  # a browser, a service
def test_a_token_for_one_workspace_never_sees_the_others(browser, guarded):
    svc, secrets = guarded
    with Visit(browser, svc.url, secrets["a"]) as visit:
        page = visit.page
        forbidden = (BETA, SECRET_OF_BETA, "beta-store")
        seen = []
        for path in ("/ui/", "/ui/search?q=lives+lisbon&in=*",
                     f"/ui/w/{ALPHA}/graph/{NEW}?depth=3", f"/ui/w/{ALPHA}/day/2024-05-08", f"/ui/w/{ALPHA}/days",
                     f"/ui/w/{ALPHA}/sessions", f"/ui/w/{ALPHA}/health", f"/ui/w/{ALPHA}/jobs"):
            response = visit.go(path)
            assert response.status == 200, path
            seen.append((path, page.content()))
        for path in (f"/ui/w/{BETA}/file/digest/wiki/{SECRET_OF_BETA}.md", f"/ui/w/{BETA}/day/2024-05-08",
                     f"/ui/w/{BETA}/sessions", f"/ui/w/{BETA}/graph/digest/wiki/{SECRET_OF_BETA}.md",
                     f"/ui/w/{BETA}/health", f"/ui/w/{BETA}/edit/digest/wiki/{SECRET_OF_BETA}.md",
                     f"/ui/search?q=lisbon&in={BETA}", "/ui/w/nosuchws/days"):
            response = visit.go(path)
            assert response.status == 404 and "no such workspace" in page.content(), path
            seen.append((path, page.content()))
        for path, html in seen:
            leaked = [word for word in forbidden if word in html]
            assert not leaked, (path, leaked)
        visit.go("/ui/search?q=lisbon&in=*")
        assert {o.get_attribute("value") for o in page.locator("select[name=in] option").all()} == {ALPHA}
        assert visit.foreign() == []


@pytest.mark.slow  # a browser, a service
def test_a_cross_site_post_is_refused(browser, guarded):
    svc, secrets = guarded
    target = f"{svc.url}/ui/w/{ALPHA}/edit/digest/wiki/portugal.md"
    before = svc.memory.read("digest/wiki/portugal.md")["content"]
    evil = ThreadedServer(_attacker_page(target))  # another origin (another port), as any web page the user opens
    try:
        with Visit(browser, svc.url, secrets["admin"]) as visit:
            page = visit.page
            page.goto(evil.url)
            page.wait_for_url(target)  # the page's form, sent by the browser
            assert "CrossSiteRequest" in page.content()  # the request guard, before any route
            # a same-origin form without its session's CSRF token (what a token-less service would otherwise take)
            visit.go("/ui/")
            answer = page.request.post(target, form={"body": "defaced", "hash": "x"}, headers={"Origin": svc.url})
            assert answer.status == 403 and "reload the page" in answer.text()
        assert svc.memory.read("digest/wiki/portugal.md")["content"] == before
    finally:
        evil.stop()


def _attacker_page(target: str):
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    html = (f'<form id="f" method="post" action="{target}"><input name="body" value="defaced">'
            '<input name="hash" value="x"><input name="csrf" value="guess"></form>'
            '<script>document.getElementById("f").submit()</script>')
    return Starlette(routes=[Route("/", lambda request: HTMLResponse(html))])


def test_without_a_token_the_dashboard_is_open_and_says_so(ws, monkeypatch):
    from dreamflow.web import app

    memory = Memory(ws.root)
    memory.write("digest/wiki/kyoto.md", "Kyoto has temples.", name="Kyoto")
    server = ApiServer(memory)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            page = client.get("/ui/")
            assert page.status_code == 200 and "No token is configured" in page.text
            assert "Content-Security-Policy" in page.headers and "default-src 'none'" in page.headers[
                "Content-Security-Policy"]
            assert client.get("/ui/login", follow_redirects=False).status_code == 303  # nothing to sign in with
            csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/w/default/edit/digest/wiki/kyoto.md")
                             .text).group(1)
            form = {"body": "Kyoto has temples and gardens.", "hash": memory.read("digest/wiki/kyoto.md")["hash"]}
            origin = {"Origin": server.url}
            refused = client.post("/ui/w/default/edit/digest/wiki/kyoto.md", data=form, headers=origin)
            assert refused.status_code == 403  # no CSRF token
            saved = client.post("/ui/w/default/edit/digest/wiki/kyoto.md", data={**form, "csrf": csrf},
                                headers=origin, follow_redirects=False)
            assert saved.status_code == 303 and memory.search("gardens")[0]["path"] == "digest/wiki/kyoto.md"
            forget = client.post("/ui/w/default/forget/digest/wiki/kyoto.md", data={"csrf": csrf}, headers=origin)
            assert forget.status_code == 400 and "dreamflow start" in forget.text  # jobs need the service
            monkeypatch.setattr(app, "AUTO_HEALTH_FILES", 0)  # a large workspace: health only when asked
            assert "Not checked yet" in client.get("/ui/w/default/health").text
            assert "files, " in client.get("/ui/w/default/health?fresh=1").text
            assert "checked " in client.get("/ui/w/default/health").text  # then reused
    finally:
        server.stop()


def test_status_names_the_dashboard():
    from dreamflow.cli.service_commands import format_status

    shown = format_status({"running": True, "service": {"url": "http://127.0.0.1:8420", "uptime_s": 5}})
    assert "Dashboard   http://127.0.0.1:8420/ui/" in shown


@pytest.mark.slow  # a browser, a service
def test_a_failed_dream_is_seen_retried_and_its_node_forgotten(browser, dreamflow_service, llm_server):
    svc, day = dreamflow_service, "2024-09-03"
    svc.memory.write(f"daily/{day}/harbour.md", content="# Harbour\n\nAna moved her boat to the Nyhavn harbour.\n")
    svc.memory.write(f"daily/{day}/sauna.md", content="# Sauna\n\nAna goes to the harbour sauna on Fridays.\n")
    llm_server.reset()
    llm_server.on("You consolidate a person's memory", json_reply({"units": [
        {"name": "Boat", "bucket": "personal", "summary": "Ana's boat is in Nyhavn.", "paths": [f"daily/{day}/harbour.md"]},
        {"name": "Sauna", "bucket": "personal", "summary": "Friday sauna.", "paths": [f"daily/{day}/sauna.md"]}]}))
    llm_server.on("Unit: Boat\n", json_reply({"action": "CREATE", "name": "Ana's boat", "content": "Ana's boat "
                                                                                                   "is in Nyhavn."}))
    llm_server.on("Unit: Sauna\n", Reply(status=500, content="model overloaded"))
    run = httpx.post(f"{svc.url}/flows/auto_dream", json={"date": day, "scan_days": 1}, timeout=60).json()
    wait_for(lambda: httpx.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()["state_type"] == "FAILED",
             180, "the dream to fail")
    with Visit(browser, svc.url, None) as visit:  # no token configured: no sign-in
        page = visit.page
        visit.go(f"/ui/w/default/day/{day}")
        decided = page.locator("table.units").inner_text()
        assert "digest/personal/ana-s-boat.md" in decided
        assert "Sauna" in decided and "failed" in decided
        page.locator("a", has_text="its run").click()
        assert "Failed" in page.locator("main").inner_text()
        assert page.locator("a", has_text="Open in the Prefect UI").get_attribute("href").endswith(run["id"])
        llm_server.on("Unit: Sauna\n", json_reply({"action": "CREATE", "name": "Friday sauna",
                                                   "content": "Ana goes to the harbour sauna on Fridays."}))
        page.locator("button", has_text="Retry").click()
        page.wait_for_selector(".badge.state-completed", timeout=150_000)  # the page refreshes until the run ends
        visit.go(f"/ui/w/default/day/{day}")
        decided = page.locator("table.units").inner_text()
        assert "failed" not in decided and "digest/personal/friday-sauna.md" in decided  # the retry's record
        visit.go("/ui/")
        page.wait_for_selector("#ws-default .jobs table.runs")
        assert page.locator("#ws-default .jobs a", has_text="Prefect UI").count() >= 1

        # forget the new node: the archive job moves it to digest/archive/, links follow
        visit.go("/ui/w/default/file/digest/personal/friday-sauna.md")
        page.once("dialog", lambda dialog: dialog.accept())  # "Forget this node? ..."
        page.locator("button", has_text="Forget").click()
        page.wait_for_selector(".badge.state-completed", timeout=150_000)
        assert "digest/archive/personal/friday-sauna.md" in page.locator("table.units").inner_text()
        assert svc.memory.stat("digest/archive/personal/friday-sauna.md")["frontmatter"]["archived"]
        assert visit.foreign() == []
