"""The strings a regex's matches must hold (storage/text/literals.py): `fold` treats letters as the regex engine's
IGNORECASE does, and `needed` never names a string some match lacks."""

import _sre
import re

import pytest

from storage.text import literals


def test_fold_makes_one_exactly_the_letters_ignorecase_takes_as_equal():
    """Every letter of the Basic Multilingual Plane (where all of Unicode's special cases lie) folds to the
    representative of what the regex engine lower-cases it to."""
    canonical = {code: chr(literals._FOLDS.get(low, low))
                 for code in range(0x10000) if not 0xD800 <= code <= 0xDFFF
                 for low in (_sre.unicode_tolower(code),)}
    assert [c for c, want in canonical.items() if literals.fold(chr(c)) != want] == []
    assert literals.fold("APİ_KEY ſecret Σ") == literals.fold("api_key secret ς")


@pytest.mark.parametrize("pattern, text", [
    (r"\b(?:ignore|disregard)\s+all", "Please DISREGARD all of it"),
    (r"(?:agora|a partir de agora)\s+voce", "a partir de agora voce"),  # the parser takes the shared `a` out
    (r"sk-(?:proj-)?[A-Za-z0-9]{20}", "key sk-proj-ABCDEFGHIJKLMNOPQRST"),
    (r"(?i)api_?key\w*\s*=", "APİKEY="),
    (r"x{2,}yz", "xxxyz"),
])
def test_every_match_holds_one_of_the_needed_strings(pattern, text):
    regex = re.compile(pattern, re.IGNORECASE)
    need = literals.needed(regex.pattern, regex.flags)
    assert regex.search(text) and need
    assert literals.may_match(need, literals.fold(text))
    assert not literals.may_match(need, literals.fold("nothing of the kind"))


@pytest.mark.parametrize("pattern", [r"\w+", r"(?:abc)?\d+", r"a|\d", r"(?<=x)"])
def test_a_pattern_without_a_certain_string_needs_nothing(pattern):
    assert literals.needed(pattern) is None
    assert literals.may_match(None, "")
