"""What jobs and surfaces share, below both: settings, the Prefect environment, the LLM client, the jobs'
write checks, the memory client (in-process or through the service), turn counters, embedders and the operation
and job declarations. Imports point down only: `engine` uses `storage`, `tasks`/`flows` use `engine`, and the
surfaces in `dreamflow/` (CLI, HTTP, MCP, service) use all of them. Nothing here imports `dreamflow`.
"""
