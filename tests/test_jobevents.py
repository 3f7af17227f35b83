"""The one place a job event gets its JSON shape (docs/API.md: /transcribe's NDJSON events, which hasrctl reads)."""

from __future__ import annotations

from typing import Any

import pytest

from hasrd.jobevents import Done, Failed, Loading, Queued, StreamEvent, to_json
from hasrd.protocol import Draft, Progress, Sentence, Turn


@pytest.mark.parametrize("ev, shape", [
    (Progress(id=7, done_s=1.5, total_s=3.0),
     {"event": "progress", "done_s": 1.5, "total_s": 3.0, "phase": "decoding"}),
    (Draft(id=7, text="一", segment=2), {"event": "draft", "text": "一", "segment": 2}),
    (Sentence(id=7, index=0, text="Hi.", engine="fw", start_s=0.0, end_s=1.0),
     {"event": "sentence", "index": 0, "text": "Hi.", "engine": "fw", "start_s": 0.0, "end_s": 1.0, "segment": 0}),
    (Turn(id=7, segment=1, kind="stopped", end_s=2.0),
     {"event": "turn", "segment": 1, "kind": "stopped", "start_s": 0.0, "end_s": 2.0, "text": ""}),
    (Loading("loading models"), {"event": "loading", "phase": "loading models", "elapsed_s": 0.0}),
    (Loading("loading models", 3.2, 12.0),
     {"event": "loading", "phase": "loading models", "elapsed_s": 3.2, "expected_s": 12.0}),
    (Queued(2), {"event": "queued", "position": 2}),
    (Done({"final": "x"}), {"event": "done", "result": {"final": "x"}}),
    (Failed({"error": {"code": "stalled", "message": "m"}}),
     {"event": "error", "error": {"code": "stalled", "message": "m"}}),
])
def test_each_event_has_the_documented_json_shape_and_no_worker_request_id(ev: StreamEvent,
                                                                          shape: dict[str, Any]) -> None:
    assert to_json(ev) == shape


def test_something_that_is_not_a_job_event_is_refused_loudly() -> None:
    with pytest.raises(TypeError, match="not a job event"):
        to_json({"event": "progress"})  # type: ignore[arg-type]
