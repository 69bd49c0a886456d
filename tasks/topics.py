"""Topics: the dream writes `daily/<date>/interests.yaml`, proactive reads it (format and dedup in
`engine.memory.interests`)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from engine.access.job_workspace import memory_of
from engine.config.prefect_env import run_logger
from engine.config.settings import Settings
from engine.memory import interests
from engine.models.llm import LLM, LLMError, response_schema
from engine.prompts import load_prompt


class Pick(BaseModel):
    title: str = Field(min_length=1, max_length=200)
    reason: str = Field(default="", max_length=1_000)


class Selection(BaseModel):
    topics: list[Pick] = Field(default_factory=list, max_length=20)


def selection_schema(candidates: list[interests.Topic], count: int) -> dict:
    """The reply schema: at most `count` picks, titles only among the candidates'."""
    schema = response_schema(Selection)
    schema["properties"]["topics"]["maxItems"] = count
    schema["$defs"]["Pick"]["properties"]["title"]["enum"] = [t.title for t in candidates]
    return schema


def choose(llm: LLM | None, candidates: list[interests.Topic], recent: list[str], count: int) -> list[interests.Topic]:
    """Up to `count` candidates: picked by the LLM when there are more than `count`, else (or when the LLM
    answer is unusable) the first ones."""
    if len(candidates) <= count or llm is None:
        return candidates[:count]
    listing = "\n".join(f"- {t.title}: {t.reason}" for t in candidates)
    messages = [{"role": "system", "content": load_prompt("topics")},
                {"role": "user", "content": f"Pick {count}.\nRecent topics:\n"
                 + "\n".join(f"- {t}" for t in recent) + f"\nCandidates:\n{listing}"}]
    try:
        picked = llm.structured(messages, Selection, "topics", json_schema=selection_schema(candidates, count)).topics
    except LLMError as exc:
        run_logger().warning("topic selection fell back to the first candidates: %s", exc)
        return candidates[:count]
    by_title = {t.title.lower(): t for t in candidates}
    chosen = []
    for item in picked:
        topic = by_title.get(item.title.strip().lower())
        if topic and topic not in chosen:
            chosen.append(topic.model_copy(update={"reason": item.reason or topic.reason}))
    return chosen[:count] or candidates[:count]


@task(cache_policy=NO_CACHE)
def select_topics(workspace: str, date: str, candidates: list[dict], topic_count: int,
                  diversity_days: int) -> dict:
    """Add up to `topic_count` new topics to the day's interests, keeping its existing ones and skipping
    near-duplicates of them and of the previous `diversity_days` days: `{path, added, usage}`."""
    memory = memory_of(workspace)
    existing = interests.load(memory, date) or interests.Interests(date=date, diversity_days=diversity_days)
    recent = interests.recent_titles(memory, date, diversity_days)
    topics = [t for t in (interests.as_topic(c) for c in candidates) if t]
    topics = interests.fresh(topics, recent + [t.title for t in existing.topics])
    if not topics:
        return {"path": None, "added": [], "usage": None}
    llm = LLM.from_settings() if len(topics) > topic_count and Settings().llm_configured else None
    added = choose(llm, topics, recent, topic_count)
    result = existing.model_copy(update={"topics": existing.topics + added, "diversity_days": diversity_days})
    path = interests.interests_path(date)
    memory.write(path, interests.render(result))
    return {"path": path, "added": [t.title for t in added], "usage": llm.usage.as_dict() if llm else None}


@task(cache_policy=NO_CACHE)
def read_topics(workspace: str, date: str, include_content: bool) -> dict:
    """The day's topics for proactive (see `interests.proactive_topics`)."""
    return interests.proactive_topics(memory_of(workspace), date, include_content)
