"""A satellite constellation as the system (``system.constellation``): the satellites are the
clients, the server sits at ground stations, on a high-altitude platform or in MEO, and the
links follow the passes (``fedsim.sim.orbits``, ``fedsim.sim.ntn``, ``fedsim.sim.passes``)."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from fedsim.config.base import NO_BOOL, RateMbps, _read_referenced_file, _Strict
from fedsim.sim import ntn, orbits

Degrees = Annotated[float, NO_BOOL]
Decibels = Annotated[float, Field(ge=-100, le=100), NO_BOOL]


def read_tle_file(path: Path) -> list[tuple[str, str, str]]:
    try:
        return orbits.parse_tle(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


class WalkerConfig(_Strict):
    """Walker-delta i: T/P/F on circular orbits."""

    total: Annotated[int, Field(ge=1, le=100_000), NO_BOOL] = Field(
        description="T: the satellites, one client each"
    )
    planes: Annotated[int, Field(ge=1, le=10_000), NO_BOOL] = Field(
        default=1, description="P: orbital planes (total a multiple of them)"
    )
    phasing: Annotated[int, Field(ge=0, le=100_000), NO_BOOL] = Field(
        default=0, description="F: the phasing between adjacent planes (below planes)"
    )
    altitude_km: Annotated[float, Field(le=100_000), NO_BOOL] = Field(
        description="above the mean radius (6,371 km); at least 100 km"
    )
    inclination_deg: Annotated[float, Field(ge=0, le=180), NO_BOOL] = Field(
        default=53.0, description="i: the planes' inclination"
    )

    @field_validator("altitude_km")
    @classmethod
    def _above_the_earth(cls, value: float) -> float:
        if value < 100:
            where = "inside the Earth" if value <= 0 else "below 100 km (no orbit lasts there)"
            raise ValueError(f"{value:g} km is {where}")
        return value

    @model_validator(mode="after")
    def _planes_divide(self) -> WalkerConfig:
        if self.total % self.planes:
            raise ValueError(f"total {self.total} is not a multiple of planes {self.planes}")
        if self.phasing >= self.planes:
            raise ValueError(f"phasing {self.phasing} must be below planes {self.planes}")
        return self


class ServerNodeConfig(_Strict):
    """Where the server is: a ground station, a high-altitude platform (fixed above a point,
    8-50 km up) or a node in a circular medium orbit. Several nodes are one server (stations
    linked on the ground): a satellite uses whichever it sees, the best one where it sees
    several."""

    kind: Literal["ground", "hap", "meo"] = Field(
        default="ground",
        description="a ground station, a high-altitude platform or a medium-orbit node",
    )
    name: str = Field(default="station", description="the node's name (each its own)")
    lat_deg: Annotated[float, Field(ge=-90, le=90), NO_BOOL] = Field(
        default=0.0, description="ground and hap: latitude"
    )
    lon_deg: Annotated[float, Field(ge=-180, le=360), NO_BOOL] = Field(
        default=0.0, description="ground and hap: longitude"
    )
    altitude_km: Annotated[float, Field(ge=0, le=100_000), NO_BOOL] | None = Field(
        default=None, description="ground: 0; hap: 20 (8-50); meo: required (2,000-35,786)"
    )
    min_elevation_deg: Annotated[float, Field(ge=0, le=90), NO_BOOL] = Field(
        default=10.0, description="ground and hap: the elevation mask (0-90)"
    )
    inclination_deg: Annotated[float, Field(ge=0, le=180), NO_BOOL] = Field(
        default=0.0, description="meo: its orbit's inclination"
    )
    raan_deg: Degrees = Field(
        default=0.0, ge=-360, le=360, description="meo: right ascension of the ascending node"
    )
    anomaly_deg: Degrees = Field(
        default=0.0, ge=-360, le=360, description="meo: argument of latitude at time 0"
    )

    @model_validator(mode="after")
    def _altitude_by_kind(self) -> ServerNodeConfig:
        altitude = self.altitude_km
        if self.kind == "ground" and altitude is not None and altitude > 10:
            raise ValueError(f"altitude_km: a ground station at {altitude:g} km: use kind hap")
        if self.kind == "hap" and altitude is not None and not 8 <= altitude <= 50:
            raise ValueError(f"altitude_km: a platform flies 8-50 km up, not {altitude:g}")
        if self.kind == "meo" and (altitude is None or not 2000 <= altitude <= 35_786):
            raise ValueError("altitude_km: a meo node needs an altitude of 2,000-35,786 km")
        return self

    def node(self, earth_rotation: bool) -> orbits.Node:
        if self.kind == "meo":
            orbit = orbits.CircularOrbits(
                np.array([self.altitude_km * 1e3]), np.radians([self.inclination_deg]),
                np.radians([self.raan_deg]), np.radians([self.anomaly_deg]), earth_rotation,
            )  # fmt: skip
            return orbits.OrbitingNode(self.name, orbit)
        altitude_m = (self.altitude_km if self.altitude_km is not None else
                      (20.0 if self.kind == "hap" else 0.0)) * 1e3  # fmt: skip
        position = orbits.geodetic_to_fixed(self.lat_deg, self.lon_deg, altitude_m)
        return orbits.FixedNode(self.name, position, self.min_elevation_deg, altitude_m)


BAND_DEFAULTS = {  # TR 38.821 Table 6.1.1.1-1 (Set-1, LEO-600) and -3 (VSAT; handheld in S)
    "Ka": {"to_ground_ghz": 20.0, "from_ground_ghz": 30.0, "bandwidth_mhz": 400.0,
           "satellite_eirp_dbw": 4.0 + 10 * math.log10(400.0), "satellite_gt_db_per_k": 13.0,
           "station_eirp_dbw": 3.0 + 43.2, "station_gt_db_per_k": 15.9},
    "S": {"to_ground_ghz": 2.0, "from_ground_ghz": 2.0, "bandwidth_mhz": 30.0,
          "satellite_eirp_dbw": 34.0 + 10 * math.log10(30.0), "satellite_gt_db_per_k": 1.1,
          "station_eirp_dbw": -7.0, "station_gt_db_per_k": -31.6},
}  # fmt: skip


class RateConfig(_Strict):
    """What a link's SNR gives: Shannon on the band (``gap_db``, ``max_bits_per_hz``), NR's
    link adaptation (the MCS meeting ``target_bler``, times 1 − BLER: the link layer's
    expected goodput), or a paper's ``fixed`` rate while in sight."""

    model: Literal["shannon", "nr", "fixed"] = Field(
        default="shannon", description="shannon, nr (link adaptation's goodput) or fixed (mbps)"
    )
    mbps: RateMbps | None = Field(default=None, description="fixed: the rate")
    gap_db: Annotated[float, Field(ge=0, le=20), NO_BOOL] = Field(
        default=0.0, description="shannon: Γ, the rate is b·log2(1 + SNR/Γ)"
    )
    max_bits_per_hz: Annotated[float, Field(gt=0, le=20), NO_BOOL] | None = Field(
        default=None, description="shannon: cap on spectral efficiency (null: none)"
    )
    target_bler: Annotated[float, Field(gt=0, lt=1), NO_BOOL] = Field(
        default=0.1, description="nr: the block error rate link adaptation aims at"
    )

    @model_validator(mode="after")
    def _fixed_needs_a_rate(self) -> RateConfig:
        if (self.model == "fixed") != (self.mbps is not None):
            raise ValueError("mbps: a fixed rate is given with model fixed, and only there")
        return self


class LinkConfig(_Strict):
    """The satellite-server link: TR 38.811's channel on the way through the atmosphere
    (a platform or a MEO node: free space), and its budget. Null values take the band's
    defaults (``BAND_DEFAULTS``)."""

    band: Literal["Ka", "S"] = Field(
        default="Ka", description="the band: its budget's defaults and its channel tables"
    )
    scenario: Literal["dense_urban", "urban", "suburban", "rural"] = Field(
        default="rural",
        description="TR 38.811's environment (rural reads the suburban tables)",
    )
    line_of_sight: Literal["always", "probability"] = Field(
        default="always",
        description="always (a station's antenna sees the sky) or drawn from Table 6.6.1-1",
    )
    shadowing: bool = Field(default=True, description="TR 38.811's shadow fading")
    to_ground_ghz: Annotated[float, Field(ge=1, le=54), NO_BOOL] | None = Field(
        default=None, description="carrier from the satellite to the server (null: the band's)"
    )
    from_ground_ghz: Annotated[float, Field(ge=1, le=54), NO_BOOL] | None = Field(
        default=None, description="carrier from the server to the satellite (null: the band's)"
    )
    bandwidth_mhz: Annotated[float, Field(gt=0, le=10_000), NO_BOOL] | None = Field(
        default=None, description="the link's band (null: the band's default)"
    )
    satellite_eirp_dbw: Decibels | None = Field(
        default=None, description="the satellite's EIRP (null: the band's default)"
    )
    satellite_gt_db_per_k: Decibels | None = Field(
        default=None, description="the satellite's G/T (null: the band's default)"
    )
    station_eirp_dbw: Decibels | None = Field(
        default=None, description="the station's EIRP (null: the band's default)"
    )
    station_gt_db_per_k: Decibels | None = Field(
        default=None, description="the station's G/T (null: the band's default)"
    )
    rate: RateConfig = Field(default=RateConfig(), description="what a link's SNR gives")
    segment_s: Annotated[float, Field(ge=0.1, le=600), NO_BOOL] = Field(
        default=5.0, description="the rate is held over segments of a pass this long"
    )

    def value(self, name: str) -> float:
        given = getattr(self, name)
        return BAND_DEFAULTS[self.band][name] if given is None else given

    @model_validator(mode="after")
    def _carriers_in_band(self) -> LinkConfig:
        for name in ("to_ground_ghz", "from_ground_ghz"):
            try:
                band = ntn.band_of(self.value(name) * 1e9)
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
            if band != self.band:
                raise ValueError(f"{name}: {self.value(name):g} GHz is not in band {self.band}")
        return self


class IslConfig(_Strict):
    """Inter-satellite links, the D2D graph of the decentralized algorithms: each satellite
    to its neighbours in its plane (``ring``), and to the same slot of the adjacent planes
    (``grid``), while their line of sight clears the Earth by ``grazing_km``."""

    neighbours: Literal["ring", "grid"] = Field(
        default="grid",
        description="ring: the plane's neighbours; grid: and the same slot of the next planes",
    )
    grazing_km: Annotated[float, Field(ge=0, le=1000), NO_BOOL] = Field(
        default=0.0, description="a link's line of sight must clear the Earth by this"
    )
    max_range_km: Annotated[float, Field(gt=0, le=100_000), NO_BOOL] | None = Field(
        default=None, description="no link beyond this range (null: none)"
    )
    rate_mbps: RateMbps | None = Field(
        default=None, description="a fixed rate; null: the free-space budget below (Shannon)"
    )
    carrier_ghz: Annotated[float, Field(ge=1, le=100), NO_BOOL] = Field(
        default=26.0, description="the ISL carrier"
    )
    bandwidth_mhz: Annotated[float, Field(gt=0, le=10_000), NO_BOOL] = Field(
        default=400.0, description="the ISL band"
    )
    eirp_dbw: Decibels = Field(default=30.0, description="each satellite's ISL EIRP")
    gt_db_per_k: Decibels = Field(default=13.0, description="each satellite's ISL G/T")


class ConstellationConfig(_Strict):
    walker: WalkerConfig | None = Field(
        default=None, description="the satellites as a Walker-delta constellation (or tle)"
    )
    tle: Path | None = Field(default=None, description="a TLE file: one satellite per set")
    epoch_utc: Annotated[datetime, NO_BOOL] | None = Field(
        default=None, description="time 0 of the run (TLE: default the latest element epoch)"
    )
    earth_rotation: bool = Field(
        default=True, description="the Earth turns under the orbits (TLEs need it)"
    )
    servers: list[ServerNodeConfig] = Field(
        min_length=1,
        max_length=1000,
        description="the server's nodes; a satellite uses the best one it sees",
    )
    link: LinkConfig = Field(default=LinkConfig(), description="the satellite-server links")
    isl: IslConfig | None = Field(
        default=None, description="inter-satellite links, the D2D graph; null: none"
    )
    relay: Literal["none", "plane"] = Field(
        default="none",
        description=(
            "a message between a satellite and the server: none, over the satellite's own "
            "pass; plane, hop by hop over its plane's ring ISLs (either way round, store and "
            "forward) to whichever plane-mate's pass delivers it first (FedISL's intra-plane "
            "relaying; needs walker and isl)"
        ),
    )

    @field_validator("tle")
    @classmethod
    def _tle_parses(cls, path: Path | None) -> Path | None:
        if path is not None:
            _read_referenced_file(path, read_tle_file)
        return path

    @model_validator(mode="after")
    def _one_source(self) -> ConstellationConfig:
        if (self.walker is None) == (self.tle is None):
            raise ValueError("walker: give the satellites as a walker constellation or a tle file")
        if self.tle is None and self.epoch_utc is not None:
            raise ValueError("epoch_utc: only TLEs have a calendar time 0")
        if self.tle is not None and not self.earth_rotation:
            raise ValueError("earth_rotation: TLEs are propagated on the real, turning Earth")
        if len({s.name for s in self.servers}) != len(self.servers):
            raise ValueError("servers: each node needs its own name")
        if self.relay == "plane" and (self.walker is None or self.isl is None):
            missing = "walker (its planes)" if self.walker is None else "isl (the ring's links)"
            raise ValueError(f"relay: plane relays over a plane's ring: it needs {missing}")
        return self

    @property
    def count(self) -> int:
        if self.walker is not None:
            return self.walker.total
        return len(_read_referenced_file(self.tle, read_tle_file))

    def orbits(self) -> orbits.CircularOrbits | orbits.TleOrbits:
        walker = self.walker
        if walker is not None:
            return orbits.walker_delta(
                walker.total, walker.planes, walker.phasing, walker.altitude_km * 1e3,
                walker.inclination_deg, earth_rotation=self.earth_rotation,
            )  # fmt: skip
        elements = _read_referenced_file(self.tle, read_tle_file)
        return orbits.TleOrbits(elements, self.epoch_utc or latest_epoch(elements))

    def nodes(self) -> list[orbits.Node]:
        return [server.node(self.earth_rotation) for server in self.servers]

    def isl_pairs(self, members: list[list[int]]) -> list[tuple[int, int]]:
        """Ring neighbours in each plane (``members``: each plane's satellites in slot order)
        and, with ``grid``, the same slot of the next plane."""
        if self.isl is None:
            return []
        pairs = set()
        for sats in members:
            for k, sat in enumerate(sats):
                if len(sats) > 1:
                    pairs.add(tuple(sorted((sat, sats[(k + 1) % len(sats)]))))
        if self.isl.neighbours == "grid" and len(members) > 1:
            for p, sats in enumerate(members):
                following = members[(p + 1) % len(members)]
                for k, sat in enumerate(sats[: len(following)]):
                    if sat != following[k]:
                        pairs.add(tuple(sorted((sat, following[k]))))
        return sorted(pairs)

    def check_visibility(self, horizon_s: float, satellites: int, forever: bool) -> list[str]:
        """Problems of a constellation in which the server would wait for ever: a node that
        sees no satellite within ``horizon_s``, and (``forever``: no time budget ends the
        run) a satellite that sees no node within it."""
        contacts = orbits.Contacts(self.orbits(), self.nodes())
        problems = []
        seen = set()
        for node_index, server in enumerate(self.servers):
            if not any(
                contacts.windows_of(sat, node_index, horizon_s) for sat in range(satellites)
            ):
                problems.append(
                    f"system.constellation.servers[{node_index}]: {server.name} sees no "
                    f"satellite in the first {horizon_s / 3600:g} h (check its latitude "
                    "against the inclination, and min_elevation_deg)"
                )
        for sat in range(satellites):
            if contacts.windows(sat, horizon_s):
                seen.add(sat)
        if not seen and not problems:
            problems.append(
                f"system.constellation: no satellite sees a server node in the first "
                f"{horizon_s / 3600:g} h: nothing could ever be sent"
            )
        elif forever and len(seen) < satellites:
            missing = sorted(set(range(satellites)) - seen)
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            problems.append(
                f"system.constellation: satellite(s) {shown} see no server node in the first "
                f"{horizon_s / 3600:g} h: a round would wait for them for ever (set "
                "run.time_budget_s, or add a station they pass over)"
            )
        return problems


def latest_epoch(elements: list[tuple[str, str, str]]) -> datetime:
    """The latest epoch of the element sets (field 4 of line 1: yyddd.dddddddd)."""
    latest = 0.0
    moment = None
    for _, first, _ in elements:
        year, day = int(first[18:20]), float(first[20:32])
        year += 2000 if year < 57 else 1900
        stamp = datetime(year, 1, 1, tzinfo=timezone.utc).timestamp() + (day - 1) * 86_400.0
        if moment is None or stamp > latest:
            latest, moment = stamp, datetime.fromtimestamp(stamp, tz=timezone.utc)
    return moment
