"""The issue-11 acceptance battery: hostile paths on every surface, recovery killed while it replays, and
outside appends racing Dreamflow's rewrites. Prints trials and failures (docs/reliability.md).

    python benchmarks/hostile_battery.py [--crash-trials 25] [--race-lines 3000] [--journal-trials 10]
        [--close-kills 30] [--skip-mcp] [--import-gb 2] [--capture-mb 50] [--capture-deliveries 3]

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
from storage.memory import Memory  # noqa: E402

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
    Memory(root)


def crash_trials(trials: int, seed: int) -> dict:
    from crash_harness import DST, SRC, build_template, calibrate, dangling, kill_mid_move, temp_files

    from storage import index, journal

    rng = random.Random(seed)
    out = {"trials": trials, "mid_move": 0, "recoveries_killed": 0, "dangling_after": 0, "temps_after": 0,
           "journal_left": 0, "notes_wrong": 0, "index_wrong": 0}
    with tempfile.TemporaryDirectory(prefix="dreamflow-battery-") as tmp:
        work = Path(tmp)
        template = build_template(work / "template", linking=300)
        window = calibrate(template, work)
        for n in range(trials):
            root = work / f"trial-{n}"
            shutil.copytree(template, root)
            kill_mid_move(root, window, rng)
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
            out["dangling_after"] += dangling(root) > 0
            out["temps_after"] += bool(temp_files(root))
            out["journal_left"] += bool(journal.entries(mem.ws))
            notes = [(root / f"digest/wiki/note-{i:04d}.md").read_text() for i in range(300)]
            out["notes_wrong"] += any(t.count(f"[[{DST}") != 3 or SRC in t for t in notes)
            with mem.db.session() as con:
                out["index_wrong"] += len(index.inbound(con, DST)) != 900 or bool(index.inbound(con, SRC))
            shutil.rmtree(root)
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

    from crash_harness import DST, SRC, build_template, calibrate, dangling, kill_mid_move

    from storage import index, journal
    from storage.workspace import Workspace

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
    with tempfile.TemporaryDirectory(prefix="dreamflow-battery-") as tmp:
        work = Path(tmp)
        template = build_template(work / "template", linking=300)
        window = calibrate(template, work)
        for n in range(trials):
            root = work / f"trial-{n}"
            shutil.copytree(template, root)
            kill_mid_move(root, window, rng)
            out["mid_move"] += dangling(root) > 0
            out["most_dangling"] = max(out["most_dangling"], dangling(root))
            for entry in journal.entries(Workspace(root)):
                how = _damage(entry, rng)
                out["damage"][how] = out["damage"].get(how, 0) + 1
            journal.begin(Workspace(root), "move", {"src": SRC})  # valid JSON, good checksum, no destination
            lines.lines.clear()
            mem = Memory(root)
            out["lines_first_open"] += len(lines.lines)
            out["dangling_after"] += dangling(root) > 0
            out["journal_left"] += bool(journal.entries(mem.ws))
            out["quarantined"] += len(os.listdir(root / journal.QUARANTINE))
            notes = [(root / f"digest/wiki/note-{i:04d}.md").read_text() for i in range(300)]
            out["notes_wrong"] += any(t.count(f"[[{DST}") != 3 or SRC in t for t in notes)
            with mem.db.session() as con:
                out["index_wrong"] += len(index.inbound(con, DST)) != 900 or bool(index.inbound(con, SRC))
            lines.lines.clear()
            Memory(root)
            out["lines_second_open"] += len(lines.lines)
            shutil.rmtree(root)
    logging.getLogger("storage").removeHandler(lines)
    return out


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DREAMFLOW_WORKSPACE"}
    return subprocess.run([sys.executable, "-m", "dreamflow", "--workspace", str(root), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def close_kills(trials: int, seed: int) -> dict:
    """Moves SIGKILLed while the index closes, and the recorded broken index: what the next commands do."""
    from crash_harness import DST, SRC, build_template, dangling, kill_during_close

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
                done = _cli(root, *args)
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
        script = ("import sys; from pathlib import Path; from storage.workspace import Workspace\n"
                  "from tasks.reme_import import copy_file\n"
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
    import subprocess

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


if __name__ == "__main__":
    main()
