"""Memory jobs as Prefect flows: one module per job (their tasks' prompts are in engine/prompts/*.md).

Importing a flow configures nothing: whatever runs flows applies Dreamflow's quiet, offline Prefect defaults
first (`engine.config.prefect_env.configure()`, before `prefect` is imported): the service (and so its runner,
deployments/runner.py), the CLI's job commands (dreamflow/cli/job_runs.py), the tests and benchmarks. A flow run
also applies them at its first step (`engine.access.job_workspace.workspace_root`), for the process a Prefect
worker starts.
"""
