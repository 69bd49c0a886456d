"""auto_memory: a conversation's new messages -> its daily card."""

from __future__ import annotations

from prefect import flow

from engine.llm import require_llm
from storage.errors import InvalidInput
from tasks import dialog
from tasks.cards import publish_usage, refresh_day, summarise_session
from tasks.context import check_date, today, workspace_root
from tasks.sessions import mark_summarised, record_messages, session_lock, unsummarised


@flow(name="auto-memory", persist_result=True)
def auto_memory(session_id: str, messages: list[dict] | None = None, date: str | None = None,
                hint: str | None = None, workspace: str | None = None) -> dict:
    """Append `messages` (if any) to session/dialog/<session_id>.jsonl, then summarise every record not yet
    summarised into the session's card of the day (`date`, else the latest message's day, else today). A
    `date` more than a day outside the days of the messages' timestamps is refused (exit 2).

    The per-session checkpoint moves only after the card is written, so a failed run (e.g. a card the
    content checks refused: `AnswerRefused`, exit 9) is redone by the next.
    """
    root = workspace_root(workspace)
    require_llm()
    date = check_date(date) if date else None
    if messages:
        record_messages(root, session_id, messages)
    with session_lock(root, session_id):
        todo = unsummarised(root, session_id)
        if not todo["records"]:
            if todo["end"] > todo["start"]:  # only unreadable lines: step over them
                mark_summarised(root, session_id, todo["end"], None)
            return {"session_id": session_id, "skipped": "no new messages", "records": todo["total"]}
        if date and dialog.outside_span(date, todo["dates"]):
            raise InvalidInput(f"the card's day {date} is outside its messages' days {todo['dates'][0]}.."
                               f"{todo['dates'][-1]}; leave the date out to file it under its messages' day")
        day = date or todo["latest_date"] or today()
        try:
            card = summarise_session(root, session_id, todo["records"], day, hint)
        except Exception as exc:  # e.g. the card was refused (exit 9): its calls and refusals are still logged
            publish_usage(root, "auto-memory", f"session {session_id}", getattr(exc, "usage", None))
            raise
        refresh_day(root, day)
        mark_summarised(root, session_id, todo["end"], card["path"])
    publish_usage(root, "auto-memory", f"session {session_id}", card["usage"])
    return {"session_id": session_id, "date": day, "card": card["path"], "created": card["created"],
            "renamed_from": card["renamed_from"], "summarised": [todo["start"], todo["end"]],
            "usage": card["usage"]}
