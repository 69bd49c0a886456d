"""What is kept out of memory: secrets replaced by a marker that names them, `<private>` spans dropped.

`redact(text, patterns)` -> `(text, {kind: n})`. Secrets are found by detect-secrets' plugins (Yelp's detector,
maintained, one plugin per provider format: AWS, GitHub, Slack, JWT, OpenAI, Stripe, private keys, passwords in
URLs, `password=`/`secret:` assignments...), each found value replaced by `[redacted: <kind>]`. The plugins are
called directly (not through `scan_line`, whose settings are process-global: the service redacts on many
threads), with detect-secrets' own heuristic filters for ids, UUIDs, templates and `$VAR` references. Its
high-entropy plugins are left off: they flag every quoted commit SHA and sha256 (benchmarks/redaction.py).

Formats detect-secrets lacks, added here (`EXTRA`): Anthropic `sk-ant-...` and current OpenAI `sk-proj-...`
keys, fine-grained GitHub tokens `github_pat_...`, `Authorization: Bearer ...` values, the whole
`-----BEGIN ... PRIVATE KEY-----` block (the plugin flags its first line only) and unquoted `.env` lines
(`API_KEY=...`, `export DB_PASSWORD=...`: the plugin's config-file rules, used on lines that are assignments).

A workspace's own patterns: `redact.yaml` at its root, `patterns: {kind: regex}` (a regex with a group redacts
the group, else the whole match); `workspace_patterns(root)` reads it (cached by mtime; a bad file is an error
naming it). `drop_private(text)`: `<private>...</private>` spans (across lines; an unclosed one runs to the
end) become `[private: dropped]`. A multi-line secret keeps its line breaks, so line numbers do not move.
"""

from __future__ import annotations

import os
import re
import threading
from collections import Counter
from functools import lru_cache
from pathlib import Path

from storage.errors import InvalidInput
from storage.text.literals import fold, may_match, needed, needed_by_any

PATTERNS_FILE = "redact.yaml"
PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)
PRIVATE_MARKER = "[private: dropped]"
MARKER = "[redacted: {}]"
_MARKED = re.compile(r"\[redacted: ([\w.-]+)\]")

# detect-secrets' secret_type -> our kind (anything else: its name, lower-case, dashed)
KINDS = {
    "AWS Access Key": "aws-access-key", "OpenAI Token": "openai-key", "GitHub Token": "github-token",
    "Slack Token": "slack-token", "JSON Web Token": "jwt", "Private Key": "private-key",
    "Basic Auth Credentials": "url-password", "Secret Keyword": "env-secret",
}
PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL)
EXTRA = (  # (kind, regex with the secret as group 1, or as the match)
    ("anthropic-key", re.compile(r"(?<![\w-])(sk-ant-(?:api|admin|oat)\d{2}-[A-Za-z0-9_-]{20,})")),
    ("openai-key", re.compile(r"(?<![\w-])(sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{32,})")),
    ("github-token", re.compile(r"(?<!\w)(github_pat_[A-Za-z0-9_]{22,})")),
    ("github-token", re.compile(r"(?<!\w)(gh[pousr]_[A-Za-z0-9]{30,})")),
    ("bearer-token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{12,}=*)")),
    ("aws-secret-key", re.compile(r"(?i)aws_?secret_?(?:access_?)?key\w*[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})\b")),
)
ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?[A-Za-z_][\w.-]*\s*[:=]")  # a `.env`/config line
# What a line must hold for the plugins to be asked (they cost ~0.1 ms a line; most lines hold none of this): a
# run of 16 token characters (every key, token and hash format), a word naming a secret given a value (the keyword
# plugin), or credentials in a URL.
CANDIDATE = re.compile(r"[A-Za-z0-9_\-+/=.]{16}|(?:pass|pwd|secret|token|key|auth|cred)\w*[\"']?\s*(?::|=|=>)"
                       r"|://[^\s/]*@", re.IGNORECASE)


@lru_cache(maxsize=1)
def _plugins() -> tuple:
    """One instance of each detect-secrets plugin used (imported on first use: the CLI starts without them);
    the keyword plugin last, so a value a provider plugin named is not named again."""
    from detect_secrets.plugins import (artifactory, aws, azure_storage_key, basic_auth, cloudant, discord,
                                        github_token, gitlab_token, ibm_cloud_iam, ibm_cos_hmac, jwt, keyword,
                                        mailchimp, npm, openai, private_key, pypi_token, sendgrid, slack,
                                        softlayer, square_oauth, stripe, telegram_token, twilio)

    return (aws.AWSKeyDetector(), openai.OpenAIDetector(), github_token.GitHubTokenDetector(),
            gitlab_token.GitLabTokenDetector(), slack.SlackDetector(), jwt.JwtTokenDetector(),
            private_key.PrivateKeyDetector(), basic_auth.BasicAuthDetector(), stripe.StripeDetector(),
            artifactory.ArtifactoryDetector(), azure_storage_key.AzureStorageKeyDetector(),
            cloudant.CloudantDetector(), discord.DiscordBotTokenDetector(), ibm_cloud_iam.IbmCloudIamDetector(),
            ibm_cos_hmac.IbmCosHmacDetector(), mailchimp.MailchimpDetector(), npm.NpmDetector(),
            pypi_token.PypiTokenDetector(), sendgrid.SendGridDetector(), softlayer.SoftlayerDetector(),
            square_oauth.SquareOAuthDetector(), telegram_token.TelegramBotTokenDetector(),
            twilio.TwilioKeyDetector(), keyword.KeywordDetector())


def _kind(plugin, line: str) -> str:
    kind = KINDS.get(plugin.secret_type) or re.sub(r"[^a-z0-9]+", "-", plugin.secret_type.lower()).strip("-")
    if kind == "env-secret":
        key = line.split("=", 1)[0].split(":", 1)[0].lower()
        return "password" if "pass" in key or "pwd" in key else kind
    return kind


def _filtered(secret: str, line: str, plugin) -> bool:
    """detect-secrets' heuristic filters: what looks like an id, a UUID, a template or a reference."""
    from detect_secrets.filters import heuristic as h

    if _MARKED.search(secret) or secret.startswith("[private"):
        return True
    if plugin.secret_type != "Secret Keyword":
        return False
    if re.fullmatch(r"[A-Za-z_][A-Za-z_.]*[_.][A-Za-z_.]*", secret) or secret.endswith("()"):
        return True  # `api_key = api_key`, `password = self.password`: a name, not a value
    return (h.is_sequential_string(secret) or h.is_potential_uuid(secret) or h.is_templated_secret(secret)
            or h.is_prefixed_with_dollar_sign(secret) or h.is_indirect_reference(line)
            or h.is_likely_id_string(secret, line, plugin) or len(secret) < 4)


@lru_cache(maxsize=1)
def _asked() -> tuple:
    """Each plugin with the strings one of which a line must hold for it to find anything (storage/text/literals.py;
    the keyword plugin's from both its rule sets): a few substring tests pass over most lines (measured on card
    lines, whose wikilinks let them through CANDIDATE: 152 -> 40 µs a line)."""
    from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP as CONFIG
    from detect_secrets.plugins.keyword import QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP as QUOTED

    return tuple((plugin, needed_by_any([*CONFIG, *QUOTED] if plugin.secret_type == "Secret Keyword"
                                        else getattr(plugin, "denylist", ())))
                 for plugin in _plugins())


def _line_secrets(line: str) -> list[tuple[str, str, bool]]:
    """`(kind, value, by keyword)` of what the plugins find in one line."""
    from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP, QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP

    found, folded = [], fold(line)
    for plugin, need in _asked():
        if not may_match(need, folded):
            continue
        if plugin.secret_type == "Secret Keyword":
            rules = CONFIG_DENYLIST_REGEX_TO_GROUP if ASSIGNMENT.match(line) else QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP
            values = plugin.analyze_string(line, denylist_regex_to_group=rules)
        else:
            values = plugin.analyze_string(line)
        for value in values:
            value = value.strip()
            if value and not _filtered(value, line, plugin):
                found.append((_kind(plugin, line), value, plugin.secret_type == "Secret Keyword"))
    return found


def _sub(regex: re.Pattern, kind: str, text: str, counts: Counter) -> str:
    def one(match: re.Match) -> str:
        whole = match.group(0)
        start, end = match.span(1) if match.re.groups else match.span(0)
        secret = match.string[start:end]
        if not secret or _MARKED.fullmatch(secret):
            return whole
        counts[kind] += 1
        at = start - match.start(0)
        return whole[:at] + MARKER.format(kind) + "\n" * secret.count("\n") + whole[at + len(secret):]
    return regex.sub(one, text)


def redact(text: str, patterns: tuple[tuple[str, re.Pattern], ...] = ()) -> tuple[str, Counter]:
    """`text` with every secret replaced by `[redacted: <kind>]`, and how many of each kind."""
    counts: Counter = Counter()
    if not text or not isinstance(text, str):
        return text, counts
    folded = fold(text)
    for kind, regex in (("private-key", PRIVATE_KEY_BLOCK), *EXTRA, *patterns):
        if may_match(needed(regex.pattern, regex.flags), folded):  # most texts hold none of what a format needs
            before = sum(counts.values())
            text = _sub(regex, kind, text, counts)
            if sum(counts.values()) != before:
                folded = fold(text)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if len(line) < 8 or not CANDIDATE.search(line):
            continue
        for kind, value, keyword in _line_secrets(line):
            if keyword:  # the value after its name: the last place it stands (`self.api_key = api_key`)
                at = line.rfind(value)
                if at < 0:
                    continue
                line = line[:at] + MARKER.format(kind) + line[at + len(value):]
                counts[kind] += 1
                continue
            tail = r"[A-Za-z0-9_\-+/=.]*" if kind == "jwt" else ""  # the plugin's match stops before the signature
            line, n = re.subn(re.escape(value) + tail, MARKER.format(kind).replace("\\", r"\\"), line)
            counts[kind] += n
        lines[i] = line
    return "\n".join(lines), counts


def marked(text: str) -> tuple[Counter, int]:
    """The markers a redacted text holds: secrets by kind, and private spans dropped."""
    return Counter(m.group(1) for m in _MARKED.finditer(text)), text.count(PRIVATE_MARKER)


def drop_private(text: str) -> tuple[str, int]:
    """`text` with its `<private>` spans replaced by `[private: dropped]`, and how many."""
    if not isinstance(text, str) or "<private" not in text.lower():
        return text, 0
    return PRIVATE.subn(PRIVATE_MARKER, text)


def workspace_patterns(root: str | os.PathLike[str]) -> tuple[tuple[str, re.Pattern], ...]:
    """The workspace's own patterns from `<root>/redact.yaml` (none without the file)."""
    path = Path(root) / PATTERNS_FILE
    try:
        st = path.stat()
    except OSError:
        return ()
    return _load_patterns(str(path), st.st_mtime_ns, st.st_size)


_lock = threading.Lock()


@lru_cache(maxsize=32)
def _load_patterns(path: str, mtime: int, size: int) -> tuple[tuple[str, re.Pattern], ...]:
    from storage.text.yaml_load import load

    with _lock:
        try:
            data, _ = load(Path(path).read_text(encoding="utf-8"))
        except Exception as exc:
            raise InvalidInput(f"{path}: not readable YAML ({exc})") from None
    table = (data or {}).get("patterns") if isinstance(data, dict) else None
    if data and not isinstance(table, dict):
        raise InvalidInput(f"{path}: expected `patterns:` mapping a kind to a regular expression")
    out = []
    for kind, source in (table or {}).items():
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]{0,40}", str(kind)) or not isinstance(source, str):
            raise InvalidInput(f"{path}: pattern {kind!r}: a kind (letters, digits, - _ .) and a regex text")
        try:
            regex = re.compile(source)
        except re.error as exc:
            raise InvalidInput(f"{path}: pattern {kind!r} is not a regular expression ({exc})") from None
        if regex.groups > 1 or regex.search(""):
            raise InvalidInput(f"{path}: pattern {kind!r} must match text and have at most one group")
        out.append((str(kind), regex))
    return tuple(out)
