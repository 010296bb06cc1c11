"""The over-the-air uplink of a World (``system.radio.uplink_aggregation: aircomp | obda``):
the aggregation slot of the synchronous averaging servers, on the radio's channel and clock.

When a round's updates are due (the server's policy closed it: all in, the first k, or the
deadline), the server opens one slot. Each participant still online measures its channel
(path loss, shadowing and the fading block at the slot's start) and transmits when truncated
channel inversion allows it (``fedsim.sim.aircomp``); all transmit at once on the whole
uplink band for d / (2B) seconds, whatever their number, drawing their transmit power (plus
the circuit power) for that time. What the server gets is ``fedsim.learn.overtheair``'s
estimate: the noisy weighted average of the transmitters' updates (BAA), or the noisy
majority vote of their signs, times the server's step (OBDA). Before the slot, a BAA client
sends the mean and spread of each tensor of its update digitally (counted uplink bytes, on
the ordinary uplink); an OBDA client sends nothing digitally. The slot's grant (the scale C,
who is asked) is control signalling, as the grants of digital uploads are: not counted.

The base station knows who transmitted (a participation flag in the slot's preamble) and so
divides by the transmitters' weights, as BAA's analysis assumes. A transmitter that goes
offline during the slot is cut: its signal is not in the sum and its joules are wasted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass

import simpy
import torch

from fedsim.config import AirCompConfig
from fedsim.learn.overtheair import AirEstimate, AnalogSum, Update, one_bit_vote
from fedsim.sim.aircomp import AirSlot, slot_s
from fedsim.sim.events import EventLog
from fedsim.sim.radio import UPLINK, Radio, db_to_linear
from fedsim.world.energy import DeviceEnergy


@dataclass
class SlotRecord:
    """One slot, for rounds.csv (``AIR_COLUMNS``)."""

    air_transmitters: int
    air_truncated: int
    air_slot_s: float
    air_snr_db: float = math.nan
    air_mse: float = math.nan


class OverTheAir:
    """The aggregation slots of one run."""

    def __init__(
        self,
        mode: str,
        config: AirCompConfig,
        env: simpy.Environment,
        radio: Radio,
        log: EventLog,
        energy: DeviceEnergy | None,
        is_online: Callable[[int], bool],
        seed: int,
    ) -> None:
        if mode not in ("aircomp", "obda"):
            raise ValueError(f"over-the-air aggregation is aircomp or obda, not {mode!r}")
        self.mode = mode
        self.server_lr = config.server_lr
        self._receive_snr = float(db_to_linear(config.receive_snr_db))
        self._env = env
        self._radio = radio
        self._log = log
        self._energy = energy
        self._is_online = is_online
        self._generator = torch.Generator().manual_seed(seed)
        self.last: SlotRecord | None = None  # the latest slot (rounds.csv)

    def side_numbers(self, tensors: tuple[torch.Tensor, ...]) -> int:
        """Numbers a client sends digitally before the slot: BAA's mean and spread per tensor;
        none for OBDA's signs."""
        return 2 * len(tensors) if self.mode == "aircomp" else 0

    def aggregate(
        self, updates: Mapping[int, Update], weights: Mapping[int, float], round_index: int | None
    ) -> Generator[simpy.Event, object, tuple[Update | None, list[int], float]]:
        """Process body: one slot for these participants' updates (weighted by ``weights``
        under BAA); returns the server's estimate of the average update (OBDA: the step along
        the vote; None when nobody transmitted), the transmitters and the slot's seconds."""
        radio = self._radio
        band_hz = radio.settings.uplink_bandwidth_hz
        candidates = sorted(c for c in updates if self._is_online(c))
        slot = AirSlot.at_snr(
            candidates,
            [radio.uplink_gain(c) for c in candidates],
            [float(radio.tx_power_w[c]) for c in candidates],
            self._receive_snr,
            radio.noise_w(UPLINK, band_hz),  # the base station receives the slot
        )
        first = next(iter(updates.values()))
        duration_s = slot_s(sum(t.numel() for t in first), band_hz)
        timing_only = any(t.is_meta for t in first)
        analog = None if self.mode != "aircomp" or timing_only else AnalogSum(updates, weights)
        draws = {}
        for index, client in enumerate(slot.clients):
            if not slot.transmits(index) or self._energy is None:
                continue
            # OBDA's BPSK (and a timing-only run) at unit power
            symbols = 1.0 if analog is None else analog.symbol_power(client)
            draws[client] = self._energy.analog_started(client, slot.power_w(index, symbols))
        sending = slot.transmitters
        truncated = sorted(set(updates) - set(sending))
        self._log.emit(
            "air_slot", transmitters=sending, truncated=truncated,
            duration_s=duration_s, round=round_index,
        )  # fmt: skip
        yield self._env.timeout(duration_s)
        transmitters = [c for c in sending if self._is_online(c)]  # none cut off
        for client, draw in draws.items():
            self._energy.analog_ended(draw, wasted=client not in transmitters)
        self.last = SlotRecord(len(transmitters), len(updates) - len(transmitters), duration_s)
        if timing_only:
            estimate = None if not transmitters else tuple(torch.empty_like(t) for t in first)
            return estimate, transmitters, duration_s
        result = self._estimate(analog, updates, transmitters, slot.sum_noise_std)
        self.last.air_snr_db, self.last.air_mse = result.snr_db, result.mse
        return result.tensors, transmitters, duration_s

    def _estimate(
        self,
        analog: AnalogSum | None,
        updates: Mapping[int, Update],
        transmitters: list[int],
        noise_std: float,
    ) -> AirEstimate:
        if analog is not None:
            return analog.estimate(transmitters, noise_std, self._generator)
        vote = one_bit_vote(updates, transmitters, noise_std, self._generator)
        if vote.tensors is None:
            return vote
        step = tuple(self.server_lr * signs for signs in vote.tensors)
        return AirEstimate(step, vote.snr_db, vote.mse)
