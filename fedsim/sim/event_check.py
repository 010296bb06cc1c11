"""The invariants every event log must satisfy (``fedsim check-events``), checked line by line:
who may send what to whom, that nobody offline trains or transmits, that every transfer that
starts ends or is aborted once, and that the byte counters add up. The log's format is in
``fedsim.sim.events``."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from fedsim.sim.events import DIRECTIONS

# Who may send and receive each direction: (sender is a client, receivers are clients).
_SHAPES = {
    "uplink": (True, False),
    "downlink": (False, True),
    "d2d": (True, True),
    "backhaul_up": (False, False),
    "backhaul_down": (False, False),
}
_SHAPE_WORDS = {
    "uplink": "from a client to the base station",
    "downlink": "from the base station to clients",
    "d2d": "from a client to clients",
    "backhaul_up": "from a site to the cloud (no client sends or receives it)",
    "backhaul_down": "from the cloud to a site (no client sends or receives it)",
}


@dataclass(frozen=True)
class CheckReport:
    """What ``check_events`` found.

    ``sent_bytes = received_bytes + wasted_bytes`` always: ``received_bytes`` are the bytes that
    reached someone and were kept (a dropped update moves from received to wasted), and the
    ``in_flight_bytes`` (full size of the transfers still open at the end) are in neither.
    """

    events: int
    violations: list[str]
    sent_bytes: int
    received_bytes: int
    wasted_bytes: int
    in_flight_bytes: int

    @property
    def ok(self) -> bool:
        return not self.violations


class _Malformed(Exception):
    """A record lacks a field the checker needs, or has one of the wrong type."""


@dataclass
class _Transfer:
    line: int
    direction: str
    num_bytes: int
    sender: int | None
    receivers: frozenset[int]
    sender_offline_line: int | None = None
    owner: int | None = None  # whose update an uplink carries: a relay's satellite, or the sender


class _Checker:
    """Replays a log, keeping who is present, online, training and sending."""

    def __init__(self) -> None:
        self.events = 0
        self.violations: list[str] = []
        self._line = 0
        self._kind = ""
        self._last_t = -math.inf
        self._end_line: int | None = None
        self._present: set[int] = set()
        self._online: set[int] = set()
        self._training: dict[int, int | None] = {}  # client -> line where it went offline
        self._open: dict[int, _Transfer] = {}
        self._closed: dict[int, int] = {}  # transfer -> line of its end
        self._uplink_from: defaultdict[int, int] = defaultdict(int)
        self._dropped_from: defaultdict[int, int] = defaultdict(int)
        self._sent = self._delivered = self._wasted = self._dropped = 0
        self._handlers: dict[str, Callable[[dict], None]] = {
            "run_start": self._on_run_start,
            "run_end": self._on_run_end,
            "join": self._on_join,
            "leave": self._on_leave,
            "online": self._on_online,
            "offline": self._on_offline,
            "round_start": _ignore,
            "round_end": _ignore,
            "train_start": self._on_train_start,
            "train_end": self._on_train_end,
            "train_abort": self._on_train_abort,
            "send_start": self._on_send_start,
            "send_end": self._on_send_end,
            "send_abort": self._on_send_abort,
            "update_dropped": self._on_update_dropped,
            "evaluate": _ignore,
            "air_slot": self._on_air_slot,
        }

    def malformed(self, line: int, reason: str) -> None:
        self.events += 1
        self.violations.append(f"line {line}: malformed: {reason}")

    def feed(self, line: int, record: object) -> None:
        if not isinstance(record, dict):
            self.malformed(line, f"not a JSON object: {record!r:.80}")
            return
        t, kind = record.get("t"), record.get("kind")
        if not isinstance(kind, str) or not _is_number(t):
            self.malformed(line, f"needs a string 'kind' and a finite number 't': {record!r:.80}")
            return
        self.events += 1
        self._line, self._kind = line, kind
        if t < self._last_t:
            self._flag(f"time goes backwards: t={t} after t={self._last_t}")
        self._last_t = max(self._last_t, t)
        if self._end_line is not None:
            self._flag(f"event after run_end (line {self._end_line})")
        handler = self._handlers.get(kind)
        if handler is None:
            self._flag("unknown event kind")
            return
        try:
            handler(record)
        except _Malformed as error:
            self._flag(f"malformed: {error}")

    def finish(self) -> CheckReport:
        if self._end_line is None:
            self.violations.append(
                f"end of log: no run_end ({len(self._open)} transfers still open)"
            )
        return CheckReport(
            events=self.events,
            violations=self.violations,
            sent_bytes=self._sent,
            received_bytes=self._delivered - self._dropped,
            wasted_bytes=self._wasted,
            in_flight_bytes=sum(transfer.num_bytes for transfer in self._open.values()),
        )

    def _flag(self, message: str) -> None:
        self.violations.append(f"line {self._line} ({self._kind}): {message}")

    def _require_online(self, client: int, doing: str) -> None:
        if client not in self._present:
            self._flag(f"client {client} {doing} while absent")
        elif client not in self._online:
            self._flag(f"client {client} {doing} while offline")

    def _go_offline(self, client: int) -> None:
        """Whatever the client was computing or sending must now be aborted, not finished."""
        self._online.discard(client)
        if client in self._training and self._training[client] is None:
            self._training[client] = self._line
        for transfer in self._open.values():
            if transfer.sender == client and transfer.sender_offline_line is None:
                transfer.sender_offline_line = self._line

    def _on_run_start(self, record: dict) -> None:
        clients = _ints(record, "clients")
        self._present.update(clients)
        self._online.update(clients)

    def _on_run_end(self, record: dict) -> None:
        self._end_line = self._line

    def _on_join(self, record: dict) -> None:
        client = _int(record, "client")
        if client in self._present:
            self._flag(f"client {client} joins while present")
        self._present.add(client)
        self._online.add(client)

    def _on_leave(self, record: dict) -> None:
        client = _int(record, "client")
        if client not in self._present:
            self._flag(f"client {client} leaves while absent")
        self._go_offline(client)
        self._present.discard(client)

    def _on_online(self, record: dict) -> None:
        client = _int(record, "client")
        if client not in self._present:
            self._flag(f"client {client} comes online while absent")
        elif client in self._online:
            self._flag(f"client {client} comes online while online")
        else:
            self._online.add(client)

    def _on_offline(self, record: dict) -> None:
        client = _int(record, "client")
        if client not in self._online:
            where = "offline" if client in self._present else "absent"
            self._flag(f"client {client} goes offline while {where}")
        self._go_offline(client)

    def _on_air_slot(self, record: dict) -> None:
        for client in _ints(record, "transmitters"):
            self._require_online(client, "transmits in an over-the-air slot")

    def _on_train_start(self, record: dict) -> None:
        client = _int(record, "client")
        self._require_online(client, "starts training")
        if client in self._training:
            self._flag(f"client {client} starts training while already training")
        self._training[client] = None

    def _on_train_end(self, record: dict) -> None:
        client = _int(record, "client")
        if client not in self._training:
            self._flag(f"client {client} ends training it never started")
            return
        offline_line = self._training.pop(client)
        if offline_line is not None:
            self._flag(
                f"client {client} ends training although it went offline at line "
                f"{offline_line} (no train_abort)"
            )

    def _on_train_abort(self, record: dict) -> None:
        client = _int(record, "client")
        if client not in self._training:
            self._flag(f"client {client} aborts training it never started")
        self._training.pop(client, None)

    def _on_send_start(self, record: dict) -> None:
        transfer = _int(record, "transfer")
        direction = record.get("direction")
        if direction not in DIRECTIONS:
            raise _Malformed(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        num_bytes = _count(record, "bytes")
        sender = None if record.get("sender") is None else _int(record, "sender")
        receivers = _ints(record, "receivers") if "receivers" in record else []
        if transfer in self._open or transfer in self._closed:
            self._flag(f"transfer {transfer} starts twice")
            return
        if (sender is not None, bool(receivers)) != _SHAPES[direction]:
            self._flag(f"transfer {transfer}: {direction} must go {_SHAPE_WORDS[direction]}")
        if sender is not None:
            self._require_online(sender, f"sends transfer {transfer}")
        owner = _int(record, "relayed_for") if "relayed_for" in record else sender
        self._open[transfer] = _Transfer(
            self._line, direction, num_bytes, sender, frozenset(receivers), owner=owner
        )

    def _take(self, transfer: int) -> _Transfer | None:
        """The open transfer that now ends, or None (flagged) if it is not open."""
        if transfer in self._open:
            self._closed[transfer] = self._line
            return self._open.pop(transfer)
        if transfer in self._closed:
            self._flag(f"transfer {transfer} already ended at line {self._closed[transfer]}")
        else:
            self._flag(f"transfer {transfer} was never started")
        return None

    def _on_send_end(self, record: dict) -> None:
        transfer_id = _int(record, "transfer")
        receivers = _ints(record, "receivers") if "receivers" in record else []
        num_bytes = None if record.get("bytes") is None else _count(record, "bytes")
        transfer = self._take(transfer_id)
        if transfer is None:
            return
        if num_bytes is not None and num_bytes != transfer.num_bytes:
            self._flag(
                f"transfer {transfer_id} ends with {num_bytes} bytes but started (line "
                f"{transfer.line}) with {transfer.num_bytes}"
            )
        if transfer.sender_offline_line is not None:
            self._flag(
                f"transfer {transfer_id} ends although its sender, client {transfer.sender}, "
                f"went offline at line {transfer.sender_offline_line} (no send_abort)"
            )
        unaddressed = sorted(set(receivers) - transfer.receivers)
        if unaddressed:
            self._flag(f"transfer {transfer_id} reaches clients {unaddressed} it was not sent to")
        offline = sorted(set(receivers) - self._online)
        if offline:
            self._flag(f"transfer {transfer_id} reaches clients {offline} while they are offline")

        self._count_retransmitted(record)
        self._sent += transfer.num_bytes
        if receivers or not transfer.receivers:  # the base station never leaves
            self._delivered += transfer.num_bytes
            if transfer.direction == "uplink" and transfer.owner is not None:
                self._uplink_from[transfer.owner] += transfer.num_bytes
        else:
            self._wasted += transfer.num_bytes

    def _on_send_abort(self, record: dict) -> None:
        transfer_id = _int(record, "transfer")
        bytes_sent = record.get("bytes_sent")
        if not _is_number(bytes_sent) or bytes_sent < 0:
            raise _Malformed(f"bytes_sent must be a number >= 0, got {bytes_sent!r}")
        transfer = self._take(transfer_id)
        if transfer is None:
            return
        if bytes_sent > transfer.num_bytes:
            self._flag(
                f"transfer {transfer_id} aborts after {bytes_sent} bytes but holds only "
                f"{transfer.num_bytes}"
            )
        self._sent += round(bytes_sent)
        self._wasted += round(bytes_sent)
        self._count_retransmitted(record)

    def _count_retransmitted(self, record: dict) -> None:
        """Failed transport blocks sent again: on the air besides the transfer, wasted."""
        if record.get("retransmitted") is not None:
            resent = _count(record, "retransmitted")
            self._sent += resent
            self._wasted += resent

    def _on_update_dropped(self, record: dict) -> None:
        client = _int(record, "client")
        num_bytes = _count(record, "bytes")
        self._dropped_from[client] += num_bytes
        if self._dropped_from[client] > self._uplink_from[client]:
            self._flag(
                f"{self._dropped_from[client]} bytes of client {client}'s updates dropped so "
                f"far, but only {self._uplink_from[client]} uplink bytes received from it"
            )
        self._dropped += num_bytes
        self._wasted += num_bytes


def _ignore(record: dict) -> None:
    """Kinds that carry no state the invariants depend on."""


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _int(record: dict, name: str) -> int:
    value = record.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Malformed(f"{name} must be an integer, got {value!r}")
    return value


def _count(record: dict, name: str) -> int:
    value = _int(record, name)
    if value < 0:
        raise _Malformed(f"{name} must be >= 0, got {value}")
    return value


def _ints(record: dict, name: str) -> list[int]:
    values = record.get(name)
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise _Malformed(f"{name} must be a list of integers, got {values!r}")
    return values


def check_event_records(records: Iterable[dict]) -> CheckReport:
    """Check parsed records (numbered from 1, as lines) against the log's invariants:

    1. time never goes backwards;
    2. only an online client trains or sends (present from ``join`` or ``run_start`` until
       ``leave``, online unless between ``offline`` and ``online``), and what it was training or
       sending when it went offline is aborted, never finished;
    3. every transfer starts once and then ends or aborts once (those open at ``run_end`` are in
       flight, not a violation), aborting after no more bytes than it holds and reaching only
       online clients it was sent to;
    4. bytes balance: sent = received + wasted, which needs every dropped update to have been
       received first (per client, dropped bytes so far <= uplink bytes received so far).
    """
    checker = _Checker()
    for line, record in enumerate(records, start=1):
        checker.feed(line, record)
    return checker.finish()


def not_an_events_file(path: Path) -> str | None:
    """Why the file is not an event log at all (then it has no violations to report, it is the
    wrong file); None if it is one. The rule: its first non-empty line is a JSON object with
    ``"t"`` and ``"kind"``, as every line the event log writes."""
    with Path(path).open(encoding="utf-8", errors="replace") as lines:
        first = next((text.strip() for text in lines if text.strip()), None)
    if first is None:
        return "not an events file: it is empty"
    try:
        record = json.loads(first)
    except json.JSONDecodeError:
        record = None
    if not isinstance(record, dict) or not {"t", "kind"} <= record.keys():
        return (
            'not an events file: its first line is not a JSON event {"t": ..., "kind": ...}: '
            f"{first!r:.60}"
        )
    return None


def check_events(path: Path) -> CheckReport:
    """Check an event log file; a malformed line is a violation, not an exception."""
    checker = _Checker()
    with Path(path).open(encoding="utf-8", errors="replace") as lines:
        for line, text in enumerate(lines, start=1):
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                checker.malformed(line, f"not JSON ({error.msg}): {text.strip()!r:.80}")
                continue
            checker.feed(line, record)
    return checker.finish()


def format_report(report: CheckReport) -> str:
    lines = [
        f"{report.events} events",
        f"bytes: sent {report.sent_bytes:,}, received {report.received_bytes:,}, "
        f"wasted {report.wasted_bytes:,}, in flight {report.in_flight_bytes:,}",
    ]
    if report.ok:
        lines.append("OK")
    else:
        lines.append(f"{len(report.violations)} violations:")
        lines.extend(f"  {violation}" for violation in report.violations)
    return "\n".join(lines)
