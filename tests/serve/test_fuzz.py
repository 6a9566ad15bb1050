"""The OpenAPI schema fuzzed with schemathesis against a real server: no 5xx, whatever comes."""

import pytest

from .test_server import server  # noqa: F401 - the fixture

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
from hypothesis import HealthCheck, given, settings  # noqa: E402 - comes with schemathesis

pytestmark = pytest.mark.slow  # a real server process

EXAMPLES = 40  # per operation: a bounded run


def test_no_request_gets_a_server_error(server):  # noqa: F811
    _, url = server("--max-texts", "8", "--max-chars", "200")
    schema = schemathesis.openapi.from_url(f"{url}/spec")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {f"{o.method.upper()} {o.path}" for o in operations} >= {
        "POST /translate", "POST /detect", "GET /languages", "POST /v1/translate"}
    calls = []
    for operation in operations:
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def no_server_error(case):
            response = case.call(base_url=url, timeout=60)
            calls.append(response.status_code)
            assert response.status_code < 500, (case.as_curl_command(), response.text)
            if response.status_code >= 400:
                assert set(response.json()) == {"error"}, response.text
        no_server_error()
    assert len(calls) >= 2 * EXAMPLES and {200, 400} <= set(calls)  # both kinds were tried
