"""Signals in Debezium's shape (cdc/signals.py): what is accepted, and what is refused with the reason."""

from __future__ import annotations

import pytest

from cdc import signals as S
from cdc.snapshot.incremental import Progress


def test_execute_snapshot_with_a_condition_and_a_surrogate_key():
    signal = S.parse("s1", "execute-snapshot", '{"data-collections": ["db.t", "db.u"], "type": "INCREMENTAL", '
                     '"additional-conditions": [{"data-collection": "db.t", "filter": "id > 100"}], '
                     '"surrogate-key": "n"}')
    assert signal == S.Signal("s1", S.EXECUTE, ("db.t", "db.u"), {"db.t": "id > 100"}, "n")
    assert S.from_json(signal.to_dict()) == signal


@pytest.mark.parametrize("type_, data, reason", [
    ("execute-snapshop", "{}", "unknown type"),
    ("execute-snapshot", "{", "not JSON"),
    ("execute-snapshot", "[]", "JSON object"),
    ("execute-snapshot", '{"data-collections": []}', "names no table"),
    ("execute-snapshot", '{"data-collections": ["t"]}', "'db.table'"),
    ("execute-snapshot", '{"data-collections": ["db.t"], "type": "blocking"}', "incremental snapshots only"),
    ("execute-snapshot", '{"data-collections": ["db.t"], "additional-conditions": [{"data-collection": "db.u", '
                         '"filter": "x"}]}', "additional condition"),
])
def test_refusals_name_the_signal_and_why(type_, data, reason):
    with pytest.raises(S.SignalRefused, match=reason) as refused:
        S.parse("s9", type_, data)
    assert "s9" in str(refused.value)


def test_stop_pause_resume_and_a_rest_body_without_id():
    assert S.parse("a", "stop-snapshot", None) == S.Signal("a", S.STOP)
    assert S.parse("b", "stop-snapshot", {"data-collections": ["db.t"]}).tables == ("db.t",)
    assert S.from_json(b'{"type": "pause-snapshot"}', default_id="rest-1") == S.Signal("rest-1", S.PAUSE)
    with pytest.raises(S.SignalRefused, match="with a type"):
        S.from_json(b'{"data": {}}')


def test_progress_round_trips_through_the_offsets():
    progress = Progress("s1", ("db.t", "db.u"), ({"base64": "AAE="}, 7), {"db.t": "id > 1"}, {"db.u": "n"},
                        paused=True, chunks=3, rows=3000, estimate=9000)
    assert Progress.from_dict(progress.to_dict()) == progress
    assert progress.next_table() == Progress("s1", ("db.u",), None, {"db.t": "id > 1"}, {"db.u": "n"}, paused=True)
    assert Progress("s1", ("db.u",)).next_table() is None
