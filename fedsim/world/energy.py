"""The World's energy model, built from its scenario: each client's powers and battery, the
meter (``fedsim.sim.energy``), and the hooks by which computations and transmissions draw
power. Transmit power is the radio's when there is one (``system.radio.tx_power_dbm``), else
``system.energy.tx_power_dbm``, drawn from the battery as that power over the amplifier's
efficiency η (``pa_efficiency``) plus the circuit power; compute energy is always the cycles
model's κ·c·D·f², spread over the computation's duration, whichever model gives that duration."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np
import simpy

from fedsim.config import EnergyConfig
from fedsim.sim.compute import CpuCycles
from fedsim.sim.energy import CATEGORIES, Draw, EnergyMeter
from fedsim.sim.medium import Flow
from fedsim.sim.radio import Radio, dbm_to_watts
from fedsim.streams import RandomStreams

_TX = CATEGORIES.index("tx")


class DeviceEnergy:
    """Per-client powers and batteries, and the meter they draw on."""

    def __init__(
        self,
        config: EnergyConfig,
        cpu: CpuCycles,
        cpu_hz: np.ndarray,
        env: simpy.Environment,
        streams: RandomStreams,
        radio: Radio | None,
        on_empty: Callable[[int], None],
    ) -> None:
        num_clients = len(cpu_hz)
        rng = streams.generator("energy")
        if radio is not None:
            tx_w = radio.tx_power_w.copy()
        else:
            tx_w = np.asarray(dbm_to_watts(config.tx_power_dbm.sample(rng, num_clients)))
        self.config = config
        self.cpu = cpu
        self.cpu_hz = cpu_hz
        self.tx_w = self.drawn_w(tx_w)
        battery = config.battery
        capacity_j = battery.capacity_j.sample(rng, num_clients) if battery else None
        self.meter = EnergyMeter(env, num_clients, capacity_j, on_empty)
        if battery is not None:
            self.meter.battery_j *= battery.initial_fraction
        self._idle: dict[int, Draw] = {}
        self.is_online: Callable[[int], bool] = lambda client: True  # the World's

    def drawn_w(self, radiated_w: float | np.ndarray) -> float | np.ndarray:
        """What a transmitter radiating radiated_w draws from its battery: p / η + P_circuit."""
        return radiated_w / self.config.pa_efficiency + self.config.circuit_power_w

    # --- computations ---

    def compute_started(self, client: int, samples: float, duration_s: float) -> Draw | None:
        """A computation of ``samples`` samples that will last duration_s begins."""
        joules = self.cpu.energy_j(samples, float(self.cpu_hz[client]))
        if duration_s <= 0:
            self.meter.add(client, "compute", joules)
            return None
        return self.meter.start(client, "compute", joules / duration_s)

    def compute_ended(self, draw: Draw | None, *, lost: bool) -> None:
        if draw is not None:
            self.meter.stop(draw, wasted=lost)

    # --- transmissions ---

    def on_air(self, flow: Flow, sender: int | None, receivers: Sequence[int]) -> list[Draw]:
        """The sender (a client) transmits and the receivers listen while the flow sends its
        bits: from when it has the medium (after any queue) and its set-up (the latency:
        propagation and access, not transmission) has passed, to its end."""
        draws: list[Draw] = []
        rx_w = self.config.rx_power_w
        power_w: dict[Draw, float] = {}  # each draw's power while the transmitter sends
        on_air = [True]  # a radio transmitter below the lowest MCS waits, drawing nothing

        def start(_wake: simpy.Event | None = None) -> None:
            if flow.cancelled or flow.done.triggered:
                return  # cut during its queue or set-up, or empty: it never sent a bit
            if sender is not None:
                tx_w = float(self.tx_w[sender])
                if radiated:  # what it radiates now on average (power control, its duty)
                    tx_w = self.drawn_w(flow.tx_power_w)
                power_w[self._draw(draws, sender, "tx", tx_w, on_air[0])] = tx_w
            if rx_w > 0:
                for r in receivers:
                    if self.is_online(r):
                        power_w[self._draw(draws, r, "rx", rx_w, on_air[0])] = rx_w

        def sending(on: bool) -> None:
            on_air[0] = on
            for draw in draws:
                self.meter.set_power(draw, power_w[draw] if on else 0.0)

        if hasattr(flow, "on_sending"):
            flow.on_sending = sending
        # A radio transmitter's power follows its link: power control, and the share of the
        # slots it sends in (a share under one PRB radiates in a fraction of them, its circuits
        # on throughout).
        radiated = sender is not None and hasattr(flow, "on_power")
        if radiated:

            def radiates(tx_w: float) -> None:
                if draws:  # the sender's draw is the first
                    power_w[draws[0]] = self.drawn_w(tx_w)
                    self.meter.set_power(draws[0], power_w[draws[0]] if on_air[0] else 0.0)

            flow.on_power = radiates

        def served() -> None:
            if flow.setup_s > 0:
                self.meter.env.timeout(flow.setup_s).callbacks.append(start)
            else:
                start()

        if flow.queued:
            flow.on_served = served
        else:
            served()
        return draws

    def analog_started(self, client: int, power_w: float) -> Draw:
        """The client transmits in an over-the-air slot at ``power_w`` (drawing power_w / η and
        its radio's circuit power), until ``analog_ended``."""
        return self.meter.start(client, "tx", self.drawn_w(power_w))

    def analog_ended(self, draw: Draw, *, wasted: bool) -> None:
        """The slot is over; ``wasted``: the client's signal did not make it into the sum."""
        self.meter.stop(draw, wasted=wasted)

    def _draw(self, draws: list[Draw], client: int, category: str, power: float, on: bool) -> Draw:
        draw = self.meter.start(client, category, power if on else 0.0)
        draws.append(draw)
        return draw

    def off_air(self, draws: list[Draw], *, lost: Collection[int], tx_lost: bool | float) -> None:
        """The flow ended or was cut: receivers in ``lost`` did not get it; ``tx_lost``: the
        transmission served nothing (aborted, lost to outage, or its receiver missed it), or
        the share of its joules that served nothing (failed transport blocks)."""
        for draw in draws:
            self.meter.stop(draw, wasted=tx_lost if draw.category == _TX else draw.client in lost)

    # --- presence ---

    def online(self, client: int) -> None:
        if self.config.idle_power_w > 0 and client not in self._idle:
            self._idle[client] = self.meter.start(client, "idle", self.config.idle_power_w)

    def offline(self, client: int) -> None:
        """Offline, gone or empty: every draw of the client ends (its work is lost)."""
        self._idle.pop(client, None)
        self.meter.stop_all(client)

    def can_take_part(self, client: int) -> bool:
        """The participation rule: at least min_fraction of the battery left."""
        battery = self.config.battery
        if battery is None or battery.min_fraction == 0:
            return True
        return self.meter.level_j(client) >= battery.min_fraction * self.meter.capacity_j[client]

    def recharge_s(self, client: int) -> float:
        """Seconds an empty battery charges before the client comes back."""
        battery = self.config.battery
        target_j = battery.charging.resume_fraction * self.meter.capacity_j[client]
        return max(target_j - self.meter.level_j(client), 0.0) / battery.charging.power_w
