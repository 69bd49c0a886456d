"""The day a job is for: `today` (this machine's calendar day) and `check_date` (a day given by a caller)."""

from __future__ import annotations

from datetime import date

from storage.errors import InvalidInput


def today() -> str:
    return date.today().isoformat()


def check_date(value: str) -> str:
    """`value` as YYYY-MM-DD (`today` allowed), else InvalidInput."""
    if value == "today":
        return today()
    try:
        return date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise InvalidInput(f"date must be YYYY-MM-DD, got {value!r}") from None
