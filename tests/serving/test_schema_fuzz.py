"""The OpenAPI document against the API, as a schema fuzzer tries it: schemathesis generates
requests for every operation from ``/openapi.json`` alone. No answer may be a 5xx or differ from
what the document declares (status, media type, body schema), and no operation may refuse most
of the requests its own schema calls valid (a 400/422 that a declared constraint would have
prevented; 401/403/404/409/413/415 are about data and state, not the schema)."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")  # in the dev extra; make test requires it

from hypothesis import HealthCheck, given, settings  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from serving_kit import clean_settings  # noqa: E402

from ragspine.serving.app import create_app  # noqa: E402

#: Statuses that say something about the data or the server's state, not about the schema.
STATE_STATUSES = {401, 403, 404, 409, 413, 415}
EXAMPLES = 20


@pytest.mark.slow
def test_generated_requests_get_declared_answers(tmp_path: Path) -> None:
    app = create_app(clean_settings(data_dir=tmp_path / "data", ocr="off"))
    total: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    checks = [schemathesis.checks.not_a_server_error, schemathesis.checks.status_code_conformance,
              schemathesis.checks.content_type_conformance, schemathesis.checks.response_schema_conformance]
    with TestClient(app):
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        for result in schema.get_all_operations():
            op = result.ok()

            @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=op.as_strategy())
            def run(case: Any) -> None:
                resp = case.call()
                total[op.label] += 1
                if 400 <= resp.status_code < 500 and resp.status_code not in STATE_STATUSES:
                    refused[op.label] += 1
                try:
                    case.validate_response(resp, checks=checks)
                except BaseException as exc:  # schemathesis raises a group of failures
                    problems.append(f"{op.label} {resp.status_code}: {str(exc).splitlines()[0]}")

            run()
    assert len(total) >= 25
    assert problems == []
    mostly_refused = {op: f"{refused[op]}/{total[op]}" for op in total if refused[op] > total[op] / 2}
    assert mostly_refused == {}
