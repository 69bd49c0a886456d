"""Workspace layout, path safety, atomic writes and file listing."""

import os

import pytest

from storage.errors import NotFound, PathError
from storage.workspace import LAYOUT, Workspace


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
