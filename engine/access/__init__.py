"""How surfaces and jobs reach a workspace's memory: the one client seam, scoped access, turns."""
