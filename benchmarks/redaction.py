"""What is kept out of memory (storage/text/redact.py), measured on tests/fixtures/secrets_corpus.py: secrets in the
providers' real formats (several of each kind) and near misses (commit SHAs, UUIDs, sha256 hashes, base64 that
is no key, long identifiers in code, hex colours, versions, prose, URLs without a password). Prints the catch
rate per kind (the secret's value is gone from the text) and the false positives per near-miss kind (a line
changed), for what Dreamflow uses and for detect-secrets' two high-entropy plugins (left off: their false
positives), and the cost per line.

    python benchmarks/redaction.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fixtures")]

from secrets_corpus import NEAR_MISSES, SECRETS  # noqa: E402

from storage.text.redact import redact  # noqa: E402


def entropy_flags(line: str) -> bool:
    """Whether detect-secrets' high-entropy plugins (default limits) flag the line."""
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString

    return any(True for plugin in (HexHighEntropyString(), Base64HighEntropyString())
               for _ in plugin.analyze_string(line))


def main() -> None:
    print(f"{'secret kind':<16} {'caught':>8} {'high-entropy':>13}")
    caught_all = total = 0
    for kind, rows in SECRETS.items():
        caught = sum(value not in redact(line)[0] for line, value in rows)
        entropy = sum(entropy_flags(line) for line, _ in rows)
        caught_all, total = caught_all + caught, total + len(rows)
        print(f"{kind:<16} {caught:>4}/{len(rows):<3} {entropy:>9}/{len(rows)}")
    print(f"{'all':<16} {caught_all:>4}/{total:<3}\n")
    print(f"{'near-miss kind':<16} {'false +':>8} {'high-entropy':>13}")
    fp_all = lines = 0
    for kind, rows in NEAR_MISSES.items():
        fp = sum(redact(line)[0] != line for line in rows)
        entropy = sum(entropy_flags(line) for line in rows)
        fp_all, lines = fp_all + fp, lines + len(rows)
        print(f"{kind:<16} {fp:>4}/{len(rows):<3} {entropy:>9}/{len(rows)}")
    print(f"{'all':<16} {fp_all:>4}/{lines:<3}\n")
    text = "\n".join([line for rows in SECRETS.values() for line, _ in rows]
                     + [line for rows in NEAR_MISSES.values() for line in rows]) * 50
    redact(text)  # plugins imported
    start = time.perf_counter()
    redact(text)
    n = text.count("\n") + 1
    print(f"cost: {(time.perf_counter() - start) / n * 1e6:.0f} µs a line ({n} lines)")


if __name__ == "__main__":
    main()
