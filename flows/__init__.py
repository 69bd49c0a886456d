"""Memory jobs as Prefect flows: one module per job (their tasks' prompts are in tasks/prompts/*.md).

Importing this package applies Dreamflow's quiet, offline Prefect defaults (nothing phones home) before any
flow module imports prefect, so `from flows.auto_dream import auto_dream` is safe from plain Python too.
"""

from engine import prefect_env

prefect_env.configure()
