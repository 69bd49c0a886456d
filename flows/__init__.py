"""Memory jobs as Prefect flows: one module per job; prompts in prompts/*.md."""
