"""What is kept out of memory (storage/text/redact.py): secrets replaced by a marker and `<private>` spans dropped
before anything is written, on every capture path, in the cards and in the index; counted in status."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from secrets_corpus import NEAR_MISSES, SECRETS  # noqa: E402

from llm_server import fact, json_reply  # noqa: E402
from storage.files import dialog
from storage.memory import Memory  # noqa: E402
from storage.text import redact  # noqa: E402
from test_cli import run  # noqa: E402

KEY = "sk-proj-Rt5Xq2mW8vLz3KpN7bYc1dHfJ4gTs6aE9uIoPlMnBvCxZ0qWeRtYuIo-AbCdEfGh12"
AWS = "AKIAJ2QF6ZT4XW7YB3LQ"
GH = "ghp_R8kz2Lq5Wv7Nx3Pm9Tb4Hc6Jd1Fg0SaYe8U"
DB_PASSWORD = "Str0ngPassw0rd"
THERAPIST = "Dr Lindqvist on Thursdays"
MESSAGES = [
    {"role": "user", "content": f"Here is my OpenAI key {KEY} and the AWS id {AWS}, keep them handy."},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": [{"type": "text", "text": f"GitHub token {GH}; the db is "
                                                         f"postgres://app:{DB_PASSWORD}@db.internal:5432/shop"}]},
    {"role": "user", "content": f"I moved to Porto. <private>my therapist is {THERAPIST}\nshe says hi</private> "
                                "I prefer green tea."},
]
SECRET_TEXTS = (KEY, AWS, GH, DB_PASSWORD, THERAPIST, "she says hi")


def everything(ws) -> str:
    return "".join(p.read_text(errors="replace") for p in ws.root.rglob("*")
                   if p.is_file() and "metadata" not in p.parts)


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_every_kind_of_the_corpus_is_replaced_by_its_marker(kind):
    for line, value in SECRETS[kind]:
        out, counts = redact.redact(line)
        assert value not in out and "[redacted: " in out and sum(counts.values()) >= 1, (kind, out)


def test_near_misses_are_left_as_they_are():
    for kind, lines in NEAR_MISSES.items():
        for line in lines:
            assert redact.redact(line) == (line, {}), kind


def test_the_strings_a_plugin_needs_pass_over_no_line_it_would_flag(monkeypatch):
    """A plugin reads a line only when it holds one of the strings its own patterns need (storage/text/literals.py):
    asking every plugin about every line of the corpus, its near misses and their variants (upper and lower case,
    in a sentence, behind a key name) finds exactly the same."""
    every = tuple((plugin, None) for plugin in redact._plugins())

    def every_plugin(line: str) -> list:
        with monkeypatch.context() as m:
            m.setattr(redact, "_asked", lambda: every)
            return redact._line_secrets(line)

    lines = [line for pairs in SECRETS.values() for line, _ in pairs] + [
        line for group in NEAR_MISSES.values() for line in group]
    variants = [v for line in lines for v in (line, line.upper(), line.lower(), f"see [[daily/a.md]] {line} today",
                                              f"PASSWORD = {line}", f'"secret": "{line}"')]
    found = [redact._line_secrets(v) for v in variants]
    assert found == [every_plugin(v) for v in variants]
    assert sum(map(bool, found)) > len(lines)  # the variants still hold secrets the plugins find


def test_private_spans_across_lines_and_unclosed_are_dropped():
    kept = dialog.Kept()
    record = dialog.clean_message({"role": "user", "content": "a <private>x\ny</private> b <PRIVATE>z\nrest"}, kept)
    assert record["content"] == "a [private: dropped] b [private: dropped]" and kept.private == 2


def test_a_turn_writes_no_secret_and_counts_them(ws):
    from engine.access.turns import record_turn

    out = record_turn(ws.root, "s1", MESSAGES)
    assert out["redacted"] == {"openai-key": 1, "aws-access-key": 1, "github-token": 1, "url-password": 1}
    assert out["private"] == 1
    text = (ws.root / "session/dialog/s1.jsonl").read_text()
    assert not [s for s in SECRET_TEXTS if s in text]
    for marker in ("[redacted: openai-key]", "[redacted: aws-access-key]", "[redacted: github-token]",
                   "[redacted: url-password]", "[private: dropped]"):
        assert marker in text
    assert "I prefer green tea" in text and "I moved to Porto" in text
    memory = Memory(ws.root)
    for secret in (KEY, AWS, GH, DB_PASSWORD, "Lindqvist"):
        assert not [h for h in memory.search(secret) if secret in json.dumps(h)], secret


def test_the_cli_turn_and_status_show_the_counts(ws):
    out = run(ws.root, "turn", "--session-id", "s2", "--messages", json.dumps(MESSAGES), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["redacted"]["openai-key"] == 1
    assert not [s for s in SECRET_TEXTS if s in everything(ws)]
    shown = run(ws.root, "status")
    assert "Kept out    4 secret(s) redacted" in shown.stdout and "1 private span(s) dropped" in shown.stdout
    status = json.loads(run(ws.root, "status", "--json").stdout)
    assert status["redacted"]["secrets"] == 4 and status["redacted"]["private"] == 1
    assert status["redacted"]["by_kind"]["aws-access-key"] == 1


def test_a_resource_keeps_its_key_on_disk_but_the_index_never_shows_it(ws):
    body = (f"Deploy notes\nAWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nid {AWS} for "
            "the deploy user\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t\n"
            "-----END RSA PRIVATE KEY-----\nthe deploy runs at noon\n").encode()
    path = ws.root / "resource/deploy.md"
    path.write_bytes(body)
    memory = Memory(ws.root)
    hits = memory.search("deploy user")
    assert hits and all(AWS not in json.dumps(h) for h in hits)
    for secret in (AWS, "wJalrXUtnFEMI", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0t"):
        assert not [h for h in memory.search(secret) if secret in json.dumps(h)], secret
    assert path.read_bytes() == body  # raw material: never modified
    status = json.loads(run(ws.root, "status", "--json").stdout)["redacted"]["index"]
    assert status == {"secrets": 3, "files": 1,
                      "by_kind": {"aws-access-key": 1, "aws-secret-key": 1, "private-key": 1}}


def test_workspace_patterns_from_redact_yaml(ws):
    from engine.access.turns import record_turn

    (ws.root / "redact.yaml").write_text('patterns:\n  employee-id: "EMP-[0-9]{6}"\n')
    out = record_turn(ws.root, "s3", [{"role": "user", "content": "my badge is EMP-123456"}])
    assert out["redacted"] == {"employee-id": 1}
    assert "[redacted: employee-id]" in (ws.root / "session/dialog/s3.jsonl").read_text()
    (ws.root / "redact.yaml").write_text('patterns:\n  bad: "("\n')
    with pytest.raises(Exception, match="redact.yaml: pattern 'bad' is not a regular expression"):
        record_turn(ws.root, "s3", [{"role": "user", "content": "hello"}])


def test_import_reme_redacts_its_dialogs(ws, tmp_path):
    from engine.access.client import local_memory
    from engine.memory.reme_import import import_reme

    reme = tmp_path / "reme"
    (reme / "session/dialog").mkdir(parents=True)
    (reme / "session/dialog/old.jsonl").write_text(
        json.dumps({"role": "user", "content": f"key {KEY} <private>secret life</private>"}) + "\n")
    report = import_reme(local_memory(ws.root), ws, reme)
    assert report["redacted"] == {"openai-key": 1} and report["private"] == 1
    text = (ws.root / "session/dialog/old.jsonl").read_text()
    assert KEY not in text and "secret life" not in text and "[redacted: openai-key]" in text
    again = import_reme(local_memory(ws.root), ws, reme)
    assert again["unchanged"] == 1 and again["redacted"] == {} and again["private"] == 0  # nothing new


def test_auto_memory_card_never_carries_a_secret(prefect_harness, llm, ws):
    from flows.auto_memory import auto_memory

    def respond(body):  # a model that copies the key into its fact, as a careless one would
        if "messages" not in body:
            return None
        return json_reply({"title": "Keys and tea", "facts": [
            fact(f"The user's OpenAI key is {KEY}.", source=(1,)),
            fact("The user prefers green tea.", kind="preference", source=(1,))]})

    llm.responder = respond
    out = auto_memory(session_id="s4", workspace=str(ws.root), messages=[
        {"role": "user", "content": f"my key is {KEY} and I prefer green tea <private>{THERAPIST}</private>",
         "created_at": "2026-11-05T18:00:00"}])
    assert out["redacted"] == {"openai-key": 1} and out["private"] == 1
    prompts = json.dumps(llm.requests)
    assert KEY not in prompts and THERAPIST not in prompts
    assert not [s for s in (KEY, THERAPIST) if s in everything(ws)]
    card = (ws.root / out["card"]).read_text()
    assert "green tea" in card
