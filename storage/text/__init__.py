"""What the files say: Markdown with frontmatter and wikilinks, fact lines and their validity, and the checks on
text going in (secrets, instructions)."""
