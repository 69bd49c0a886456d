"""Token and time accounting of LLM calls, per call kind (no `openai` import: `dreamflow status` reads it)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

TOTALS = ("calls", "prompt_tokens", "completion_tokens", "total_tokens", "seconds")
OUTCOMES = ("answers", "first_try", "repairs", "failures")


@dataclass
class Usage:
    """Tokens and time spent on LLM calls, in total and per call kind (`extract`, `integrate`, `repair`...).

    `seconds` is wall time inside calls. Each kind also counts `answers` asked for, `first_try` (valid without
    repair), `repairs` and `failures` (no usable answer); repair calls' tokens count under kind `repair`.
    `gates` counts the answers each content rule refused (engine/memory/quality.py), a repair refused again too.
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    seconds: float = 0.0
    kinds: dict[str, dict] = field(default_factory=dict)
    gates: dict[str, int] = field(default_factory=dict)

    def add(self, other: Usage | dict | None) -> Usage:
        """Add another Usage (or its dict form) to this one, in place; returns self."""
        if other is None:
            return self
        data = other if isinstance(other, dict) else asdict(other)
        for key in TOTALS:
            setattr(self, key, getattr(self, key) + (data.get(key) or 0))
        for kind, counts in (data.get("kinds") or {}).items():
            mine = self._kind(kind)
            for key in TOTALS + OUTCOMES:
                mine[key] += counts.get(key) or 0
        for rule, count in (data.get("gates") or {}).items():
            self.gates[rule] = self.gates.get(rule, 0) + (count or 0)
        return self

    def record(self, kind: str, seconds: float, response_usage: Any = None) -> None:
        """Count one attempted call of `kind` (failed ones included), with the tokens its response reports."""
        spent = {"calls": 1, "seconds": seconds}
        spent.update({key: getattr(response_usage, key, 0) or 0 for key in TOTALS[1:4]})
        self.add({**spent, "kinds": {kind: spent}})

    def note(self, kind: str, outcome: str) -> None:
        """Count one outcome (`answers`, `first_try`, `repairs`, `failures`) of `kind`."""
        self._kind(kind)[outcome] += 1

    def gate(self, rule: str) -> None:
        """Count one answer refused by the content rule `rule`."""
        self.gates[rule] = self.gates.get(rule, 0) + 1

    def _kind(self, kind: str) -> dict:
        return self.kinds.setdefault(kind, dict.fromkeys(TOTALS + OUTCOMES, 0))

    def as_dict(self) -> dict:
        data = asdict(self)
        data["seconds"] = round(self.seconds, 3)
        for counts in data["kinds"].values():
            counts["seconds"] = round(counts["seconds"], 3)
        return data


@contextmanager
def charged(usage: Usage):
    """Attach what was spent so far (`usage.as_dict()`) to an exception leaving the block as `exc.usage`: a
    failed unit's or item's calls cost tokens too, and the run's summary counts them."""
    try:
        yield
    except Exception as exc:
        exc.usage = usage.as_dict()
        raise
