"""The HTTP API against its own OpenAPI schema, fuzzed by schemathesis: for generated requests (valid and
not), no route answers 5xx, and every answer has a documented status, content type, `Allow` header and body
shape, upload (JSON and multipart) and download (bytes) included."""

import tempfile

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dreamflow.http.api import create_app
from engine.config.settings import Settings
from storage.memory import Memory

# Built at import: schemathesis parametrizes from a schema object (its fixture-based loader fails on pytest 9).
_WORKSPACE = tempfile.TemporaryDirectory(prefix="dreamflow-api-schema-")  # removed when the process exits
_memory = Memory(_WORKSPACE.name)
_memory.write("digest/wiki/a.md", "Alpha [[digest/wiki/b.md]]", name="A")
_memory.write("digest/wiki/b.md", "Beta", name="B")
_app = create_app(_memory, settings=Settings(allowed_hosts=["testserver", "localhost"]))  # the ASGI client's Host
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance,
          allow_header_conformance]


# Each route gets schemathesis' coverage phase (~41 deterministic cases: boundaries, wrong types, missing
# fields) and then 10 random ones (25 cost ~500 more requests, ~5 s).
@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_route_answers_as_documented(case):
    case.call_and_validate(checks=CHECKS)
