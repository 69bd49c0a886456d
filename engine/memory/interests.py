"""Interests: `daily/<date>/interests.yaml`, the topics to bring up proactively (plain functions, no prefect).

```yaml
date: 2024-05-08
topic_count: 2          # topics in the file
diversity_days: 7       # earlier days whose topics were avoided
topics:
  - {title: ..., reason: ..., keywords: [...], paths: [...], evidence: [...]}
```
A new topic is dropped when it nearly duplicates one already in the file or in the previous `diversity_days`
days: same normalised words (BM25 terms: lowercased, stemmed, stopwords dropped, CJK bigrams), or a Jaccard
overlap of at least `NEAR`.
"""

from __future__ import annotations

from datetime import date as Date
from datetime import timedelta

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from engine.access.toolbox import read_text
from storage.errors import DreamflowError, InvalidInput
from storage.index.tokenize import terms
from storage.text.yaml_load import load as load_yaml

NEAR = 0.6
MAX_CONTENT_CHARS = 4_000


class Topic(BaseModel):
    title: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    keywords: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)

    @field_validator("title", "reason", mode="before")
    @classmethod
    def _text(cls, value):
        return " ".join(str(value).split()) if value is not None else value


class Interests(BaseModel):
    date: str
    topic_count: int = 0
    diversity_days: int = 7
    topics: list[Topic] = Field(default_factory=list)

    @field_validator("date", mode="before")
    @classmethod
    def _iso(cls, value):
        return value.isoformat() if isinstance(value, Date) else str(value)


def interests_path(date: str) -> str:
    return f"daily/{date}/interests.yaml"


def load(memory, date: str) -> Interests | None:
    """The day's interests, None when there is no file; malformed YAML or topics: a clear InvalidInput."""
    path = interests_path(date)
    text = read_text(memory, path)
    if text is None:
        return None
    try:
        data, _ = load_yaml(text)  # bounded: an alias bomb is malformed YAML, not a hang
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path} is not readable YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} must be a YAML mapping with a `topics` list")
    try:
        return Interests.model_validate({"date": date, **data})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidInput(f"{path} has invalid topics ({problems}); each topic needs a title and a reason") \
            from None


def recent_titles(memory, date: str, days: int) -> list[str]:
    """Topic titles of the `days` days before `date` (unreadable files are skipped)."""
    titles = []
    end = Date.fromisoformat(date)
    for n in range(1, days + 1):
        try:
            found = load(memory, (end - timedelta(days=n)).isoformat())
        except InvalidInput:
            continue
        titles += [t.title for t in found.topics] if found else []
    return titles


def _words(title: str) -> frozenset[str]:
    return frozenset(terms(title)) or frozenset([title.strip().lower()])


def near_duplicate(a: str, b: str) -> bool:
    """True when two titles say nearly the same thing."""
    wa, wb = _words(a), _words(b)
    return wa == wb or len(wa & wb) / len(wa | wb) >= NEAR


def fresh(candidates: list[Topic], avoid: list[str]) -> list[Topic]:
    """Candidates that duplicate neither `avoid` nor each other, in order."""
    kept: list[Topic] = []
    for topic in candidates:
        if not any(near_duplicate(topic.title, seen) for seen in [*avoid, *(k.title for k in kept)]):
            kept.append(topic)
    return kept


def as_topic(candidate: dict) -> Topic | None:
    """A topic from an extraction candidate; a missing reason is taken from its evidence."""
    reason = candidate.get("reason") or "; ".join(candidate.get("evidence") or [])
    try:
        return Topic.model_validate({**candidate, "reason": reason or "mentioned in recent memory"})
    except ValidationError:
        return None


def render(interests: Interests) -> str:
    data = interests.model_dump()
    data["topic_count"] = len(interests.topics)
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=100)


def proactive_topics(memory, date: str, include_content: bool = False) -> dict:
    """The day's topics for an agent to bring up: `{date, path, topics}`, or `{date, skipped}` without a
    file. With `include_content`, each topic carries the text of its `paths`."""
    found = load(memory, date)
    if found is None:
        return {"date": date, "skipped": f"no {interests_path(date)}", "topics": []}
    topics = [t.model_dump() for t in found.topics]
    if include_content:
        for topic in topics:
            topic["content"] = {p: _excerpt(memory, p) for p in topic["paths"]}
    return {"date": date, "path": interests_path(date), "topics": topics}


def _excerpt(memory, path: str) -> str | None:
    try:
        text = read_text(memory, path)
    except DreamflowError:  # a path outside the workspace or a binary file
        return None
    return None if text is None else text[:MAX_CONTENT_CHARS]
