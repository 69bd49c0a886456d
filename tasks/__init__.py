"""Prefect tasks, used by the flows: every module here defines tasks (`@task`), with the small pure code that
belongs to one of them beside it; the domain logic they call is in engine/ and storage/.

Importing a task configures nothing (see `flows`: what runs flows configures Prefect first).
"""
