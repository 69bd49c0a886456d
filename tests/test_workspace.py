"""Workspace layout, path safety, atomic writes and file listing; a workspace kept in a git repository."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from cli_probe import ENTRY
from storage.errors import NotFound, PathError
from storage.files.workspace import GITIGNORES, LAYOUT, Workspace
from storage.memory import Memory


def test_layout_created_on_first_use(tmp_path):
    ws = Workspace(tmp_path / "new")
    for sub in LAYOUT:
        assert (ws.root / sub).is_dir(), sub


@pytest.mark.parametrize(
    "bad, why",
    [
        ("../outside.md", "escapes"),
        ("daily/../../x.md", "escapes"),
        ("/etc/passwd", "absolute"),
        ("C:/x.md", "absolute"),
        ("", "non-empty"),
        (".", "root"),
    ],
)
def test_refuses_paths_outside_the_workspace(ws, bad, why):
    with pytest.raises(PathError, match=why):
        ws.resolve(bad)


def test_normalize_canonicalises_separators_and_dots(ws):
    assert ws.normalize("./daily//2024-01-01\\card.md") == "daily/2024-01-01/card.md"


def test_symlink_leaving_the_workspace_is_refused(ws, tmp_path):
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "s.md").write_text("secret")
    os.symlink(outside, ws.root / "digest" / "link")
    with pytest.raises(PathError, match="symlink"):
        ws.read_text("digest/link/s.md")
    with pytest.raises(PathError, match="symlink"):
        ws.write_text("digest/link/new.md", "x")
    assert not (outside / "new.md").exists()


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(ws):
    ws.write_text("digest/wiki/a.md", "first\n")
    ws.write_text("digest/wiki/a.md", "second\n")
    assert ws.read_text("digest/wiki/a.md") == "second\n"
    assert os.listdir(ws.root / "digest" / "wiki") == ["a.md"]


def test_failed_write_keeps_old_content(ws, monkeypatch):
    ws.write_text("digest/wiki/a.md", "kept\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        ws.write_text("digest/wiki/a.md", "lost\n")
    monkeypatch.undo()
    assert ws.read_text("digest/wiki/a.md") == "kept\n"
    assert os.listdir(ws.root / "digest" / "wiki") == ["a.md"]


def test_read_missing_file_is_not_found(ws):
    with pytest.raises(NotFound):
        ws.read_text("daily/nope.md")


def test_iter_files_skips_metadata_scratch_and_escaping_links(ws, tmp_path):
    ws.write_text("daily/2024-01-01/card.md", "x")
    ws.write_text("digest/wiki/node.md", "x")
    ws.write_text("metadata/index.json", "{}")
    for scratch in (".card.md.swp", "card.md~", "#card.md#", ".x.tmp"):
        (ws.root / "daily" / scratch).write_text("scratch")
    (tmp_path / "out.md").write_text("outside")
    os.symlink(tmp_path / "out.md", ws.root / "digest" / "out.md")
    assert list(ws.iter_files()) == ["daily/2024-01-01/card.md", "digest/wiki/node.md"]
    assert list(ws.iter_files("digest")) == ["digest/wiki/node.md"]


# ---- git: derived state and raw conversations stay out of a commit ---------------------------------------

def test_every_workspace_gets_its_gitignores_once_and_an_edit_stands(tmp_path):
    root = tmp_path / "ws"
    Workspace(root)
    for folder, text in GITIGNORES.items():
        assert (root / folder / ".gitignore").read_text() == text
    (root / "metadata/.gitignore").unlink()  # a workspace made before Dreamflow wrote them
    (root / "session/dialog/.gitignore").write_text("# we share our conversations\n")  # the team's decision
    with ThreadPoolExecutor(8) as pool:  # several processes opening it at once: one whole file, no temp left
        list(pool.map(lambda _: Workspace(root), range(8)))
    assert (root / "metadata/.gitignore").read_text() == GITIGNORES["metadata"]
    assert (root / "session/dialog/.gitignore").read_text() == "# we share our conversations\n"
    assert not [n for _, _, names in os.walk(root) for n in names if n.endswith(".tmp")]


def test_the_gitignores_are_no_memory(tmp_path):
    mem = Memory(tmp_path / "ws")
    mem.write("daily/2024-05-08/kyoto.md", content="# Kyoto\n\nRamen near the temple.\n")
    mem.reindex()
    assert [e["path"] for e in mem.list()["entries"]] == ["daily/2024-05-08/kyoto.md"]
    assert [e["path"] for e in mem.list("session/dialog")["entries"]] == []
    assert mem.index_stats()["files"] == 1
    assert mem.search("Dreamflow derived commit conversations") == []


def git(cwd, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def dreamflow(cwd, home, *args: str) -> subprocess.CompletedProcess:
    """The console script, run in `cwd` with its own Dreamflow home (workspace registry)."""
    env = {**os.environ, "DREAMFLOW_HOME": str(home), "DREAMFLOW_EMBEDDER": "none"}
    env.pop("DREAMFLOW_WORKSPACE", None)
    done = subprocess.run([sys.executable, "-c", ENTRY, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done


@pytest.mark.e2e
def test_a_repository_commits_its_memory_but_not_the_index_nor_the_conversations(tmp_path):
    repo = tmp_path / "web-app"
    repo.mkdir()
    git(repo, "init", "-q")
    dreamflow(repo, tmp_path / "home", "workspace", "add", "alpha", str(repo / ".dreamflow"), "--folder", str(repo))
    dreamflow(repo, tmp_path / "home", "write", "daily/2024-05-08/deploy", "--name", "Deploy",
              "--description", "how we deploy", "--content", "# Deploy\n\nWe deploy with blue-green swaps.\n")
    dreamflow(repo, tmp_path / "home", "turn", "--session-id", "s1", "--messages",
              json.dumps([{"role": "user", "content": "my token is hunter2"}]))
    dreamflow(repo, tmp_path / "home", "write", "daily/2024-05-08/chat", "--name", "Chat", "--description", "a card",
              "--metadata", 'source_conversation="[[session/dialog/s1.jsonl]]"', "--content", "# Chat\n\nA token.\n")
    assert (repo / ".dreamflow/metadata/index.duckdb").exists() and (repo / ".dreamflow/session/dialog/s1.jsonl").exists()
    git(repo, "add", "-A")
    staged = git(repo, "diff", "--cached", "--name-only").split()
    assert staged == [".dreamflow/daily/2024-05-08/chat.md", ".dreamflow/daily/2024-05-08/deploy.md",
                      ".dreamflow/session/dialog/.gitignore"]
    git(repo, "commit", "-qm", "memory")

    clone = tmp_path / "teammate"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    assert not (clone / ".dreamflow/metadata").exists()
    found = json.loads(dreamflow(clone, tmp_path / "home2", "--workspace", ".dreamflow", "search", "blue-green",
                                 "--json").stdout)
    assert [hit["path"] for hit in found] == ["daily/2024-05-08/deploy.md"]  # the index, rebuilt on first use
    assert git(clone, "status", "--porcelain") == ""  # and nothing of it to commit
    health = json.loads(dreamflow(clone, tmp_path / "home2", "--workspace", ".dreamflow", "doctor", "--json").stdout)
    assert health["ok"] and [row["target"] for row in health["absent_conversations"]] == ["session/dialog/s1.jsonl"]
