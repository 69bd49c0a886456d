"""The dates and periods a query names (storage/search/timeref.py)."""

import datetime as dt

from storage.search.timeref import periods

D = dt.date
TODAY = D(2026, 12, 2)


def test_absolute_dates_months_and_years():
    assert periods("What did Mel do on 3 June, 2023?") == [(D(2023, 6, 3), D(2023, 6, 3))]
    assert periods("the talk on October 13, 2023") == [(D(2023, 10, 13), D(2023, 10, 13))]
    assert periods("the 1st of Feb 2024") == [(D(2024, 2, 1), D(2024, 2, 1))]
    assert periods("in July 2023") == [(D(2023, 7, 1), D(2023, 7, 31))]
    assert periods("2023-06-03 and 2024-02") == [(D(2023, 6, 3), D(2023, 6, 3)), (D(2024, 2, 1), D(2024, 2, 29))]
    assert periods("beach trips in 2023") == [(D(2023, 1, 1), D(2023, 12, 31))]


def test_no_year_no_period_and_impossible_dates_skipped():
    assert periods("camping in June?") == []
    assert periods("May I ask what you did on the 3rd?") == []
    assert periods("31 February 2023") == []


def test_relative_times_count_from_today():
    assert periods("yesterday", TODAY) == [(D(2026, 12, 1), D(2026, 12, 1))]
    assert periods("what happened today", TODAY) == [(TODAY, TODAY)]
    assert periods("last week", TODAY) == [(D(2026, 11, 19), D(2026, 11, 25))]
    assert periods("this month", TODAY) == [(D(2026, 12, 1), D(2026, 12, 31))]
    assert periods("last month", TODAY) == [(D(2026, 11, 1), D(2026, 11, 30))]
    assert periods("last year", TODAY) == [(D(2025, 1, 1), D(2025, 12, 31))]
    assert periods("3 weeks ago", TODAY) == [(D(2026, 11, 8), D(2026, 11, 14))]
    assert periods("two months ago", D(2026, 1, 15)) == [(D(2025, 11, 1), D(2025, 11, 30))]
    assert periods("a year ago", TODAY) == [(D(2025, 1, 1), D(2025, 12, 31))]
