"""Every tuning number of card writing and of the dream's judge, each with what it means. Why a rule exists
(the model incidents behind it) is in docs/dream.md."""

from datetime import timedelta

# ---- extraction: what the model is shown and what a fact may be ------------------------------------------
MAX_FACTS = 30               # facts one answer may list
MAX_FACT_WORDS = 45          # words of one fact (a fact is one sentence)
MIN_FACT_TERMS = 2           # content terms a fact needs to say something
MAX_UNSAID = 2               # sentences of one user message no fact cites kept in its words (extraction.unsaid)
ECHO_SHARE = 0.67            # share of an assistant fact's content words a user message must hold to be what it echoes
MAX_ITEM_CHARS = 6_000       # of one numbered message or block shown to the model (the rest of it is not read)
MAX_BLOCK_LINES = 12         # lines of a resource grouped into one numbered block
MAX_RESOURCE_CHARS = 40_000  # of a resource read into cards (the rest is left out, and said so)
MAX_CALL_CHARS = 12_000      # of material per extraction call (a small local model reads ~25 tokens/s)
TITLE_WORDS = 8              # words of a card title taken from its first fact (a model's title: twice that at most)

# ---- prose checks (quality.py) ----------------------------------------------------------------------------
MIN_TERMS = 3                # content terms a written text needs
VERBATIM_RUN = 8             # words in a row copied from the material that make a copy
COPY_SHARE = 0.6             # share of a text copied verbatim that makes it a copy ...
COPY_MIN_WORDS = 20          # ... when it has this many words
INSTRUCTIONS_SHARE = 0.5     # share of a text's word runs taken from the request's instructions that echoes them
PASTED_SHARE = 0.8           # share of a text that is the material pasted ...
PASTED_MIN_WORDS = 20        # ... when it has this many words

# ---- the dream: candidates and the judge ------------------------------------------------------------------
SEARCHED = 12                # search hits read for the node facts a new fact may touch
CANDIDATES = 5               # node facts one new fact is compared with
SIMILAR = 0.35               # cosine from which a fact of the subject's node is shown though it shares no word
KEPT_WORDS = 0.67            # share of a listed fact's words a `same` or `refines` answer must keep
SHARED_WORDS = 2             # words shared with a listed fact that make a low-overlap `refines` a replacement
MEANT = 0.5                  # cosine from which a listed fact is the one a change means, though it shares one word
MEANT_MARGIN = 0.1           # ... when no other listed fact comes this close
ASKED_NEAR = 0.3             # cosine from which a fact sharing a name with a change is asked about alone
MAX_BACK = timedelta(days=3653)  # how far before the day it was said a fact's own date may reach
MAX_CHAIN = 20               # superseded_by hops followed to a node's current successor
