"""Energy: the joules every client spends computing, transmitting, receiving and idling, and
batteries that run out at the exact instant they do.

A client's power draw is piecewise constant: it changes only when a computation or a
transmission starts or ends, or the client goes online or offline. Between two changes the
meter knows every draw, so it integrates joules per category exactly, and a battery's level
falls linearly: the instant it empties is now + level / draw, a wake-up re-armed at every
change (a stale one is a no-op). Nothing is sampled on a time grid.

Categories: ``compute`` (a computation of D samples at c cycles per sample on a CPU at f Hz
costs κ·c·D·f² joules, spread evenly over its duration), ``tx`` (transmit power over the
amplifier's efficiency, plus circuit power, over the air time), ``rx`` (receive power over the
air time of what the client receives), ``idle`` (a base draw while online). Joules of work that
was lost (a computation cut short, a transmission aborted or lost to outage) are also counted
as ``wasted``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

CATEGORIES = ("compute", "tx", "rx", "idle")
_INDEX = {name: i for i, name in enumerate(CATEGORIES)}


@dataclass(eq=False, slots=True)
class Draw:
    """One consumer of a client's power (a computation, a transmission, being online)."""

    client: int
    category: int
    power_w: float
    joules: float = 0.0
    stopped: bool = False


class EnergyMeter:
    """Per-client joules by category, and optional batteries.

    ``capacity_j``: per-client battery capacity (None: no batteries). ``on_empty(client)`` is
    called at the instant a battery reaches zero; the client's draws go on being integrated
    only until the caller stops them (it should, at once: an empty device does nothing).
    """

    def __init__(
        self,
        env: simpy.Environment,
        num_clients: int,
        capacity_j: np.ndarray | None = None,
        on_empty: Callable[[int], None] = lambda client: None,
    ) -> None:
        self.env = env
        self.joules = np.zeros((num_clients, len(CATEGORIES)))
        self.wasted_j = np.zeros(num_clients)
        self.capacity_j = None if capacity_j is None else np.asarray(capacity_j, dtype=float)
        self.battery_j = None if capacity_j is None else self.capacity_j.copy()
        self.on_empty = on_empty
        self._draws: dict[int, list[Draw]] = {}  # only clients drawing power now
        self._power_w = np.zeros(num_clients)
        self._since_s = np.zeros(num_clients)
        self._token = np.zeros(num_clients, dtype=np.int64)
        self.changed: set[int] = set()  # clients whose joules moved since the caller cleared it

    def start(self, client: int, category: str, power_w: float) -> Draw:
        """The client starts drawing power_w for this category (until ``stop``)."""
        self._settle(client)
        draw = Draw(client, _INDEX[category], power_w)
        self._draws.setdefault(client, []).append(draw)
        self._power_w[client] += power_w
        self._arm(client)
        return draw

    def set_power(self, draw: Draw, power_w: float) -> None:
        """The draw goes on at another power (0: a transmitter waiting for a better channel)."""
        if draw.stopped:
            return
        client = draw.client
        self._settle(client)
        self._power_w[client] += power_w - draw.power_w
        draw.power_w = power_w
        self._arm(client)

    def stop(self, draw: Draw, *, wasted: bool | float = False) -> float:
        """End a draw; returns its joules (counted as wasted too when its work was lost; a
        fraction: that share of them, e.g. the air time of failed transport blocks)."""
        if draw.stopped:
            return draw.joules
        client = draw.client
        self._settle(client)
        draw.stopped = True
        draws = self._draws[client]
        draws.remove(draw)
        if draws:
            self._power_w[client] -= draw.power_w
        else:
            del self._draws[client]
            self._power_w[client] = 0.0  # exactly: no float residue once nothing draws
        if wasted:
            self.wasted_j[client] += draw.joules * float(wasted)
        self._arm(client)
        return draw.joules

    def add(self, client: int, category: str, joules: float, *, wasted: bool = False) -> None:
        """Charge joules at once (work that takes no time, e.g. a zero-length computation)."""
        self._settle(client)
        self.joules[client, _INDEX[category]] += joules
        self.changed.add(client)
        if wasted:
            self.wasted_j[client] += joules
        if self.battery_j is not None:
            self.battery_j[client] -= joules
            if self.battery_j[client] <= 0 and joules > 0:
                self.battery_j[client] = 0.0
                self.on_empty(client)
                return
        self._arm(client)

    def stop_all(self, client: int, *, wasted: bool = True) -> None:
        """End every draw of the client (it went offline, left, or its battery is empty)."""
        for draw in list(self._draws.get(client, ())):
            self.stop(draw, wasted=wasted and CATEGORIES[draw.category] != "idle")

    def is_empty(self, client: int) -> bool:
        return self.battery_j is not None and self.level_j(client) <= 0.0

    def level_j(self, client: int) -> float:
        """The battery's level now (inf without batteries)."""
        if self.battery_j is None:
            return float("inf")
        elapsed_s = self.env.now - self._since_s[client]
        return float(self.battery_j[client] - self._power_w[client] * elapsed_s)

    def recharge(self, client: int, joules: float) -> None:
        self._settle(client)
        self.battery_j[client] = min(self.battery_j[client] + joules, self.capacity_j[client])
        self._arm(client)

    def settle_all(self) -> None:
        """Bring every client's account up to now."""
        for client in list(self._draws):
            self._settle(client)

    def totals(self) -> dict[str, float]:
        """Joules by category over all clients, and wasted, at this instant."""
        self.settle_all()
        sums = self.joules.sum(axis=0)
        totals = {f"{name}_j": float(sums[i]) for i, name in enumerate(CATEGORIES)}
        return totals | {"wasted_j": float(self.wasted_j.sum())}

    def per_client_j(self) -> np.ndarray:
        """Every client's joules, all categories, at this instant."""
        self.settle_all()
        return self.joules.sum(axis=1)

    def client_joules(self, client: int) -> np.ndarray:
        """The client's joules by category (``CATEGORIES``) at this instant."""
        self._settle(client)
        return self.joules[client]

    def wasted_of(self, client: int) -> float:
        self._settle(client)
        return float(self.wasted_j[client])

    def _settle(self, client: int) -> None:
        """Integrate the client's draws up to now."""
        now = self.env.now
        elapsed_s = now - self._since_s[client]
        self._since_s[client] = now
        draws = self._draws.get(client)
        if not draws or elapsed_s <= 0:
            return
        for draw in draws:
            joules = draw.power_w * elapsed_s
            draw.joules += joules
            self.joules[client, draw.category] += joules
        if self.battery_j is not None:
            self.battery_j[client] -= self._power_w[client] * elapsed_s
        self.changed.add(client)

    def _arm(self, client: int) -> None:
        """With a battery, wake up when the current draw will have emptied it."""
        self._token[client] += 1
        if self.battery_j is None or self._power_w[client] <= 0:
            return
        delay_s = max(self.battery_j[client], 0.0) / self._power_w[client]
        token = int(self._token[client])
        self.env.timeout(delay_s).callbacks.append(lambda _: self._empty(client, token))

    def _empty(self, client: int, token: int) -> None:
        if token != self._token[client]:
            return  # the draw changed since: a later wake-up is armed
        self._settle(client)
        self.battery_j[client] = 0.0  # what float noise left of it
        self.on_empty(client)
