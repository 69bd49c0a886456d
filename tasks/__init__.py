"""Small Prefect tasks around plain functions, used by the flows."""
