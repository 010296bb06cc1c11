"""The event log of a run (``fedsim.sim.event_check`` checks a log's invariants).

A log is one JSON object per line, ``{"t": simulated seconds, "kind": ..., **fields}``; fields
that are None are left out. Clients are integers; the base station is no client: a transfer it
sends has no ``sender``, one addressed to it has empty ``receivers``.

==============  ===========================================================================
kind            fields
==============  ===========================================================================
run_start       clients (present, and online, from the start)
run_end
join            client (present, and online, from now)
leave           client (gone for good)
online          client
offline         client
round_start     round
round_end       round
train_start     client, round, steps
train_end       client
train_abort     client, reason
send_start      transfer, direction (uplink | downlink | d2d | backhaul_up | backhaul_down),
                bytes, sender, receivers, round, site (a backhaul transfer's site: it goes
                between the site and the cloud, so it has neither sender nor receivers),
                relayed_for (a leg of a satellite's message relayed by its plane-mates: that
                satellite, the update's owner on the uplink, the addressee on the downlink)
send_end        transfer, receivers (those who got it: a broadcast may reach only part of its
                group), bytes, retransmitted (bytes of transport blocks sent again, if any)
send_abort      transfer, bytes_sent, reason, retransmitted
update_dropped  client, bytes, reason, round (an update received, then discarded by the server)
evaluate        round, accuracy
air_slot        transmitters, truncated (participants that do not transmit), duration_s,
                round (an over-the-air aggregation slot begins: analog, no bytes)
==============  ===========================================================================

Bytes are counted when a transfer ends, at the simulated moment they have crossed the air: a
completed transfer counts in full, an aborted one by what it had sent. Bytes that did not serve
the learning are *wasted*: aborted transfers, transfers whose every receiver went offline,
transport blocks that failed and were sent again (``retransmitted``, on the air besides a
transfer's bytes), and updates the server dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

DIRECTIONS = ("uplink", "downlink", "d2d", "backhaul_up", "backhaul_down")
FLUSH_EVERY_LINES = 1000


@dataclass(frozen=True)
class _OpenTransfer:
    direction: str
    num_bytes: int
    to_base_station: bool


class EventLog:
    """Byte counters for the recorder, and optionally every event as one JSON line.

    The byte-carrying kinds (``send_start``, ``send_end``, ``send_abort``, ``update_dropped``)
    move the counters whether they come through their methods or through ``emit``, so the
    counters always agree with the log. A call that would break an invariant the log cannot
    repair (an unknown transfer, more bytes aborted than the transfer holds) raises ValueError
    at once, where the simulator's bug is.
    """

    def __init__(self, clock: Callable[[], float], path: Path | None = None) -> None:
        self._clock = clock
        self._file: TextIO | None = None
        if path is not None:  # open for the whole run, until close()
            self._file = path.open("w", encoding="utf-8")
        self._unflushed_lines = 0
        self.emitted = 0  # events so far: a reader that saw this count knows nothing happened
        self._next_transfer = 0
        self._open: dict[int, _OpenTransfer] = {}
        self.uplink_bytes = 0
        self.downlink_bytes = 0
        self.d2d_bytes = 0
        self.backhaul_up_bytes = 0  # sites to the cloud (``fedsim.sim.backhaul``)
        self.backhaul_down_bytes = 0
        self.wasted_bytes = 0
        self.retransmitted_bytes = 0  # failed transport blocks sent again (part of wasted)
        self.sent_bytes = 0
        self.transmissions = dict.fromkeys(DIRECTIONS, 0)  # transfers started, per direction
        self._counters: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "send_start": self._count_start,
            "send_end": self._count_end,
            "send_abort": self._count_abort,
            "update_dropped": self._count_dropped,
        }

    def emit(self, kind: str, **fields: object) -> None:
        """Log one event at the clock's time (see the module docstring for kinds and fields)."""
        self.emitted += 1
        count = self._counters.get(kind)
        if count is not None:
            count(fields)
        if self._file is None:
            return
        record = {"t": self._clock(), "kind": kind}
        record.update((name, value) for name, value in fields.items() if value is not None)
        self._file.write(json.dumps(record, separators=(",", ":"), default=_plain) + "\n")
        self._unflushed_lines += 1
        if self._unflushed_lines >= FLUSH_EVERY_LINES:
            self._file.flush()
            self._unflushed_lines = 0

    def transfer_start(
        self,
        direction: str,
        num_bytes: int,
        sender: int | None,
        receivers: Sequence[int],
        round_index: int | None = None,
        *,
        site: int | None = None,
        relayed_for: int | None = None,
    ) -> int:
        """Log the first bit going out; returns the transfer's id (0, 1, 2, ...). ``site``:
        a backhaul transfer's base-station site; ``relayed_for``: the satellite whose message
        a relay leg carries."""
        transfer = self._next_transfer
        self.emit(
            "send_start",
            transfer=transfer,
            direction=direction,
            bytes=num_bytes,
            sender=sender,
            receivers=list(receivers),
            round=round_index,
            site=site,
            relayed_for=relayed_for,
        )
        return transfer

    def transfer_end(
        self, transfer: int, receivers: Sequence[int], *, retransmitted: int = 0
    ) -> None:
        """Log the last bit arriving at ``receivers`` (those still online). Empty receivers waste
        a transfer sent to clients, never one sent to the base station, which is always there.
        ``retransmitted``: bytes of transport blocks it sent again (on the air, wasted)."""
        num_bytes = self._get_open(transfer).num_bytes
        self.emit(
            "send_end", transfer=transfer, receivers=list(receivers), bytes=num_bytes,
            retransmitted=retransmitted or None,
        )  # fmt: skip

    def transfer_abort(
        self, transfer: int, bytes_sent: float, reason: str, *, retransmitted: int = 0
    ) -> None:
        """Log the sender stopping after ``bytes_sent`` (rounded to whole bytes) and
        ``retransmitted`` bytes of failed blocks sent again, all wasted."""
        self.emit(
            "send_abort", transfer=transfer, bytes_sent=round(bytes_sent), reason=reason,
            retransmitted=retransmitted or None,
        )  # fmt: skip

    def update_dropped(
        self, client: int, num_bytes: int, reason: str, round_index: int | None = None
    ) -> None:
        """Log the server discarding an update it received (too late, too stale)."""
        self.emit(
            "update_dropped", client=client, bytes=num_bytes, reason=reason, round=round_index
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def _get_open(self, transfer: int) -> _OpenTransfer:
        if transfer not in self._open:
            raise ValueError(f"transfer {transfer!r} is not in flight")
        return self._open[transfer]

    def _count_start(self, fields: Mapping[str, Any]) -> None:
        transfer, direction, num_bytes = fields["transfer"], fields["direction"], fields["bytes"]
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if not isinstance(transfer, int) or transfer < self._next_transfer:
            raise ValueError(f"transfer id {transfer!r} is taken, use {self._next_transfer}")
        if num_bytes < 0:
            raise ValueError(f"a transfer cannot carry {num_bytes} bytes")
        to_base_station = not fields.get("receivers")
        self._open[transfer] = _OpenTransfer(direction, int(num_bytes), to_base_station)
        self.transmissions[direction] += 1
        self._next_transfer = transfer + 1

    def _count_end(self, fields: Mapping[str, Any]) -> None:
        transfer = self._get_open(fields["transfer"])
        del self._open[fields["transfer"]]
        self.sent_bytes += transfer.num_bytes
        if fields.get("receivers") or transfer.to_base_station:  # the base station never leaves
            self._add_delivered(transfer.direction, transfer.num_bytes)
        else:
            self.wasted_bytes += transfer.num_bytes
        self._count_retransmitted(fields)

    def _count_abort(self, fields: Mapping[str, Any]) -> None:
        transfer = self._get_open(fields["transfer"])
        bytes_sent = round(fields["bytes_sent"])
        if not 0 <= bytes_sent <= transfer.num_bytes:
            raise ValueError(
                f"transfer {fields['transfer']} of {transfer.num_bytes} bytes cannot abort "
                f"after {bytes_sent} bytes"
            )
        del self._open[fields["transfer"]]
        self.sent_bytes += bytes_sent
        self.wasted_bytes += bytes_sent
        self._count_retransmitted(fields)

    def _count_retransmitted(self, fields: Mapping[str, Any]) -> None:
        resent = int(fields.get("retransmitted") or 0)
        self.retransmitted_bytes += resent
        self.sent_bytes += resent
        self.wasted_bytes += resent

    def _count_dropped(self, fields: Mapping[str, Any]) -> None:
        self.wasted_bytes += int(fields["bytes"])

    def _add_delivered(self, direction: str, num_bytes: int) -> None:
        if direction == "uplink":
            self.uplink_bytes += num_bytes
        elif direction == "downlink":
            self.downlink_bytes += num_bytes
        elif direction == "d2d":
            self.d2d_bytes += num_bytes
        elif direction == "backhaul_up":
            self.backhaul_up_bytes += num_bytes
        else:
            self.backhaul_down_bytes += num_bytes


def _plain(value: object) -> object:
    """JSON form of numpy scalars and arrays (client ids often come out of a numpy rng)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
