"""The typed objects the memory domain passes: a card fact waiting to be consolidated (`CardFact`), the facts of
one subject (`Unit`), a node fact a new fact may touch (`Candidate`) and what the judge decided (`Decision`).
`CardFact` and `Unit` convert to and from the JSON the dream persists (`as_dict`, `from_dict`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from storage.text.facts import Fact

RelationName = Literal["new", "same", "refines", "replaces"]


@dataclass(frozen=True)
class CardFact:
    """A current card fact not yet cited by a node: `source` is its anchor (`daily/d/card.md#^f2`), `card` the
    card, `day` the day it was said, `date` its own date if it names one, `resource` whether the card is a
    resource's, `said` the messages it cites and `siblings` every fact of its card with the messages it cites."""

    text: str
    kind: str = "fact"
    about: str | None = None
    day: str = ""
    date: str | None = None
    card: str = ""
    source: str = ""
    resource: bool = False
    said: tuple[str, ...] = ()
    siblings: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)

    def as_dict(self) -> dict:
        return {"source": self.source, "card": self.card, "day": self.day, "text": self.text, "kind": self.kind,
                "about": self.about, "date": self.date, "resource": self.resource, "said": list(self.said),
                "siblings": {k: list(v) for k, v in self.siblings.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> CardFact:
        return cls(text=data["text"], kind=data.get("kind") or "fact", about=data.get("about"),
                   day=data.get("day") or "", date=data.get("date"), card=data.get("card") or "",
                   source=data.get("source") or "", resource=bool(data.get("resource")),
                   said=tuple(data.get("said") or ()),
                   siblings={k: tuple(v) for k, v in (data.get("siblings") or {}).items()})


@dataclass(frozen=True)
class Unit:
    """The facts of one subject (`key`, display name `about`) landing in one node of `bucket`; `paths` are the
    cards they come from."""

    key: str
    about: str
    bucket: str = "personal"
    id: str = ""
    facts: tuple[CardFact, ...] = ()
    paths: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"key": self.key, "about": self.about, "facts": [f.as_dict() for f in self.facts],
                "paths": list(self.paths), "id": self.id, "bucket": self.bucket}

    @classmethod
    def from_dict(cls, data: dict) -> Unit:
        return cls(key=data["key"], about=data["about"], bucket=data.get("bucket") or "personal",
                   id=data.get("id") or "", facts=tuple(CardFact.from_dict(f) for f in data.get("facts") or ()),
                   paths=tuple(data.get("paths") or ()))


@dataclass(frozen=True)
class Candidate:
    """A current fact of node `node` a new fact may touch; `near` is its cosine to the new fact (0 without an
    embedder)."""

    node: str
    fact: Fact
    near: float = 0.0


@dataclass(frozen=True)
class Decision:
    """How a new fact relates to memory: `new` (no `target`), or `same`, `refines`, `replaces` the `target`."""

    relation: RelationName
    target: Candidate | None = None

    def __iter__(self):  # `relation, target = decision`
        return iter((self.relation, self.target))

