"""The `/mcp` session manager: the mcp SDK's streamable HTTP one, with abandoned sessions unable to lock out
new clients.

The SDK answers `503 Too many open sessions` once `max_sessions` are open, until some idle out (30 minutes),
so a client that opens sessions and walks away (about 10,000 in 20 s) locks everyone out, and each held
session costs ~40 KB. Here a new client at the cap ends the least recently used idle session instead (its id
then answers 404, and an MCP client re-initializes); only sessions with a request in flight are never ended,
so the cap (`DREAMFLOW_MCP_MAX_SESSIONS`) bounds memory and 503 means that many sessions are busy right now.
"""

from __future__ import annotations

import math

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class EvictingSessionManager(StreamableHTTPSessionManager):
    """`StreamableHTTPSessionManager` whose new sessions push out the least recently used idle ones at the cap."""

    def _admit_session(self, requestor):
        if self.max_sessions is not None:
            while len(self._server_instances) >= self.max_sessions and self._end_least_recently_used():
                pass
        return super()._admit_session(requestor)

    def _end_least_recently_used(self) -> bool:
        """End the idle session whose last request finished first; False when every session is busy.

        An idle session's idle deadline is when its last request ended plus the idle timeout, so the earliest
        deadline is the least recently used; a session with a request in flight has none (infinite)."""
        idle = [(transport.idle_scope.deadline, session_id) for session_id, transport in self._server_instances.items()
                if transport.idle_scope is not None and math.isfinite(transport.idle_scope.deadline)]
        if not idle:
            return False
        session_id = min(idle)[1]
        transport = self._server_instances.pop(session_id)  # its id answers 404 from now on
        self._session_owners.pop(session_id, None)
        transport.idle_scope.cancel()  # ends its message loop, which terminates the transport
        return True
