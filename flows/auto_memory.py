"""auto_memory: a conversation's new messages -> its daily card."""

from __future__ import annotations

from collections import Counter

from prefect import flow

from engine.access.job_workspace import llm_or_skipped, workspace_root
from engine.config.days import check_date, today
from engine.models.usage import Usage
from storage.errors import InvalidInput
from storage.files import dialog
from storage.text import redact
from tasks.cards import publish_usage, refresh_day, summarise_session
from tasks.sessions import mark_summarised, record_messages, session_lock, unsummarised

COUNTED = ("recited", "restated", "echoes", "unsaid")  # what each card's checks did, summed over its runs


@flow(name="auto-memory", persist_result=True)
def auto_memory(session_id: str, messages: list[dict] | None = None, date: str | None = None,
                hint: str | None = None, workspace: str | None = None) -> dict:
    """Append `messages` (if any) to session/dialog/<session_id>.jsonl, then add the facts of every record not
    yet summarised to the session's card of the day (`date`, else the latest message's day, else today). A
    `date` more than a day outside the days of the messages' timestamps is refused (exit 2).

    Records are read in runs a small model can take at once; the per-session checkpoint moves after each run's
    card is written, so a failed run (e.g. a model whose facts the checks all refused: `AnswerRefused`, exit 9)
    is redone by the next. The summary's `redacted` (secrets by kind) and `private` (spans) count what the
    summarised messages had kept out of memory (replaced by markers when they were recorded).
    """
    root = workspace_root(workspace)
    if (skipped := llm_or_skipped()) is not None:
        return skipped
    date = check_date(date) if date else None
    if messages:
        record_messages(root, session_id, messages)
    spent, cards, dropped, first, runs, added, counted = Usage(), [], [], None, 0, 0, Counter()
    kept_out, private = Counter(), 0
    with session_lock(root, session_id):
        while True:
            todo = unsummarised(root, session_id)
            first = todo["start"] if first is None else first
            if not todo["records"]:
                if todo["end"] > todo["start"]:  # only unreadable lines: step over them
                    mark_summarised(root, session_id, todo["end"], None)
                break
            if date and dialog.outside_span(date, todo["dates"]):
                raise InvalidInput(f"the card's day {date} is outside its messages' days {todo['dates'][0]}.."
                                   f"{todo['dates'][-1]}; leave the date out to file it under its messages' day")
            day = date or todo["latest_date"] or today()
            try:
                card = summarise_session(root, session_id, todo["records"], todo["lines"], day, hint)
            except Exception as exc:  # e.g. every fact refused (exit 9): its calls and refusals are still logged
                spent.add(getattr(exc, "usage", None))
                publish_usage(root, "auto-memory", f"session {session_id}", spent.as_dict())
                raise
            spent.add(card["usage"])
            runs += 1
            found, spans = redact.marked(dialog.transcript(todo["records"]))
            kept_out.update(found)
            private += spans
            if card["added"]:
                refresh_day(root, day)
            if card["path"] and card["path"] not in cards:
                cards.append(card["path"])
            added += len(card["added"])
            counted.update({key: card.get(key, 0) for key in COUNTED})
            dropped += card["dropped"]
            mark_summarised(root, session_id, todo["end"], card["path"])
    if not runs:
        return {"session_id": session_id, "skipped": "no new messages", "records": todo["total"]}
    usage = spent.as_dict()
    publish_usage(root, "auto-memory", f"session {session_id}", usage)
    return {"session_id": session_id, "date": day, "card": cards[-1] if cards else None, "cards": cards,
            "facts": added, **{key: counted[key] for key in COUNTED},
            "dropped": dropped, "summarised": [first, todo["end"]],
            "redacted": dict(kept_out), "private": private, "usage": usage}
