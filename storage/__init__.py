"""Plain-Python core of Dreamflow: workspace files, Markdown model, DuckDB index, search and graph.

Nothing in this package imports prefect, openai or torch, so the CLI's read/write/search path starts fast.
"""
