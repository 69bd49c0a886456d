"""The DuckDB index built from the files: chunks, BM25 postings, vectors, links and provenance chains; always
rebuildable, kept fresh, health-checked."""
