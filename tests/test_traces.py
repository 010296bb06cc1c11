"""Device profiles and availability traces: FedScale's JSON schema and CSV read to the same
values, in numeric client-id order; a replay switches clients exactly at the trace's times;
every malformed file is a ValueError naming the file and the entry."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import simpy

from fedsim.sim import readers, traces
from fedsim.sim.readers import (
    AvailabilityTrace,
    DeviceProfile,
    read_availability,
    read_device_profiles,
)
from fedsim.sim.traces import replay_availability

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "traces"


# --- the shipped examples


def test_the_example_device_profiles_read_back_the_same_from_json_and_csv():
    from_json = read_device_profiles(EXAMPLES / "devices.json")
    from_csv = read_device_profiles(EXAMPLES / "devices.csv")
    assert len(from_json) == 40
    assert from_json == from_csv
    # client 19, the smallest id (the JSON lists ids in text order, "112566" first)
    assert from_json[0] == DeviceProfile(15.9e-3, 2409e3, 16740e3)
    assert from_json[-1] == DeviceProfile(29.8e-3, 1563e3, 11850e3)  # client 936247
    for profile in from_json:
        assert 5e-3 <= profile.compute_s_per_sample <= 50e-3
        assert 500e3 <= profile.uplink_bps <= 20e6
        assert profile.downlink_bps is not None and profile.downlink_bps > profile.uplink_bps


def test_the_example_availability_reads_back_the_same_from_json_and_csv():
    from_json = read_availability(EXAMPLES / "availability.json")
    from_csv = read_availability(EXAMPLES / "availability.csv")
    assert len(from_json) == len(from_csv) == 40
    assert [t.intervals_s for t in from_json] == [t.intervals_s for t in from_csv]
    assert {t.period_s for t in from_json} == {3600.0}
    assert {t.period_s for t in from_csv} == {None}
    assert from_json[0].intervals_s == ((1396.0, 1626.0), (2384.0, 3016.0))  # client 19
    assert from_json[-1].intervals_s == ((109.0, 259.0), (939.0, 1100.0), (1861.0, 3046.0))
    assert sum(len(t.intervals_s) for t in from_json) == 96
    for trace in from_json:
        assert all(120 <= end - start < 1200 for start, end in trace.intervals_s)
        assert trace.intervals_s[-1][1] <= 3600


def test_the_example_ids_are_the_same_in_both_files():
    def ids(name: str) -> list[int]:
        return sorted(int(key) for key in json.loads((EXAMPLES / name).read_text()))

    assert ids("devices.json") == ids("availability.json")
    assert ids("devices.json")[:5] == [19, 46, 50, 99, 27557]


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        (traces, {"torch", "pydantic", "pickle"}),
        (readers, {"torch", "pydantic", "pickle", "simpy", "networkx"}),  # the schema reads with it
    ],
    ids=["traces", "readers"],
)
def test_the_module_imports_neither_torch_nor_pydantic(module, forbidden):
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    roots = {name.split(".")[0] for name in imported}
    assert roots.isdisjoint(forbidden), roots


# --- reading


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_ids_are_ordered_numerically_not_as_text(tmp_path):
    devices = {
        "432802": {"computation": 3, "communication": 30},
        "9": {"computation": 1, "communication": 10},
        "10": {"computation": 2, "communication": 20},
    }
    path = write(tmp_path, "d.json", json.dumps(devices))
    assert [p.compute_s_per_sample for p in read_device_profiles(path)] == [1e-3, 2e-3, 3e-3]
    rows = "client,uplink_kbps,compute_ms_per_sample\n432802,30,3\n9,10,1\n10,20,2\n"
    from_csv = read_device_profiles(write(tmp_path, "d.csv", rows))
    assert from_csv == read_device_profiles(path)
    assert [p.uplink_bps for p in from_csv] == [10e3, 20e3, 30e3]
    assert {p.downlink_bps for p in from_csv} == {None}

    rows = "client,start_s,end_s\n100,5,6\n20,3,4\n3,1,2\n20,0,1.5\n"
    intervals = [t.intervals_s for t in read_availability(write(tmp_path, "a.csv", rows))]
    assert intervals == [((1.0, 2.0),), ((0.0, 1.5), (3.0, 4.0)), ((5.0, 6.0),)]


def test_json_and_csv_of_the_same_data_are_equal_with_and_without_downlink(tmp_path):
    one = {"computation": 12.5, "communication": 800}
    both = {"1": one, "2": {**one, "downlink": 4000}}
    from_json = read_device_profiles(write(tmp_path, "d.json", json.dumps(both)))
    assert from_json == [DeviceProfile(0.0125, 800e3, None), DeviceProfile(0.0125, 800e3, 4e6)]
    header = "client,compute_ms_per_sample,uplink_kbps"
    three = read_device_profiles(write(tmp_path, "d3.csv", f"{header}\n1,12.5,800\n"))
    four = read_device_profiles(
        write(tmp_path, "d4.csv", f"{header},downlink_kbps\n2,12.5,800,4e3")
    )
    assert three + four == from_json


def test_fedscale_extra_keys_are_ignored_and_touching_intervals_merged(tmp_path):
    behave = {
        "7": {
            "duration": 99,
            "model": "x",
            "active": [0, 10, 30],
            "inactive": [10, 20, 40],
            "finish_time": 50,
        },
        "8": {"active": [], "inactive": [], "finish_time": 5},
    }
    (seven, eight) = read_availability(write(tmp_path, "a.json", json.dumps(behave)))
    assert seven == AvailabilityTrace(((0.0, 20.0), (30.0, 40.0)), 50.0)
    assert eight == AvailabilityTrace((), 5.0)
    rows = "client,start_s,end_s\n7,30,40\n7,10,20\n7,0,10\n"
    (from_csv,) = read_availability(write(tmp_path, "a.csv", rows))
    assert from_csv.intervals_s == seven.intervals_s and from_csv.period_s is None


# --- replay


def replayed(trace: AvailabilityTrace, until_s: float | None, leave_on_call: int = 0) -> list:
    """(time, online) of each set_online call; the client leaves on call leave_on_call."""
    env = simpy.Environment()
    calls: list[tuple[float, bool]] = []

    def set_online(online: bool) -> bool:
        calls.append((env.now, online))
        return len(calls) != leave_on_call

    process = env.process(replay_availability(env, trace, set_online))
    env.run(until=until_s)
    assert until_s is not None or not process.is_alive
    return calls


def alternating(times_s: list[float]) -> list[tuple[float, bool]]:
    """Switches at times_s, offline first (every client starts online), then alternating."""
    return [(t, i % 2 == 1) for i, t in enumerate(times_s)]


@pytest.mark.parametrize(
    "intervals, period_s, until_s, times_s",
    [
        # offline at 0 (the first interval starts later), then repeated every period
        (
            ((60, 120), (300, 400)),
            600,
            1300,
            [0, 60, 120, 300, 400, 660, 720, 900, 1000, 1260],
        ),
        # from 0 to the period's end: online across the wrap, no switch at 600 or 1200
        (((0, 100), (500, 600)), 600, 1750, [100, 500, 700, 1100, 1300, 1700]),
        # touching intervals: no switch at the shared instant
        (((10, 20), (20, 30)), None, None, [0, 10, 30]),
        # without a period: offline for good after the last interval
        (((0, 50),), None, None, [50]),
        (((5, 50),), None, None, [0, 5, 50]),
        # no intervals: offline at 0 for good, repeated or not
        ((), None, None, [0]),
        ((), 60, None, [0]),
        # online over the whole period: never switched
        (((0, 60),), 60, None, []),
        (((0, 30), (30, 60)), 60, None, []),
    ],
)
def test_replay_switches_at_exactly_the_trace_times(intervals, period_s, until_s, times_s):
    trace = AvailabilityTrace(intervals, period_s)
    assert replayed(trace, until_s) == alternating(times_s)


def test_replay_across_the_wrap_is_exact_with_a_period_that_is_not_a_binary_fraction():
    # 5 * 0.1 + 0.1 != 6 * 0.1: the wrap at 0.6 must still make no switch
    trace = AvailabilityTrace(((0.0, 0.05), (0.07, 0.1)), 0.1)
    calls = replayed(trace, 0.75)
    assert [online for _, online in calls] == [False, True] * 7
    assert [time_s for time_s, _ in calls] == pytest.approx(
        [k / 10 + dt for k in range(7) for dt in (0.05, 0.07)]
    )


def test_replay_stops_when_the_client_has_left():
    trace = AvailabilityTrace(((60.0, 120.0),), 600.0)
    assert replayed(trace, None, leave_on_call=3) == [(0, False), (60, True), (120, False)]


def test_the_example_replays_within_its_period():
    trace = read_availability(EXAMPLES / "availability.json")[0]
    switches = [(1396, True), (1626, False), (2384, True), (3016, False)]
    later = [(t + 3600, online) for t, online in switches]
    assert replayed(trace, 7200) == [(0, False), *switches, *later]


@pytest.mark.parametrize(
    "intervals, period_s",
    [(((5.0, 5.0),), None), (((0.0, 10.0), (5.0, 20.0)), None), (((0.0, 10.0),), 5.0)],
)
def test_a_trace_built_in_code_is_checked(intervals, period_s):
    with pytest.raises(ValueError):
        AvailabilityTrace(intervals, period_s)


# --- malformed files: a ValueError naming the file and the entry

DEVICE = '"5": {"computation": 10, "communication": 100}'
BEHAVE = '"5": {"active": [0], "inactive": [10], "finish_time": 60}'
DEVICE_HEADER = "client,compute_ms_per_sample,uplink_kbps"
AVAILABILITY_HEADER = "client,start_s,end_s"


def device(computation: str, extra: str = "") -> str:
    """devices JSON of client "5" with this computation value."""
    return f'{{"5": {{"computation": {computation}, "communication": 1{extra}}}}}'


def behave(active: str, inactive: str, finish_time: str = "60") -> str:
    """availability JSON of client "5"."""
    return f'{{"5": {{"active": {active}, "inactive": {inactive}, "finish_time": {finish_time}}}}}'


MALFORMED = [
    # name, text, where, what
    ("d.json", '{"5": {"computation": 10}}', "client '5'", "missing key 'communication'"),
    ("d.json", device("-1"), "client '5'", "computation must be a finite number > 0"),
    ("d.json", device("0"), "client '5'", "computation must be a finite number > 0"),
    ("d.json", device("NaN"), "client '5'", "finite"),
    ("d.json", device("true"), "client '5'", "computation"),
    ("d.json", device('"9"'), "client '5'", "computation"),
    ("d.json", device("1", ', "downlink": -2'), "client '5'", "downlink"),
    ("d.json", f'{{{DEVICE}, "05": {{}}}}', "client '05'", "the same id as '5'"),
    ("d.json", f"{{{DEVICE}, {DEVICE}}}", "key '5'", "appears twice"),
    ("d.json", '{"phone-3": {}}', "client 'phone-3'", "integer"),
    ("d.json", '{"5": [10, 100]}', "client '5'", "expected an object"),
    ("d.json", "[1, 2]", "", "expected a JSON object"),
    ("d.json", "{", "", "not JSON"),
    ("d.json", f"{DEVICE_HEADER}\n5,10,100\n", "", "not JSON"),
    ("d.json", "{}", "", "no clients"),
    ("a.json", behave("[0, 20]", "[10]"), "client '5'", "lists of equal length"),
    ("a.json", behave("0", "10"), "client '5'", "lists"),
    ("a.json", behave("[0, 5]", "[10, 20]"), "client '5'", "overlaps"),
    ("a.json", behave("[20, 0]", "[30, 10]"), "client '5'", "overlaps or precedes"),
    ("a.json", behave("[10]", "[10]"), "client '5'", "start before"),
    ("a.json", behave("[-1]", "[10]"), "client '5'", "active must be a finite number >= 0"),
    ("a.json", behave("[0]", "[10]", "9"), "client '5'", "finish_time must be >="),
    ("a.json", behave("[]", "[]", "0"), "client '5'", "finish_time must be a finite number > 0"),
    ("a.json", '{"5": {"active": [0], "inactive": [10]}}', "client '5'", "missing key 'finish"),
    ("a.json", f'{{{BEHAVE}, "6": {{"active": [0]}}}}', "client '6'", "missing key 'inactive'"),
    ("d.txt", f"{{{DEVICE}}}", "", "must end in .json or .csv"),
    ("a.pkl", f"{{{BEHAVE}}}", "", "must end in .json or .csv"),
]

# name, header, rows, the line named and the message
MALFORMED_CSV = [
    ("d.csv", "client,compute_ms,uplink_kbps", ["5,1,1"], "", "the header must be"),
    ("d.csv", DEVICE_HEADER, ["5,1"], ":2", "expected 3 fields"),
    ("d.csv", DEVICE_HEADER, ["5,10,100", "6,-1,100"], ":3", "compute_ms_per_sample"),
    ("d.csv", DEVICE_HEADER, ["5,10,0"], ":2", "uplink_kbps must be a finite number > 0"),
    ("d.csv", DEVICE_HEADER, ["5,10,fast"], ":2", "uplink_kbps"),
    ("d.csv", DEVICE_HEADER, ["5,10,inf"], ":2", "finite"),
    ("d.csv", DEVICE_HEADER, ["5,10,100", "5,10,100"], ":3", "client 5 appears twice"),
    ("d.csv", DEVICE_HEADER, ["-5,10,100"], ":2", "client must be an integer"),
    ("d.csv", DEVICE_HEADER, [], "", "no clients"),
    ("a.csv", "client,start,end", ["5,0,1"], "", "the header must be client,start_s,end_s"),
    ("a.csv", AVAILABILITY_HEADER, ["5,0,10", "6,0,1", "5,5,20"], ":4: client 5", "overlaps"),
    ("a.csv", AVAILABILITY_HEADER, ["5,10,10"], ":2: client 5", "start before"),
    ("a.csv", AVAILABILITY_HEADER, ["5,-3,10"], ":2", "start_s must be a finite number >= 0"),
]
MALFORMED += [
    (name, "\n".join([header, *rows, ""]), where, what)
    for name, header, rows, where, what in MALFORMED_CSV
]


@pytest.mark.parametrize("name, text, where, what", MALFORMED)
def test_a_malformed_file_names_the_file_and_the_entry(tmp_path, name, text, where, what):
    path = write(tmp_path, name, text)
    read = read_availability if name.startswith("a") else read_device_profiles
    with pytest.raises(ValueError) as error:
        read(path)
    message = str(error.value)
    assert message.startswith(f"{path}{where}" if where.startswith(":") else f"{path}:"), message
    assert where in message and what in message, message


def test_a_binary_file_is_not_json(tmp_path):
    path = tmp_path / "d.json"
    path.write_bytes(b"\x80\x04\x95pickle")
    with pytest.raises(ValueError, match="not JSON"):
        read_device_profiles(path)


@pytest.mark.parametrize(
    "joined_s, expected",
    [
        (90, [(120, False), (660, True), (720, False)]),  # joins while online: left alone
        (200, [(200, False), (660, True), (720, False)]),  # joins while offline: off at once
        (60, [(60, True), (120, False), (660, True), (720, False)]),  # joins at a switch
        (700, [(720, False)]),  # a later period
    ],
)
def test_a_client_that_joins_later_follows_the_trace_from_its_arrival(joined_s, expected):
    trace = AvailabilityTrace(((60.0, 120.0),), 600.0)
    env = simpy.Environment()
    calls: list[tuple[float, bool]] = []

    def join():
        yield env.timeout(joined_s)
        yield from replay_availability(env, trace, lambda on: calls.append((env.now, on)) or True)

    env.process(join())
    env.run(until=800)
    assert calls == expected


def test_a_client_that_joins_after_a_trace_without_period_ended_goes_offline():
    trace = AvailabilityTrace(((0.0, 50.0),), None)
    env = simpy.Environment()
    calls: list[tuple[float, bool]] = []

    def join():
        yield env.timeout(80)
        yield from replay_availability(env, trace, lambda on: calls.append((env.now, on)) or True)

    env.process(join())
    env.run()
    assert calls == [(80, False)]
