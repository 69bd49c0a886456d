"""`python -m dreamflow` runs the CLI (same as the `dreamflow` console script)."""

from dreamflow.cli import main

main()
