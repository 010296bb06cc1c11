"""Who is present and who is online, and every process that changes it: availability
(renewal on/off, a CSV of switches, interval traces), arrivals from the reserve, departures,
and batteries that run out (leaving, or charging offline). Built by the World from its
scenario; the World hears of each change through ``interrupt`` (a client's work is lost when
it goes offline or leaves) and tells the algorithm through its ``on_join`` / ``on_leave``."""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial

import simpy

from fedsim.config import ClientsConfig, EnergyConfig
from fedsim.results.recorder import Recorder
from fedsim.sim import churn, readers, traces
from fedsim.sim.events import EventLog
from fedsim.streams import RandomStreams
from fedsim.world.energy import DeviceEnergy

LOST = "lost"  # why work stopped: the client went offline or left
BATTERY = "battery"  # why a client left or went offline: its battery ran out


class Presence:
    """The present and online sets (``present``, ``online``) and the processes that move
    clients between them; ``interrupt(client, cause)`` is called when a client's work is
    lost, ``joined`` / ``left`` when the population changes."""

    def __init__(
        self,
        env: simpy.Environment,
        clients: ClientsConfig,
        num_clients: int,
        streams: RandomStreams,
        log: EventLog,
        recorder: Recorder,
        interrupt: Callable[[int, str], None],
        joined: Callable[[int], None],
        left: Callable[[int], None],
    ) -> None:
        self.env = env
        self.config = clients
        self.streams = streams
        self.log = log
        self.recorder = recorder
        self.interrupt = interrupt
        self.joined = joined
        self.left = left
        self.present: set[int] = set(range(clients.count))
        self.online: set[int] = set(self.present)
        self.energy: DeviceEnergy | None = None  # attached with system.energy
        self._battery: EnergyConfig | None = None
        self._reserve = iter(range(clients.count, num_clients))
        self._online_again: dict[int, simpy.Event] = {}
        self._charging: set[int] = set()
        self._departure_rng = streams.generator("departures", 1)
        self._intervals: list[readers.AvailabilityTrace] = []

    def start(self, energy: DeviceEnergy | None) -> None:
        """Begin the run: every present client online, then the processes of change."""
        self.energy = energy
        if energy is not None:
            for client in sorted(self.present):
                energy.online(client)
        self._log_activity()
        availability = self.config.availability
        if availability.kind == "trace":
            rows = readers.read_availability_trace(availability.path)
            self.env.process(churn.replay_trace(self.env, rows, self.set_online))
        elif availability.kind == "intervals":
            self._intervals = readers.read_availability(availability.path)
        for client in sorted(self.present):
            self._start_availability(client)
        for purpose, changes, apply in (
            ("arrivals", self.config.arrivals, self._join_next),
            ("departures", self.config.departures, self._leave_random),
        ):
            schedule = [(c.time_s, c.count) for c in changes.schedule]
            if changes.rate_per_s > 0 or schedule:
                rng = self.streams.generator(purpose)
                times = churn.change_times(rng, changes.rate_per_s, schedule)
                self.env.process(churn.apply_at(self.env, times, apply))

    def until_online(self, client: int) -> simpy.Event:
        """An event that fires when the client is (back) online; at once if it is."""
        if client in self.online:
            event = self.env.event()
            event.succeed()
            return event
        return self._online_again.setdefault(client, self.env.event())

    def _start_availability(self, client: int) -> None:
        availability = self.config.availability
        if availability.kind == "intervals":  # in the trace's own time, from the run's start
            trace = self._intervals[client]
            process = traces.replay_availability(self.env, trace, partial(self.set_online, client))
        elif availability.kind == "renewal":
            process = churn.renewal_availability(
                self.env,
                self.streams.generator("availability", client),
                availability.mean_online_s,
                availability.mean_offline_s,
                availability.law,
                partial(self.set_online, client),
            )
        else:
            return
        self.env.process(process)

    def set_online(self, client: int, online: bool, cause: str | None = None) -> bool:
        """Apply an availability change; False once the client has left for good. A client
        whose battery is charging stays offline whatever its availability says."""
        if client not in self.present:
            return False
        if online and client not in self.online and client not in self._charging:
            self.online.add(client)
            self.log.emit("online", client=client)
            if self.energy is not None:
                self.energy.online(client)
            waiting = self._online_again.pop(client, None)
            if waiting is not None:
                waiting.succeed()
        elif not online and client in self.online:
            self.online.discard(client)
            self.log.emit("offline", client=client, cause=cause)
            self._stop_work(client, cause)
        self._log_activity()
        return True

    def _stop_work(self, client: int, cause: str | None) -> None:
        """Offline or gone: its work is lost and it draws no more power."""
        self.interrupt(client, cause or LOST)
        if self.energy is not None:
            self.energy.offline(client)

    def _join_next(self) -> bool:
        client = next(self._reserve, None)
        if client is None:
            return False
        self.present.add(client)
        self.online.add(client)
        self.log.emit("join", client=client)
        if self.energy is not None:
            self.energy.online(client)
        self._log_activity()
        self._start_availability(client)
        self.joined(client)
        return True

    def _leave_random(self) -> bool:
        if not self.present:
            return False
        self.leave(int(self._departure_rng.choice(sorted(self.present))))
        return True

    def leave(self, client: int, cause: str | None = None) -> None:
        """The client leaves for good: its work is lost."""
        self.present.discard(client)
        self.online.discard(client)
        self.log.emit("leave", client=client, cause=cause)
        self._stop_work(client, cause)
        self._log_activity()
        self.left(client)

    def battery_empty(self, client: int) -> None:
        """The client's battery just ran out: it leaves for good, or with charging goes
        offline and comes back once charged (its availability cannot bring it back sooner)."""
        if client not in self.present:
            return
        self.recorder.battery_departures += 1
        charging = self.energy.config.battery.charging
        if charging is None:
            self.leave(client, cause=BATTERY)
            return
        self.set_online(client, False, cause=BATTERY)
        self._charging.add(client)
        self.env.process(self._recharge(client, charging.power_w))

    def _recharge(self, client: int, power_w: float) -> Generator[simpy.Event, None, None]:
        duration_s = self.energy.recharge_s(client)
        yield self.env.timeout(duration_s)
        self.energy.meter.recharge(client, duration_s * power_w)
        self._charging.discard(client)
        self.set_online(client, True)

    def _log_activity(self) -> None:
        self.recorder.log_activity(self.env.now, len(self.present), len(self.online))
