"""How Dreamflow runs unattended: Prefect deployments (`serve.py`) and workspace file watchers (`watch.py`)."""
