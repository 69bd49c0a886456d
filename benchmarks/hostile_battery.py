"""The issue-11 acceptance battery: hostile paths on every surface, recovery killed while it replays, and
outside appends racing Dreamflow's rewrites. Prints trials and failures (docs/reliability.md).

    python benchmarks/hostile_battery.py [--crash-trials 25] [--race-lines 3000] [--journal-trials 10]
        [--close-kills 30] [--skip-mcp] [--import-gb 2] [--capture-mb 50] [--capture-deliveries 3]
        [--skip-service] [--mcp-sessions 10000]

- paths: ~80 hostile paths (absolute, `..`, `%2e%2e`, lookalikes, NUL, long, trailing dots and spaces,
  METADATA in any case, symlinks into metadata/ or out of the workspace, loops, FIFOs, sockets, `..\\`)
  through every path-taking operation, in-process, over HTTP (real uvicorn) and over MCP stdio. A failure
  is a crash (an exception that is not a Dreamflow error, an HTTP 5xx, an MCP internal error), or an answer
  that carries the outside secret file or touched it.
- crash: SIGKILL a move mid-rewrite, then SIGKILL the recovering process 1-3 times, then open once more:
  every note must link the new path exactly as often as before, no temp file or journal entry left, and the
  index must agree.
- race: an outside process appends a line every 2 ms while edit/append/prepend/frontmatter_update run.
- import: `dreamflow import-reme` of a ReMe folder holding a 2 GB sparse file, a backslash name, a name that
  is not UTF-8, METADATA/ and Metadata/ (issue 21): the import must finish, skip and report each, build the
  index and stay small (peak RSS of the process); then the import's copy step streams the same 2 GB file
  with the cap raised (peak RSS, seconds).
- journal: SIGKILL a move mid-rewrite, then truncate, bit-flip or overwrite its journal entry and add an entry
  with a valid checksum but an invalid plan: the next command must leave no link to a missing file, set both
  entries aside in metadata/journal-quarantine/ with one warning line, and the one after must say nothing.
- close: SIGKILL a move while DuckDB closes and checkpoints (after its journal entry is dropped), then run
  index-stats, reindex, move back and doctor --fix through the CLI: each must exit 0 or 1 with no traceback,
  and the index must agree with the files; plus the recorded index such a kill left broken for good
  (tests/fixtures/damaged-index.tar.gz), checkpointed as the old build did: the next command must heal it.
- capture: Claude Code transcripts of `--capture-mb` MB shaped like issue 21's 500 MB ones (one prompt and
  answer per 2 KB, as 256k prompts in 500 MB; 500-byte records with a prompt every 1,000, as 1M tiny
  records), delivered to `dreamflow hook claude-code` (real subprocesses, default limits) up to
  `--capture-deliveries` times: peak RSS and seconds per delivery, turns taken, duplicates, bytes left.
- cross-site (issue 21): against a real `dreamflow start`, what a web page can send without the service's
  consent (foreign, `null` and other-port `Origin`s, `Sec-Fetch-Site`, `text/plain`/form/multipart bodies, no
  body) to every write route, upload, flow and `/mcp`; a failure is an answer other than 403 or any change
  (a file, a flow run, a counted turn), or a script's JSON / the docs page's own request being refused; plus a
  preflight from a foreign page to the Prefect server it started.
- sessions: open `--mcp-sessions` `/mcp` sessions and abandon them, then a new client must initialize and
  call a tool; 503s and the service's RSS before/after are reported.
- stdio: lone surrogate escapes in every part of a request to `dreamflow mcp`; each request must get an answer.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), str(ROOT / "tests")] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]

from storage.errors import DreamflowError  # noqa: E402
from storage.memory import Memory, recover  # noqa: E402

SECRET = "SECRET-OUTSIDE"
SPECIALS = ["fifo.md", "sock.md", "loop", "dangle.md", "metalink", "idx.md", "outlink", "outfile.md", "up"]


def hostile_paths() -> list:
    w = "digest/wiki/"
    return [
        "/etc/passwd", "../x.md", "digest/../../x.md", "%2e%2e/x.md", "digest/%2e%2e/%2e%2e/x.md", "..\\x.md",
        "digest\\..\\..\\x.md", "C:\\x.md", "c:x.md", "\x00", w + "a\x00.md", "a" * 300 + ".md", "d/" * 2600 + "x.md",
        w + "a.md.", w + "a.md ", " " + w + "a.md", "metadata/index.duckdb", "METADATA/x.md", "Metadata/x.md",
        "metadata", "./metadata/x.md", "digest/../metadata/x.md", "\uff4detadata/x.md", "metadata./x.md",
        "metadata /x.md", w + "metalink/index.duckdb", w + "metalink/x.md", w + "idx.md", w + "outlink/secret.md",
        w + "outfile.md", w + "loop", w + "dangle.md", w + "up/metadata/x.md", w + "up/up/x.md", w + "fifo.md",
        w + "sock.md", "", " ", ".", "/", "//", "~/x.md", "~root/x.md", "\u2025/x.md", "\uff0e\uff0e/x.md",
        w + "\u202e.md", w + "a\nb.md", w + "a\rb.md", "\\\\server\\share\\x.md", "file:///etc/passwd", w + "a.md/",
        w + "a.md/.", "digest/wiki", w, "..", "...", "..../x.md", w + "[[x]].md", w + "a|b.md", w + "a#b.md",
        "session/dialog/../../metadata/x", w + "metalink", w + "up", w + "up/", "metadata\\x.md",
        "MeTaDaTa\\index.duckdb", w + "up\\metadata\\x.md", w + "UP/metadata/x.md", w + "con.md", w + "nul",
        w + "x.md:stream", w + "\udcff.md", "digest/\udcff", 123, None, ["a"], {"a": 1},
    ]


OPS = {
    "read": lambda p: {"path": p}, "stat": lambda p: {"path": p}, "list": lambda p: {"prefix": p},
    "write": lambda p: {"path": p, "content": "x"}, "create": lambda p: {"path": p, "content": "x"},
    "edit": lambda p: {"path": p, "old": "hello", "new": "hi"}, "append": lambda p: {"path": p, "content": "z"},
    "prepend": lambda p: {"path": p, "content": "z"}, "delete": lambda p: {"path": p},
    "move": lambda p: {"src": p, "dst": "digest/wiki/moved.md"}, "frontmatter_get": lambda p: {"path": p},
    "frontmatter_update": lambda p: {"path": p, "metadata": {"k": 1}},
    "frontmatter_delete_keys": lambda p: {"path": p, "keys": ["k"]},
    "relink": lambda p: {"target": "digest/wiki/b.md", "new_target": p}, "traverse": lambda p: {"paths": [p]},
    "tags": lambda p: {"tag": p}, "daily_list": lambda p: {"date": p},
}


def hostile_workspace(root: Path, outside: Path) -> Memory:
    mem = Memory(root)
    mem.write("digest/wiki/a.md", "hello [[digest/wiki/b.md]]\n")
    mem.write("digest/wiki/b.md", "b\n")
    (outside / "secret.md").write_text(SECRET)
    wiki = root / "digest" / "wiki"
    for name, target in (("metalink", "../../metadata"), ("idx.md", "../../metadata/index.duckdb"),
                         ("outlink", str(outside)), ("outfile.md", str(outside / "secret.md")),
                         ("loop", "loop"), ("dangle.md", "nowhere.md"), ("up", "..")):
        os.symlink(target, wiki / name)
    os.mkfifo(wiki / "fifo.md")
    socket.socket(socket.AF_UNIX).bind(str(wiki / "sock.md"))
    with open(os.path.join(os.fsencode(wiki), b"caf\xe9.md"), "wb") as fh:  # a Latin-1 name
        fh.write(b"links [[digest/wiki/a.md]]\n")
    return mem


def _restore(mem: Memory) -> None:
    for rel, text in (("digest/wiki/a.md", "hello [[digest/wiki/b.md]]\n"), ("digest/wiki/b.md", "b\n")):
        if not (mem.ws.root / rel).exists():
            mem.write(rel, text)


def _outside_intact(outside: Path) -> bool:
    return sorted(os.listdir(outside)) == ["secret.md"] and (outside / "secret.md").read_text() == SECRET


def paths_in_process(mem: Memory, outside: Path) -> tuple[int, list[str]]:
    cases, failures = 0, []
    for name, args in OPS.items():
        for path in hostile_paths():
            cases += 1
            try:
                answer = getattr(mem, name)(**args(path))
                if SECRET in json.dumps(answer, default=str, ensure_ascii=True):
                    failures.append(f"{name} {path!r}: leaked the outside file")
            except (DreamflowError, TypeError, ValueError):
                pass  # TypeError/ValueError: a wrong argument type in-process (the surfaces validate it)
            except Exception as exc:
                failures.append(f"{name} {path!r}: {type(exc).__name__}: {str(exc)[:100]}")
            if not _outside_intact(outside):
                failures.append(f"{name} {path!r}: touched the outside folder")
            _restore(mem)
    return cases, failures


def _post(port: int, route: str, body: bytes) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", route, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = response.read().decode("utf-8", "replace")
    conn.close()
    return response.status, answer


def paths_over_http(mem: Memory, outside: Path) -> tuple[int, list[str]]:
    from test_api import ApiServer

    server = ApiServer(mem)
    cases, failures = 0, []
    try:
        for name, args in {**OPS, "download": lambda p: {"path": p},
                           "upload": lambda p: {"name": p, "content": "eA=="}}.items():
            for path in hostile_paths():
                cases += 1
                status, answer = _post(server.port, f"/ops/{name}", json.dumps(args(path)).encode())
                if status >= 500 or SECRET in answer:
                    failures.append(f"HTTP {name} {path!r}: {status} {answer[:100]}")
                if not _outside_intact(outside):
                    failures.append(f"HTTP {name} {path!r}: touched the outside folder")
                _restore(mem)
        cases += 1
        status, answer = _post(server.port, "/ops/list", b"{}")
        if status >= 500:
            failures.append(f"HTTP list of the whole workspace: {status} {answer[:100]}")
    finally:
        server.stop()
    return cases, failures


def paths_over_mcp(mem: Memory, outside: Path) -> tuple[int, list[str]]:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "dreamflow", "--workspace", str(mem.ws.root),
                                                                 "mcp"], env=env)
    sendable = [p for p in hostile_paths() if not (isinstance(p, str) and "\udcff" in p)]  # JSON can't carry them
    cases, failures = 0, []

    async def run() -> None:
        nonlocal cases
        async with Client(params) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            for name, args in OPS.items():
                for path in sendable if name in tools else ():
                    cases += 1
                    result = await client.call_tool(name, args(path))
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    if SECRET in text or "internal error" in text:
                        failures.append(f"MCP {name} {path!r}: {text[:100]}")
                    _restore(mem)
            cases += 1
            with anyio.fail_after(20):
                await client.list_resources()
            for path in sendable:
                if isinstance(path, str):
                    cases += 1
                    try:
                        with anyio.fail_after(20):
                            result = await client.read_resource("dreamflow://" + path)
                        if SECRET in str(result.contents):
                            failures.append(f"MCP resource {path!r}: leaked the outside file")
                    except TimeoutError:
                        failures.append(f"MCP resource {path!r}: no answer in 20 s")
                    except Exception as exc:
                        if "internal" in str(exc).lower():
                            failures.append(f"MCP resource {path!r}: {exc}")

    try:
        anyio.run(run)
    except Exception as exc:  # the server died or stopped answering
        failures.append(f"MCP session ended: {type(exc).__name__}: {str(exc)[:150]}")
    if not _outside_intact(outside):
        failures.append("MCP: touched the outside folder")
    return cases, failures


def _recover(root: str) -> None:
    recover(Memory(root))


def _killed_moves(trials: int, rng: random.Random):
    """Yield (workspace, rewrite window) for each trial, right after a move of its target over 300 linking notes
    was SIGKILLed mid-rewrite; the workspace is removed when the caller asks for the next one."""
    from crash_harness import build_template, calibrate, kill_mid_move

    with tempfile.TemporaryDirectory(prefix="dreamflow-battery-") as tmp:
        work = Path(tmp)
        template = build_template(work / "template", linking=300)
        window = calibrate(template, work)
        for n in range(trials):
            root = work / f"trial-{n}"
            shutil.copytree(template, root)
            kill_mid_move(root, window, rng)
            yield root, window
            shutil.rmtree(root)


def _notes_and_index_wrong(root: Path, mem: Memory) -> tuple[bool, bool]:
    """Whether the 300 notes or the index still disagree with a finished move of SRC to DST."""
    from crash_harness import DST, SRC

    from storage.index import indexer as index

    notes = [(root / f"digest/wiki/note-{i:04d}.md").read_text() for i in range(300)]
    with mem.db.session() as con:
        return (any(t.count(f"[[{DST}") != 3 or SRC in t for t in notes),
                len(index.inbound(con, DST)) != 900 or bool(index.inbound(con, SRC)))


def crash_trials(trials: int, seed: int) -> dict:
    from crash_harness import dangling, temp_files

    from storage.files import journal

    rng = random.Random(seed)
    out = {"trials": trials, "mid_move": 0, "recoveries_killed": 0, "dangling_after": 0, "temps_after": 0,
           "journal_left": 0, "notes_wrong": 0, "index_wrong": 0}
    for root, window in _killed_moves(trials, rng):
        out["mid_move"] += dangling(root) > 0
        for _ in range(rng.randint(1, 3)):
            child = multiprocessing.get_context("fork").Process(target=_recover, args=(str(root),))
            child.start()
            time.sleep(rng.uniform(0, window * 1.5))
            if child.is_alive():
                os.kill(child.pid, signal.SIGKILL)
                out["recoveries_killed"] += 1
            child.join()
        mem = Memory(root)
        recover(mem)
        out["dangling_after"] += dangling(root) > 0
        out["temps_after"] += bool(temp_files(root))
        out["journal_left"] += bool(journal.entries(mem.ws))
        notes_wrong, index_wrong = _notes_and_index_wrong(root, mem)
        out["notes_wrong"] += notes_wrong
        out["index_wrong"] += index_wrong
    return out


def _damage(entry: Path, rng: random.Random) -> str:
    """Damage a journal entry as a bad disk or a stray editor might: truncate, flip one bit, or overwrite."""
    data = bytearray(entry.read_bytes())
    how = rng.choice(["truncated", "bit-flipped", "garbage"])
    if how == "truncated":
        data = data[:rng.randrange(len(data))]
    elif how == "bit-flipped":
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    else:
        data = bytearray(rng.randbytes(rng.randint(1, 512)))
    entry.write_bytes(bytes(data))
    return how


def journal_damage(trials: int, seed: int) -> dict:
    """SIGKILL a move mid-rewrite, damage its journal entry, add an entry that is valid JSON with a good checksum
    but an invalid plan; open twice. The first open must leave no link to a missing file and set both entries
    aside with one warning line; the second must say nothing."""
    import logging

    from crash_harness import SRC, dangling

    from storage.files import journal
    from storage.files.workspace import Workspace

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.WARNING)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    rng = random.Random(seed)
    out = {"trials": trials, "mid_move": 0, "most_dangling": 0, "damage": {}, "dangling_after": 0, "journal_left": 0,
           "quarantined": 0, "lines_first_open": 0, "lines_second_open": 0, "notes_wrong": 0, "index_wrong": 0}
    lines = Lines()
    logging.getLogger("storage").addHandler(lines)
    for root, _ in _killed_moves(trials, rng):
        out["mid_move"] += dangling(root) > 0
        out["most_dangling"] = max(out["most_dangling"], dangling(root))
        for entry in journal.entries(Workspace(root)):
            how = _damage(entry, rng)
            out["damage"][how] = out["damage"].get(how, 0) + 1
        journal.begin(Workspace(root), "move", {"src": SRC})  # valid JSON, good checksum, no destination
        lines.lines.clear()
        mem = Memory(root)
        recover(mem)
        out["lines_first_open"] += len(lines.lines)
        out["dangling_after"] += dangling(root) > 0
        out["journal_left"] += bool(journal.entries(mem.ws))
        out["quarantined"] += len(os.listdir(root / journal.QUARANTINE))
        notes_wrong, index_wrong = _notes_and_index_wrong(root, mem)
        out["notes_wrong"] += notes_wrong
        out["index_wrong"] += index_wrong
        lines.lines.clear()
        recover(Memory(root))
        out["lines_second_open"] += len(lines.lines)
    logging.getLogger("storage").removeHandler(lines)
    return out


def close_kills(trials: int, seed: int) -> dict:
    """Moves SIGKILLed while the index closes, and the recorded broken index: what the next commands do."""
    from crash_harness import DST, SRC, build_template, cli, dangling, kill_during_close

    rng = random.Random(seed)
    out = {"trials": trials, "commands_failed": 0, "tracebacks": 0, "healed": 0, "disagreeing": 0}
    with tempfile.TemporaryDirectory() as work:
        template = build_template(Path(work) / "template", linking=300)
        cases = []
        for n in range(trials):
            root = Path(work) / f"trial-{n}"
            shutil.copytree(template, root)
            kill_during_close(root, rng)
            cases.append((root, [["index-stats"], ["reindex"], ["move", DST, SRC], ["doctor", "--fix"]]))
        recorded = Path(work) / "recorded"
        with tarfile.open(ROOT / "tests" / "fixtures" / "damaged-index.tar.gz") as tar:
            tar.extractall(recorded, filter="data")
        import duckdb

        duckdb.connect(str(recorded / "before_next_13" / "metadata" / "index.duckdb")).close()
        hub = "digest/wiki/hub14.md"
        cases.append((recorded / "before_next_13", [["move", hub, "digest/wiki/hub15.md"], ["reindex"],
                                                    ["move", "digest/wiki/hub15.md", hub], ["doctor", "--fix"]]))
        for root, commands in cases:
            for args in commands:
                done = cli(root, *args)
                out["tracebacks"] += "Traceback" in done.stderr
                out["healed"] += "the index was damaged" in done.stderr
                out["commands_failed"] += done.returncode not in (0, 1, 10)
            mem = Memory(root)
            indexed = mem.index_stats()["files"]
            on_disk = sum(1 for p in root.rglob("*.md") if "metadata" not in p.parts)
            out["disagreeing"] += indexed != on_disk or dangling(root) != 0
        out["recorded_index_damaged_sets_kept"] = len(list((recorded / "before_next_13/metadata/damaged").iterdir()))
    return out


def _append_outside(path: str, lines: int) -> None:
    for i in range(lines):
        with open(path, "a") as fh:
            fh.write(f"outside {i}\n")
        time.sleep(0.002)


def race(lines: int) -> dict:
    from storage.errors import Conflict

    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory(tmp)
        rel = "digest/wiki/log.md"
        mem.write(rel, "counter\n")
        writer = multiprocessing.get_context("fork").Process(target=_append_outside,
                                                              args=(str(mem.ws.root / rel), lines))
        writer.start()
        counts = {"edit": 0, "append": 0, "prepend": 0, "frontmatter_update": 0, "conflicts": 0}
        calls = [lambda i: mem.edit(rel, "counter", "counter"), lambda i: mem.append(rel, f"mine {i}"),
                 lambda i: mem.prepend(rel, f"pre {i}"), lambda i: mem.frontmatter_update(rel, {"n": i})]
        i = 0
        while writer.is_alive():
            name = list(counts)[i % 4]
            try:
                calls[i % 4](i)
                counts[name] += 1
            except Conflict:
                counts["conflicts"] += 1
            i += 1
        writer.join()
        text = (mem.ws.root / rel).read_text()
        counts["outside_lines"] = lines
        counts["lost"] = sum(f"outside {j}\n" not in text for j in range(lines))
    return counts


def _peak_rss_mb(cmd: list[str]) -> tuple[int, int, str, str]:
    """(exit status, peak RSS in MB, seconds taken, stdout) of `cmd` run to the end (its own rusage: wait4)."""
    started = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}) as proc:
        out = proc.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss >> 10, f"{time.monotonic() - started:.1f} s", out


def import_hostile(gb: float) -> dict:
    """import-reme on a hostile ReMe folder with a `gb` GB sparse file; then its copy step on that file."""
    with tempfile.TemporaryDirectory(prefix="dreamflow-import-") as tmp:
        src, ws = Path(tmp) / "reme", Path(tmp) / "ws"
        for rel, text in (("digest/wiki/kyoto.md", "---\nname: Kyoto\n---\nTemples and zeppelins.\n"),
                          ("digest/wiki/a\\b.md", "a backslash\n"), ("METADATA/index.md", "derived\n"),
                          ("Metadata/index.md", "derived\n"), ("resource/ok.txt", "fine\n")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text(text)
        with open(os.path.join(os.fsencode(src / "resource"), b"caf\xe9.txt"), "wb") as fh:
            fh.write(b"latin-1 name\n")
        size = int(gb * (1 << 30))
        with open(src / "resource/huge.bin", "wb") as fh:
            fh.truncate(size)
        status, rss, took, out = _peak_rss_mb([sys.executable, "-m", "dreamflow", "--workspace", str(ws),
                                                "import-reme", str(src), "--json"])
        result = json.loads(out) if status == 0 else {}
        found = Memory(ws).search("zeppelins") if status == 0 else []
        ws_mb = sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(ws) for f in fs) >> 20
        out = {"exit": status, "peak_rss_mb": rss, "time": took, "copied": result.get("copied"),
               "skipped": {r["path"]: r["reason"][:40] for r in result.get("skipped", [])},
               "index_finds_it": bool(found), "workspace_disk_mb": ws_mb}
        script = ("import sys; from pathlib import Path; from storage.files.workspace import Workspace\n"
                  "from engine.memory.reme_import import copy_file\n"
                  "print(copy_file(Path(sys.argv[2]), Workspace(sys.argv[1]), 'resource/huge.bin', True, 1 << 40))")
        status, rss, took, answer = _peak_rss_mb([sys.executable, "-c", script, str(ws),
                                                   str(src / "resource/huge.bin")])
        out["copy_step_with_cap_raised"] = {"exit": status, "answer": answer.strip(), "peak_rss_mb": rss,
                                            "time": took, "bytes": os.stat(ws / "resource/huge.bin").st_size}
def _transcript(path: Path, mb: int, shape: str) -> int:
    """Write a Claude Code transcript of about `mb` MB; returns its prompts."""
    def record(kind: str, uuid: str, content) -> str:
        message = {"role": kind, "content": content}
        if kind == "assistant":
            message.update(model="claude-opus-4-5-20251101", id=f"msg_{uuid}", type="message")
        return json.dumps({"parentUuid": None, "isSidechain": False, "sessionId": "battery", "type": kind,
                           "uuid": uuid, "timestamp": "2024-05-09T10:00:00.000Z", "message": message}) + "\n"

    prompts = 0
    with path.open("w") as fh:
        while fh.tell() < mb << 20:
            words = "words " * (150 if shape == "prompts" else 1)
            fh.write(record("user", f"u-{prompts}", f"prompt {prompts} {words}"))
            if shape == "prompts":
                fh.write(record("assistant", f"a-{prompts}", [{"type": "text", "text": "answer " * 120}]))
            else:
                fh.writelines(json.dumps({"type": "progress", "uuid": f"p-{prompts}-{n}", "pad": "." * 420}) + "\n"
                              for n in range(1000))
            prompts += 1
    return prompts


def huge_transcripts(mb: int, deliveries: int) -> dict:
    """Each shape's deliveries: `{shape: {prompts, deliveries: [{s, rss_mb, turns, left_mb}], duplicates}}`."""
    from cli_probe import RSS_PROBE

    out = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DREAMFLOW_EMBEDDER": "none"}
    for shape in ("prompts", "tiny"):
        with tempfile.TemporaryDirectory(prefix="dreamflow-capture-") as tmp:
            transcript = Path(tmp) / "battery.jsonl"
            prompts = _transcript(transcript, mb, shape)
            payload = json.dumps({"session_id": "battery", "transcript_path": str(transcript),
                                  "hook_event_name": "Stop"})
            runs = []
            for _ in range(deliveries):
                started = time.monotonic()
                proc = subprocess.run([sys.executable, "-c", RSS_PROBE, "--workspace", f"{tmp}/ws", "hook",
                                       "claude-code", "--verbose"], input=payload, capture_output=True, text=True,
                                      env=env, timeout=600)
                said = proc.stderr.split("maxrss")[0]
                left = int(said.split("; ")[-1].split()[0]) if "left for the next" in said else 0
                turns = int(said.rsplit(" in ", 1)[-1].split()[0]) if " turn(s)" in said else said.strip()
                runs.append({"s": round(time.monotonic() - started, 1), "turns": turns,
                             "rss_mb": round(int(proc.stderr.split("maxrss")[-1]) / 1024),
                             "left_mb": round(left / (1 << 20), 1)})
                if not left:
                    break
            dialog = Path(tmp) / "ws/session/dialog/battery.jsonl"
            users = [json.loads(line)["content"] for line in dialog.read_text().splitlines()
                     if '"role": "user"' in line] if dialog.exists() else []
            out[shape] = {"mb": mb, "prompts": prompts, "deliveries": runs, "duplicates": len(users) - len(set(users))}
    return out
# ---- issue 21: cross-site requests, abandoned /mcp sessions, unreadable stdio requests --------------------------

FOREIGN_ORIGINS = ["http://evil.example", "null", "http://localhost:1", "http://127.0.0.1.nip.io"]


def _raw(port: int, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    answer = response.read().decode("utf-8", "replace")
    conn.close()
    return response.status, answer


def _browser_shapes(body: bytes) -> list[tuple[bytes, dict]]:
    """The (body, headers) a page of another site can make a browser send with `body` (or a form, or none)."""
    boundary = "b0undary"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"planted.txt\"\r\n\r\n"
            f"planted\r\n--{boundary}--\r\n").encode()
    shapes = [(form, {"Content-Type": f"multipart/form-data; boundary={boundary}"}),
              (body, {"Content-Type": "text/plain;charset=UTF-8"}),
              (b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}),
              (body, {"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}),
              (body, {"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"})]
    for origin in FOREIGN_ORIGINS:
        shapes += [(b"", {"Origin": origin}), (body, {"Origin": origin, "Content-Type": "text/plain"}),
                   (form, {"Origin": origin, "Content-Type": f"multipart/form-data; boundary={boundary}"}),
                   (body, {"Origin": origin, "Content-Type": "application/json",
                           "Accept": "application/json, text/event-stream"})]
    return shapes


def cross_site(svc) -> tuple[int, list[str]]:
    """Every route that changes something, in every shape a foreign page can send; then the allowed callers."""
    import httpx

    from deployments.serve import DEPLOYMENTS

    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}})
    routes = {"/ops/write": {"path": "digest/wiki/planted.md", "content": "planted"},
              "/ops/delete": {"path": "digest/wiki/keep.md"}, "/ops/upload": {"name": "planted.txt", "content": "eA=="},
              "/turn": {"session_id": "page", "messages": [{"role": "user", "content": "x"}]}, "/mcp": None,
              **{f"/flows/{flow}": {} for flow in DEPLOYMENTS}}
    svc.memory.write("digest/wiki/keep.md", "keep me")
    runs_before = _run_count(svc)
    cases, failures = 0, []
    for route, payload in routes.items():
        body = (initialize if payload is None else json.dumps(payload)).encode()
        for data, headers in _browser_shapes(body):
            for method in ("POST", "PUT", "DELETE"):
                cases += 1
                status, answer = _raw(svc.port, method, route, data, {"Host": f"127.0.0.1:{svc.port}", **headers})
                if status != 403 or "CrossSiteRequest" not in answer:
                    failures.append(f"{method} {route} {headers}: {status} {answer[:100]}")
    ws = svc.workspace
    if (ws / "digest/wiki/planted.md").exists() or list(ws.rglob("planted*")):
        failures.append("a page planted a file")
    if not (ws / "digest/wiki/keep.md").exists():
        failures.append("a page deleted a file")
    if "page" in svc.memory.status()["turns"]["sessions"]:
        failures.append("a page recorded a turn")
    if _run_count(svc) != runs_before:
        failures.append(f"a page started {_run_count(svc) - runs_before} flow run(s)")
    own = f"http://127.0.0.1:{svc.port}"
    for headers in ({}, {"Origin": own, "Sec-Fetch-Site": "same-origin"}, {"Sec-Fetch-Site": "none"}):
        cases += 1
        status, answer = _raw(svc.port, "POST", "/ops/read", json.dumps({"path": "digest/wiki/keep.md"}).encode(),
                              {"Content-Type": "application/json", **headers})
        if status != 200:
            failures.append(f"allowed caller {headers} refused: {status} {answer[:100]}")
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}
    for origin in FOREIGN_ORIGINS:
        cases += 1
        resp = httpx.options(f"{svc.prefect_api}/deployments/filter", headers={"Origin": origin, **preflight})
        if "access-control-allow-origin" in resp.headers:
            failures.append(f"Prefect API lets {origin} script it (CORS {resp.headers['access-control-allow-origin']})")
    return cases, failures


def _run_count(svc) -> int:
    """Flow runs started by someone (not the ones the scheduler adds for the nightly deployments)."""
    return sum(not run["auto_scheduled"] for run in svc.prefect("POST", "/flow_runs/filter", {"limit": 200}))


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def abandoned_sessions(svc, sessions: int) -> dict:
    """Open `sessions` /mcp sessions (8 at a time) and walk away; then a new MCP client must still work."""
    from concurrent.futures import ThreadPoolExecutor

    import anyio
    import httpx
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    rss_before = _rss_mb(svc.proc.pid)
    statuses: dict[int, int] = {}
    started = time.monotonic()

    def open_some(count: int) -> list[int]:
        with httpx.Client(timeout=60) as client:
            return [client.post(f"{svc.url}/mcp", json=body, headers=headers).status_code for _ in range(count)]

    with ThreadPoolExecutor(8) as pool:
        for codes in pool.map(open_some, [sessions // 8 + (i < sessions % 8) for i in range(8)]):
            for code in codes:
                statuses[code] = statuses.get(code, 0) + 1
    opened_s = time.monotonic() - started

    async def new_client():
        async with Client(streamable_http_client(f"{svc.url}/mcp")) as client:
            return await client.call_tool("read", {"path": "digest/wiki/keep.md", "numbered": False})

    started = time.monotonic()
    try:
        result = anyio.run(new_client)
        new_client_ok = not result.is_error
    except Exception as exc:
        new_client_ok = f"{type(exc).__name__}: {str(exc)[:100]}"
    return {"sessions": sessions, "statuses": statuses, "open_s": round(opened_s, 1),
            "new_client_ok": new_client_ok, "new_client_s": round(time.monotonic() - started, 2),
            "rss_mb": (round(rss_before), round(_rss_mb(svc.proc.pid)))}


def stdio_unreadable(workspace: Path) -> dict:
    """Lone surrogate escapes in the id, method, tool name, arguments and nested values of requests to a real
    `dreamflow mcp`; every request must get an answer within 60 s (a loaded machine), and the server must keep
    serving (the last request is a valid one)."""
    import subprocess
    import threading

    call = '{"jsonrpc": "2.0", "id": %s, "method": "%s", "params": %s}'
    requests = {
        2: call % (2, "tools/call", '{"name": "search", "arguments": {"query": "\\ud800"}}'),
        3: call % (3, "tools/call", '{"name": "\\udfff", "arguments": {}}'),
        4: call % (4, "tools/call", '{"name": "write", "arguments": {"path": "a\\ud800.md", "content": "x"}}'),
        5: call % (5, "tools/call", '{"name": "write", "arguments": {"path": "a.md", "content": "\\udc00"}}'),
        6: call % (6, "resources/read", '{"uri": "dreamflow://\\ud83d.md"}'),
        7: call % (7, "tools/list", '{"cursor": "\\ud800"}'),
        8: call % (8, "tools/call", '{"name": "frontmatter_update", "arguments": {"path": "a.md", '
                                    '"metadata": {"\\ud800": [{"x": "\\udbff"}]}}}'),
        9: call % (9, "\\ud800", "{}"),
        None: call % ('"\\ud800"', "tools/call", '{"name": "list", "arguments": {}}'),
        10: call % (10, "tools/call", '{"name": "list", "arguments": {}}'),
    }
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "battery", "version": "1"}}}
    proc = subprocess.Popen([sys.executable, "-m", "dreamflow", "--workspace", str(workspace), "mcp"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    answers: dict = {}
    reader = threading.Thread(target=lambda: [answers.setdefault(json.loads(line).get("id"), json.loads(line))
                                              for line in proc.stdout], daemon=True)
    reader.start()
    lines = [json.dumps(init), '{"jsonrpc": "2.0", "method": "notifications/initialized"}', *requests.values()]
    proc.stdin.write("".join(line + "\n" for line in lines).encode())
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while not set(requests) <= set(answers) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.stdin.close()
    proc.wait(30)
    unanswered = [key for key in requests if key not in answers]
    return {"requests": len(requests), "answered": len(requests) - len(unanswered), "unanswered": unanswered,
            "errors": sum("error" in answers.get(key, {}) for key in requests)}


def issue_21(sessions: int) -> None:
    """The service-side classes on one real `dreamflow start` (no LLM), and the stdio one."""
    sys.path.insert(0, str(ROOT / "tests"))
    from service_harness import RunningService

    with tempfile.TemporaryDirectory(prefix="dreamflow-battery-") as tmp:
        started = time.monotonic()
        svc = RunningService.start(Path(tmp), timeout=600)
        print(f"service ready in {time.monotonic() - started:.0f} s")
        try:
            started = time.monotonic()
            cases, failures = cross_site(svc)
            print(f"cross-site requests: {cases} cases, {len(failures)} failures ({time.monotonic() - started:.0f} s)")
            for failure in failures[:15]:
                print("   ", failure)
            if sessions:
                print("abandoned /mcp sessions:", abandoned_sessions(svc, sessions))
        finally:
            svc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--crash-trials", type=int, default=25)
    parser.add_argument("--race-lines", type=int, default=3000)
    parser.add_argument("--journal-trials", type=int, default=10)
    parser.add_argument("--close-kills", type=int, default=30)
    parser.add_argument("--skip-mcp", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--import-gb", type=float, default=2, help="sparse file size for the import class (0: skip)")
    parser.add_argument("--capture-mb", type=int, default=50)
    parser.add_argument("--capture-deliveries", type=int, default=3)
    parser.add_argument("--skip-service", action="store_true", help="skip the cross-site and /mcp session classes")
    parser.add_argument("--mcp-sessions", type=int, default=10000, help="abandoned /mcp sessions to open (0: none)")
    args = parser.parse_args()
    surfaces = [("in-process", paths_in_process), ("HTTP", paths_over_http)]
    if not args.skip_mcp:
        surfaces.append(("MCP stdio", paths_over_mcp))
    for label, run in surfaces:
        with tempfile.TemporaryDirectory() as ws, tempfile.TemporaryDirectory() as outside:
            started = time.monotonic()
            cases, failures = run(hostile_workspace(Path(ws), Path(outside)), Path(outside))
            print(f"hostile paths, {label}: {cases} cases, {len(failures)} failures "
                  f"({time.monotonic() - started:.0f} s)")
            for failure in failures[:15]:
                print("   ", failure)
    if args.crash_trials:
        print("move killed, then its recovery killed:", crash_trials(args.crash_trials, args.seed))
    if args.journal_trials:
        print("move killed, its journal entry damaged, an invalid entry beside it:",
              journal_damage(args.journal_trials, args.seed))
    if args.close_kills:
        print("move killed while the index closes, and the recorded broken index:",
              close_kills(args.close_kills, args.seed))
    if args.race_lines:
        print("outside appends every 2 ms during rewrites:", race(args.race_lines))
    if args.import_gb:
        print(f"import-reme of a hostile folder with a {args.import_gb:g} GB sparse file:",
              import_hostile(args.import_gb))
    if args.capture_mb:
        for shape, result in huge_transcripts(args.capture_mb, args.capture_deliveries).items():
            print(f"huge Claude Code transcript ({shape}):", result)
    if not args.skip_mcp:
        with tempfile.TemporaryDirectory() as ws:
            print("stdio requests with lone surrogates:", stdio_unreadable(Path(ws)))
    if not args.skip_service:
        issue_21(args.mcp_sessions)


if __name__ == "__main__":
    main()
