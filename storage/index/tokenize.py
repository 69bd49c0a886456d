"""BM25 terms: the one tokenizer used for documents and queries alike.

English (and other Latin-script) words are lowercased, stopwords dropped and Snowball-stemmed with
PyStemmer; numbers are kept as they are. CJK runs (Chinese, Japanese kana, Korean Hangul) have no spaces
between words, so each run becomes overlapping character bigrams (a one-character run becomes that
character), which finds Chinese words without a dictionary.

`term_hash` is a term's key in the index's postings (storage/index/indexer.py writes it, search looks it up).
`tokens` estimates what a text takes in a model's context (recall's budgets, what the hooks inject).
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata

import Stemmer

# A word: letters/digits optionally joined by apostrophes (don't, Mel's). A CJK run: Han, kana, Hangul.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
_HAS_CJK = re.compile(f"[{_CJK}]")
# ASCII text (the common case) splits ~5x faster with translate + split than with a regex.
_ASCII_SEPARATORS = str.maketrans({chr(i): " " for i in range(128) if not (chr(i).isalnum() or chr(i) in "_'")})
_WORD = re.compile(r"\w+(?:'\w+)*")  # other text without CJK
_WORD_OR_CJK = re.compile(rf"([{_CJK}]+)|([^\W{_CJK}]+(?:'[^\W{_CJK}]+)*)")

STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during
    each few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's
    hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's
    me more most mustn't my myself no nor not of off on once only or other ought our ours ourselves out over
    own same shan't she she'd she'll she's should shouldn't so some such than that that's the their theirs
    them themselves then there there's these they they'd they'll they're they've this those through to too
    under until up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's will with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves s t d ll m re ve
    """.split()
)

_stemmer = Stemmer.Stemmer("english")
_stems: dict[str, str] = {}  # word -> stem ("" for a stopword); cleared when it grows past _MAX_CACHE
_MAX_CACHE = 500_000


def _stem(word: str) -> str:
    """Stem of one lowercased word ("" for a stopword); possessives and contractions keep their stem.

    Accents are dropped (café = cafe) and compatibility forms folded (ｆｕｌｌ = full), so a query typed
    either way matches."""
    word_ = word.strip("'")
    if not word_.isascii():
        word_ = "".join(c for c in unicodedata.normalize("NFKD", word_) if not unicodedata.combining(c))
    base = word_.split("'", 1)[0]
    if not base or word_ in STOPWORDS or base in STOPWORDS:
        stem = ""
    else:
        stem = base if base.isdigit() else _stemmer.stemWord(base)
    if len(_stems) >= _MAX_CACHE:
        _stems.clear()
    _stems[word] = stem
    return stem


def terms(text: str) -> list[str]:
    """BM25 terms of `text`, in order, duplicates kept (callers count term frequency)."""
    text = text.lower()
    if text.isascii():
        words = text.translate(_ASCII_SEPARATORS).split()
    else:
        text = text.replace("\u2019", "'")
        if _HAS_CJK.search(text):
            return _mixed_terms(text)
        words = _WORD.findall(text)
    stems = list(map(_stems.get, words))
    if None in stems:
        stems = [_stem(w) if s is None else s for w, s in zip(words, stems)]
    return [s for s in stems if s]


def _mixed_terms(text: str) -> list[str]:
    """Terms of text that holds CJK runs: words stemmed as usual, each CJK run as character bigrams."""
    out: list[str] = []
    for cjk, word in _WORD_OR_CJK.findall(text):
        if word:
            stem = _stems.get(word)
            if stem is None:
                stem = _stem(word)
            if stem:
                out.append(stem)
        elif len(cjk) == 1:
            out.append(cjk)
        else:
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return out


def tokens(text: str) -> int:
    """Estimated model tokens of `text`: ASCII characters / 4 (rounded up) plus one per other character
    (conservative for CJK)."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 4) + len(text) - ascii_chars


def term_hash(term: str) -> int:
    """A term's key in the `postings` table: its 8-byte BLAKE2b digest as a non-negative 63-bit integer (fits
    DuckDB's integer columns and numpy's int64; integers scan and sort several times faster than strings)."""
    digest = hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


# words of what is said to be polite, not to be remembered or looked up: a "fact" or a prompt of nothing else
# says nothing (engine/memory/extraction.py, storage/search/relevance.py)
SMALL_TALK = frozenset(terms("thanks thank lot hello hi hey bye goodbye ok okay sure noted note great "
                             "congratulations nice cool welcome good night morning please sorry yes no"))
