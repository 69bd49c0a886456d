"""The dates a query names, as periods: "on 3 June, 2023", "June 2023", "2023-06-03", "in 2023", "last week".

Search (storage/search/search.py, `date_boost`) ranks files dated inside such a period a little higher: a question
about "the trip in June 2023" most likely concerns notes written then. Absolute dates need a year (a bare month
or day is ambiguous); relative ones (yesterday, today, this/last week|month|year, N days|weeks|months|years
ago) count from `today`.
"""

from __future__ import annotations

import datetime as dt
import re

_NAMES = "january february march april may june july august september october november december".split()
_MONTHS = {name: i for i, name in enumerate(_NAMES, 1)} | {name[:3]: i for i, name in enumerate(_NAMES, 1)}
_MONTHS["sept"] = 9  # (no `calendar`: importing it costs the CLI ~15 ms)
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{0}>\d{{1,2}})(?:st|nd|rd|th)?"
_YEAR = r"(?P<{0}>(?:19|20)\d\d)"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "twelve": 12}
_PATTERN = re.compile("|".join((
    r"\b(?P<iy>(?:19|20)\d\d)-(?P<im>\d\d)(?:-(?P<id>\d\d))?\b",
    rf"\b{_DAY.format('d1')}\s+(?:of\s+)?{_MONTH.format('m1')},?\s+{_YEAR.format('y1')}\b",
    rf"\b{_MONTH.format('m2')}\s+{_DAY.format('d2')},?\s+{_YEAR.format('y2')}\b",
    rf"\b{_MONTH.format('m3')},?\s+{_YEAR.format('y3')}\b",
    rf"\b{_YEAR.format('y4')}\b",
    r"\b(?P<rel>yesterday|today)\b",
    r"\b(?P<which>this|last)\s+(?P<unit>week|month|year)\b",
    r"\b(?P<n>\d+|" + "|".join(_NUMBERS) + r")\s+(?P<units>days?|weeks?|months?|years?)\s+ago\b",
)), re.IGNORECASE)


def periods(text: str, today: dt.date | None = None) -> list[tuple[dt.date, dt.date]]:
    """[(first day, last day)] of every date or period `text` names, in order (impossible dates skipped)."""
    today = today or dt.date.today()
    out = []
    for m in _PATTERN.finditer(text):
        try:
            period = _period(m, today)
        except ValueError:  # 31 February, month 13
            continue
        if period:
            out.append(period)
    return out


def _period(m: re.Match, today: dt.date) -> tuple[dt.date, dt.date] | None:
    g = {k: v for k, v in m.groupdict().items() if v}
    if "iy" in g:
        year, month = int(g["iy"]), int(g["im"])
        return _day(dt.date(year, month, int(g["id"]))) if "id" in g else _month(year, month)
    for i in "12":
        if f"y{i}" in g:
            return _day(dt.date(int(g[f"y{i}"]), _MONTHS[g[f"m{i}"].lower()], int(g[f"d{i}"])))
    if "y3" in g:
        return _month(int(g["y3"]), _MONTHS[g["m3"].lower()])
    if "y4" in g:
        return dt.date(int(g["y4"]), 1, 1), dt.date(int(g["y4"]), 12, 31)
    if "rel" in g:
        return _day(today - dt.timedelta(days=g["rel"].lower() == "yesterday"))
    if "unit" in g:
        back = g["which"].lower() == "last"
        unit = g["unit"].lower()
        if unit == "week":
            end = today - dt.timedelta(days=7 * back)
            return end - dt.timedelta(days=6), end
        if unit == "month":
            return _month(*_months_back(today, back))
        return dt.date(today.year - back, 1, 1), dt.date(today.year - back, 12, 31)
    n = int(g["n"]) if g["n"].isdigit() else _NUMBERS[g["n"].lower()]
    unit = g["units"].lower().rstrip("s")
    if unit == "day":
        return _day(today - dt.timedelta(days=n))
    if unit == "week":
        mid = today - dt.timedelta(weeks=n)
        return mid - dt.timedelta(days=3), mid + dt.timedelta(days=3)
    if unit == "month":
        return _month(*_months_back(today, n))
    return dt.date(today.year - n, 1, 1), dt.date(today.year - n, 12, 31)


def _day(day: dt.date) -> tuple[dt.date, dt.date]:
    return day, day


def _month(year: int, month: int) -> tuple[dt.date, dt.date]:
    after = dt.date(year + 1, 1, 1) if month == 12 else dt.date(year, month + 1, 1)
    return dt.date(year, month, 1), after - dt.timedelta(days=1)


def _months_back(today: dt.date, n: int) -> tuple[int, int]:
    index = today.year * 12 + today.month - 1 - n
    return index // 12, index % 12 + 1


def local_date(iso: str | None) -> str | None:
    """The calendar day of an ISO timestamp (a message's `created_at`), in local time when it has a zone."""
    if not iso:
        return None
    try:
        moment = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    return (moment.astimezone() if moment.tzinfo else moment).date().isoformat()
