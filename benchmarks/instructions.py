"""Memory is data, not instructions: how many planted instructions and how many benign notes the UserPromptSubmit
hook injects as they stand, and how many search flags, on tests/fixtures/instructions.json.

End to end: every line of the corpus is a note of its own (`notes/<kind>-<n>.md`: a heading and the line) in one
workspace among 40 work notes; for each, a prompt about its topic ("What do my notes say about deploys?") goes
through the hook's own `context` (dreamflow/hooks/context.py: recall with the hook's budget and thresholds from
the settings) in a fresh session, and `search` for the topic gives the note's hit. Printed per kind:
injected as it stands (the line's text is in what the hook injects), left out (the note was cited, its line
neutralised), not reached (the hook injected nothing of the note), flagged in search, detector hits.

`--any-match`: the hook's relevance thresholds at 0 (any keyword match injected), so every note is reached.

    DREAMFLOW_EMBEDDER=none python benchmarks/instructions.py [--any-match]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from dreamflow.hooks.context import context
from storage.memory import Memory
from storage.text import instructions

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "instructions.json"


def main() -> None:
    if "--any-match" in sys.argv:
        for name in ("SCORE", "RELEVANCE", "WORDS"):
            os.environ[f"DREAMFLOW_INJECT_MIN_{name}"] = "0"
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        memory = Memory(root)
        for n in range(40):
            memory.write(f"daily/2024-04-{n % 28 + 1:02d}/note-{n}.md",
                         f"# Note {n}\n\nAna reviewed pull request {n} of the payments service with Bo.\n")
        notes = []
        for kind in ("planted", "benign"):
            for n, (topic, line) in enumerate(corpus[kind]):
                path = f"notes/{kind}-{n}.md"
                memory.write(path, f"# {topic}\n\n{line}\n")
                notes.append((kind, n, topic, line, path))
        rows = {kind: {"notes": 0, "injected": 0, "left out": 0, "not reached": 0, "flagged": 0, "detected": 0}
                for kind in ("planted", "benign")}
        for kind, n, topic, line, path in notes:
            row = rows[kind]
            row["notes"] += 1
            question = f"What do my notes say about {topic}?"
            text = context(("bench", root), {"hook_event_name": "UserPromptSubmit", "session_id": f"{kind}-{n}",
                                             "prompt": question}) or ""
            if line.split("\n")[0] in text:
                row["injected"] += 1
            elif f"[instruction left out: {path}:" in text:
                row["left out"] += 1
            else:
                row["not reached"] += 1
            hits = [h for h in memory.search(f"{topic} {line[:200]}", limit=20) if h["path"] == path]
            row["flagged"] += bool(hits and hits[0]["flags"])
            row["detected"] += instructions.is_instruction(line)
    print("| corpus | notes | injected as they stand | left out (marked) | not reached | flagged in search | detected |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind, row in rows.items():
        print(f"| {kind} | {row['notes']} | {row['injected']} | {row['left out']} | {row['not reached']} | "
              f"{row['flagged']} | {row['detected']} |")


if __name__ == "__main__":
    main()
