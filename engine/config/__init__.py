"""Settings, the workspace registry, grants and the day a job is for: what a process reads once to know where it is."""
