"""Relative times in a fact ("yesterday", "next Friday", "in 3 days", "last month") resolved by code to the
dates they mean, counted from the day the message that says them was said.

A model is never asked to do date arithmetic: it writes what the message says, and `resolve` rewrites the
phrase in the sentence (`I moved to Porto yesterday` said on 2026-11-05 -> `I moved to Porto on 2026-11-04`)
and gives the day it names, for the fact's `date`. Phrases are English; other languages keep their words and
the fact is dated by its message.
"""

from __future__ import annotations

import datetime as dt
import re

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}
_COUNT = r"(?P<{0}>\d{{1,3}}|" + "|".join(_NUMBERS) + r")"
_UNIT = r"(?P<{0}>day|week|month|year)s?"
_PHRASE = re.compile(r"\b(?:" + "|".join((
    r"(?P<rel>(?:the\s+)?day\s+before\s+yesterday|(?:the\s+)?day\s+after\s+tomorrow|yesterday|today|tonight|tomorrow)",
    r"(?P<which>last|next|this(?:\s+coming)?|coming)\s+(?P<span>week(?:end)?|month|year|" + "|".join(_WEEKDAYS) + r")",
    _COUNT.format("n") + r"\s+" + _UNIT.format("unit") + r"\s+(?P<dir>ago|from\s+now|later)",
    r"in\s+" + _COUNT.format("n2") + r"\s+" + _UNIT.format("unit2"),
)) + r")\b", re.IGNORECASE)
_ON = re.compile(r"\b(?:on|by|to|for|until|till|since|from|before|after)\s*$", re.IGNORECASE)  # a preposition already there
_VERB = re.compile(r"\s+(?:is|was|will|has|had|'s)\b", re.IGNORECASE)  # the phrase is the sentence's subject
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_DAY = re.compile(r"\b(?:(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + "|".join(_MONTHS) + r")|(" + "|".join(_MONTHS)
                        + r")\s+(\d{1,2})(?:st|nd|rd|th)?)\b(?:,?\s+(\d{4}))?", re.IGNORECASE)


def resolve(text: str, said: dt.date) -> tuple[str, dt.date | None]:
    """`text` with its relative time phrases replaced by the dates they mean, counted from `said`, and the first
    day so named (None when the text names none)."""
    first: list[dt.date] = []

    def swap(match: re.Match) -> str:
        day, words = _meaning(match, said)
        if day is None:
            return match.group(0)
        if not first:
            first.append(day)
        before, after = text[:match.start()], text[match.end():]
        if words.startswith("on ") and (_ON.search(before) or _VERB.match(after)):
            words = words[3:]  # "moved to next Friday", "today was my first day": the date alone
        return words[0].upper() + words[1:] if not before.strip() else words

    resolved = _PHRASE.sub(swap, text)
    return resolved, (first[0] if first else None)


def named_days(text: str, said: dt.date) -> list[dt.date]:
    """The days the relative time phrases of `text` name, counted from `said`, in order."""
    return [day for day in (_meaning(m, said)[0] for m in _PHRASE.finditer(text)) if day]


def written_days(text: str, said: dt.date) -> list[dt.date]:
    """The days `text` writes out (`2026-12-22`, `22 December`, `December 22, 2026`), in order."""
    found = [(m.start(), m.group(0)) for m in _ISO.finditer(text)] + \
        [(m.start(), m.group(0)) for m in _MONTH_DAY.finditer(text)]
    return [day for day in (date_of(words, said) for _, words in sorted(found)) if day]


def forms(day: dt.date) -> str:
    """The ways a fact may write `day`: `2026-12-22 December Dec 22 2026`."""
    month = _MONTHS[day.month - 1]
    return f"{day.isoformat()} {month} {month[:3]} {day.day} {day.year}"


def date_of(words: str | None, said: dt.date) -> dt.date | None:
    """The day `words` name (`2026-11-04`, `4 November`, `yesterday`, `next Friday`), counted from `said`;
    None when they name none. A day and month without a year take the year that puts it nearest `said`."""
    if not words:
        return None
    iso = _ISO.search(words)
    if iso:
        try:
            return dt.date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3)))
        except ValueError:
            return None
    named = _MONTH_DAY.search(words)
    if named:
        day = int(named.group(1) or named.group(4))
        month = _MONTHS.index((named.group(2) or named.group(3)).lower()) + 1
        years = [int(named.group(5))] if named.group(5) else [said.year - 1, said.year, said.year + 1]
        options = []
        for year in years:
            try:
                options.append(dt.date(year, month, day))
            except ValueError:
                continue
        return min(options, key=lambda d: abs((d - said).days)) if options else None
    return resolve(words, said)[1]


def _meaning(m: re.Match, said: dt.date) -> tuple[dt.date | None, str]:
    """(the first day the phrase names, how the sentence says it instead)."""
    if m.group("rel"):
        word = " ".join(m.group("rel").lower().split()).removeprefix("the ")
        offset = {"day before yesterday": -2, "yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1,
                  "day after tomorrow": 2}[word]
        day = said + dt.timedelta(days=offset)
        return day, f"on {day.isoformat()}"
    if m.group("which"):
        which, span = m.group("which").lower().split()[0], m.group("span").lower()
        step = {"last": -1, "next": 1}.get(which, 0)
        if span in _WEEKDAYS:  # last: the latest one before; next: the first after; this/coming: on or after
            delta = (_WEEKDAYS.index(span) - said.weekday()) % 7
            if step < 0:
                delta -= 7 if delta else 7
                delta = delta if delta < 0 else delta - 7
            elif step > 0 and delta == 0:
                delta = 7
            day = said + dt.timedelta(days=delta)
            return day, f"on {span.capitalize()} {day.isoformat()}"
        if span.startswith("week"):
            monday = said - dt.timedelta(days=said.weekday()) + dt.timedelta(weeks=step)
            if span == "weekend":
                saturday = monday + dt.timedelta(days=5)
                return saturday, f"on the weekend of {saturday.isoformat()}"
            return monday, f"in the week of {monday.isoformat()}"
        if span == "month":
            year, month = divmod(said.year * 12 + said.month - 1 + step, 12)
            day = dt.date(year, month + 1, 1)
            return day, f"in {_MONTHS[month].capitalize()} {year}"
        day = dt.date(said.year + step, 1, 1)
        return day, f"in {day.year}"
    n = (m.group("n") or m.group("n2")).lower()
    count = _NUMBERS.get(n) or int(n)
    unit = (m.group("unit") or m.group("unit2")).lower()
    sign = -1 if (m.group("dir") or "").lower() == "ago" else 1
    if unit in ("day", "week"):
        day = said + dt.timedelta(days=sign * count * (7 if unit == "week" else 1))
        return day, f"on {day.isoformat()}"
    months = count * (12 if unit == "year" else 1) * sign
    year, month = divmod(said.year * 12 + said.month - 1 + months, 12)
    day = dt.date(year, month + 1, 1)
    return day, f"in {_MONTHS[month].capitalize()} {year}"
