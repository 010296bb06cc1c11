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

    python -m benchmarks.radio_throughput [--clients 10000] [--rounds 2] [--repeats 3]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

import simpy

from benchmarks._common import base_parser, set_threads, table, write_results
from benchmarks.event_throughput import CountingEnvironment, churn_scenario, timing_only_run
from fedsim.config import Scenario, parse_scenario
from fedsim.runner import build_dataset, build_trainers
from fedsim.sim.medium import ChannelFlow, ChannelMedium

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
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(repeats):  # alternate, so that both see the same machine load
        for name, sc in variants.items():
            runs[name].append(timing_only_run(sc, data, trainers))
            if runs[name][-1]["fingerprint"] != references[name]["fingerprint"]:
                raise RuntimeError(f"timing-only runs of one seed differ ({name})")
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


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each timing-only run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each variant")
    parser.add_argument("--dataset", default="fashion_mnist")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    results = compare(args.clients, args.rounds, args.repeats, args.dataset)
    path = write_results("radio_throughput", results, args.out)
    print(table(results["rows"], COLUMNS))
    print(table([results[label] for label in RATIOS], RATIO_COLUMNS))
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
