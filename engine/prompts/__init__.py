"""The system prompts of the LLM tasks, one Markdown file per call kind beside this module."""

from pathlib import Path

FOLDER = Path(__file__).parent


def load_prompt(name: str) -> str:
    """The system prompt `engine/prompts/<name>.md`."""
    path = FOLDER / f"{name}.md"
    if not path.is_file():
        raise FileNotFoundError(f"no prompt engine/prompts/{name}.md")
    return path.read_text(encoding="utf-8")
