"""Facts from new material: the one small LLM call that reads a conversation's messages (or a resource's
lines, or an old prose card's lines) and answers a list of one-sentence facts, and the checks code makes on
each fact before anything is written.

The material is numbered (`[1] user, 2026-11-05 18:00: ...`) and each fact cites the numbers it comes from;
code turns them into links a reader opens (`session/dialog/<id>.jsonl#L3`, `resource/x.md#L4-L6`). Each fact
is screened on its own (`screen`): a fact whose words are not in the lines it cites is re-cited to the line
that holds them; a fact with the prompt's markup, a placeholder, a tool call or the instructions' words is
refused, and so is a question asked in the conversation filed as anything but an open question. A fact refused
for how it words its message is kept in the words of the cited sentence that says most of it when that
sentence passes the checks; the others are dropped and reported with their rule. A sentence the model cut at a
comma before a name is kept whole (`_rejoined`). A user's statement no kept fact cites is kept in their words
(`unsaid`). Relative times are resolved
to dates from its message's day (engine/memory/relative_dates.py), and the first day a fact names is its `date`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, Field, field_validator

from engine.memory import quality, relative_dates
from engine.models.llm import response_schema
from engine.memory.thresholds import (ECHO_SHARE, MAX_BLOCK_LINES, MAX_FACT_WORDS, MAX_FACTS, MAX_ITEM_CHARS,
                                     MAX_UNSAID, MIN_FACT_TERMS)
from storage.index.chunking import ECHO_NEW_WORDS, says_back
from storage.index.tokenize import SMALL_TALK, terms
from storage.text import facts


RESTATED = ("ungrounded", "question", "copy", "long", "same_change", "joined")  # refusals of a fact's wording:
# its sentence may stand
# words a fact may add to what its lines say: how facts name the user, framing words and light verbs (the
# content words must all be in the lines)
FRAMING = frozenset(terms("user users person assistant now currently current also still new anymore longer "
                          "mention mentioned said says told tells stated states explained reported take get "
                          "use need make include contain "
                          "require call named want"))
# a transcript line's head: a time, `[stamp]` or speaker label before the words (`- **18:00**: User: ...`)
_TRANSCRIPT = re.compile(r"^[\W_]{0,6}(?:\[[^\]\n]{0,40}\]|\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}\S*|\d{1,2}:\d{2}"
                         r"(?::\d{2})?(?:\s?[ap]m)?\b|(?:user|assistant|system|human|ai|bot)[\W_]{0,4}:)", re.IGNORECASE)
# a sentence that asks (`Is she settling in`, `Do you plan to visit her`, `What is ...`): a question said in
# the conversation is not a fact about anyone, unless the model files it as an open question
_QUESTION = re.compile(r"\?|(?:^|[.!;:]\s+)(?:(?:is|are|am|was|were|do|does|did|can|could|shall|should|will|would|"
                       r"have|has|had)\s+(?:i|you|he|she|it|we|they|there|this|that|the|your|my|his|her|our|their)"
                       r"|(?:what|where|when|who|why|how|which)\s+(?:is|are|was|were|do|does|did|can|could|should|"
                       r"will|would|have|has))\b", re.IGNORECASE)
# a change and its two values (`Heron is now called Kestrel`, `renamed Heron to Kestrel`, `from Lisbon to Porto`)
_CLAUSE = r"[^,.;:!?()]"
_CHANGES = (re.compile(rf"({_CLAUSE}{{1,80}}?)\s+(?:is|are|was|were|has been|have been|got|gets)\s+(?:now\s+)?"
                       rf"(?:re)?(?:called|named|known as)\s+({_CLAUSE}{{1,80}})", re.I),
            re.compile(rf"\b(?:renamed|changed|switched|moved)\s+({_CLAUSE}{{1,80}}?)\s+to\s+({_CLAUSE}{{1,80}})", re.I),
            re.compile(rf"\bfrom\s+({_CLAUSE}{{1,60}}?)\s+to\s+({_CLAUSE}{{1,60}})", re.I),
            re.compile(rf"({_CLAUSE}{{1,80}}?)\s+(?:became|turned into)\s+({_CLAUSE}{{1,80}})", re.I))
# how a message marks a change's values: the word before a value (articles and the like, `_FILLER`, passed
# over) names the new one (`to Porto`, `called Kestrel`) or the old one (`from Lisbon`, `not Osteria Lupa`), the
# word right after it the new one (`It's Lantern now`)
_NEW_BEFORE, _NEW_AFTER = frozenset({"to", "into", "called", "named", "now"}), frozenset({"now"})
_OLD_BEFORE = frozenset({"from", "not", "instead", "longer", "formerly", "anymore"})
_FILLER = frozenset({"the", "a", "an", "it", "s", "is", "was", "be", "been", "of", "my", "our", "her", "his"})
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_SENTENCE = re.compile(r"(?<![A-Z][a-z]\.)(?<!Mrs\.)(?<=[.!?;])\s+|\n+")  # not after `Mr.`, `Dr.`, `Mrs.`
# a speaker's own words (`unsaid`) and the words that open a request rather than a statement
_OWN = re.compile(r"\b(?:I|I'm|I've|I'll|I'd|[Mm]y|[Oo]ur|[Ww]e|[Ww]e're|[Ww]e've|[Mm]ine|[Oo]urs)\b")
_YOU = re.compile(r"\b(?:you|your|yours|you're|you've|you'll)\b", re.IGNORECASE)
# work on code (`parser.py`, `src/app`, `load_config()`, `TodoWrite`, backticks): what a coding session says to
# get something done, left to the model
_CODE = re.compile(r"[`\\<>{}=]|\w/\w|\b\w+\.(?:[a-z]{1,4})\b(?!\.)|\b[a-z]+_\w+|\w\("
                   r"|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*")
_FIRST_PERSON = frozenset({"I", "I'm", "I've", "I'll", "I'd", "I’m", "I’ve", "I’ll", "I’d"})
_REQUEST = frozenset("please can could would will should shall remind let lets help tell show find fix add make "
                     "write create run check update remove delete give send explain summarise summarize list "
                     "do don't does did is are was were what who where when why how which thanks thank let's "
                     "hi hello hey ok okay sure yes no".split())
KIND_SYNONYMS = {"preferences": "preference", "like": "preference", "likes": "preference", "plans": "plan",
                 "goal": "plan", "decisions": "decision", "events": "event", "open question": "question",
                 "questions": "question", "follow-up": "question", "followup": "question", "todo": "question",
                 "how-to": "procedure", "howto": "procedure", "instruction": "procedure", "steps": "procedure",
                 "facts": "fact"}


# ---- what the model answers -------------------------------------------------------------------------------

class ExtractedFact(BaseModel):
    """One fact as the model states it; `source` are the numbers of the material it comes from."""

    text: str = Field(min_length=1, max_length=600)
    about: str = Field(default="", max_length=120)
    kind: str = "fact"
    source: list[int] = Field(default_factory=list, max_length=10)

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, value) -> str:
        word = " ".join(str(value or "").strip().lower().replace("_", " ").split())
        word = KIND_SYNONYMS.get(word, word)
        return word if word in facts.KINDS else "fact"

    @field_validator("source", mode="before")
    @classmethod
    def _numbers(cls, value):
        values = value if isinstance(value, list) else [value]
        return [int(v) for v in values if isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit())]


class FactList(BaseModel):
    title: str = Field(default="", max_length=200)
    facts: list[ExtractedFact] = Field(default_factory=list, max_length=MAX_FACTS)


def fact_schema(count: int) -> dict:
    """The reply schema for material of `count` numbered items: kinds and cited numbers constrained."""
    schema = response_schema(FactList)
    item = schema["$defs"]["ExtractedFact"]["properties"]
    item["kind"] = {"type": "string", "enum": list(facts.KINDS)}
    item["source"] = {"type": "array", "items": {"type": "integer", "enum": list(range(1, count + 1))},
                      "minItems": 1, "maxItems": 5}
    schema["properties"]["facts"]["maxItems"] = MAX_FACTS
    return schema


# ---- numbered material ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """One numbered piece of material: what it says and where a fact citing it links to."""

    number: int
    text: str
    anchor: str               # `session/dialog/s1.jsonl#L3`, `resource/x.md#L4-L6`, `daily/d/card.md#L7`
    label: str = ""           # a message's time, shown in the link
    said: dt.date | None = None
    speaker: str = ""
    context: str = ""         # the heading it stands under (a document's), shown and counted as its words


def message_items(dialog_path: str, records: list[dict], lines: list[int], fallback: dt.date) -> list[Item]:
    """Items of a conversation's records; `lines` are their line numbers in the dialog jsonl."""
    items = []
    for record, line in zip(records, lines):
        stamp = record.get("created_at") or ""
        moment = _moment(stamp)
        text = _text(record.get("content"))
        if not text.strip():
            continue
        items.append(Item(len(items) + 1, text[:MAX_ITEM_CHARS], f"{dialog_path}#L{line}",
                          moment.strftime("%Y-%m-%d %H:%M") if moment else "",
                          moment.date() if moment else fallback, str(record.get("role") or "user")))
    return items


def block_items(path: str, text: str, said: dt.date, first_line: int = 1, anchored: bool = True) -> list[Item]:
    """Items of a text's paragraphs (at most `MAX_BLOCK_LINES` lines each), headings and blank lines left out;
    anchors name their lines (`anchored=False`: the file alone, e.g. HTML whose lines the text lost)."""
    items, block, heading = [], [], ""

    def close():
        if block:
            a, b = block[0][0], block[-1][0]
            anchor = f"{path}#L{a}" + (f"-L{b}" if b > a else "") if anchored else path
            body = "\n".join(line for _, line in block)[:MAX_ITEM_CHARS]
            items.append(Item(len(items) + 1, body, anchor, said=said, context=heading))
            block.clear()

    for number, line in enumerate(text.split("\n"), first_line):
        title = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not line.strip() or title:
            close()
            heading = title.group(1)[:120] if title else heading
            continue
        block.append((number, line.rstrip()))
        if len(block) >= MAX_BLOCK_LINES:
            close()
    close()
    return items


def prompt_material(header: str, items: list[Item]) -> str:
    """The user message: a header, then each item as `[n] speaker, time: text`."""
    lines = [header, ""]
    for item in items:
        who = ", ".join(filter(None, [item.speaker, item.label, item.context and f"under {item.context!r}"]))
        text = item.text.replace("\n", "\n    ")
        lines.append(f"[{item.number}] {who}: {text}" if who else f"[{item.number}] {text}")
    return "\n".join(lines)


def _moment(stamp: str) -> dt.datetime | None:
    try:
        moment = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone() if moment.tzinfo else moment


def _text(content) -> str:
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else [content]
    return "\n".join(b if isinstance(b, str) else str(b.get("text") or "") for b in blocks
                     if isinstance(b, (str, dict)))


# ---- screening ---------------------------------------------------------------------------------------------

@dataclass
class Screened:
    """The facts kept (ready to write, ids not yet given) and the ones dropped: `{text, rule, why}`."""

    kept: list[facts.Fact] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    recited: int = 0    # kept facts whose citation code corrected
    restated: int = 0   # kept facts code restated: in their message's words (the model's being ungrounded) or
    # with a change's values the way round the message says them (`_direction`)
    echoes: int = 0     # facts of an assistant's echo taken from the user's message (`from_user`)
    unsaid: int = 0     # user statements no fact cited, kept in their words (`unsaid`)
    title: str = ""     # the answer's title, when the name checks pass it


@dataclass(frozen=True)
class _Checked:
    """One fact after the checks: what to write and the items that ground it, or the rule that drops it."""

    text: str = ""
    grounds: tuple[Item, ...] = ()
    day: str | None = None
    rule: str = ""
    why: str = ""


def screen(answer: FactList, items: list[Item], instructions: str) -> Screened:
    """Each fact of `answer` checked on its own against the `items` it cites (see the module docstring). A fact
    refused for how it words its message (`RESTATED`: ungrounded, a question, a transcript line, too long) is
    kept in the words of the sentence it cites that says most of it (`_their_words`), when that sentence passes
    every check and no kept fact says it already: the model found what is worth keeping, the message says it."""
    by_number = {item.number: item for item in items}
    material = quality.Material("\n".join(item.text for item in items), "", instructions)
    out, seen, strayed = Screened(), set(), []
    for fact in answer.facts:
        text = " ".join(fact.text.split()).lstrip("-*> ").strip()
        cited = [by_number[n] for n in dict.fromkeys(fact.source) if n in by_number]
        turned = _direction(text, cited)
        checked = _check(turned or text, fact.kind, cited, items, material)
        if not checked.rule:
            key = frozenset(terms(checked.text)) - FRAMING
            if key in seen:
                checked = _Checked(rule="duplicate", why="another fact of the answer says the same")
            seen.add(key)
        words = _their_words(text, cited) if checked.rule in RESTATED else None
        if words:
            strayed.append((fact, text, checked, words))
        elif checked.rule:
            out.dropped.append({"text": text[:300], "rule": checked.rule, "why": checked.why})
        else:
            out.recited += [i.number for i in checked.grounds] != [i.number for i in cited]
            out.restated += turned is not None
            out.kept.append(_kept(fact, checked))
    for fact, text, checked, (sentence, item) in strayed:
        restated = _check(sentence, fact.kind, [item], items, material)
        key = frozenset(terms(restated.text)) - FRAMING
        if restated.rule or key in seen or _said_already(restated.text, out.kept):
            out.dropped.append({"text": text[:300], "rule": checked.rule, "why": checked.why})
            continue
        seen.add(key)
        out.restated += 1
        out.kept.append(_kept(fact, restated))
    out.kept, joined = _rejoined(out.kept, items, material)
    out.restated += joined
    return out


def _rejoined(kept: list[facts.Fact], items: list[Item], material: quality.Material) -> tuple[list[facts.Fact], int]:
    """`kept` with each fact the model cut from a sentence at a comma before a name (`We took Biscuit to a new vet
    today, Dr. Moreau on Elm Street.`: `Dr. Moreau on Elm Street.` alone names neither Biscuit nor a vet) given
    the whole sentence, and the facts whose words that sentence holds left out: a name after a comma names what
    the words before it spoke of. A part that starts a clause of its own (`..., and my sister lives in Gdansk`,
    `..., so I report to Jonas Weber now`) stays a fact of its own; a name that starts one (`I moved to Porto,
    Ana stayed in Lisbon.`) is joined too, the sentence holding both claims in the user's words. Returns the
    facts and how many were joined."""
    by_anchor = {item.anchor: item for item in items}
    out, joined = list(kept), 0
    for fact in kept:
        cited = [by_anchor.get(s) for s in fact.sources]
        item = cited[0] if len(cited) == 1 and cited[0] is not None and cited[0].speaker != "assistant" else None
        sentence = _cut_before_a_name(fact.text, item.text) if item is not None and fact in out else None
        checked = _check(sentence, fact.kind, [item], items, material) if sentence else None
        if checked is None or checked.rule:
            continue
        whole = _content(checked.text)
        out = [f for f in out if f is fact or f.sources != fact.sources or not _content(f.text) <= whole]
        out[out.index(fact)] = replace(fact, text=checked.text, date=checked.day or fact.date)
        joined += 1
    return out, joined


def _cut_before_a_name(text: str, message: str) -> str | None:
    """The sentence of `message` whose part after a comma, starting with a capitalised word (not `I`), `text`
    says from its start (two words at least), or None."""
    said = re.findall(r"\w+", text.lower())
    if len(said) < 2:
        return None
    for sentence in _SENTENCE.split(message):
        words = list(re.finditer(r"\w+", sentence))
        for k, word in enumerate(words):
            if (k and word.group()[0].isupper() and word.group() != "I"
                    and sentence[:word.start()].rstrip().endswith(",")
                    and [w.group().lower() for w in words[k:k + len(said)]] == said):
                return sentence.strip()
    return None


def _check(text: str, kind: str, cited: list[Item], items: list[Item], material: quality.Material) -> _Checked:
    refused = _refused(text, material)
    if refused is None and kind != "question" and _QUESTION.search(text):
        refused = ("question", "a question asked in the conversation is not a fact (file it as an open question)")
    if refused is None and kind == "question" and cited and all(c.speaker == "assistant" for c in cited):
        refused = ("question", "a question the assistant asked is no open question of the user's")
    if refused is None and _same_change(text):
        refused = ("same_change", "it says a change whose old and new value are the same words")
    if refused is not None:
        return _Checked(rule=refused[0], why=refused[1])
    said = cited[0].said if cited and cited[0].said else (items[0].said if items else dt.date.today())
    resolved, named = relative_dates.resolve(_own_dates(text, cited), said)
    added = (set(terms(resolved)) - set(terms(text))) | _days_given(cited)  # date words code wrote or counts
    grounds = _grounding(resolved, cited, items, added)
    if grounds is None:
        missing = sorted(_missing(resolved, cited, added))
        return _Checked(rule="ungrounded", why=f"its words {', '.join(missing[:5])} are not in the lines it cites"
                        if cited else "it cites no line of the material")
    if _joined(resolved, grounds, added):
        return _Checked(rule="joined", why="its words are only found in different messages, never in one")
    day = named or relative_dates.date_of(resolved, said)
    return _Checked(resolved, tuple(grounds), day.isoformat() if day else None)


def _same_change(text: str) -> bool:
    """Whether `text` says a change whose new value adds no word to the old one (`Kestrel is now called Kestrel`
    where the user said Heron is now called Kestrel): a garble, not a change."""
    for pattern in _CHANGES:
        for match in pattern.finditer(text):
            old, new = (set(terms(g)) - FRAMING for g in match.groups())
            if new and new <= old:
                return True
    return False


def _direction(text: str, cited: list[Item]) -> str | None:
    """`text` with the two values of the change it says swapped, when the message it cites says them the other
    way round (`renamed from 'Lantern' to 'Quarry'` citing `... It's Lantern now.`; docs/dream.md), else None. The message decides only when it marks a value: the fact's old value
    marked new there (`It's Lantern now`, `to Porto`, `called Kestrel`) or its new value marked old (`from
    Lisbon`, `not Osteria Lupa`), and not both ways."""
    for pattern in _CHANGES:
        for match in pattern.finditer(text):
            old, new = (_value_span(text, match, n, 3 - n) for n in (1, 2))
            if old is None or new is None:
                continue
            for item in cited:
                if item.speaker == "assistant":
                    continue
                marks = _marks(item.text, text[slice(*old)]), _marks(item.text, text[slice(*new)])
                if None in marks:
                    continue
                (old_new, old_old), (new_new, new_old) = marks
                if (old_new and not old_old and not new_new) or (new_old and not new_new and not old_old):
                    return text[:old[0]] + text[slice(*new)] + text[old[1]:new[0]] + text[slice(*old)] + text[new[1]:]
                break
    return None


def _value_span(text: str, match: re.Match, group: int, other: int) -> tuple[int, int] | None:
    """(start, end) in `text` of the words of a change's value (`match`'s `group`) the other value lacks."""
    theirs = set(terms(match.group(other))) - FRAMING
    words = [w for w in re.finditer(r"\w+", match.group(group)) if set(terms(w.group())) - theirs - FRAMING]
    if not words:
        return None
    return match.start(group) + words[0].start(), match.start(group) + words[-1].end()


def _marks(message: str, value: str) -> tuple[bool, bool] | None:
    """(marked new, marked old): how `message` marks the first place it says `value`, by the word before it
    (articles and the like passed over) or `now` after it; None when it does not say it."""
    said = [w.lower() for w in re.findall(r"\w+", message)]
    wanted = [w.lower() for w in re.findall(r"\w+", value)]
    at = next((i for i in range(len(said)) if said[i:i + len(wanted)] == wanted), None)
    if at is None or not wanted:
        return None
    before = next((w for w in reversed(said[max(0, at - 4):at]) if w not in _FILLER), "")
    after = said[at + len(wanted)] if at + len(wanted) < len(said) else ""
    return before in _NEW_BEFORE or after in _NEW_AFTER, before in _OLD_BEFORE


def _joined(text: str, grounds: list[Item], added: set[str]) -> bool:
    """Whether a fact joins words only found in different messages into one claim (`The doctor says Fennel &
    Bean is allergic to peanuts` from a message about the doctor and one about the cafe): no one message holds
    all its words, with the question an answer replies to (an assistant message asking) counted with it.
    Resource blocks and old card lines (no speaker) may be joined: they are one document."""
    asked = [g for g in grounds if g.speaker == "assistant" and "?" in g.text]
    said = [g for g in grounds if g not in asked]
    if len(said) < 2 or not all(g.speaker for g in said):
        return False
    return all(_missing(text, [g, *asked], added) for g in said)


def from_user(kept: list[facts.Fact], items: list[Item], instructions: str) -> tuple[list[facts.Fact], int]:
    """`kept` with each fact whose only sources are assistant messages that echo the user (`A green Fabia now,
    noted.` after `I sold the Corolla and bought a green Škoda Fabia`) taken from the user's message instead:
    the user message before it that holds `ECHO_SHARE` of its content words, nearest first, in the words of
    its sentence that says most of it when that sentence passes every check, else re-cited to it when it holds
    every word; an echo another kept fact says already is left out. Returns the facts and how many were
    taken from the user. `items` are the whole conversation (a turn shows the model only the message before
    it), numbered as in the dialog."""
    by_anchor = {item.anchor: item for item in items}
    material = quality.Material("\n".join(item.text for item in items), "", instructions)
    out, taken = [], 0
    for n, fact in enumerate(kept):
        cited = [by_anchor.get(s) for s in fact.sources]
        echoed = _echoed(fact.text, cited, items) if cited and all(c and c.speaker == "assistant"
                                                                    for c in cited) else None
        if echoed is None:
            out.append(fact)
            continue
        taken += 1
        others = [*out, *kept[n + 1:]]
        words = _their_words(fact.text, [echoed])
        checked = _check(words[0], fact.kind, [echoed], items, material) if words else _Checked(rule="none")
        if not checked.rule and not _said_already(checked.text, others):
            out.append(replace(fact, text=checked.text, date=checked.day or fact.date,
                               sources=tuple(i.anchor for i in checked.grounds),
                               labels=tuple(i.label for i in checked.grounds)))
        elif not _missing(fact.text, [echoed], set()) and not _said_already(fact.text, others):
            out.append(replace(fact, sources=(echoed.anchor,), labels=(echoed.label,)))
    return out, taken


def unsaid(kept: list[facts.Fact], items: list[Item], instructions: str) -> list[facts.Fact]:
    """Facts in the user's words for the statements no kept fact says: a sentence of a user message that the
    kept facts citing it hold less than half the content words of (none cite it, or they kept another part:
    `remind me to get him something` of "My brother Tomasz's birthday is on March 14, remind me to get him
    something."), that says something of the user's own (`my`, `our`, `I`, `we`) with a name or a number in it,
    asks nothing and passes every check, at most MAX_UNSAID a message. A small model leaves such a line out of its
    answer (docs/jobs.md): unkept, it stays raw conversation, no dream can replace it and a later change has
    nothing to retire."""
    material = quality.Material("\n".join(item.text for item in items), "", instructions)
    out: list[facts.Fact] = []
    for item in items:
        if item.speaker != "user":
            continue
        said = set().union(*(_content(f.text) for f in kept if item.anchor in f.sources))
        taken = 0
        for sentence in _SENTENCE.split(item.text):
            sentence = " ".join(sentence.split())
            words = _content(sentence)
            if taken == MAX_UNSAID or len(words & said) >= len(words) / 2 or not _statement(sentence):
                continue
            checked = _check(sentence, "fact", [item], items, material)
            if checked.rule or _said_already(checked.text, [*kept, *out]):
                continue
            out.append(facts.Fact(text=checked.text, about="user", date=checked.day, sources=(item.anchor,),
                                  labels=(item.label,)))
            taken += 1
    return out


def _statement(sentence: str) -> bool:
    """Whether a sentence says something of the speaker's own with a name or number in it, and asks, bids or
    tells the assistant nothing and is no work on code: `My sister Dorota lives in Gdansk.`, not `Short one
    today, I'm tired.`, `Please remind me about Dorota.`, `I need you to check the Berlin numbers.` or `I get a
    KeyError in parser.py on line 42.`"""
    words = re.findall(r"[\w'’]+", sentence)
    if (not words or words[0].lower() in _REQUEST or not _OWN.search(sentence) or _YOU.search(sentence)
            or _CODE.search(sentence)):
        return False
    return any(w[0].isdigit() or (k and w[0].isupper() and w not in _FIRST_PERSON) for k, w in enumerate(words))


def _echoed(text: str, cited: list[Item], items: list[Item]) -> Item | None:
    """The user message an assistant's fact repeats (see `from_user`), or None: the nearest one holding
    `ECHO_SHARE` of its content words, or the user message it replies to when it only echoes that one (repeats
    some of its words and adds no more than a reply that echoes a line, storage/index/chunking.ECHO_NEW_WORDS or as many
    as it repeats: "Osteria Lupa sounds lovely for an anniversary." after "We booked Osteria Lupa for our
    anniversary dinner.", or opens by saying its value back: storage/index/chunking.says_back)."""
    wanted = _content(text)
    first = min(items.index(c) for c in cited)
    replied = True  # the first user message before it: the one it replies to
    for item in reversed(items[:first]):
        if item.speaker != "user" or not wanted:
            continue
        shared = wanted & set(terms(item.text))
        if len(shared) >= ECHO_SHARE * len(wanted) or (replied and (
                (shared and len(wanted - shared) <= max(ECHO_NEW_WORDS, len(shared))) or says_back(text, set(terms(item.text)) - SMALL_TALK))):
            return item
        replied = False
    return None


def _kept(fact: ExtractedFact, checked: _Checked) -> facts.Fact:
    return facts.Fact(text=checked.text, kind=fact.kind, about=" ".join(fact.about.split())[:80] or None,
                      date=checked.day, sources=tuple(i.anchor for i in checked.grounds),
                      labels=tuple(i.label for i in checked.grounds))


def _content(text: str) -> set[str]:
    """The words that carry what `text` says: no framing, small talk or numbers."""
    return {t for t in terms(text) if not t.isdigit()} - FRAMING - SMALL_TALK


def _their_words(text: str, cited: list[Item]) -> tuple[str, Item] | None:
    """The sentence of a cited message (not the assistant's) that shares the most of `text`'s content words
    (`A young girl goes to Oak Primary` citing `My daughter goes to Oak Primary.`); None when no sentence shares
    one."""
    wanted = _content(text)
    best, best_shared = None, 0
    for item in cited:
        if item.speaker == "assistant":
            continue
        for sentence in _SENTENCE.split(item.text):
            shared = len(wanted & _content(sentence))
            if shared > best_shared:
                best, best_shared = (sentence.strip(), item), shared
    return best


def _said_already(text: str, kept: list[facts.Fact]) -> bool:
    """Whether a kept fact holds half or more of `text`'s content words."""
    words = _content(text)
    return any(len(words & _content(f.text)) >= len(words) / 2 for f in kept)


def _days_given(cited: list[Item]) -> set[str]:
    """The terms of every form of the days the cited lines name, relative or written out (`yesterday` said on
    11-05: 2026, 11, 04, november, nov, 4; `2026-12-22`: december, dec, 22 too): a fact may write a day its
    own way (`December 22, 2026` for a message's `2026-12-22`)."""
    return {t for item in cited if item.said
            for day in [*relative_dates.named_days(item.text, item.said),
                        *relative_dates.written_days(item.text, item.said)]
            for t in terms(relative_dates.forms(day))}


def _own_dates(text: str, cited: list[Item]) -> str:
    """`text` with a date the model worked out itself (one its lines do not give, where they give one relative
    time) replaced by the date code counts from the message's day: date arithmetic is code's."""
    given = "\n".join(item.text for item in cited)
    computed = [d for d in dict.fromkeys(_ISO_DATE.findall(text)) if d not in given]
    days = {day for item in cited if item.said for day in relative_dates.named_days(item.text, item.said)}
    if len(computed) == 1 and len(days) == 1:
        return text.replace(computed[0], days.pop().isoformat())
    return text


def _refused(text: str, material: quality.Material) -> tuple[str, str] | None:
    for finding in (quality.markup(text), quality.template(text), quality.tool("", text),
                    quality.instructions(text, material)):
        if finding:
            return finding
    if _TRANSCRIPT.match(text):
        return "copy", "a fact is a statement, not a line of the transcript (a time or speaker label before it)"
    if len(text.split()) > MAX_FACT_WORDS or "\n" in text:
        return "long", f"a fact is one sentence of at most {MAX_FACT_WORDS} words"
    if len(set(terms(text)) - FRAMING - SMALL_TALK) < MIN_FACT_TERMS:
        return "thin", "it says too little to remember"
    return None


def _missing(text: str, cited: list[Item], added: set[str]) -> set[str]:
    said = set(terms("\n".join(f"{item.context}\n{item.text}" for item in cited)))
    return set(terms(text)) - said - FRAMING - added


def _grounding(text: str, cited: list[Item], items: list[Item], added: set[str]) -> list[Item] | None:
    """The items that hold every word of the fact: the cited ones, else the one item (or the cited ones plus one
    more) that does; None when no line holds them (a fact of the model's own)."""
    if cited and not _missing(text, cited, added):
        return cited
    for item in items:
        if not _missing(text, [item], added):
            return [item]
    for item in items:
        if item not in cited and cited and not _missing(text, cited + [item], added):
            return sorted(cited + [item], key=lambda i: i.number)
    return None
