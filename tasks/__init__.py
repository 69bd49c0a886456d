"""Small Prefect tasks around plain functions, used by the flows.

Like `flows`, importing this package applies the quiet, offline Prefect defaults first.
"""

from engine import prefect_env

prefect_env.configure()
