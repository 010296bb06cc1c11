"""Readers of the system model's input files: availability (a CSV of switches, interval
traces), device profiles, client positions and D2D edge lists, each with errors that name the
file and the line or entry.

Nothing here imports simpy, torch, pydantic or networkx, so the scenario schema reads these
files at validation (a missing or malformed one is found by ``fedsim validate``, not mid-run)
without loading the simulator.

Device profiles and availability traces come in FedScale's schema (JSON) or as CSV. FedScale
ships them as pickles; we never unpickle anything (a pickle runs code when loaded), so its files
are converted to JSON once (scenarios/traces/README.md shows how). Client ids in these files are
arbitrary integers (FedScale's look like 432802): readers return the entries in ascending
numeric id order and the caller gives the i-th to client i.
"""

from __future__ import annotations

import csv
import importlib.metadata
import importlib.util
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_DEVICE_COLUMNS = ("client", "compute_ms_per_sample", "uplink_kbps")
_AVAILABILITY_COLUMNS = ("client", "start_s", "end_s")


# --- CSV tables


def csv_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a CSV whose header is exactly ``columns`` (in any order)."""
    names = ",".join(columns)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or set(reader.fieldnames) != set(columns):
            raise ValueError(f"{path}: the header must be {names}")
        for row in reader:
            if None in row or None in row.values():  # DictReader's marks of a wrong field count
                raise ValueError(
                    f"{path}:{reader.line_num}: expected {len(columns)} fields: {names}"
                )
            yield reader.line_num, row


# --- availability: a CSV of switches


def read_availability_trace(path: Path) -> list[tuple[float, int, bool]]:
    """Rows (time_s, client, online) of a CSV trace with header time_s,client,state."""
    rows = []
    for line, row in csv_rows(path, ("time_s", "client", "state")):
        state = row["state"].strip()
        if state not in ("online", "offline"):
            raise ValueError(f"{path}:{line}: state must be online or offline, got {state!r}")
        try:
            time_s, client = float(row["time_s"]), int(row["client"])
        except ValueError:
            raise ValueError(f"{path}:{line}: time_s must be a number, client an integer") from None
        if not (math.isfinite(time_s) and time_s >= 0) or client < 0:
            raise ValueError(f"{path}:{line}: time_s and client must be finite and >= 0")
        rows.append((time_s, client, state == "online"))
    return sorted(rows)


# --- device profiles and availability traces


@dataclass(frozen=True)
class DeviceProfile:
    """How fast one device trains and talks; downlink_bps None: not in the file, the caller
    derives it (FedScale only gives one bandwidth)."""

    compute_s_per_sample: float
    uplink_bps: float
    downlink_bps: float | None


@dataclass(frozen=True)
class AvailabilityTrace:
    """Online during each [start, end) of intervals_s (sorted, non-overlapping, in seconds
    from the start of the run); the pattern repeats every period_s when given, else the
    client stays offline after the last interval."""

    intervals_s: tuple[tuple[float, float], ...]
    period_s: float | None

    def __post_init__(self) -> None:
        previous_end_s = 0.0
        for start_s, end_s in self.intervals_s:
            if not (math.isfinite(end_s) and previous_end_s <= start_s < end_s):
                raise ValueError(
                    f"intervals must be finite, sorted, non-overlapping [start, end) with "
                    f"0 <= start < end, got {self.intervals_s}"
                )
            previous_end_s = end_s
        if self.period_s is not None and not (
            math.isfinite(self.period_s) and self.period_s > 0 and self.period_s >= previous_end_s
        ):
            raise ValueError(
                f"period_s must be finite, > 0 and >= the last end, got {self.period_s}"
            )


def read_device_profiles(path: Path) -> list[DeviceProfile]:
    """Device profiles in ascending client-id order, from FedScale's device capacity JSON
    (client -> {"computation": ms per sample, "communication": kbit/s}, optional "downlink"
    in kbit/s) or a CSV client,compute_ms_per_sample,uplink_kbps[,downlink_kbps]."""
    return _by_suffix(path, _device_profiles_json, _device_profiles_csv)


def read_availability(path: Path) -> list[AvailabilityTrace]:
    """Availability traces in ascending client-id order, from FedScale's client behaviour
    JSON (client -> {"active": [s], "inactive": [s], "finish_time": s}, repeating every
    finish_time) or a CSV client,start_s,end_s of online intervals (no repeat)."""
    return _by_suffix(path, _availability_json, _availability_csv)


def merge_touching(intervals_s: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """One interval where one ends as the next starts: no offline instant between them."""
    merged: list[tuple[float, float]] = []
    for start_s, end_s in intervals_s:
        if merged and merged[-1][1] == start_s:
            merged[-1] = (merged[-1][0], end_s)
        else:
            merged.append((start_s, end_s))
    return merged


def _by_suffix(
    path: Path, from_json: Callable[[Path], list[T]], from_csv: Callable[[Path], list[T]]
) -> list[T]:
    readers = {".json": from_json, ".csv": from_csv}
    reader = readers.get(path.suffix.lower())
    if reader is None:
        raise ValueError(f"{path}: the file name must end in .json or .csv")
    entries = reader(path)
    if not entries:
        raise ValueError(f"{path}: no clients")
    return entries


def _client_id(text: str) -> int | None:
    text = text.strip()
    return int(text) if re.fullmatch(r"[0-9]+", text) else None


def _json_clients(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(key, entry) of a JSON object client id -> entry object, in ascending id order."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in pairs:  # json would keep the last one silently
            if key in seen:
                raise ValueError(f"{path}: key {key!r} appears twice")
            seen.add(key)
        return dict(pairs)

    try:
        with path.open(encoding="utf-8") as f:
            document = json.load(f, object_pairs_hook=no_duplicates)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not JSON (not UTF-8 text: {error})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a JSON object mapping client ids to entries")
    ids: dict[int, str] = {}
    for key, entry in document.items():
        client = _client_id(key)
        if client is None:
            raise ValueError(f"{path}: client {key!r}: the id must be an integer >= 0")
        if client in ids:
            raise ValueError(f"{path}: client {key!r}: the same id as {ids[client]!r}")
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: client {key!r}: expected an object")
        ids[client] = key
    return [(ids[client], document[ids[client]]) for client in sorted(ids)]


def _bound(positive: bool) -> str:
    return "> 0" if positive else ">= 0"


def _json_value(path: Path, key: str, entry: dict[str, Any], name: str) -> Any:
    if name not in entry:
        raise ValueError(f"{path}: client {key!r}: missing key {name!r}")
    return entry[name]


def _json_number(path: Path, key: str, value: Any, name: str, *, positive: bool = True) -> float:
    """A finite number > 0 (>= 0 unless positive); JSON booleans are not numbers."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        raise ValueError(
            f"{path}: client {key!r}: {name} must be a finite number {_bound(positive)}"
        )
    return float(value)


def _csv_clients(
    path: Path, columns: tuple[str, ...], *, positive: bool
) -> Iterator[tuple[str, int, dict[str, float]]]:
    """(file:line, client, the other columns as finite numbers > 0, or >= 0 unless
    positive) of each CSV row."""
    for line, row in csv_rows(path, columns):
        where = f"{path}:{line}"
        client = _client_id(row["client"])
        if client is None:
            raise ValueError(f"{where}: client must be an integer >= 0, got {row['client']!r}")
        numbers = {}
        for name in columns[1:]:
            try:
                numbers[name] = float(row[name])
            except ValueError:
                numbers[name] = math.nan
            value = numbers[name]
            if not (math.isfinite(value) and value >= 0) or (positive and value == 0):
                raise ValueError(f"{where}: {name} must be a finite number {_bound(positive)}")
        yield where, client, numbers


def _profile(compute_ms: float, uplink_kbps: float, downlink_kbps: float | None) -> DeviceProfile:
    """From the files' units (FedScale's) to seconds and bit/s."""
    return DeviceProfile(
        compute_ms / 1e3, uplink_kbps * 1e3, None if downlink_kbps is None else downlink_kbps * 1e3
    )


def _device_profiles_json(path: Path) -> list[DeviceProfile]:
    profiles = []
    for key, entry in _json_clients(path):
        compute_ms, uplink_kbps = (
            _json_number(path, key, _json_value(path, key, entry, name), name)
            for name in ("computation", "communication")
        )
        downlink_kbps = (
            _json_number(path, key, entry["downlink"], "downlink") if "downlink" in entry else None
        )
        profiles.append(_profile(compute_ms, uplink_kbps, downlink_kbps))
    return profiles


def _device_profiles_csv(path: Path) -> list[DeviceProfile]:
    with path.open(newline="") as f:
        header = next(csv.reader(f), [])
    columns = _DEVICE_COLUMNS + ("downlink_kbps",) if "downlink_kbps" in header else _DEVICE_COLUMNS
    profiles: dict[int, DeviceProfile] = {}
    for where, client, numbers in _csv_clients(path, columns, positive=True):
        if client in profiles:
            raise ValueError(f"{where}: client {client} appears twice")
        profiles[client] = _profile(
            numbers["compute_ms_per_sample"], numbers["uplink_kbps"], numbers.get("downlink_kbps")
        )
    return [profiles[client] for client in sorted(profiles)]


def _availability_json(path: Path) -> list[AvailabilityTrace]:
    traces = []
    for key, entry in _json_clients(path):
        starts, ends = (_json_value(path, key, entry, name) for name in ("active", "inactive"))
        if not (isinstance(starts, list) and isinstance(ends, list)) or len(starts) != len(ends):
            raise ValueError(
                f"{path}: client {key!r}: active and inactive must be lists of equal length"
            )
        intervals_s = [
            (
                _json_number(path, key, start, "active", positive=False),
                _json_number(path, key, end, "inactive", positive=False),
            )
            for start, end in zip(starts, ends, strict=True)
        ]
        previous_end_s = _check_intervals(f"{path}: client {key!r}", intervals_s, 0.0)
        period_s = _json_number(
            path, key, _json_value(path, key, entry, "finish_time"), "finish_time"
        )
        if period_s < previous_end_s:
            raise ValueError(f"{path}: client {key!r}: finish_time must be >= the last inactive")
        traces.append(AvailabilityTrace(tuple(merge_touching(intervals_s)), period_s))
    return traces


def _availability_csv(path: Path) -> list[AvailabilityTrace]:
    rows: dict[int, list[tuple[float, float, str]]] = {}
    for where, client, numbers in _csv_clients(path, _AVAILABILITY_COLUMNS, positive=False):
        rows.setdefault(client, []).append((numbers["start_s"], numbers["end_s"], where))
    traces = []
    for client in sorted(rows):
        previous_end_s = 0.0
        intervals_s = []
        for start_s, end_s, where in sorted(rows[client]):
            previous_end_s = _check_intervals(
                f"{where}: client {client}", [(start_s, end_s)], previous_end_s
            )
            intervals_s.append((start_s, end_s))
        traces.append(AvailabilityTrace(tuple(merge_touching(intervals_s)), None))
    return traces


def _check_intervals(
    where: str, intervals_s: list[tuple[float, float]], previous_end_s: float
) -> float:
    """The last end, after checking each start < its end and >= the previous end."""
    for start_s, end_s in intervals_s:
        if not start_s < end_s:
            raise ValueError(
                f"{where}: an interval [{start_s:g}, {end_s:g}) must start before it ends"
            )
        if start_s < previous_end_s:
            raise ValueError(
                f"{where}: the interval [{start_s:g}, {end_s:g}) overlaps or precedes the one "
                f"ending at {previous_end_s:g}"
            )
        previous_end_s = end_s
    return previous_end_s


# --- client positions and D2D edge lists


def read_positions(path: Path) -> dict[int, tuple[float, float]]:
    """Client positions (metres, base station at the origin) from a CSV: client,x_m,y_m."""
    positions: dict[int, tuple[float, float]] = {}
    for line, row in csv_rows(path, ("client", "x_m", "y_m")):
        try:
            client, x_m, y_m = int(row["client"]), float(row["x_m"]), float(row["y_m"])
        except ValueError:
            raise ValueError(
                f"{path}:{line}: client must be an integer, x_m, y_m numbers"
            ) from None
        if client < 0 or not (abs(x_m) <= 1e6 and abs(y_m) <= 1e6):
            raise ValueError(f"{path}:{line}: client must be >= 0 and |x_m|, |y_m| <= 1e6")
        if client in positions:
            raise ValueError(f"{path}:{line}: client {client} is placed twice")
        positions[client] = (x_m, y_m)
    return positions


def read_edge_list(path: Path, num_nodes: int) -> list[tuple[int, int, float | None]]:
    """Edges (u, v, rate_bps or None) of a D2D edge-list file of ``u v [rate_mbps]`` lines
    (``#`` starts a comment) on nodes 0..num_nodes-1, in file order; no self-loops, no edge
    twice (in either direction)."""
    edges: list[tuple[int, int, float | None]] = []
    seen: set[tuple[int, int]] = set()
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{path}:{lineno}"
        if len(fields) not in (2, 3):
            raise ValueError(f"{where}: expected 'u v [rate_mbps]', got {line.strip()!r}")
        try:
            u, v = int(fields[0]), int(fields[1])
            rate_mbps = float(fields[2]) if len(fields) == 3 else None
        except ValueError:
            raise ValueError(f"{where}: expected 'u v [rate_mbps]', got {line.strip()!r}") from None
        for node in (u, v):
            if not 0 <= node < num_nodes:
                raise ValueError(f"{where}: node {node} is outside 0..{num_nodes - 1}")
        if u == v:
            raise ValueError(f"{where}: self-loop on node {u}")
        if (min(u, v), max(u, v)) in seen:
            raise ValueError(f"{where}: duplicate edge {u}-{v}")
        seen.add((min(u, v), max(u, v)))
        if rate_mbps is None:
            edges.append((u, v, None))
        elif 0 < rate_mbps < math.inf:
            edges.append((u, v, rate_mbps * 1e6))
        else:
            raise ValueError(f"{where}: rate_mbps must be positive and finite, got {rate_mbps}")
    return edges


def sionna_tables_folder() -> Path | None:
    """Where the installed Sionna keeps its BLER tables, found without importing it."""
    spec = importlib.util.find_spec("sionna")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "sys" / "bler_tables"
    return folder if folder.is_dir() else None


def sionna_version() -> str | None:
    """The version of the sionna-no-rt whose tables ``sionna_tables_folder`` finds (from its
    metadata, without importing it); None where there are none, "unknown" where a ``sionna``
    package has them without that distribution's metadata."""
    if sionna_tables_folder() is None:
        return None
    try:
        return importlib.metadata.version("sionna-no-rt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
