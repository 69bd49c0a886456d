"""The HTTP API the service serves: the app (`api`), its bearer-token layer (`access`) and the guard in front of
everything (`http_guard`)."""
