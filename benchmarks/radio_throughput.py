"""What the radio costs the event loop: a timing-only run with Rayleigh block fading vs fixed rates.

The scenario of ``event_throughput`` (10,000 clients with renewal churn, arrivals and
departures, FedAvg on 10% per round with an 8 s deadline), run timing-only in four variants,
identical but for the links:

- ``fixed``: each client's uplink at a fixed rate (log-normal, median 2 Mbit/s), downlink 4×;
- ``radio``: ``system.radio`` with clients in a 500 m cell, 8 dB log-normal shadowing and
  Rayleigh block fading re-drawn every 0.1 s, uploads sharing the 20 MHz band equally,
  nothing lost (``link: ideal``);
- ``whole_transfer``: the same radio with the pre-link-layer loss rule (a transfer lost whole
  when a fading block it spans is below the threshold, and sent again);
- ``harq``: the same radio with the default lossy link: NR transport blocks, link
  adaptation and HARQ, failed blocks drawn per period (no event per block);
- ``pf``: the ``radio`` variant with its band as 51 PRBs given by a proportional-fair
  scheduler at every fading block (and whenever an upload starts or ends), PRB by PRB on
  the rate each adds at the client's power spread over its PRBs;
- ``pf_per_prb``: the same with the per-PRB view (``power_aware: false``: a rate per PRB of
  the whole band's rate / N, so a period's band goes to one upload);
- ``cells7``: the ``radio`` variant on 7 hexagonal cells (ISD 500 m, wrap-around), each
  reusing the band, every upload's SINR counting the uploads of the other cells.

Each variant's SimPy events are counted in a reference run (with the radio, also how many of
them are the band's own wake-ups, how many uploads were re-planned at a new fading block,
and how many re-plans of an upload's rate there were in all); then the same deterministic
runs are timed with SimPy's own environment, the variants alternating so that both see the
same machine load. Reported: events/s, and the ratios radio/fixed, harq/whole_transfer
(the new default over the old rule), pf/radio, pf/pf_per_prb and cells7/radio (the
cellular model's cost beside the single equal-split cell) of events/s, of events per
simulated second and of wall time per simulated round. With the radio, events/s says
little: most of the time goes to re-planning uploads, within few events.

Then what frequency-selective fading costs (issue 43): the ``harq`` variant, and the same
with its band given by a proportional-fair scheduler every fading block (``harq_pf``), each
with flat fading and with TR 38.901 TDL-C (300 ns, a gain per RBG of 2 PRBs on the 51 PRBs
of 20 MHz at 30 kHz; Doppler 5 Hz; ``_tdl``): the subbands' gains per link and block, EESM
per period and, with PF, a placement of every RBG. Run with ``--selective-clients`` clients
(default 20,000: 2,000 selected per round), timed alternately like the others; reported:
wall time per simulated round, TDL-C over flat.

Then what the radio's caches save (issue 38): ``scenarios/multicell.yaml``'s world (70
walking clients on 7 TR 38.901 UMa cells, a proportional-fair scheduler with open-loop power
control, harq, other cells' uploads as interference), its first run (FedAvg waiting for all)
timing-only for ``--cellular-rounds`` rounds, with the scheduling period of the file (the
fading block, 0.1 s) and of 1 ms, each with the caches (``Radio(cache_channel=True)``: the
large-scale loss and power per client until it moves, a link's rate per band share until its
channel changes) and without them (the same code recomputing them at every query, as before
the caches), alternating; each pair must give identical results. Counted in every run (a
counter around the call, in both variants): large-scale loss computations and scheduler
allocations (one per scheduling period of a cell with uploads, and per upload that starts or
ends).

    python -m benchmarks.radio_throughput [--clients 10000] [--rounds 2] [--repeats 3]
        [--cellular-rounds 1] [--selective-clients 20000] [--only-selective]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial, wraps
from unittest import mock

import simpy

from benchmarks._common import base_parser, set_threads, table, write_results
from benchmarks.event_throughput import (
    REPO,
    CountingEnvironment,
    churn_scenario,
    timing_only_run,
)
from fedsim.config import Scenario, load_scenario, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.band import ChannelFlow, ChannelMedium
from fedsim.sim.radio import Radio
from fedsim.sim.scheduler import ProportionalFair
from fedsim.world import network as world_network

RADIO = {
    "cell_radius_m": 500,
    "shadowing_db": 8,
    "fading": {"model": "rayleigh", "coherence_s": 0.1},
}  # the default uplink_sharing: equal shares of a 20 MHz band


LINKS = {"radio": "ideal", "whole_transfer": "whole_transfer", "harq": "harq"}
CELLULAR = {  # the ideal-link radio with a cellular feature on
    "pf": {"uplink_sharing": "proportional_fair"},
    "pf_per_prb": {"uplink_sharing": {"scheduler": "proportional_fair", "power_aware": False}},
    "cells7": {"cells": {"rings": 1, "inter_site_distance_m": 500, "wrap_around": True}},
}
RATIOS = {  # the radio's cost; the new default link over the old rule; the cellular model's
    "radio_over_fixed": ("radio", "fixed"),
    "harq_over_whole_transfer": ("harq", "whole_transfer"),
    "pf_over_radio": ("pf", "radio"),
    "pf_over_pf_per_prb": ("pf", "pf_per_prb"),
    "cells7_over_radio": ("cells7", "radio"),
}


def radio_scenario(fixed: Scenario, link: str = "ideal", **extra: object) -> Scenario:
    """The same scenario with ``system.radio`` and the given link model (and any further
    radio keys): the network keeps only its latency (the radio sets the rates, so a fixed
    rate may not be given alongside)."""
    data = fixed.model_dump(exclude_unset=True)
    data["system"]["network"] = {"latency_s": fixed.system.network.latency_s}
    data["system"]["radio"] = {**RADIO, "link": {"model": link}, **extra}
    return parse_scenario(data)


@contextmanager
def counting_radio_work() -> Iterator[dict]:
    """Counts the band's SimPy wake-ups (``ChannelMedium._wake``: one for the earliest entry
    of its agenda of flow ends and channel changes), the uploads re-planned at a new fading
    block (the live entries due at a wake-up that are not a flow's end, read from the
    agenda's heap before the wake-up pops them) and the re-plans of an upload for any reason
    (``_replan``: each evaluates the upload's channel rate; a flow starting or ending on the
    equally shared band re-plans every sending upload)."""
    counts = {"wakeups": 0, "changes": 0, "replans": 0}
    wake, replan = ChannelMedium._wake, ChannelMedium._replan

    def counted(self: ChannelMedium, event: simpy.Event) -> None:
        counts["wakeups"] += 1
        agenda, now, due = self._agenda, self.env.now, [0]
        while due:  # the heap's entries due by now: a subtree at its root
            i = due.pop()
            if i < len(agenda) and agenda[i][0] <= now:
                _, _, token, flow = agenda[i]
                counts["changes"] += token == flow._token and not flow._ending
                due += [2 * i + 1, 2 * i + 2]
        wake(self, event)

    def counted_replan(self: ChannelMedium, flows: list[ChannelFlow]) -> None:
        counts["replans"] += len(flows)
        replan(self, flows)

    with (
        mock.patch.object(ChannelMedium, "_wake", counted),
        mock.patch.object(ChannelMedium, "_replan", counted_replan),
    ):
        yield counts


SELECTIVE = {  # issue 43: the lossy link over flat and TDL-C fading, equal shares and PF
    "harq": {},
    "harq_tdl": {"profile": "TDL-C"},
    "harq_pf": {"uplink_sharing": "proportional_fair"},
    "harq_pf_tdl": {"uplink_sharing": "proportional_fair", "profile": "TDL-C"},
}
TDL = {"profile": "TDL-C", "delay_spread_ns": 300, "doppler_hz": 5.0}


def selective_scenario(fixed: Scenario, variant: dict) -> Scenario:
    """The harq radio of ``radio_scenario``, with a PRB scheduler and TDL-C fading if asked."""
    extra = {key: value for key, value in variant.items() if key != "profile"}
    if "profile" in variant:
        extra["fading"] = {**RADIO["fading"], **TDL}
    else:
        extra["fading"] = {**RADIO["fading"], "doppler_hz": TDL["doppler_hz"]}
    return radio_scenario(fixed, "harq", **extra)


def timed_runs(
    variants: dict[str, Scenario], data: object, trainers: list, references: dict, repeats: int
) -> dict[str, list[dict]]:
    """Each variant timed ``repeats`` times, alternating so that all see the same machine
    load; refuses to go on if a run's results differ from its reference's."""
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, sc in variants.items():
            runs[name].append(timing_only_run(sc, data, trainers))
            if runs[name][-1]["fingerprint"] != references[name]["fingerprint"]:
                raise RuntimeError(f"timing-only runs of one seed differ ({name})")
    return runs


def compare_selective(clients: int, rounds: int, repeats: int, dataset: str) -> dict:
    """The four ``SELECTIVE`` variants timed alternately; refuses to report if a variant's
    runs differ. Ratios: TDL-C over flat, with equal shares and with PF."""
    fixed = churn_scenario(clients, rounds, dataset)
    variants = {name: selective_scenario(fixed, extra) for name, extra in SELECTIVE.items()}
    data = build_dataset(fixed)
    trainers = build_trainers(fixed, data)
    references = {name: timing_only_run(sc, data, trainers) for name, sc in variants.items()}
    runs = timed_runs(variants, data, trainers, references, repeats)
    rows = []
    for name, reference in references.items():
        simulated_s, rounds_done, sent_bytes, wasted_bytes = reference["fingerprint"]
        loop_s = [r["loop_s"] for r in runs[name]]
        rows.append({
            "variant": name,
            "clients": clients,
            "rounds": rounds_done,
            "simulated_s": simulated_s,
            "participants_per_round": reference["participants_per_round"],
            "sent_mb": sent_bytes / 1e6,
            "wasted_mb": wasted_bytes / 1e6,
            "wall_s": min(loop_s),
            "wall_s_median": statistics.median(loop_s),
            "wall_s_runs": loop_s,
            "wall_s_per_round": min(loop_s) / max(rounds_done, 1),
        })  # fmt: skip
    by_name = {row["variant"]: row for row in rows}
    ratios = [
        {
            "ratio": f"{tdl}/{flat}",
            "wall_s_per_round": (
                by_name[tdl]["wall_s_per_round"] / by_name[flat]["wall_s_per_round"]
            ),
            "median_wall_s": by_name[tdl]["wall_s_median"] / by_name[flat]["wall_s_median"],
        }
        for tdl, flat in (("harq_tdl", "harq"), ("harq_pf_tdl", "harq_pf"))
    ]
    return {"tdl": TDL, "rows": rows, "ratios": ratios}


MULTICELL = REPO / "scenarios" / "multicell.yaml"
CELLULAR_PERIODS_S = {"multicell": None, "multicell_1ms": 0.001}  # None: the file's (0.1 s)


def multicell_scenario(rounds: int, dataset: str, period_s: float | None) -> Scenario:
    """multicell.yaml without its sweep (other cells' uploads as interference, as its file
    says) for ``rounds`` rounds; another dataset than its own only changes the model's input
    (synthetic holds at most 6,000 samples: 80 per client)."""
    overrides = [f"run.rounds={rounds}", "sweep={}"]
    if period_s is not None:
        overrides.append(f"system.radio.uplink_sharing.period_s={period_s}")
    if dataset != "fashion_mnist":
        overrides += [f"dataset.name={dataset}", "dataset.num_samples=5600"]
    return load_scenario(MULTICELL, overrides)


@contextmanager
def radio_caches(on: bool) -> Iterator[None]:
    """The World's radio built with its caches on (as fedsim builds it) or off."""
    radio = Radio if on else partial(Radio, cache_channel=False)
    with mock.patch.object(world_network, "Radio", radio):
        yield


@contextmanager
def counting_calls(methods: dict[str, tuple[type, str]]) -> Iterator[dict[str, int]]:
    """Counts the calls of each ``(class, method)``: a plain wrapper, about a tenth of a
    microsecond a call, against tens for a large-scale loss."""
    counts = dict.fromkeys(methods, 0)

    def counted(name: str, method: Callable) -> Callable:
        @wraps(method)
        def call(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return method(*args, **kwargs)

        return call

    with ExitStack() as stack:
        for name, (cls, attribute) in methods.items():
            method = getattr(cls, attribute)
            stack.enter_context(mock.patch.object(cls, attribute, counted(name, method)))
        yield counts


def compare_caches(rounds: int, repeats: int, dataset: str) -> dict:
    """multicell.yaml with the radio's caches on and off, at its scheduling period and at 1 ms
    (``CELLULAR_PERIODS_S``), timed alternately; refuses to report if a pair's results differ."""
    scenarios = {
        name: multicell_scenario(rounds, dataset, period_s)
        for name, period_s in CELLULAR_PERIODS_S.items()
    }
    data = build_dataset(scenarios["multicell"], timing_only=True)  # one for all: same data
    trainers = build_trainers(scenarios["multicell"], data)
    counted = {
        "losses": (Radio, "_computed_loss_db"),
        "allocations": (ProportionalFair, "allocate"),
    }
    references = {  # untimed: also warms up what a first run pays for (BLER tables, shapes)
        name: timing_only_run(sc, data, trainers)["fingerprint"] for name, sc in scenarios.items()
    }
    runs: dict[tuple[str, bool], list[dict]] = {
        (name, cached): [] for name in scenarios for cached in (True, False)
    }
    for _ in range(repeats):  # alternate, so that both see the same machine load
        for (name, cached), done in runs.items():
            with radio_caches(cached), counting_calls(counted) as counts:
                done.append(timing_only_run(scenarios[name], data, trainers) | counts)
            if done[-1]["fingerprint"] != references[name]:
                raise RuntimeError(f"{name}: the radio's caches changed the results")
    rows = []
    for (name, cached), done in runs.items():
        loop_s = [r["loop_s"] for r in done]
        simulated_s, rounds_done, sent_bytes, _ = done[0]["fingerprint"]
        rows.append({
            "variant": name,
            "period_s": world_network.uplink_sharing(scenarios[name].system.radio).period_s,
            "caches": "on" if cached else "off",
            "rounds": rounds_done,
            "simulated_s": simulated_s,
            "sent_mb": sent_bytes / 1e6,
            "wall_s": min(loop_s),
            "wall_s_median": statistics.median(loop_s),
            "wall_s_runs": loop_s,
            "loss_computations": done[0]["losses"],
            "allocations": done[0]["allocations"],
            "losses_per_allocation": done[0]["losses"] / max(done[0]["allocations"], 1),
        })  # fmt: skip
    by_key = {(row["variant"], row["caches"]): row for row in rows}
    ratios = [
        {
            "variant": name,
            "wall_s_off_over_on": by_key[name, "off"]["wall_s"] / by_key[name, "on"]["wall_s"],
            "median_off_over_on": (
                by_key[name, "off"]["wall_s_median"] / by_key[name, "on"]["wall_s_median"]
            ),
            "losses_off_over_on": (
                by_key[name, "off"]["loss_computations"]
                / max(by_key[name, "on"]["loss_computations"], 1)
            ),
        }
        for name in scenarios
    ]
    return {"scenario": str(MULTICELL.relative_to(REPO)), "rows": rows, "ratios": ratios}


def compare(clients: int, rounds: int, repeats: int, dataset: str) -> dict:
    fixed = churn_scenario(clients, rounds, dataset)
    variants = (
        {"fixed": fixed}
        | {name: radio_scenario(fixed, link) for name, link in LINKS.items()}
        | {name: radio_scenario(fixed, **extra) for name, extra in CELLULAR.items()}
    )
    data = build_dataset(fixed)  # the radio changes neither the data nor the model
    trainers = build_trainers(fixed, data)
    references, changes = {}, {}
    for name, sc in variants.items():
        with counting_radio_work() as counts:
            references[name] = timing_only_run(sc, data, trainers, CountingEnvironment)
        changes[name] = counts
    runs = timed_runs(variants, data, trainers, references, repeats)
    rows = []
    for name, reference in references.items():
        events = reference["events"]
        simulated_s, rounds_done, sent_bytes, wasted_bytes = reference["fingerprint"]
        loop_s = [r["loop_s"] for r in runs[name]]
        best_s = min(loop_s)
        rows.append({
            "variant": name,
            "clients": clients,
            "rounds": rounds_done,
            "events": events,
            "simulated_s": simulated_s,
            "wall_s": best_s,
            "wall_s_median": statistics.median(loop_s),
            "wall_s_runs": loop_s,
            "events_per_s": events / best_s,
            "events_per_s_median": events / statistics.median(loop_s),
            "events_per_cpu_s": events / min(r["loop_cpu_s"] for r in runs[name]),
            "events_per_simulated_s": events / simulated_s,
            "wall_s_per_round": best_s / max(rounds_done, 1),
            "selected_per_round": reference["selected_per_round"],
            "participants_per_round": reference["participants_per_round"],
            "sent_mb": sent_bytes / 1e6,
            "wasted_mb": wasted_bytes / 1e6,
            "band_wakeups": changes[name]["wakeups"],
            "fading_changes": changes[name]["changes"],
            "upload_replans": changes[name]["replans"],
            "upload_replans_per_event": changes[name]["replans"] / events,
        })  # fmt: skip
    by_name = {row["variant"]: row for row in rows}
    ratios = {
        label: {"ratio": f"{top}/{bottom}"} | {
            key: by_name[top][key] / by_name[bottom][key]
            for key in ("events_per_s", "events_per_s_median", "events_per_cpu_s",
                        "events_per_simulated_s", "wall_s_per_round", "events")
        }
        for label, (top, bottom) in RATIOS.items()
    }  # fmt: skip
    return {"radio": RADIO, "repeats": repeats, "rows": rows} | ratios


COLUMNS = ("variant", "rounds", "events", "simulated_s", "wall_s", "events_per_s",
           "events_per_simulated_s", "wall_s_per_round", "participants_per_round",
           "sent_mb", "wasted_mb", "band_wakeups", "fading_changes", "upload_replans")  # fmt: skip
RATIO_COLUMNS = ("ratio", "events_per_s", "events_per_cpu_s", "events_per_simulated_s",
                 "wall_s_per_round")  # fmt: skip
SELECTIVE_COLUMNS = ("variant", "clients", "rounds", "simulated_s", "participants_per_round",
                     "sent_mb", "wasted_mb", "wall_s", "wall_s_median",
                     "wall_s_per_round")  # fmt: skip
SELECTIVE_RATIO_COLUMNS = ("ratio", "wall_s_per_round", "median_wall_s")
CACHE_COLUMNS = ("variant", "period_s", "caches", "rounds", "simulated_s", "sent_mb", "wall_s",
                 "wall_s_median", "loss_computations", "allocations",
                 "losses_per_allocation")  # fmt: skip
CACHE_RATIO_COLUMNS = ("variant", "wall_s_off_over_on", "median_off_over_on",
                       "losses_off_over_on")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each timing-only run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each variant")
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument(
        "--cellular-rounds", type=int, default=1, help="rounds of each multicell.yaml run"
    )
    parser.add_argument(
        "--selective-clients", type=int, default=20_000,
        help="clients of the frequency-selective comparison (a tenth selected per round)",
    )  # fmt: skip
    parser.add_argument(
        "--only-selective", action="store_true", help="only the frequency-selective comparison"
    )
    args = parser.parse_args(argv)
    set_threads(args.threads)
    results = {}
    if not args.only_selective:
        results = compare(args.clients, args.rounds, args.repeats, args.dataset)
        results["caches"] = compare_caches(args.cellular_rounds, args.repeats, args.dataset)
    results["selective"] = compare_selective(
        args.selective_clients, args.rounds, args.repeats, args.dataset
    )
    path = write_results("radio_throughput", results, args.out)
    if not args.only_selective:
        print(table(results["rows"], COLUMNS))
        print(table([results[label] for label in RATIOS], RATIO_COLUMNS))
        print(table(results["caches"]["rows"], CACHE_COLUMNS))
        print(table(results["caches"]["ratios"], CACHE_RATIO_COLUMNS))
    print(table(results["selective"]["rows"], SELECTIVE_COLUMNS))
    print(table(results["selective"]["ratios"], SELECTIVE_RATIO_COLUMNS))
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
