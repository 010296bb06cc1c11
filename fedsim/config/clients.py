"""The clients: how many, when each is online (availability), and who arrives or leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from fedsim.config.base import (
    MAX_CLIENTS,
    MAX_TIME_S,
    MIN_PERIOD_S,
    NO_BOOL,
    EventRate,
    Instant,
    _Strict,
    read_now_by,
    tagged_union,
)
from fedsim.sim.readers import read_availability, read_availability_trace


class AlwaysOnline(_Strict):
    """Every client is online from its arrival until it leaves."""

    kind: Literal["always"] = "always"


class RenewalAvailability(_Strict):
    """On/off renewal process per client; every client starts online."""

    kind: Literal["renewal"] = "renewal"
    mean_online_s: Annotated[float, Field(ge=MIN_PERIOD_S, le=MAX_TIME_S), NO_BOOL] = Field(
        description="mean length of an online period"
    )
    mean_offline_s: Annotated[float, Field(ge=MIN_PERIOD_S, le=MAX_TIME_S), NO_BOOL] = Field(
        description="mean length of an offline period"
    )
    law: Literal["exponential", "fixed"] = Field(
        default="exponential", description="periods drawn from an exponential law, or fixed"
    )


class TraceAvailability(_Strict):
    """CSV with header time_s,client,state (state: online|offline); others stay online."""

    kind: Literal["trace"] = "trace"
    path: Annotated[Path, read_now_by(read_availability_trace)] = Field(
        description="CSV file, relative to the working folder (as when run)"
    )


class IntervalsAvailability(_Strict):
    """Online intervals per client: FedScale's client behaviour JSON (active/inactive lists,
    repeating every finish_time) or a CSV client,start_s,end_s (scenarios/traces/README.md).
    The i-th client of the file, in ascending id order, is client i."""

    kind: Literal["intervals"] = "intervals"
    path: Annotated[Path, read_now_by(read_availability)] = Field(
        description="JSON or CSV, relative to the working folder"
    )


AVAILABILITIES = (AlwaysOnline, RenewalAvailability, TraceAvailability, IntervalsAvailability)
Availability = tagged_union(AVAILABILITIES, "kind")


class ScheduledChange(_Strict):
    """So many clients arrive (or leave) at a simulated instant."""

    time_s: Instant = Field(description="when, in simulated time")
    count: Annotated[int, Field(gt=0, le=MAX_CLIENTS), NO_BOOL] = Field(
        description="how many clients"
    )


class ArrivalsConfig(_Strict):
    """New clients drawn, in order, from a reserve partitioned with the others."""

    reserve: Annotated[int, Field(ge=0, le=MAX_CLIENTS), NO_BOOL] = Field(
        default=0, description="clients held back to arrive later, partitioned with the others"
    )
    rate_per_s: EventRate = Field(
        default=0.0, description="Poisson arrivals (from the reserve); 0: none"
    )
    schedule: list[ScheduledChange] = Field(
        default=[], description="arrivals at given instants (from the reserve)"
    )

    @model_validator(mode="after")
    def _enough_reserve(self) -> ArrivalsConfig:
        scheduled = sum(change.count for change in self.schedule)
        if scheduled > self.reserve:
            raise ValueError(
                f"the schedule brings {scheduled} clients but reserve is {self.reserve}"
            )
        if self.rate_per_s > 0 and self.reserve == 0:
            raise ValueError("Poisson arrivals need a reserve of clients (set reserve)")
        return self


class DeparturesConfig(_Strict):
    """Clients leaving for good, chosen uniformly among those present."""

    rate_per_s: EventRate = Field(default=0.0, description="Poisson departures; 0: none")
    schedule: list[ScheduledChange] = Field(default=[], description="departures at given instants")


class ClientsConfig(_Strict):
    count: Annotated[int, Field(gt=0, le=MAX_CLIENTS), NO_BOOL] = Field(
        description=f"clients present at the start; with arrivals.reserve at most {MAX_CLIENTS:,}"
    )
    availability: Availability = Field(
        default=AlwaysOnline(), description="when each client is online"
    )
    arrivals: ArrivalsConfig = Field(
        default=ArrivalsConfig(), description="clients that join during the run"
    )
    departures: DeparturesConfig = Field(
        default=DeparturesConfig(), description="clients that leave for good during the run"
    )

    @model_validator(mode="after")
    def _bounded_population(self) -> ClientsConfig:
        if self.total > MAX_CLIENTS:
            raise ValueError(
                f"count + arrivals.reserve = {self.total:,}: at most {MAX_CLIENTS:,} clients"
            )
        return self

    @property
    def total(self) -> int:
        """Clients in the partition: those present at the start plus the reserve."""
        return self.count + self.arrivals.reserve

    @property
    def can_drop_out(self) -> bool:
        departures = self.departures.rate_per_s > 0 or bool(self.departures.schedule)
        return departures or self.availability.kind != "always"
