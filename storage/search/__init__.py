"""Reading memory back: hybrid search, recall packed into a budget, relevance gates, dates in queries and the
trace from a fact down to its message."""
