"""The event log's counters and JSON lines, and the checker against hand-made broken logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.sim.event_check import CheckReport, check_event_records, check_events, format_report
from fedsim.sim.events import FLUSH_EVERY_LINES, EventLog


class Clock:
    """A settable stand-in for ``lambda: env.now``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _hand_written_run(log: EventLog, clock: Clock) -> None:
    """Two clients; a broadcast, one update kept, one aborted, one dropped, one in flight."""
    log.emit("run_start", clients=[0, 1])
    down = log.transfer_start("downlink", 1000, None, [0, 1], round_index=0)
    clock.now = 1.0
    log.transfer_end(down, [0, 1])
    log.emit("train_start", client=0, round=0, steps=5)
    log.emit("train_start", client=1, round=0, steps=5)
    clock.now = 2.0
    log.emit("train_end", client=0)
    up0 = log.transfer_start("uplink", 400, 0, [], round_index=0)
    log.emit("offline", client=1)
    log.emit("train_abort", client=1, reason="offline")
    clock.now = 3.0
    log.transfer_end(up0, [])
    log.update_dropped(0, 400, "stale", round_index=0)
    log.emit("online", client=1)
    d2d = log.transfer_start("d2d", 300, 1, [0])
    clock.now = 3.5
    log.transfer_abort(d2d, 149.6, "cancelled")
    up1 = log.transfer_start("uplink", 500, 1, [])
    clock.now = 4.0
    log.emit("evaluate", round=0, accuracy=0.5)
    log.emit("run_end")
    assert (down, up0, d2d, up1) == (0, 1, 2, 3)


def test_counters_and_json_lines(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "events.jsonl"
    log = EventLog(clock, path)
    _hand_written_run(log, clock)
    log.close()

    assert (log.downlink_bytes, log.uplink_bytes, log.d2d_bytes) == (1000, 400, 0)
    assert log.sent_bytes == 1000 + 400 + 150
    assert log.wasted_bytes == 400 + 150  # dropped update + aborted d2d

    records = _lines(path)
    assert records[0] == {"t": 0.0, "kind": "run_start", "clients": [0, 1]}
    assert records[1] == {
        "t": 0.0,
        "kind": "send_start",
        "transfer": 0,
        "direction": "downlink",
        "bytes": 1000,
        "receivers": [0, 1],
        "round": 0,
    }  # sender None is left out
    assert {"t": 1.0, "kind": "send_end", "transfer": 0, "receivers": [0, 1], "bytes": 1000} in (
        records
    )
    assert {
        "t": 3.0,
        "kind": "update_dropped",
        "client": 0,
        "bytes": 400,
        "reason": "stale",
        "round": 0,
    } in records
    abort = {
        "t": 3.5,
        "kind": "send_abort",
        "transfer": 2,
        "bytes_sent": 150,
        "reason": "cancelled",
    }
    assert abort in records
    assert records[-1] == {"t": 4.0, "kind": "run_end"}
    assert " " not in path.read_text()  # compact separators


def test_log_passes_check_with_exact_byte_balance(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "events.jsonl"
    log = EventLog(clock, path)
    _hand_written_run(log, clock)
    log.close()

    report = check_events(path)
    assert report.ok, report.violations
    assert report.events == len(path.read_text().splitlines())
    assert report.sent_bytes == log.sent_bytes == 1550
    assert report.wasted_bytes == log.wasted_bytes == 550
    assert report.received_bytes == 1000  # the broadcast; the upload was received, then dropped
    assert report.in_flight_bytes == 500
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes
    assert "OK" in format_report(report)


def test_counters_only_without_path() -> None:
    log = EventLog(lambda: 0.0)
    transfer = log.transfer_start("uplink", 10, 3, [])
    log.transfer_end(transfer, [])
    log.emit("train_start", client=3, round=None, steps=1)
    log.close()
    assert (log.uplink_bytes, log.sent_bytes, log.wasted_bytes) == (10, 10, 0)


def test_broadcast_reaching_nobody_is_wasted_and_counted_once() -> None:
    log = EventLog(lambda: 0.0)
    log.transfer_end(log.transfer_start("downlink", 100, None, [1, 2, 3]), [1, 2])
    log.transfer_end(log.transfer_start("d2d", 70, 1, [2]), [])
    assert (log.downlink_bytes, log.d2d_bytes, log.wasted_bytes, log.sent_bytes) == (
        100,
        0,
        70,
        170,
    )


def test_emit_of_byte_kinds_moves_counters_too() -> None:
    log = EventLog(lambda: 0.0)
    log.emit(
        "send_start", transfer=0, direction="uplink", bytes=50, sender=1, receivers=[], round=None
    )
    log.emit("send_end", transfer=0, receivers=[])
    log.emit("update_dropped", client=1, bytes=50, reason="late")
    assert (log.uplink_bytes, log.wasted_bytes) == (50, 50)
    assert log.transfer_start("uplink", 1, 1, []) == 1


def test_numpy_values_are_written_as_plain_json(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(lambda: 0.0, path)
    log.emit("run_start", clients=np.arange(3))
    log.transfer_start("uplink", np.int64(7), np.int64(2), [])
    log.close()
    assert _lines(path)[0]["clients"] == [0, 1, 2]
    assert _lines(path)[1]["sender"] == 2


def test_lines_are_flushed_every_thousand(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(lambda: 0.0, path)
    for _ in range(FLUSH_EVERY_LINES):
        log.emit("evaluate", round=0, accuracy=0.1)
    assert len(path.read_text().splitlines()) == FLUSH_EVERY_LINES
    log.emit("run_end")
    log.close()
    log.close()
    assert len(path.read_text().splitlines()) == FLUSH_EVERY_LINES + 1


def test_log_refuses_impossible_transfers() -> None:
    log = EventLog(lambda: 0.0)
    with pytest.raises(ValueError, match="direction"):
        log.transfer_start("sideways", 1, 0, [])
    transfer = log.transfer_start("uplink", 100, 0, [])
    with pytest.raises(ValueError, match="cannot abort"):
        log.transfer_abort(transfer, 101, "offline")
    log.transfer_abort(transfer, 100.4, "offline")
    with pytest.raises(ValueError, match="not in flight"):
        log.transfer_end(transfer, [])
    with pytest.raises(ValueError, match="not in flight"):
        log.transfer_abort(transfer, 0, "offline")
    assert (log.sent_bytes, log.wasted_bytes) == (100, 100)


# The checker on hand-made record lists.


def _start(t: float, clients: list[int]) -> dict:
    return {"t": t, "kind": "run_start", "clients": clients}


def _send(t: float, transfer: int, direction: str, num_bytes: int, sender=None, receivers=()):
    record = {"t": t, "kind": "send_start", "transfer": transfer, "direction": direction}
    record.update(bytes=num_bytes, receivers=list(receivers))
    if sender is not None:
        record["sender"] = sender
    return record


def _end(t: float, transfer: int, receivers=()) -> dict:
    return {"t": t, "kind": "send_end", "transfer": transfer, "receivers": list(receivers)}


def _abort(t: float, transfer: int, bytes_sent: float) -> dict:
    return {"t": t, "kind": "send_abort", "transfer": transfer, "bytes_sent": bytes_sent}


def _client(t: float, kind: str, client: int, **fields) -> dict:
    return {"t": t, "kind": kind, "client": client, **fields}


RUN_END = {"t": 100.0, "kind": "run_end"}


def _only_violation(records: list[dict]) -> str:
    report = check_event_records(records)
    assert len(report.violations) == 1, report.violations
    return report.violations[0]


def test_clean_sequence_balances_bytes_with_a_transfer_in_flight() -> None:
    records = [
        _start(0.0, [0, 1]),
        _send(0.0, 0, "downlink", 1000, receivers=[0, 1]),
        _end(1.0, 0, [0, 1]),
        _client(1.0, "train_start", 0, round=0, steps=3),
        _client(1.0, "train_start", 1, round=0, steps=3),
        _client(2.0, "train_end", 0),
        _send(2.0, 1, "uplink", 300, sender=0),
        _client(2.5, "leave", 1),
        _client(2.5, "train_abort", 1, reason="left"),
        _end(3.0, 1),
        _client(3.0, "update_dropped", 0, bytes=300, reason="stale"),
        _client(3.0, "join", 2),
        _send(3.0, 2, "downlink", 800, receivers=[0, 2]),
        _client(3.2, "offline", 2),
        _end(4.0, 2, [0]),  # the broadcast reaches only who is still online
        _send(4.0, 3, "d2d", 200, sender=0, receivers=[2]),
        _client(4.2, "online", 2),
        _client(4.5, "offline", 0),
        _abort(4.5, 3, 60.0),
        _send(5.0, 4, "downlink", 500, receivers=[2]),
        {"t": 5.0, "kind": "evaluate", "round": 0, "accuracy": 0.4},
        {"t": 6.0, "kind": "run_end"},
    ]
    report = check_event_records(records)
    assert report == CheckReport(
        events=len(records),
        violations=[],
        sent_bytes=1000 + 300 + 800 + 60,
        received_bytes=1000 + 800,
        wasted_bytes=300 + 60,
        in_flight_bytes=500,
    )
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes


def test_time_going_backwards() -> None:
    message = _only_violation([_start(5.0, [0]), {"t": 4.0, "kind": "round_start"}, RUN_END])
    assert message.startswith("line 2 (round_start): time goes backwards")


def test_training_while_offline() -> None:
    records = [
        _start(0.0, [0]),
        _client(1.0, "offline", 0),
        _client(2.0, "train_start", 0, round=0, steps=1),
        RUN_END,
    ]
    assert (
        _only_violation(records) == "line 3 (train_start): client 0 starts training while offline"
    )


def test_sending_while_absent() -> None:
    records = [_start(0.0, [0]), _client(1.0, "leave", 0), _send(2.0, 0, "uplink", 10, 0), RUN_END]
    message = _only_violation(records)
    assert message == "line 3 (send_start): client 0 sends transfer 0 while absent"


def test_end_without_start() -> None:
    message = _only_violation([_start(0.0, [0]), _end(1.0, 7), RUN_END])
    assert message == "line 2 (send_end): transfer 7 was never started"


def test_double_end() -> None:
    records = [
        _start(0.0, []),
        _send(0.0, 0, "downlink", 5, None, [1]),
        _end(1, 0),
        _abort(1, 0, 2),
    ]
    message = _only_violation([*records, RUN_END])
    assert message == "line 4 (send_abort): transfer 0 already ended at line 3"


def test_abort_with_too_many_bytes() -> None:
    records = [_start(0.0, [0]), _send(0.0, 0, "uplink", 100, 0), _abort(1.0, 0, 100.5), RUN_END]
    message = _only_violation(records)
    assert message.startswith("line 3 (send_abort): transfer 0 aborts after 100.5 bytes")


def test_train_end_after_going_offline() -> None:
    records = [
        _start(0.0, [0]),
        _client(0.0, "train_start", 0, round=0, steps=1),
        _client(1.0, "offline", 0),
        _client(2.0, "online", 0),
        _client(3.0, "train_end", 0),
        RUN_END,
    ]
    message = _only_violation(records)
    assert message.startswith("line 5 (train_end): client 0 ends training although it went")
    assert "offline at line 3" in message


def test_send_end_after_sender_went_offline() -> None:
    records = [
        _start(0.0, [0]),
        _send(0.0, 0, "uplink", 100, 0),
        _client(1.0, "offline", 0),
        _end(2.0, 0),
        RUN_END,
    ]
    assert "went offline at line 3 (no send_abort)" in _only_violation(records)


def test_dropping_more_than_received() -> None:
    records = [
        _start(0.0, [0, 1]),
        _send(0.0, 0, "uplink", 100, 0),
        _end(1.0, 0),
        _client(1.0, "update_dropped", 0, bytes=100, reason="stale"),
        _client(1.0, "update_dropped", 1, bytes=1, reason="stale"),  # client 1 sent nothing
        RUN_END,
    ]
    message = _only_violation(records)
    assert message.startswith("line 5 (update_dropped): 1 bytes of client 1's updates dropped")


def test_receiving_while_offline_or_unaddressed() -> None:
    records = [
        _start(0.0, [0, 1, 2]),
        _send(0.0, 0, "downlink", 100, None, [0, 1]),
        _client(0.5, "offline", 1),
        _end(1.0, 0, [0, 1, 2]),
        RUN_END,
    ]
    violations = check_event_records(records).violations
    assert violations == [
        "line 4 (send_end): transfer 0 reaches clients [2] it was not sent to",
        "line 4 (send_end): transfer 0 reaches clients [1] while they are offline",
    ]


def test_direction_shape_and_unknown_kind() -> None:
    records = [_start(0.0, [0]), _send(0.0, 0, "uplink", 1, None, [0]), {"t": 0, "kind": "nap"}]
    violations = check_event_records([*records, RUN_END]).violations
    assert violations == [
        "line 2 (send_start): transfer 0: uplink must go from a client to the base station",
        "line 3 (nap): unknown event kind",
    ]


def test_missing_run_end_and_events_after_it() -> None:
    records = [_start(0.0, [0]), _send(0.0, 0, "uplink", 9, 0)]
    report = check_event_records(records)
    assert report.violations == ["end of log: no run_end (1 transfers still open)"]
    assert report.in_flight_bytes == 9
    late = check_event_records([*records, RUN_END, _end(101.0, 0)])
    assert late.violations == ["line 4 (send_end): event after run_end (line 3)"]


def test_malformed_records_are_violations() -> None:
    records = [
        _start(0.0, [0]),
        ["not", "an", "object"],
        {"kind": "run_end"},
        {"t": 1.0, "kind": "train_start", "client": "zero"},
        {"t": 1.0, "kind": "send_abort", "transfer": 0, "bytes_sent": -1},
        RUN_END,
    ]
    violations = check_event_records(records).violations  # type: ignore[arg-type]
    assert [v.split(":")[0] for v in violations] == [
        "line 2",
        "line 3",
        "line 4 (train_start)",
        "line 5 (send_abort)",
    ]
    assert all("malformed" in v for v in violations)


def test_malformed_line_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [json.dumps(_start(0.0, [0])), '{"t": 1.0, "kind": "onl', json.dumps(RUN_END)]
    path.write_text("\n".join(lines) + "\n")
    report = check_events(path)
    assert report.events == 3
    assert len(report.violations) == 1
    assert report.violations[0].startswith("line 2: malformed: not JSON")
    text = format_report(report)
    assert "3 events" in text and "1 violations:" in text and "line 2" in text


# Any log the simulator can write through EventLog passes, and its counters match the checker.


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.floats(0, 1)), max_size=60))
def test_any_consistent_run_passes_and_matches_counters(tmp_path_factory, steps) -> None:
    path = tmp_path_factory.mktemp("log") / "events.jsonl"
    clock = Clock()
    log = EventLog(clock, path)
    clients = range(4)
    online = set(clients)
    open_transfers: dict[int, tuple[int | None, list[int], int]] = {}
    received_from = dict.fromkeys(clients, 0)
    log.emit("run_start", clients=list(clients))
    for action, client, fraction in steps:
        clock.now += fraction
        if action == 0 and client in online:  # goes offline: its uploads abort
            online.discard(client)
            log.emit("offline", client=client)
            for transfer, (sender, _, size) in list(open_transfers.items()):
                if sender == client:
                    log.transfer_abort(transfer, fraction * size, "offline")
                    del open_transfers[transfer]
        elif action == 0:
            online.add(client)
            log.emit("online", client=client)
        elif action == 1 and client in online:
            size = 1 + int(fraction * 1000)
            transfer = log.transfer_start("uplink", size, client, [])
            open_transfers[transfer] = (client, [], size)
        elif action == 2:
            group = [c for c in clients if c != client]
            size = 1 + int(fraction * 1000)
            direction = "d2d" if client in online else "downlink"
            sender = client if client in online else None
            transfer = log.transfer_start(direction, size, sender, group)
            open_transfers[transfer] = (sender, group, size)
        elif action in (3, 4) and open_transfers:
            transfer = sorted(open_transfers)[client % len(open_transfers)]
            sender, group, size = open_transfers.pop(transfer)
            if action == 3:
                log.transfer_end(transfer, [c for c in group if c in online])
                if not group:
                    received_from[sender] += size
            else:
                log.transfer_abort(transfer, fraction * size, "cancelled")
        elif action == 5 and received_from[client]:
            dropped = 1 + int(fraction * (received_from[client] - 1))
            received_from[client] -= dropped
            log.update_dropped(client, dropped, "stale")
    log.emit("run_end")
    log.close()

    report = check_events(path)
    assert report.ok, report.violations
    assert report.sent_bytes == log.sent_bytes
    assert report.wasted_bytes == log.wasted_bytes
    assert report.sent_bytes == report.received_bytes + report.wasted_bytes
    assert report.in_flight_bytes == sum(size for _, _, size in open_transfers.values())
