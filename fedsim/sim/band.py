"""A radio band shared by transmissions whose rates follow their channels (with ``radio``).

``ChannelMedium`` splits a band among its flows (equal shares, fixed sub-bands, or the whole
band to one at a time); ``ScheduledMedium`` gives PRBs by a scheduler (``fedsim.sim.scheduler``)
every period. A flow's channel (``ChannelLink``, a ``transmission.RadioLink``) says how fast its
bits get through on the share it has, and when that changes by itself.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Protocol

import numpy as np
import simpy

from fedsim.sim.draws import block_of
from fedsim.sim.medium import SIMULTANEOUS_REL_TOL, Flow, Medium, TransmissionLost
from fedsim.sim.scheduler import FlatRates
from fedsim.sim.selective import SubbandGrid


class ChannelLink(Protocol):
    """What a ``ChannelMedium`` asks of a transfer's channel (``transmission.RadioLink`` is one)."""

    failure: TransmissionLost | None  # set when the link is lost: the flow fails with it

    def speed_bps(self, bandwidth_hz: float, remaining_bits: float) -> float:
        """How fast the flow's bits get through on a share of bandwidth_hz from the current
        instant, with ``remaining_bits`` still to go."""

    def next_change_s(self) -> float:
        """When that speed next changes by itself (a new fading block, a move); inf: never.
        Asked right after ``speed_bps``, at the same instant."""

    @property
    def sending(self) -> bool:
        """Whether the transmitter is on the air now (it may wait for a better channel)."""

    radiated_w: float  # what the transmitter radiates now (power control, its duty change it)

    def achievable_bps(self, bandwidth_hz: float) -> float:
        """The rate it would get on bandwidth_hz now, without starting anything (a
        scheduler's metric)."""

    def usable_hz(self, bandwidth_hz: float) -> float:
        """The most of bandwidth_hz its rate grows on now: a larger share gains nothing."""

    def radiating(self, on: bool) -> None:
        """It is on the air from now (True, again at each re-plan), or not (it lost its share,
        waits below the lowest MCS, or ended)."""

    # Frequency-selective fading (a ``ScheduledMedium`` with subbands): the PRBs a scheduler
    # placed it on per subband, and its rate on each subband alone at a power per PRB.
    allocation_prbs: np.ndarray | None

    def subband_rates_bps(self, reference_prbs: float) -> np.ndarray: ...


class ChannelFlow(Flow):
    """A flow whose rate follows its channel; ``rate_bps`` is the rate it sends at now."""

    __slots__ = (
        "link", "on_sending", "on_power", "share_hz", "_token", "_ending", "_sending",
        "_power_w",
    )  # fmt: skip

    def __init__(self, medium: Medium, num_bytes: int, link: ChannelLink, seq: int, setup_s: float):
        super().__init__(medium, num_bytes, math.inf, seq, setup_s)
        self.link = link
        # Called with False when the transmitter stops sending for a while (below the lowest
        # MCS), True when it starts again: the energy meter follows it.
        self.on_sending: Callable[[bool], None] | None = None
        self.on_power: Callable[[float], None] | None = None  # its transmit power changed
        self.share_hz: float | None = None  # a scheduled medium's PRBs (None: the equal share)
        self._power_w = link.radiated_w
        self._token = 0  # bumped at every re-plan: its older entries in the agenda are stale
        self._ending = False  # whether its next agenda entry is its end (else a channel change)
        self._sending = True

    @property
    def tx_power_w(self) -> float:
        """What its transmitter radiates at while it sends (power control changes it)."""
        return self._power_w


class ChannelMedium(Medium):
    """A band of bandwidth_hz shared by flows whose rates follow their channels.

    - ``split``: every sending flow gets bandwidth_hz / n (FDMA, equal shares), re-split
      whenever a flow starts or ends; each flow's rate is its own channel's rate on its share.
      A flow whose rate stops growing on fewer PRBs than that (a power-limited transmitter
      whose link fills fewer PRBs at a higher power spectral density) takes those, and the
      others split the rest equally (max-min fair shares, re-split when a flow's channel
      moves it across the level): the equal split of a scheduler that leaves no PRB idle.
    - otherwise each of ``slots`` flows gets bandwidth_hz / slots (fixed sub-bands; one slot
      is TDMA, the whole band to one flow at a time); flows beyond the slots wait, first come
      first served. ``slots=None`` without ``split``: every flow has the whole band (D2D links,
      each on its own).

    Between two changes (a flow starts or ends, or a channel changes) every flow's speed is
    constant, so completion times are exact: a flow whose channel changes mid-way keeps the
    bits it had sent and goes on at its new rate. Each flow's next end or channel change is an
    entry in the medium's own agenda (a heap); one SimPy wake-up is pending for the earliest,
    so re-splitting the band among n flows costs no SimPy events, only n heap entries.
    """

    def __init__(
        self,
        env: simpy.Environment,
        bandwidth_hz: float,
        *,
        slots: int | None,
        split: bool,
        prb_hz: float = math.nan,
    ) -> None:
        """``prb_hz``: the link model's PRB (NaN: it has none, so a flow fills any share)."""
        if not (bandwidth_hz > 0 and math.isfinite(bandwidth_hz)):
            raise ValueError(f"bandwidth_hz must be positive and finite, got {bandwidth_hz}")
        if slots is not None and (slots < 1 or split):
            raise ValueError("slots must be >= 1, and an equal split has no fixed slots")
        super().__init__(env)
        self.bandwidth_hz = bandwidth_hz
        self.slots = slots
        self.split = split
        self.prb_hz = prb_hz
        self._level_hz = math.inf  # an equal share where some flows fill less (``_hand_on``)
        self._sending: dict[ChannelFlow, None] = {}  # in arrival order
        self._in_setup: set[ChannelFlow] = set()
        self._queue: deque[ChannelFlow] = deque()
        self._agenda: list[tuple[float, int, int, ChannelFlow]] = []  # (due_s, seq, token, flow)
        self._wake_s = math.inf  # the earliest pending wake-up
        self._resplit_pending = False
        self._rerate_pending = False

    @property
    def active(self) -> int:
        return len(self._sending) + len(self._in_setup) + len(self._queue)

    def start(self, num_bytes: int, link: ChannelLink, setup_s: float = 0.0) -> Flow:  # type: ignore[override]
        """Put a flow of num_bytes on the band; its rate comes from its link's channel."""
        if num_bytes < 0:
            raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
        if not (setup_s >= 0 and math.isfinite(setup_s)):
            raise ValueError(f"setup_s must be >= 0 and finite, got {setup_s}")
        flow = ChannelFlow(self, num_bytes, link, self._arrivals, setup_s)
        self._arrivals += 1
        self._admit(flow)
        return flow

    def share_hz(self) -> float:
        """The band a sending flow has now."""
        if self.split:
            return self.bandwidth_hz / max(len(self._sending), 1)
        return self.share_alone_hz()

    def share_alone_hz(self) -> float:
        """The band one flow has when no other is sending."""
        return self.bandwidth_hz / (self.slots or 1)

    def _admit(self, flow: ChannelFlow) -> None:  # type: ignore[override]
        flow.queued = True
        self._queue.append(flow)
        self._fill_slots()

    def _fill_slots(self) -> None:
        while self._queue and (
            self.slots is None or len(self._sending) + len(self._in_setup) < self.slots
        ):
            flow = self._queue.popleft()
            flow._serve()
            self._in_setup.add(flow)
            self._after_setup(flow, partial(self._enter, flow))

    def _enter(self, flow: ChannelFlow, _wake: simpy.Event | None = None) -> None:
        if flow not in self._in_setup:
            return  # cancelled during its set-up
        self._in_setup.remove(flow)
        self._sending[flow] = None
        if self.split:
            self._resplit_soon()
        else:
            self._replan([flow])

    def _replan(self, flows: list[ChannelFlow]) -> None:
        """Set each flow's speed from its channel now; put its end or next change (whichever
        comes first) in the agenda."""
        share_hz = self.share_hz()
        now = self.env.now
        failed: list[ChannelFlow] = []
        sent: list[ChannelFlow] = []
        for flow in flows:
            flow._token += 1
            flow._set_speed(0.0)  # bank the bits sent so far
            flow_share_hz = share_hz if flow.share_hz is None else flow.share_hz
            if flow_share_hz <= 0:  # no PRBs this period: it waits for the next
                flow.rate_bps = 0.0
                flow.link.radiating(False)
                if flow._sending:
                    flow._sending = False
                    if flow.on_sending is not None:
                        flow.on_sending(False)
                continue
            flow.rate_bps = flow.link.speed_bps(flow_share_hz, flow._remaining_bits())
            if flow.link.failure is not None:  # the radio link failed: the flow with it
                failed.append(flow)
                continue
            if flow.rate_bps <= 0.0 and flow._remaining_bits() <= 0.0:
                sent.append(flow)  # its last bit left as its channel changed (float noise)
                continue
            flow.link.radiating(flow.link.sending)  # waiting below the lowest MCS: silent
            if flow.link.radiated_w != flow._power_w:
                flow._power_w = flow.link.radiated_w
                if flow.on_power is not None:
                    flow.on_power(flow._power_w)
            flow._set_speed(flow.rate_bps)
            if flow.link.sending != flow._sending:
                flow._sending = not flow._sending
                if flow.on_sending is not None:
                    flow.on_sending(flow._sending)
            end_s = now + flow._remaining_bits() / flow.rate_bps if flow.rate_bps > 0 else math.inf
            change_s = flow.link.next_change_s()
            flow._ending = end_s <= change_s
            due_s = min(end_s, change_s)
            if due_s < math.inf:
                heapq.heappush(self._agenda, (due_s, flow._seq, flow._token, flow))
        for flow in failed:
            self._withdraw(flow)
            flow.done.defused = True  # its sender may be cut at this very instant: no waiter
            flow.done.fail(flow.link.failure)
        if sent:
            self._end(sent)
        self._arm()

    def _arm(self) -> None:
        """Make sure a wake-up is pending for the earliest live entry of the agenda."""
        agenda = self._agenda
        while agenda and agenda[0][2] != agenda[0][3]._token:
            heapq.heappop(agenda)  # stale: re-planned or finished since
        if agenda and agenda[0][0] < self._wake_s:
            self._wake_s = agenda[0][0]
            self._wake_at(self._wake_s - self.env.now, self._wake)

    def _wake(self, _event: simpy.Event) -> None:
        """End the flows due now (those within float noise of now end together) and re-plan
        those whose channel changed."""
        now = self.env.now
        if now >= self._wake_s:
            self._wake_s = math.inf  # the earliest wake-up fired (a superseded one may follow)
        tolerance_s = SIMULTANEOUS_REL_TOL * max(now, 1.0)
        ending, changing, later = [], [], []
        agenda = self._agenda
        while agenda and agenda[0][0] <= now + tolerance_s:
            entry = heapq.heappop(agenda)
            _, _, token, flow = entry
            if token != flow._token:
                continue
            if flow._ending:
                ending.append(flow)
            elif entry[0] <= now:
                changing.append(flow)
            else:
                later.append(entry)  # a change a hair later: its block has not begun yet
        for entry in later:
            heapq.heappush(agenda, entry)
        if ending:
            self._end(ending)
        if not self._shares_hold(changing):
            self._resplit_soon()
        self._replan(changing)

    def _end(self, flows: list[ChannelFlow]) -> None:
        """These flows delivered their last bit now: they leave the band."""
        for flow in sorted(flows, key=lambda f: f._seq):
            del self._sending[flow]
            flow._token += 1
            flow.link.radiating(False)
            flow._finish()
        self._fill_slots()
        if self.split:
            self._resplit_soon()

    def _withdraw(self, flow: ChannelFlow) -> float:  # type: ignore[override]
        sent = flow._stop()
        flow._token += 1
        if flow in self._queue:
            self._queue.remove(flow)
            return sent
        was_sending = flow in self._sending
        self._sending.pop(flow, None)
        if was_sending:
            flow.link.radiating(False)
        self._in_setup.discard(flow)
        self._fill_slots()
        if was_sending and self.split:
            self._resplit_soon()
        return sent

    def _resplit_soon(self) -> None:
        """Re-split the band among the sending flows at the end of this instant, once, however
        many flows start or stop in it (a deadline cancels tens of uploads at once)."""
        if not self._resplit_pending:
            self._resplit_pending = True
            self.env.timeout(0).callbacks.append(self._resplit)

    def _resplit(self, _event: simpy.Event) -> None:
        self._resplit_pending = False
        self._hand_on()
        self._replan(list(self._sending))

    def _hand_on(self) -> None:
        """Equal shares, up to what each flow can fill: a flow whose rate stops growing below
        the equal share (``usable_hz``) keeps what it fills, and the rest is split equally
        among the others, again (water-filling). Asked only where a share can hold more than
        one PRB: a flow fills at least one."""
        flows = list(self._sending)
        for flow in flows:
            flow.share_hz = None  # the equal share (``share_hz``)
        self._level_hz = math.inf
        if not self.bandwidth_hz / max(len(flows), 1) > self.prb_hz:
            return
        usable = sorted((flow.link.usable_hz(self.bandwidth_hz), flow._seq, flow) for flow in flows)
        left_hz, count = self.bandwidth_hz, len(flows)
        for usable_hz, _, flow in usable:
            if usable_hz >= left_hz / count:
                break
            flow.share_hz = usable_hz
            left_hz, count = left_hz - usable_hz, count - 1
        if count < len(flows):
            self._level_hz = left_hz / count if count else math.inf
            for _, _, flow in usable[len(flows) - count :]:
                flow.share_hz = self._level_hz

    def _shares_hold(self, flows: list[ChannelFlow]) -> bool:
        """Whether the shares stay as they are though these flows' channels changed: each
        still fills its share (``_hand_on``)."""
        if not self.split or not self.bandwidth_hz / max(len(self._sending), 1) > self.prb_hz:
            return True
        level_hz = min(self._level_hz, self.share_hz())
        for flow in flows:
            share_hz = level_hz if flow.share_hz is None else flow.share_hz
            if min(flow.link.usable_hz(self.bandwidth_hz), level_hz) != share_hz:
                return False
        return True

    def rerate_soon(self) -> None:
        """The sending flows' channels changed from outside (other cells' interference):
        rate them again on the shares they have, at the end of this instant, once."""
        if not self._rerate_pending and self._sending:
            self._rerate_pending = True
            self.env.timeout(0).callbacks.append(self._rerate)

    def _rerate(self, _event: simpy.Event) -> None:
        self._rerate_pending = False
        self._replan(list(self._sending))


class PrbScheduler(Protocol):
    """What a ``ScheduledMedium`` asks of a scheduler (``fedsim.sim.scheduler``)."""

    def allocate(
        self, users: list[int], rate_bps: Callable[[int, float], float], num_prbs: int
    ) -> list[int]: ...

    def record(self, users: list[int], achieved_bps: list[float]) -> None: ...

    def allocate_subbands(
        self,
        users: list[int],
        rates_of: Callable[[int, int], np.ndarray],
        subband_prbs: tuple[int, ...],
    ) -> np.ndarray: ...


class ScheduledMedium(ChannelMedium):
    """A band of ``num_prbs`` PRBs of ``prb_hz`` given to the sending flows by a scheduler at
    every scheduling period (at k·period_s) and whenever a flow starts or ends (so no PRB
    idles while a flow has data); in between a flow keeps its PRBs and its rate follows its
    channel. A flow given no PRBs waits (draws no transmit power). At each period's end the
    scheduler learns the rate each flow achieved over it (its proportional-fair averages).
    The flows' users are their transmitters (``users``), one flow per user at a time.

    The scheduler sees each flow's rate on m PRBs now: ``power_aware``, the link's rate on
    m PRBs at the power it would send there (its power spreads over them, or power control
    sets it per PRB); otherwise m / N of its rate on the whole band.

    With ``subbands`` (frequency-selective fading) the scheduler places the flows on PRB
    groups: it sees each flow's rate on each subband alone, its power spread over the
    subbands it would hold (``power_aware``) or over the whole band, and a flow's link is
    told which PRBs it holds."""

    def __init__(
        self,
        env: simpy.Environment,
        num_prbs: int,
        prb_hz: float,
        scheduler: PrbScheduler,
        period_s: float,
        user_of: Callable[[ChannelLink], int],
        power_aware: bool = True,
        subbands: SubbandGrid | None = None,
    ) -> None:
        super().__init__(env, num_prbs * prb_hz, slots=None, split=True)
        self.power_aware = power_aware
        self.subbands = subbands
        self.num_prbs = num_prbs
        self.prb_hz = prb_hz
        self.scheduler = scheduler
        self.period_s = period_s
        self._user_of = user_of
        self._bits_at_period_start: dict[ChannelFlow, float] = {}
        self._period_armed = False
        self._allocated_s = env.now
        self.prbs_given: dict[int, float] = {}  # user -> PRB·seconds over the run

    def share_alone_hz(self) -> float:
        return self.num_prbs * self.prb_hz

    def _resplit(self, _event: simpy.Event) -> None:
        """Allocate the PRBs among the sending flows now, then rate them on their PRBs."""
        self._resplit_pending = False
        flows = self._flows_by_user()
        if flows:
            self.bank_prb_time()
            users = [self._user_of(flow.link) for flow in flows]
            if len(set(users)) != len(users):
                raise ValueError("a scheduled medium serves one flow per user at a time")
            if self.subbands is None:
                allocation = self.scheduler.allocate(
                    users, self._rate_on_prbs(flows), self.num_prbs
                )
            else:
                allocation = self._place(flows, users, self.subbands)
            for flow, prbs in zip(flows, allocation, strict=True):
                flow.share_hz = prbs * self.prb_hz
                self._bits_at_period_start.setdefault(flow, flow.bytes_sent() * 8.0)
            self._arm_period()
        self._replan(flows)

    def _place(self, flows: list[ChannelFlow], users: list[int], grid: SubbandGrid) -> list[int]:
        """Place the flows on the subbands; each flow's link learns its PRBs. Returns the
        PRBs each flow holds. The scheduler sees a flow's rate on each subband with its power
        spread over the k subbands it would hold (``power_aware``), or over the whole band."""
        group_prbs = max(grid.prbs)

        def spread_prbs(held: int) -> int:
            return min(held * group_prbs, self.num_prbs) if self.power_aware else self.num_prbs

        on_one = [flow.link.subband_rates_bps(spread_prbs(1)) for flow in flows]  # asked of all

        def rates_of(i: int, held: int) -> np.ndarray:
            if held == 1:
                return on_one[i]
            return flows[i].link.subband_rates_bps(spread_prbs(held))

        placed = self.scheduler.allocate_subbands(users, rates_of, grid.prbs).astype(float)
        held = placed.sum(axis=1).astype(int).tolist()
        for flow, prbs, count in zip(flows, placed, held, strict=True):
            flow.link.allocation_prbs = prbs if count else None
        return held

    def _rate_on_prbs(self, flows: list[ChannelFlow]) -> Callable[[int, float], float]:
        """The scheduler's view: flows[i]'s rate on m PRBs now, a what-if (nothing changes)."""
        prb_hz = self.prb_hz
        if self.power_aware:
            return lambda i, prbs: flows[i].link.achievable_bps(prbs * prb_hz) if prbs else 0.0
        full_hz = self.share_alone_hz()
        return FlatRates([flow.link.achievable_bps(full_hz) / self.num_prbs for flow in flows])

    def _flows_by_user(self) -> list[ChannelFlow]:
        """The sending flows in the scheduler's order: ascending users."""
        return sorted(self._sending, key=lambda f: (self._user_of(f.link), f._seq))

    def bank_prb_time(self) -> None:
        """Add the PRB·seconds of the allocation that ends now to each user's total."""
        now = self.env.now
        since_s = self._allocated_s
        for flow in self._sending:
            if flow.share_hz:
                user = self._user_of(flow.link)
                prb_s = flow.share_hz / self.prb_hz * (now - since_s)
                self.prbs_given[user] = self.prbs_given.get(user, 0.0) + prb_s
        self._allocated_s = now

    def _withdraw(self, flow: ChannelFlow) -> float:  # type: ignore[override]
        self.bank_prb_time()
        self._bits_at_period_start.pop(flow, None)
        return super()._withdraw(flow)

    def _wake(self, _event: simpy.Event) -> None:
        self.bank_prb_time()
        super()._wake(_event)
        for flow in list(self._bits_at_period_start):
            if flow not in self._sending:
                del self._bits_at_period_start[flow]

    def _arm_period(self) -> None:
        if not self._period_armed:
            self._period_armed = True
            now = self.env.now
            end_s = (block_of(now, self.period_s) + 1) * self.period_s
            self._wake_at(end_s - now, self._period_ends)

    def _period_ends(self, _event: simpy.Event) -> None:
        """Tell the scheduler what each flow achieved over the period; allocate again."""
        self._period_armed = False
        flows = self._flows_by_user()
        if not flows:
            self._bits_at_period_start.clear()
            return
        achieved = []
        for flow in flows:
            bits = flow.bytes_sent() * 8.0
            achieved.append((bits - self._bits_at_period_start.get(flow, bits)) / self.period_s)
            self._bits_at_period_start[flow] = bits
        self.scheduler.record([self._user_of(f.link) for f in flows], achieved)
        self._resplit_soon()
