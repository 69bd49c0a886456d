"""`python -m dreamflow` runs the CLI (same as the `dreamflow` console script)."""

from dreamflow.entry import main

main()
