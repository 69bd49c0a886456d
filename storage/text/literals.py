"""The strings a regular expression's matches must hold: a few substring tests (`in`) that pass over most texts
before a costly search reads them (storage/text/instructions.py, storage/text/redact.py).

`needed(pattern, flags)` reads the parsed pattern: a run of literal characters, the options of an alternation, what
a group or a repeat of at least one holds; of those the most telling (the longest shortest string). None when no
string is certain. The strings are `fold`ed (lower case, and the letters IGNORECASE also takes as equal, such as
ı/i and ſ/s, made one), so `may_match` holds for any match, whatever the pattern's case flag. Pure, no I/O.
"""

from __future__ import annotations

from functools import lru_cache
from re import _constants as _sre  # the parsed form of a pattern (Python's own parser, 3.11+)
from re import _parser as _sre_parse
from re._casefix import _EXTRA_CASES

_FOLDS = {code: min((code, *same)) for code, same in _EXTRA_CASES.items()}
_REPEATS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT)


def fold(text: str) -> str:
    """Lower case with the letters IGNORECASE also takes as equal made one (İ lower-cased as the regex engine
    does, to i, not to i and a combining dot)."""
    return text.replace("\u0130", "i").lower().translate(_FOLDS)


@lru_cache(maxsize=512)
def needed(pattern: str, flags: int = 0) -> frozenset[str] | None:
    """Strings (folded) one of which every match of `pattern` holds, or None (remembered: patterns are few)."""
    def of(items) -> frozenset[str] | None:
        needs, run = [], ""
        for op, arg in items:
            if op is _sre.LITERAL:
                run += chr(arg)
                continue
            if run:
                needs.append(frozenset({fold(run)}))
                run = ""
            need = None
            if op is _sre.SUBPATTERN:
                need = of(arg[3])
            elif op is _sre.ATOMIC_GROUP:
                need = of(arg)
            elif op in _REPEATS and arg[0] >= 1:
                need = of(arg[2])
            elif op is _sre.BRANCH:
                options = [of(branch) for branch in arg[1]]
                need = None if any(o is None for o in options) else frozenset().union(*options)
            if need:
                needs.append(need)
        if run:
            needs.append(frozenset({fold(run)}))
        return max(needs, key=lambda need: min(map(len, need)), default=None)

    return of(_sre_parse.parse(pattern, flags))


def needed_by_any(regexes) -> frozenset[str] | None:
    """Strings one of which a text must hold for any of `regexes` (compiled) to match, or None."""
    needs = [needed(r.pattern, r.flags) for r in regexes]
    return None if not needs or any(n is None for n in needs) else frozenset().union(*needs)


def may_match(need: frozenset[str] | None, folded: str) -> bool:
    """Whether a `fold`ed text holds one of `need` (None: it may always match)."""
    return need is None or any(string in folded for string in need)
