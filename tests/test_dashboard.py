"""The dashboard (`/ui`, dreamflow/web/) driven in a real headless Chromium (Playwright over the system's
Chromium): sign in, the overview, search, a hit opened at its lines, a wikilink followed, a superseded node's
history, the graph, a day's dream decisions per fact, what a session was given, an edit found by search; a node's
facts with their windows and History, each fact's way back to the message it comes from; a read-only token
refused, a token for one workspace that never sees the other's names, files or messages, a cross-site POST
refused, nothing loaded from outside 127.0.0.1; and, on the shared service, a failed dream seen on its day and
retried.

One browser for the module. The token-protected service serves two workspaces and borrows the shared service's
Prefect server (`--prefect-api`, no runner), so it starts in seconds; its facts are written by real dreams run
in this process on that Prefect server too (no second one for this worker), and the retry runs on the shared
service."""

import json
import os
import re
from pathlib import Path

import httpx
import pytest
from llm_server import Reply, json_reply, text_of
from service_harness import RunningService, ThreadedServer, loopback, register, wait_for
from test_api import ApiServer

from storage.files import dream_log
from storage.memory import Memory
from storage.text import facts

pytestmark = pytest.mark.timeout(400)

CHROMIUM = os.environ.get("DREAMFLOW_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
ADMIN = "admin-secret-for-the-dashboard"
ALPHA, BETA = "wsalpha", "wsbeta"
SECRET_OF_BETA = "zebrabetasecret"  # a word only beta's files hold
BETA_DIALOG, BETA_SAID = "session/dialog/beta-chat.jsonl", "quokkamessage: only beta's conversation says this"
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


# The memory as the jobs write it: each message of a conversation a dialog record, each card a list of facts
# citing them (as auto-memory writes it), nodes of facts written by real dreams (flows/auto_dream.py, in this
# process, the model scripted): the user lived in Lisbon, then moved to Porto.
DAY1, DAY2 = "2026-11-02", "2026-11-05"
USER = "digest/personal/user.md"
CHAT1, CHAT2 = "session/dialog/chat-1.jsonl", "session/dialog/chat-2.jsonl"
HOME, MOVED = f"daily/{DAY1}/home.md", f"daily/{DAY2}/moved.md"
BORROWED = "daily/2026-10-01/borrowed.md"
LISBON, PORTO = "The user lives in Lisbon, near the river.", "The user lives in Porto now."
COMPARE = "You keep a memory of facts up to date"  # engine/prompts/compare.md
CONVERSATIONS = {
    CHAT1: [("user", f"{DAY1}T18:01:00", "I live in Lisbon, near the river."),
            ("assistant", f"{DAY1}T18:01:05", "Lovely! Do you like it there?"),
            ("user", f"{DAY1}T18:03:00", "I do. I like green tea in the morning, on the balcony.")],
    CHAT2: [("user", f"{DAY2}T09:12:00", "Big change: I moved to Porto yesterday. I live in Porto now.")],
}


def write_card(memory: Memory, path: str, name: str, *lines: tuple) -> None:
    """A card as auto-memory writes it: (kind, about, text, dialog, line[, date]) facts citing their message."""
    body = f"# {name}\n"
    for n, (kind, about, text, dialog, line, *when) in enumerate(lines, 1):
        said = CONVERSATIONS.get(dialog)
        stamp = said[line - 1][1].replace("T", " ")[:16] if said else path.split("/")[1]
        body = facts.add(body, facts.Fact(text, id=f"f{n}", kind=kind, about=about, date=when[0] if when else None,
                                          sources=(f"{dialog}#L{line}",), labels=(stamp,)))
    memory.write(path, body, name=name, description=name, metadata={"session_id": dialog.split("/")[-1][:-6]})


def dream_facts(root: Path, llm_server, prefect_api: str) -> None:
    """Two days of cards and the real dream of each, run in this process on the Prefect server at `prefect_api`:
    the second day's move replaces where the user lives."""
    memory = Memory(root)
    for dialog, said in CONVERSATIONS.items():
        memory.ws.write_text(dialog, "".join(json.dumps({"role": role, "content": text, "created_at": at,
                                                         "id": f"m{n}"}) + "\n"
                                             for n, (role, at, text) in enumerate(said, 1)))
    write_card(memory, HOME, "Home", ("fact", "user", LISBON, CHAT1, 1),
               ("preference", "user", "The user likes green tea in the morning.", CHAT1, 3))
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from engine.config import prefect_env
    from flows.auto_dream import auto_dream

    with (pytest.MonkeyPatch.context() as env, temporary_settings({PREFECT_API_URL: prefect_api}),
          prefect_env.interactive_runs()):
        for key, value in {"DREAMFLOW_LLM_BASE_URL": llm_server.base_url, "DREAMFLOW_LLM_MODEL": llm_server.model,
                           "DREAMFLOW_LLM_API_KEY": "test-key", "DREAMFLOW_LLM_MAX_RETRIES": "0",
                           "DREAMFLOW_EMBEDDER": "none"}.items():
            env.setenv(key, value)
        auto_dream(date=DAY1, scan_days=1, workspace=str(root))
        write_card(memory, MOVED, "Moved to Porto", ("fact", "user", PORTO, CHAT2, 1, "2026-11-04"))
        llm_server.reset()
        llm_server.on(COMPARE, json_reply({"relation": "replaces", "fact": 1}))
        auto_dream(date=DAY2, scan_days=1, workspace=str(root))
    assert llm_server.pending() == 0  # the model was asked once: does the move replace Lisbon?


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, dreamflow_service, inprocess_llm_server):
    """A token-protected service serving alpha (default) and beta, on the shared service's Prefect server;
    yields (service, {token name: secret})."""
    root = tmp_path_factory.mktemp("dashboard")
    folders = {ALPHA: root / "ws", BETA: root / "beta-store"}
    write_alpha(folders[ALPHA])
    dream_facts(folders[ALPHA], inprocess_llm_server, dreamflow_service.prefect_api)
    # a card of alpha whose fact cites beta's conversation by a path out of alpha: its trace must not follow it
    write_card(Memory(folders[ALPHA]), BORROWED, "Borrowed", ("fact", "user", "The user read a note.",
                                                              f"../{folders[BETA].name}/{BETA_DIALOG}", 1))
    secret_page = folders[BETA] / f"digest/wiki/{SECRET_OF_BETA}.md"
    secret_page.parent.mkdir(parents=True)
    secret_page.write_text(note(SECRET_OF_BETA, "beta only", f"## Facts\n\n- {SECRET_OF_BETA} lives in Lisbon too. "
                                f"(about:: {SECRET_OF_BETA}) (since:: {DAY1}) (source:: [[{BETA_DIALOG}#L1]]) ^f1\n\n"
                                f"## Sources\n\n- {DAY1}: [[{BETA_DIALOG}]]\n"))
    (folders[BETA] / BETA_DIALOG).parent.mkdir(parents=True)
    (folders[BETA] / BETA_DIALOG).write_text(json.dumps({"role": "user", "content": BETA_SAID,
                                                        "created_at": f"{DAY1}T08:00:00"}) + "\n")
    dream_log.record(Memory(folders[BETA]).ws, {"date": DAY2, "actions": [
        {"name": SECRET_OF_BETA, "fact": f"{SECRET_OF_BETA} lives in Lisbon too.", "action": "created",
         "node": f"digest/wiki/{SECRET_OF_BETA}.md"}], "failed": []})
    secrets = register(root, ADMIN, folders, {"a": ([ALPHA], False), "a-read": ([ALPHA], True)})
    service = RunningService.start(root, token=ADMIN, prefect_api=dreamflow_service.prefect_api, runner=False)
    try:
        yield service, secrets
    finally:
        service.stop()


def settled(page) -> None:
    """Wait until the page's parts loaded after it (the overview's health and jobs) are in."""
    page.wait_for_load_state("load")
    page.wait_for_function("() => !document.querySelector('.fragment.loading')")


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
        settled(self.page)
        return response

    def foreign(self) -> list[str]:
        """Requests that went anywhere but this service."""
        return [u for u in self.requested if not u.startswith(self.url + "/")]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.context.close()


@pytest.mark.e2e
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
        assert "digest/personal" in card.inner_text() and f"Dream of {DAY2}" in card.inner_text()
        assert "1 replaced" in card.locator(".actions-summary").inner_text()  # the move replaced where they live
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

        # the day: its cards and what the dream decided, per fact: the fact, the decision, the node, what it replaced
        visit.go(f"/ui/w/{ALPHA}/day/{DAY2}")
        assert "Moved to Porto" in page.locator("ul.cards").inner_text()
        row = page.locator("table.units tr", has_text=PORTO)
        assert row.locator(".badge").inner_text() == "replaced" and f"was: {LISBON}" in row.inner_text()
        row.locator("a", has_text=PORTO).click()  # the fact as its card says it
        page.wait_for_url(re.compile(re.escape(MOVED) + "#f1$"))
        visit.go(f"/ui/w/{ALPHA}/day/{DAY2}")
        page.locator("table.units tr", has_text=PORTO).locator("a", has_text=USER).click()
        page.wait_for_url(re.compile(re.escape(USER) + "$"))

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


@pytest.mark.e2e
@pytest.mark.slow  # a browser, a service
def test_a_node_shows_its_facts_their_history_and_where_each_comes_from(browser, guarded):
    svc, secrets = guarded
    with Visit(browser, svc.url, secrets["a-read"]) as visit:  # a read-only token reads traces too
        page = visit.page
        visit.go(f"/ui/w/{ALPHA}/file/{USER}")
        body = page.locator(".markdown")
        assert "(since::" not in body.inner_text() and "^f" not in body.locator(".fact-text").first.inner_text()
        now, was = fact_row(page, PORTO), fact_row(page, LISBON)
        assert "current" in now.locator(".fact-meta").inner_text() and "since 2026-11-04" in now.inner_text()
        assert "replaced" in was.locator(".fact-meta").inner_text()
        assert "held 2026-11-02 → 2026-11-04" in was.inner_text()
        assert LISBON in now.locator(".fact-rel", has_text="replaces").inner_text()
        tea = fact_row(page, "green tea")
        assert "preference" in tea.inner_text() and "current" in tea.inner_text()
        assert body.locator("h2", has_text="History").count() == 1 and "Home" in body.inner_text()

        was.locator(".fact-rel a", has_text=PORTO).click()  # "replaced by": jumps to the fact that replaced it
        assert page.evaluate("location.hash") == "#" + now.get_attribute("id")
        assert page.locator(".fact:target").inner_text().startswith(PORTO)

        # where it comes from: the node fact, the card fact it was consolidated from, the message with its time
        now.locator("a", has_text="Where from?").click()
        chain = now.locator(".trace-box")
        chain.locator(".said").wait_for()
        steps = chain.inner_text()
        assert MOVED in steps and CHAT2 in steps and "2026-11-05 09:12" in steps
        assert "Big change: I moved to Porto yesterday." in chain.locator(".said").inner_text()
        assert chain.locator(".role-user").count() == 1
        chain.locator("a", has_text=f"{CHAT2}:1").click()  # the message, in its conversation, at its line
        page.wait_for_url(re.compile(re.escape(CHAT2) + r"\?lines=1-1#L1$"))
        assert "Big change" in page.locator(".conversation .message.hit").inner_text()

        # the retired fact's own way back, on its page: the first conversation's message
        response = visit.go(f"/ui/w/{ALPHA}/trace/{USER}?fact={was_id(svc)}")
        assert response.status == 200 and "I live in Lisbon, near the river." in page.locator(".said").inner_text()
        assert "2026-11-02 18:01" in page.locator("main").inner_text()

        # a card's fact, straight to its message
        visit.go(f"/ui/w/{ALPHA}/file/{HOME}")
        tea = fact_row(page, "green tea")
        tea.locator("a", has_text="Where from?").click()
        tea.locator(".trace-box .said").wait_for()
        assert "I like green tea in the morning" in tea.locator(".trace-box").inner_text()

        # search: a fact hit carries its own validity
        visit.go("/ui/search?q=lisbon+river&history=true")
        hit = page.locator("ol.hits .hit", has_text=USER).filter(has_text=LISBON)  # each fact a hit of its own
        assert "replaced" in hit.locator(".hit-head").inner_text()
        assert "2026-11-02 → 2026-11-04" in hit.locator(".hit-head").inner_text()
        assert visit.foreign() == []


def fact_row(page, sentence: str):
    """The row of the fact whose sentence holds `sentence` (not the rows that only link to it)."""
    return page.locator(".markdown .fact", has=page.locator(".fact-text", has_text=sentence))


def was_id(svc) -> str:
    """The block id of the retired Lisbon fact in the user's node (the dream numbers facts)."""
    return next(f.id for f in facts.parse(svc.memory.read(USER, numbered=False)["content"]) if f.text == LISBON)


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
@pytest.mark.slow  # a browser, a service
def test_a_token_for_one_workspace_never_sees_the_others(browser, guarded):
    svc, secrets = guarded
    with Visit(browser, svc.url, secrets["a"]) as visit:
        page = visit.page
        forbidden = (BETA, SECRET_OF_BETA, "beta-store", BETA_SAID.split(":")[0])
        cited = f"../beta-store/{BETA_DIALOG}"  # alpha's own card names this path: shown as written, never followed
        seen = []
        for path in ("/ui/", "/ui/search?q=lives+lisbon&in=*",
                     f"/ui/w/{ALPHA}/graph/{NEW}?depth=3", f"/ui/w/{ALPHA}/day/{DAY2}", f"/ui/w/{ALPHA}/days",
                     f"/ui/w/{ALPHA}/sessions", f"/ui/w/{ALPHA}/health", f"/ui/w/{ALPHA}/jobs",
                     f"/ui/w/{ALPHA}/file/{BORROWED}"):
            response = visit.go(path)
            assert response.status == 200, path
            seen.append((path, page.content()))
        # alpha's card citing beta's conversation by a path out of alpha: the trace stops there, broken
        response = visit.go(f"/ui/w/{ALPHA}/trace/{BORROWED}?fact=f1")
        assert response.status == 200 and page.locator(".step-broken").count() == 1
        seen.append(("trace", page.content()))
        for path in (f"/ui/w/{BETA}/file/digest/wiki/{SECRET_OF_BETA}.md", f"/ui/w/{BETA}/day/{DAY2}",
                     f"/ui/w/{BETA}/trace/digest/wiki/{SECRET_OF_BETA}.md?fact=f1",
                     f"/ui/w/{BETA}/trace/{BETA_DIALOG}?fact=1",
                     f"/ui/w/{BETA}/sessions", f"/ui/w/{BETA}/graph/digest/wiki/{SECRET_OF_BETA}.md",
                     f"/ui/w/{BETA}/health", f"/ui/w/{BETA}/edit/digest/wiki/{SECRET_OF_BETA}.md",
                     f"/ui/search?q=lisbon&in={BETA}", "/ui/w/nosuchws/days"):
            response = visit.go(path)
            assert response.status == 404 and "no such workspace" in page.content(), path
            seen.append((path, page.content()))
        for path, html in seen:
            leaked = [word for word in forbidden if word in html.replace(cited, "")]
            assert not leaked, (path, leaked)
        visit.go("/ui/search?q=lisbon&in=*")
        assert {o.get_attribute("value") for o in page.locator("select[name=in] option").all()} == {ALPHA}
        assert visit.foreign() == []


PET_CARD, PET, REX = "daily/2026-11-06/pet.md", "digest/personal/user-pet.md", "digest/wiki/rex.md"
DOG, CAT, WHY = "The user has a dog named Rex.", "The user has a cat named Rex.", "Rex is a cat, not a dog"
SHOTS = Path("/tmp/web-shots")


@pytest.mark.e2e
@pytest.mark.slow  # a browser, a service
def test_this_is_wrong_on_a_fact_retracts_it_with_its_card_fact_and_writes_the_correction(browser, guarded):
    import datetime as dt

    svc, secrets = guarded
    memory, today = svc.memory, dt.date.today().isoformat()
    write_card(memory, PET_CARD, "Pet", ("fact", "user", DOG, "session/dialog/chat-3.jsonl", 2))
    for path, name, text in ((PET, "The user's pet", DOG), (REX, "Rex", "Rex is the user's dog and naps a lot.")):
        body = facts.add(f"# {name}\n", facts.Fact(text, id="f1", about="user", since="2026-11-06",
                                                   sources=(f"{PET_CARD}#^f1",), labels=("2026-11-06",)))
        memory.write(path, body, name=name, metadata={"status": "current"})
    before = memory.read(PET)["content"]

    with Visit(browser, svc.url, secrets["a-read"]) as visit:  # a read-only token: no action, a POST refused
        page = visit.page
        visit.go(f"/ui/w/{ALPHA}/file/{PET}")
        assert DOG in fact_row(page, DOG).inner_text() and page.locator("details.retract").count() == 0
        assert "This is wrong" not in page.content()
        csrf = page.locator("header input[name=csrf]").input_value()
        answer = page.request.post(f"{svc.url}/ui/w/{ALPHA}/retract/{PET}", headers={"Origin": svc.url},
                                   form={"fact": "f1", "reason": "defaced", "csrf": csrf})
        assert answer.status == 403 and "may only read" in answer.text()
    with Visit(browser, svc.url, secrets["a"]) as visit:
        page = visit.page
        # forged: a POST without the session's CSRF token, and one from another site's page
        answer = page.request.post(f"{svc.url}/ui/w/{ALPHA}/retract/{PET}", headers={"Origin": svc.url},
                                   form={"fact": "f1", "reason": "forged", "csrf": "guess"})
        assert answer.status == 403 and "reload the page" in answer.text()
        answer = page.request.post(f"{svc.url}/ui/w/{ALPHA}/retract/{PET}", headers={"Origin": "http://evil.example"},
                                   form={"fact": "f1", "reason": "forged"})
        assert answer.status == 403
        assert memory.read(PET)["content"] == before

        visit.go(f"/ui/w/{ALPHA}/file/{PET}")
        wrong = fact_row(page, DOG)
        assert not wrong.locator(".retract-form").is_visible()  # closed until asked
        wrong.locator("summary", has_text="This is wrong").click()
        wrong.locator("input[name=reason]").fill(WHY)
        wrong.locator("input[name=correct]").fill(CAT)
        SHOTS.mkdir(exist_ok=True)
        wrong.screenshot(path=str(SHOTS / "retract-form.png"))
        wrong.locator("button", has_text="Retract this fact").click()
        page.wait_for_selector("h1:has-text('Retracted')")
        settled(page)
        page.screenshot(path=str(SHOTS / "retract.png"), full_page=True)
        said = page.locator(".retracted-answer")
        assert DOG in said.locator(".retracted-fact").inner_text() and WHY in said.inner_text()
        assert today in said.inner_text()
        assert said.locator(".retracted-cards a", has_text=f"{PET_CARD}#^f1").count() == 1
        assert said.locator("a", has_text=CAT).count() == 1  # the correction, a link to it
        review = said.locator(".review a", has_text="Rex is the user's dog")  # written from the same card fact
        assert review.count() == 1 and review.get_attribute("href").endswith(f"{REX}#f1")

        with page.expect_navigation():  # the node: the correction current, the old fact retracted
            said.locator("a", has_text=CAT).click()
        settled(page)
        now, was = fact_row(page, CAT), fact_row(page, DOG)
        assert "current" in now.locator(".fact-meta").inner_text() and f"since {today}" in now.inner_text()
        assert DOG in now.locator(".fact-rel", has_text="corrects").inner_text()
        assert "retracted" in was.locator(".fact-meta").inner_text()
        assert was.locator(".fact-retraction").inner_text().startswith(f"retracted on {today}:")
        assert was.locator(".fact-retraction .reason").inner_text() == WHY
        assert CAT in was.locator(".fact-rel", has_text="corrected by").inner_text()
        assert was.locator("details.retract").count() == 0 and now.locator("details.retract").count() == 1
        history = page.locator(".markdown h2", has_text="History")
        assert history.count() == 1 and was.evaluate("(row, h) => !!(h.compareDocumentPosition(row) & 4)",
                                                    history.element_handle())  # under History
        visit.go(f"/ui/w/{ALPHA}/file/{PET_CARD}")  # the card fact it came from: retracted too
        assert "retracted" in fact_row(page, DOG).locator(".fact-meta").inner_text()

        visit.go("/ui/search?q=dog+named+Rex")
        assert DOG not in page.locator("main").inner_text()  # search no longer gives the old fact
        visit.go("/ui/search?q=cat+named+Rex")
        assert CAT in page.locator("ol.hits .hit", has_text=PET).inner_text()
        # sent again (a reload of the answer): a conflict, nothing changes twice
        after = memory.read(PET)["content"]
        csrf = page.locator("header input[name=csrf]").input_value()
        answer = page.request.post(f"{svc.url}/ui/w/{ALPHA}/retract/{PET}", headers={"Origin": svc.url},
                                   form={"fact": "f1", "reason": "again", "csrf": csrf})
        assert answer.status == 409 and "retracted already" in answer.text()
        assert memory.read(PET)["content"] == after
        assert visit.foreign() == []


@pytest.mark.e2e
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


@pytest.mark.e2e
@pytest.mark.slow  # a browser, a service
def test_a_failed_dream_is_seen_retried_and_its_node_forgotten(browser, dreamflow_service, llm_server):
    svc, day = dreamflow_service, "2024-09-03"
    for who, was in (("Birgit", "Birgit keeps her sailing boat in the Christianshavn canal."),
                     ("Jonas", "Jonas goes to the harbour sauna on Mondays.")):  # nodes the dream has written
        svc.memory.write(f"digest/personal/{who.lower()}.md", f"# {who}\n\n## Facts\n\n- {was} (since:: 2024-09-01) ^f1\n",
                         name=who, metadata={"about": who.lower(), "status": "current"})
    write_card(svc.memory, f"daily/{day}/harbour.md", "Harbour", ("fact", "Birgit", "Birgit keeps her sailing boat "
                                                                  "in the Nyhavn harbour now.", "session/dialog/b.jsonl", 1))
    write_card(svc.memory, f"daily/{day}/sauna.md", "Sauna", ("fact", "Jonas", "Jonas goes to the harbour sauna on "
                                                              "Fridays now.", "session/dialog/j.jsonl", 1))
    llm_server.reset()
    llm_server.on(lambda b: "messages" in b and "Nyhavn" in text_of(b), json_reply({"relation": "replaces", "fact": 1}))
    llm_server.on(lambda b: "messages" in b and "Fridays" in text_of(b), Reply(status=500, content="model overloaded"))
    run = loopback.post(f"{svc.url}/flows/auto_dream", json={"date": day, "scan_days": 1}, timeout=60).json()
    wait_for(lambda: loopback.get(f"{svc.url}/flows/runs/{run['id']}", timeout=60).json()["state_type"] == "FAILED",
             180, "the dream to fail")
    with Visit(browser, svc.url, None) as visit:  # no token configured: no sign-in
        page = visit.page
        visit.go(f"/ui/w/default/day/{day}")
        decided = page.locator("table.units").inner_text()
        assert "digest/personal/birgit.md" in decided and "Christianshavn" in decided  # what it replaced
        failed = page.locator("table.units tr.failed")
        assert "Jonas" in failed.inner_text() and "failed" in failed.inner_text()
        assert "model overloaded" in failed.inner_text()  # why
        page.locator("a", has_text="its run").click()
        assert "Failed" in page.locator("main").inner_text()
        assert page.locator("a", has_text="Open in the Prefect UI").get_attribute("href").endswith(run["id"])
        llm_server.on(lambda b: "messages" in b and "Fridays" in text_of(b),
                      json_reply({"relation": "replaces", "fact": 1}))
        page.locator("button", has_text="Retry").click()
        page.wait_for_selector(".badge.state-completed", timeout=150_000)  # the page refreshes until the run ends
        visit.go(f"/ui/w/default/day/{day}")
        decided = page.locator("table.units").inner_text()
        assert "failed" not in decided and "digest/personal/jonas.md" in decided  # the retry's record
        assert "on Mondays" in decided
        visit.go("/ui/")
        page.wait_for_selector("#ws-default .jobs table.runs")
        assert page.locator("#ws-default .jobs a", has_text="Prefect UI").count() >= 1

        # forget the node: the archive job moves it to digest/archive/, links follow
        visit.go("/ui/w/default/file/digest/personal/jonas.md")
        page.once("dialog", lambda dialog: dialog.accept())  # "Forget this node? ..."
        page.locator("button", has_text="Forget").click()
        page.wait_for_selector(".badge.state-completed", timeout=150_000)
        assert "digest/archive/personal/jonas.md" in page.locator("table.units").inner_text()
        assert svc.memory.stat("digest/archive/personal/jonas.md")["frontmatter"]["archived"]
        assert visit.foreign() == []


def test_a_digest_folder_of_your_own_has_its_own_colour_not_the_wikis():
    from dreamflow.web.graph_layout import kind_of

    assert [kind_of(p) for p in ("digest/personal/a.md", "digest/procedure/b.md", "digest/wiki/c.md",
                                 "digest/project/build.md", "digest/archive/project/old.md")] == [
        "personal", "procedure", "wiki", "own", "archive"]
    assert ".kind-own rect" in (Path(__file__).parent.parent / "dreamflow/web/static/dashboard.css").read_text()


# ---- pages that read well: the graph, a conversation, the days (issue 37, item 11) -----------------------------

CHAIN = [f"digest/procedure/build-step-{i}.md" for i in range(5)]
HUB = "digest/personal/ana.md"
FRIENDS = [f"digest/personal/friend-{i}.md" for i in range(7)]
FAN = "notes/ana-fan.md"


def write_graphs(memory: Memory) -> None:
    """A 5-file chain (`next::` links) and a 33-file neighbourhood two hops around Ana: seven friends she knows,
    a missing bakery, three notes linking to her, three topics per friend, one friend linking back."""
    for i, path in enumerate(CHAIN):
        follows = f"\n\nnext:: [[{CHAIN[i + 1]}]]\n" if i + 1 < len(CHAIN) else "\n"
        memory.write(path, f"# Step {i}\n\nStep {i} of the build pipeline.{follows}",
                     name=f"Build pipeline step number {i}")
    memory.write(HUB, "# Ana\n\n" + "\n".join(f"- knows:: [[{p}]]" for p in FRIENDS)
                 + "\n\nworks_at:: [[digest/wiki/alfama-bakery.md]]\n", name="Ana Ferreira")
    for i in range(3):
        memory.write(f"notes/ana-note-{i}.md", f"Met [[{HUB}]] at the market, time {i}.", name=f"Market note {i}")
    for i, path in enumerate(FRIENDS):
        topics = [f"digest/wiki/topic-{i}-{j}.md" for j in range(3)]
        back = f"\n\nfriend_of:: [[{HUB}]]\n" if i == 0 else ""
        memory.write(path, f"# Friend {i}\n\nTalks about {' '.join(f'[[{t}]]' for t in topics)}.{back}",
                     name=f"Friend number {i} of Ana Ferreira")
        for j, topic in enumerate(topics):
            memory.write(topic, f"Topic {i}.{j}.", name=f"Topic {i}.{j} with a rather long name indeed")


def overlapping(boxes: list[tuple]) -> list[tuple]:
    """The pairs of (name, left, top, width, height) boxes that overlap."""
    from dreamflow.web.graph_layout import overlap

    return [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:] if overlap(a[1:], b[1:])]


def test_the_graph_of_a_chain_and_of_a_33_file_neighbourhood_puts_no_label_over_another(ws):
    from dreamflow.web import graph_layout as gl

    memory = Memory(ws.root)
    write_graphs(memory)
    for center, hops, files in ((CHAIN[2], 2, 5), (CHAIN[0], 3, 4), (HUB, 2, 33)):
        drawing = gl.layout(center, memory.traverse([center], depth=hops, direction="both", limit=80))
        nodes = drawing["nodes"]
        assert len(nodes) == files
        boxes = [(n["path"], n["x"] - n["w"] / 2, n["y"] - n["h"] / 2, n["w"], n["h"]) for n in nodes]
        labels = [(e["predicate"], *gl.label_box(e)) for e in drawing["edges"] if e["predicate"]]
        assert all(e["shown"] for e in drawing["edges"] if e["predicate"])  # each typed link says its predicate
        assert overlapping(boxes + labels) == [], center  # no file over a file, no predicate over either
        for n in nodes:  # each label's lines fit inside its box, drawn inside it
            assert 1 <= len(n["lines"]) <= 2 and all(len(line) * gl.CHAR_WIDTH <= n["w"] - 2 * gl.PAD_X + 1e-6
                                                     for line in n["lines"])
            assert all(n["y"] - n["h"] / 2 < y < n["y"] + n["h"] / 2 for y in n["baselines"])
        left, top, width, height = map(float, drawing["box"].split())
        assert all(left <= b[1] and b[1] + b[3] <= left + width and top <= b[2] and b[2] + b[4] <= top + height
                   for b in boxes + labels)
        assert width <= 1150 and height <= 900, (center, width, height)  # fits a laptop's page, unscaled
    chain = {n["path"]: n for n in gl.layout(CHAIN[2], memory.traverse([CHAIN[2]], depth=2))["nodes"]}
    xs = [chain[p]["x"] for p in CHAIN]
    assert xs == sorted(xs) and len(set(xs)) == 5 and len({chain[p]["y"] for p in CHAIN}) == 1  # reads along
    around = {n["path"]: n for n in gl.layout(HUB, memory.traverse([HUB], depth=2, limit=80))["nodes"]}
    assert around[FRIENDS[3]]["x"] > 0 > around["notes/ana-note-0.md"]["x"]  # links out right, links in left
    fan = {"nodes": [{"path": "hub.md", "depth": 0, "name": "Hub"}] + [  # traverse's most: 80 files
        {"path": f"n{i}.md", "depth": 1, "name": f"A neighbour with a long name {i}"} for i in range(79)],
        "edges": [{"source": f"n{i}.md", "target": "hub.md", "predicate": "cites" if i % 2 else None} for i in range(79)]}
    drawing = gl.layout("hub.md", fan)
    assert overlapping([(n["path"], n["x"] - n["w"] / 2, n["y"] - n["h"] / 2, n["w"], n["h"]) for n in drawing["nodes"]]
                       + [(e["predicate"], *gl.label_box(e)) for e in drawing["edges"] if e["shown"]]) == []
    assert drawing["height"] < 1600 and drawing["width"] < 1150  # dealt into sub-columns, not one long one
    assert gl.wrap("Build pipeline step number 4") == ["Build pipeline step", "number 4"]
    assert gl.wrap("x" * 50) == ["x" * 20, "x" * 19 + "…"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """An open dashboard (no token, no service) on a workspace with the graphs, a conversation and two days,
    one with its day page."""
    memory = Memory(tmp_path_factory.mktemp("plain") / "ws")
    write_graphs(memory)
    memory.ws.write_text(CHAT1, "".join(json.dumps(record) + "\n" for record in [
        {"role": "user", "content": "I live in Lisbon, near the river.", "created_at": f"{DAY1}T18:01:00"},
        {"role": "assistant", "content": "Lovely! Do you like it there?", "created_at": f"{DAY1}T18:01:05"},
        {"role": "user", "content": [{"type": "text", "text": "I like green tea in the morning."}],
         "created_at": f"{DAY1}T18:03:00"}]) + "not a record\n")
    memory.write(HOME, "# Home\n\nThe user lives in Lisbon.\n", name="Home")
    memory.write(MOVED, "# Moved\n\nThe user lives in Porto.\n", name="Moved to Porto")
    memory.daily_reindex(DAY1)
    server = ApiServer(memory)
    try:
        yield memory, server
    finally:
        server.stop()


@pytest.mark.e2e
def test_the_graph_page_draws_every_label_apart_at_full_size(browser, plain):
    memory, server = plain
    with Visit(browser, server.url, None) as visit:
        page = visit.page
        for center, files in ((CHAIN[2], 5), (HUB, 33)):
            visit.go(f"/ui/w/default/graph/{center}?depth=2")
            nodes = page.locator("svg a.node")
            assert nodes.count() == files
            drawn = page.evaluate("""() => [...document.querySelectorAll('svg a.node')].map(a => {
                const t = a.querySelector('text').getBoundingClientRect(), r = a.querySelector('rect').getBoundingClientRect();
                return [a.textContent.trim(), t.left, t.top, t.width, t.height, r.left, r.top, r.width, r.height]; })""")
            assert overlapping([tuple(d[:5]) for d in drawn]) == [], center  # as the browser draws them
            for name, *box in drawn:  # each label inside its own box
                tx, ty, tw, th, rx, ry, rw, rh = box
                assert rx <= tx and tx + tw <= rx + rw and ry <= ty and ty + th <= ry + rh, name
            svg = page.locator("figure.graph svg")
            assert svg.bounding_box()["width"] >= float(svg.get_attribute("width")) - 1  # not shrunk to fit
            assert page.evaluate("getComputedStyle(document.querySelector('svg a.node text')).fontSize") == "12px"
        assert page.locator("svg .edge-label", has_text="friend_of").count() == 1
        page.locator("svg a.node", has_text="Market note 1").click()
        page.wait_for_url(re.compile(r"/graph/notes/ana-note-1\.md"))
        assert visit.foreign() == []


@pytest.mark.e2e
def test_a_conversation_reads_as_messages_each_at_its_line(browser, plain):
    memory, server = plain
    with Visit(browser, server.url, None) as visit:
        page = visit.page
        visit.go(f"/ui/w/default/file/{CHAT1}#L3")  # as a trace links it
        messages = page.locator("ol.conversation li.message")
        assert messages.count() == 4
        first = messages.nth(0).inner_text()
        assert "User" in first and "I live in Lisbon, near the river." in first and "18:01" in first
        assert "Assistant" in messages.nth(1).inner_text() and "{" not in page.locator("ol.conversation").inner_text()
        assert page.locator("li.message:target").get_attribute("id") == "L3"  # the message the link names
        assert "green tea" in page.locator("li.message:target").inner_text()
        assert page.evaluate("getComputedStyle(document.querySelector('li.message:target')).outlineStyle") == "solid"
        assert "not a record" in messages.nth(3).inner_text() and "not a message" in messages.nth(3).inner_text()
        visit.go(f"/ui/w/default/file/{CHAT1}?lines=2-2#L2")
        assert page.locator("li.message.hit").count() == 1 and "Lovely" in page.locator("li.message.hit").inner_text()
        page.locator("li.message", has_text="I live in Lisbon").locator("a.anchor").click()
        assert page.evaluate("location.hash") == "#L1"
        actions = page.locator(".file-actions").inner_text()
        assert "Edit" not in actions and "Raw JSONL" in actions  # what was said is not edited here
        page.locator(".file-actions a", has_text="Raw JSONL").click()
        assert '"role": "user"' in page.locator("pre.source").inner_text()
        response = visit.go(f"/ui/w/default/edit/{CHAT1}")
        assert response.status == 400 and "is a conversation" in page.locator("p.error").inner_text()
        long_chat = "session/dialog/long.jsonl"  # past what one page shows: a trace's link opens it at the message
        memory.ws.write_text(long_chat, "".join(json.dumps({"role": "user", "content": f"message {n} " + "x" * 150})
                                                + "\n" for n in range(1, 3001)))
        visit.go(f"/ui/w/default/file/{long_chat}?lines=2900-2900#L2900")
        assert page.locator("li.message.hit").get_attribute("id") == "L2900"
        assert page.locator("li.message:target").inner_text().count("message 2900 ") == 1
        page.locator("a", has_text="From line 1").click()
        assert page.locator("li.message").first.get_attribute("id") == "L1"
        assert visit.foreign() == []


@pytest.mark.e2e
def test_every_day_says_whether_it_has_a_day_page_and_offers_to_write_it(browser, plain):
    memory, server = plain
    with Visit(browser, server.url, None) as visit:
        page = visit.page
        visit.go("/ui/w/default/days")
        cells = page.locator("table.days tbody tr td:nth-child(3)")
        assert cells.count() == 2 and all(text.strip() for text in cells.all_inner_texts())  # never an empty cell
        written = page.locator("table.days tr", has_text=DAY1)
        assert written.locator("a", has_text=f"daily/{DAY1}.md").count() == 1
        waiting = page.locator("table.days tr", has_text=DAY2)
        assert "none yet" in waiting.inner_text()
        waiting.locator("button", has_text="Write it now").click()
        page.wait_for_url(re.compile(re.escape(f"/file/daily/{DAY2}.md") + "$"))
        assert "Moved to Porto" in page.locator(".markdown").inner_text()
        visit.go("/ui/w/default/days")
        assert page.locator("table.days tr", has_text=DAY2).locator("a", has_text=f"daily/{DAY2}.md").count() == 1
        assert memory.daily_list(date=DAY2)["index_page"]
        visit.go("/ui/")  # the overview's counts say what they count
        assert "pieces of files search ranks" in page.locator("#ws-default .counts div", has_text="Passages").get_attribute(
            "title")
        assert visit.foreign() == []


def test_a_fact_s_words_show_as_said_without_the_escapes_of_its_line(ws):
    """A fact line escapes what would read as structure (`\\::`, `\\^`, `\\#`, storage/text/facts.py); the file page's
    rows, what replaced what, a search hit and "where from?" show the words as the user said them."""
    said = "I live in Lisbon near the river. ## History ^f1 (until:: 2020-01-01)"
    was = "I lived in Porto ## Old ^x1 key::value"
    card, node = "daily/2024-05-08/chat.md", "digest/personal/user.md"
    memory = Memory(ws.root)
    memory.write(card, "# Chat\n\n## Facts\n\n" + facts.Fact(said, id="f1", about="user").render() + "\n")
    memory.write(node, note("User", "Where the user lives", "# User\n\n## Facts\n\n" + facts.Fact(
        said, id="f2", since="2024-05-08", sources=(f"{card}#^f1",), labels=("2024-05-08",)).render()
        + "\n\n## History\n\n" + facts.Fact(was, id="f1", until="2024-05-08", replaced_by=f"{node}#^f2").render()
        + "\n"))
    assert "\\::" in memory.read(node)["content"]  # the file keeps its escapes
    server = ApiServer(memory)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            pages = {"file": client.get(f"/ui/w/default/file/{node}").text,
                     "search": client.get("/ui/search", params={"q": "Lisbon river"}).text,
                     "trace": client.get(f"/ui/w/default/trace/{node}", params={"fact": "^f2"}).text}
    finally:
        server.stop()
    for name, page in pages.items():
        shown = " ".join(re.sub(r"<[^>]+>", " ", re.sub(r"</?mark>", "", page)).replace("&#39;", "'").split())
        assert not re.search(r"\\[:^#]", shown), (name, re.findall(r".{30}\\[:^#].{10}", shown))
        assert said in shown, (name, shown)
    assert was in " ".join(re.sub(r"<[^>]+>", " ", pages["file"]).split())  # "replaces" names the old fact
