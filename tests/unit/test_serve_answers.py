"""What a serving app answers to a request it cannot take (400, saying what was expected) and to its own failure
(500 with a request id, the traceback only in the log)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from starlette.requests import Request

from cuberay.serve import answers
from cuberay.serve.answers import BadRequest
from cuberay.serve.torch_model import input_width, rows_of

EXPECTED = 'expected JSON {"inputs": [[64 numbers], ...]}'


@pytest.mark.parametrize("payload, problem", [
    ([1, 2], 'the request is a JSON array without "inputs"'),
    ({"rows": [[1.0] * 64]}, 'the request is a JSON object without "inputs"'),
    ({"inputs": "0,1,2"}, '"inputs" is a JSON string'),
    ({"inputs": []}, '"inputs" is empty'),
    ({"inputs": [[1.0] * 64, "x"]}, "row 1 is a JSON string, not a list of numbers"),
    ({"inputs": [[1.0] * 63 + ["1"]]}, "row 0 holds a JSON string where numbers belong"),
    ({"inputs": [[True] * 64]}, "row 0 holds a JSON boolean where numbers belong"),
    ({"inputs": [[[1.0] * 64]]}, "row 0 holds a JSON array where numbers belong"),
    ({"inputs": [[1.0] * 10]}, "row 0 has 10 numbers"),
])
def test_a_request_of_the_wrong_shape_says_what_was_expected(payload, problem) -> None:
    with pytest.raises(BadRequest) as caught:
        rows_of(payload, 64)
    assert str(caught.value) == f"{problem}; {EXPECTED}"


def test_rows_of_the_right_shape_pass_and_ragged_rows_do_not_without_a_width() -> None:
    assert rows_of({"inputs": [0.5] * 64}, 64) == [[0.5] * 64]  # one row, bare
    assert rows_of({"inputs": [[1, 2], [3, 4]]}) == [[1, 2], [3, 4]]
    with pytest.raises(BadRequest, match=r"row 1 has 3 numbers; expected JSON \{\"inputs\": \[\[N numbers\]"):
        rows_of({"inputs": [[1, 2], [3, 4, 5]]})


def test_the_model_says_how_wide_a_row_is() -> None:
    from torch import nn

    assert input_width(nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))) == 64  # the digits MLP
    assert input_width(nn.Sequential(nn.ReLU())) is None


def _request(body: bytes) -> Request:
    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)


def test_a_body_that_is_not_json_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match=r"^the request body is not JSON \(Expecting value"):
        asyncio.run(answers.json_body(_request(b"inputs=1,2,3")))
    assert asyncio.run(answers.json_body(_request(b'{"inputs": [1]}'))) == {"inputs": [1]}


def test_a_bad_request_from_another_deployment_is_still_the_callers_mistake() -> None:
    from ray.exceptions import RayTaskError

    try:
        raise BadRequest("row 0 has 3 numbers")
    except BadRequest as err:
        remote = RayTaskError("handle_request", "Traceback (most recent call last): ...", err).as_instanceof_cause()
    assert str(remote) != "row 0 has 3 numbers"  # Ray's text (process, traceback): not for the caller
    assert str(answers.client_error(remote)) == "row 0 has 3 numbers"
    assert answers.client_error(RuntimeError("boom")) is None


def test_an_internal_failure_answers_500_with_a_request_id_and_logs_the_traceback() -> None:
    import ray.serve.context  # noqa: F401 - Serve sets up its logger on import, dropping handlers added before

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(logging.Formatter().format(record))

    kept = Kept()
    answers.log.addHandler(kept)  # Serve's logger, which Serve writes to the replica's log file
    try:
        try:
            raise RuntimeError("the weights file is corrupt")
        except RuntimeError as err:
            response = answers.internal_error(err, "t-web", "v2")
    finally:
        answers.log.removeHandler(kept)
    body = json.loads(response.body)
    assert response.status_code == 500 and response.headers["x-cuberay-version"] == "v2"
    assert body["error"] == "version v2 failed to answer; the app's log has the details under this request id"
    assert body["request_id"] and "Traceback" not in response.body.decode() and ".py" not in response.body.decode()
    [line] = kept.lines
    assert line.startswith(f"request {body['request_id']} to t-web: version v2 failed\nTraceback")
    assert "the weights file is corrupt" in line


def test_the_ingress_reads_its_figures_on_the_loop_that_counts_requests() -> None:
    """Serve runs a plain method in a worker thread: figures read there race the requests being counted."""
    import inspect

    from cuberay.serve.router import TrafficMixin

    assert inspect.iscoroutinefunction(TrafficMixin.stats)
