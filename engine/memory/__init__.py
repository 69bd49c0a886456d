"""The memory domain: what a card fact, a subject's unit and a node fact are, how facts are extracted from new
material and screened (extraction, quality, relative_dates), how cards are written (cards), gathered for the
dream (gathering) and judged against what memory holds (consolidation), with every tuning number in
thresholds; what the proactive job looks up (interests) and a ReMe workspace brought over (reme_import). It
reads and writes through the memory it is given; Prefect lives in tasks/."""
