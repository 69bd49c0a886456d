"""The day page `daily/YYYY-MM-DD.md`: a generated list of that day's cards between markers, the rest as written."""

from __future__ import annotations

from storage.text.model import CARDS_END, CARDS_START, GENERATED_BLOCKS, REME_NOTES_END, REME_NOTES_START  # noqa: F401


def day_page(day: str, cards: list[dict], existing: str | None) -> str:
    """The text of daily/DAY.md: the generated card list between markers (taking the place of ReMe's
    `<!-- notes:auto -->` block on a page ReMe wrote), everything else kept as written."""
    from storage.text.markdown import render_frontmatter

    lines = [CARDS_START]
    for card in cards:
        alias = (card["name"] or "").replace("|", "/").replace("]", ")").replace("\n", " ").strip()
        line = f"- [[{card['path']}|{alias}]]" if alias else f"- [[{card['path']}]]"
        if card["description"]:
            line += ": " + " ".join(card["description"].split())
        lines.append(line)
    lines.append(CARDS_END)
    block = "\n".join(lines)
    if existing is None:
        meta = {"name": day, "description": f"Index of the cards of {day}", "date": day}
        return render_frontmatter(meta, f"# {day}\n\n{block}\n")
    for opening, closing in GENERATED_BLOCKS:
        start = existing.find(opening)
        end = existing.find(closing, start)
        if start >= 0 and end >= 0:  # ours, or ReMe's auto block (a page ReMe wrote): replaced in place
            return existing[:start] + block + existing[end + len(closing):]
    return existing.rstrip("\n") + "\n\n" + block + "\n"
