"""``fedsim budget``'s tables: time per round and its breakdown, traffic per round, then
the sections a scenario calls for (rounds that kept nothing, codecs, the radio, the levels of
cells and hierarchical FL, energy, a constellation's passes), each with its note."""

from __future__ import annotations

from fedsim.budget.runs import Budget
from fedsim.config import Scenario
from fedsim.world.satellites import constellation_lines


def format_budgets(scenario: Scenario, budgets: list[Budget], model_bytes: int) -> str:
    """Two readable tables, time per round (its breakdown) and traffic per round, then notes."""

    def cell(value: float | None, width: int, digits: int = 3) -> str:
        return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.{digits}f}"

    name_width = max([12, *(len(b.algorithm) for b in budgets)])
    time_columns = (
        "rounds", "kept/rnd", "round_s", "closed_form_s", "dl_queue_s", "downlink_s",
        "compute_s", "ul_queue_s", "uplink_s", "waiting_s", "total_s",
    )  # fmt: skip
    traffic_columns = (
        "up_MB/rnd", "down_MB/rnd", "d2d_MB/rnd", "up_tx/rnd", "down_tx/rnd", "d2d_tx/rnd",
        "delivered_MB", "retx_MB", "cut_MB", "on_air_MB", "wasted",
    )  # fmt: skip
    shares = scenario.model.architectures
    models = (
        f"model {shares[0].name} ({model_bytes:,} bytes per model message)"
        if len(shares) == 1
        else "models "
        + ", ".join(f"{share.name} {share.fraction:.0%}" for share in shares)
        + f" ({model_bytes:,} bytes per message of the largest)"
    )
    lines = [
        f"scenario {scenario.name}: {scenario.clients.count} clients, {models}",
        "",
        f"{'time per round':>{name_width}} " + " ".join(f"{c:>13}" for c in time_columns),
    ]
    for b in budgets:
        times = (b.round_s, b.closed_form_round_s, b.downlink_queue_s, b.downlink_s, b.compute_s)
        times += (b.uplink_queue_s, b.uplink_s, b.waiting_s)
        lines.append(
            f"{b.algorithm:>{name_width}} {b.rounds:>13} {cell(b.participants_per_round, 13, 1)} "
            + " ".join(cell(t, 13) for t in times)
            + f" {b.time_s:>13.1f}"
        )
    lines += ["", f"{'traffic':>{name_width}} " + " ".join(f"{c:>11}" for c in traffic_columns)]
    for b in budgets:
        per_round = (b.uplink_bytes_per_round, b.downlink_bytes_per_round, b.d2d_bytes_per_round)
        transmissions = (
            b.uplink_transmissions_per_round,
            b.downlink_transmissions_per_round,
            b.d2d_transmissions_per_round,
        )
        delivered = b.uplink_bytes + b.downlink_bytes + b.d2d_bytes
        on_air = delivered + b.wasted_bytes
        totals = (delivered, b.retransmitted_bytes, b.wasted_bytes - b.retransmitted_bytes)
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(cell(None if v is None else v / 1e6, 11) for v in per_round)
            + " "
            + " ".join(cell(v, 11, 1) for v in transmissions)
            + " "
            + " ".join(cell(v / 1e6, 11, 2) for v in (*totals, on_air))
            + f" {b.wasted_bytes / on_air if on_air else 0:>11.1%}"
        )
    lines += _no_round_lines(budgets)
    lines += _empty_round_lines(budgets)
    lines += _compression_lines(budgets, name_width, model_bytes)
    lines += _radio_lines(budgets, name_width)
    lines += _level_lines(budgets, name_width)
    lines += _energy_lines(budgets, name_width)
    lines += constellation_lines([(b.algorithm, b.constellation) for b in budgets], name_width)
    lines += [
        "",
        "kept/rnd: updates the server kept per round (applied, for an asynchronous server). "
        "round_s = dl_queue_s + downlink_s + compute_s + ul_queue_s + uplink_s + waiting_s for "
        "the mean participant: waiting for the base station's transmitter and on the air, "
        "computing, waiting for the uplink medium (TDMA) and on the air, then idle until the "
        "round closes (or at a barrier).",
        "closed_form_s: E[round time] where a closed form is exact, n/a otherwise. Breakdown "
        "n/a: no participant to break down (local training at its own pace and asynchronous "
        "servers gather no round; a round that kept no update has none: see why above). "
        "_tx/rnd: transmissions started per round (a multicast counts once). on_air_MB = "
        "delivered_MB + retx_MB (transport blocks that failed and were sent again) + cut_MB "
        "(transfers cut or lost, updates dropped, broadcasts nobody received); wasted = "
        "(retx + cut) / on_air.",
    ]
    return "\n".join(lines)


def _no_round_lines(budgets: list[Budget]) -> list[str]:
    """Runs whose server completed no round: per-round figures have nothing to divide by."""
    lines = [
        f"{b.algorithm}: the server never stepped: no round completed in the "
        f"{b.simulated_s:.1f} s simulated, though {b.uplink_bytes / 1e6:.2f} MB went up "
        "(per-round figures n/a; totals as sent). An asynchronous buffer the arrivals never "
        "fill (buffer_size above what arrives before the run ends), or updates all dropped as "
        "stale, do this; a smaller buffer_size or a longer run lets it step."
        for b in budgets
        if b.rounds == 0
    ]
    return ["", *lines] if lines else []


_CUT_WORDS = {
    "cut_before_model": "still waiting for the model",
    "cut_computing": "training",
    "cut_uploading": "sending their update",
    "cut_after_delivery": "delivered but not kept",
}


def _empty_round_lines(budgets: list[Budget]) -> list[str]:
    """Why rounds kept nothing: where the selected clients' tasks were when the rounds closed
    (a broadcast that outlasts the deadline leaves everyone waiting for the model)."""
    lines = []
    for b in budgets:
        if not b.empty_rounds:
            continue
        cut = b.empty_rounds_cut_at
        total = sum(cut.values())
        shares = ", ".join(
            f"{count / total:.0%} {_CUT_WORDS[where]}"
            for where, count in sorted(cut.items(), key=lambda item: -item[1])
            if count
        )
        line = (
            f"{b.algorithm}: {b.empty_rounds} of {b.rounds} rounds kept no update; when they "
            f"closed, their {total:,} selected clients were: {shares or 'none cut'}"
        )
        if cut.get("cut_before_model", 0) == total and total:
            line += (
                " (the model never reached them in time: a broadcast runs at its slowest "
                "member's rate, so many clients per round make it long; fewer per round, a "
                "longer deadline_s or unicast shorten the wait)"
            )
        lines.append(line + ".")
    return ["", *lines] if lines else []


def _compression_lines(budgets: list[Budget], name_width: int, model_bytes: int) -> list[str]:
    """Each codec's bytes per model message, beside the uncompressed size."""
    coded = [b for b in budgets if b.message_bytes is not None]
    if not coded:
        return []
    headers = {"uplink": "up_bytes/msg", "downlink": "down_bytes/msg", "peer": "peer_bytes/msg"}
    directions = [d for d in headers if any(d in b.message_bytes for b in coded)]
    title = f"{'compression':>{name_width}} "
    lines = ["", title + " ".join(f"{headers[d]:>17}" for d in directions)]
    for b in coded:
        sizes = [b.message_bytes.get(d) for d in directions]
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(
                f"{'-':>17}" if size is None else f"{size:>9,} ({model_bytes / size:>4.0f}x)"
                for size in sizes
            )
        )
    sized_on = {b.messages_sized_on for b in coded} - {None}
    qsgd = {
        "update": "QSGD's Elias coding, whose size depends on the values, on the model and the "
        "update of a seeded short training (one local round of the first client): a typical "
        "figure, as updates vary",
        "stand-in": "QSGD's Elias coding on a seeded standard-normal tensor (the clients' data "
        "is not loaded): a trained update's heavier tails code smaller, 1.5-2.4x for LeNet-5 "
        "at s = 4..16, so these sizes and the times they give are upper bounds",
    }
    lines.append(
        f"compression: the encoded bytes of one model-shaped message ({model_bytes:,} bytes "
        "uncompressed): exact for every codec whose size depends on the shape only"
        + "".join(f"; {qsgd[how]}" for how in sorted(sized_on))
        + "."
    )
    return lines


def bler_tables_text(tables: dict) -> str:
    """``sionna (sionna-no-rt 2.2.0)`` or ``builtin (the finite-length bound, no Sionna)``."""
    if tables["source"] == "sionna":
        return f"sionna (sionna-no-rt {tables['version']})"
    return "builtin (the finite-length bound, no Sionna)"


def _radio_lines(budgets: list[Budget], name_width: int) -> list[str]:
    """With the radio: each run's clients' uplink SNR (whole band, no fading), the rates
    their transfers got and ρ (10th, 50th, 90th percentile over the clients), and outages."""
    runs = [b for b in budgets if b.radio is not None]
    if not runs:
        return []
    keys = ("uplink_snr_db", "uplink_mbps", "downlink_mbps", "rho")
    columns = ("SNR dB", "up Mbps", "down Mbps", "rho")

    def spread(values: list[float] | None, mark: str = "") -> str:
        text = "n/a" if values is None else " / ".join(f"{v:.3g}" for v in values) + mark
        return f"{text:>20}"

    def side_information(b: Budget, key: str) -> str:
        """Over the air the uplink's digital bytes are side information, not the updates."""
        over_the_air = b.uplink_aggregation != "digital" and key in ("uplink_mbps", "rho")
        return "*" if over_the_air else ""

    lines = [
        "",
        f"{'radio':>{name_width}} "
        + " ".join(f"{c + ' p10/p50/p90':>20}" for c in columns)
        + f" {'outages':>9} {'retransmit':>10} {'given_up':>9} {'BLER':>7} {'MCS':>6}",
    ]
    for b in runs:
        radio = b.radio
        harq = (
            f" {radio['bler']:>7.1%} {radio['mean_mcs']:>6.1f}"
            if radio.get("bler") is not None
            else f" {'n/a':>7} {'n/a':>6}"
        )
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(spread(radio[k], side_information(b, k)) for k in keys)
            + f" {radio['outages']:>9} {radio['retransmissions']:>10} {radio['given_up']:>9}"
            + harq
        )
    for b in runs:
        if b.radio.get("prb_deciles"):
            shares = " ".join(f"{share:.1%}" for share in b.radio["prb_deciles"])
            lines.append(
                f"{b.algorithm:>{name_width}} PRB share by SNR decile (low→high): {shares}"
            )
    tables = {b.algorithm: bler_tables_text(b.bler_tables) for b in runs if b.bler_tables}
    if len(set(tables.values())) == 1:
        lines.append(f"{'BLER tables':>{name_width}} {next(iter(tables.values()))}")
    else:  # a sweep of bler_tables
        lines += [f"{label:>{name_width}} BLER tables: {text}" for label, text in tables.items()]
    lines.append(
        "radio: SNR on the whole uplink band without fading; rates as the transfers got them "
        "(band shares, fading, outages, failed blocks), over the clients that used the link; "
        "rho = down / up; outages, retransmit, given_up: whole transfers (whole_transfer and "
        "per_upload links); BLER and MCS: the harq link's transport blocks (failed share, mean "
        "MCS index)."
    )
    if any(side_information(b, "rho") for b in runs):
        lines.append(
            "*: over the air the updates go in one analog slot, not as bits: up Mbps is the rate "
            "of the digital side information each client sends before it (BAA: the mean and "
            "spread of each tensor, a few bytes), and rho is the downlink's rate over that one, "
            "not over the model's."
        )
    return lines


def _level_lines(budgets: list[Budget], name_width: int) -> list[str]:
    """With several cells: the backhaul's traffic per round; under hierarchical FL, per level
    (clients and edges over the radio, edges and the cloud over the backhaul) per cloud round,
    and the cloud round's time, measured and in closed form."""
    runs = [b for b in budgets if b.backhaul is not None]
    if not runs:
        return []
    columns = ("bh_up_MB/rnd", "bh_down_MB/rnd", "bh_up_tx/rnd", "bh_down_tx/rnd")
    lines = ["", f"{'backhaul':>{name_width}} " + " ".join(f"{c:>14}" for c in columns)]
    for b in runs:
        count = max(b.rounds, 1)
        values = (b.backhaul["up_bytes"] / 1e6, b.backhaul["down_bytes"] / 1e6)
        values += (b.backhaul["up_transmissions"], b.backhaul["down_transmissions"])
        lines.append(
            f"{b.algorithm:>{name_width}} " + " ".join(f"{v / count:>14.3f}" for v in values)
        )
    hierarchical = [b for b in runs if b.cloud is not None]
    if not hierarchical:
        return lines
    columns = (
        "cloud_rnds", "edge/cloud", "cloud_rnd_s", "closed_form_s", "backhaul_s",
        "radio_MB/cld", "bh_MB/cld",
    )  # fmt: skip
    lines += ["", f"{'cloud level':>{name_width}} " + " ".join(f"{c:>13}" for c in columns)]
    for b in hierarchical:
        cloud = b.cloud
        count = max(cloud["cloud_rounds"], 1)
        radio_mb = (b.uplink_bytes + b.downlink_bytes) / 1e6 / count
        backhaul_mb = (b.backhaul["up_bytes"] + b.backhaul["down_bytes"]) / 1e6 / count
        timed = (cloud["cloud_round_s"], cloud["closed_form_cloud_round_s"], cloud["backhaul_s"])
        lines.append(
            f"{b.algorithm:>{name_width}} {cloud['cloud_rounds']:>13} "
            f"{cloud['edge_rounds_per_cloud']:>13} "
            + " ".join(f"{'n/a':>13}" if t is None else f"{t:>13.3f}" for t in timed)
            + f" {radio_mb:>13.3f} {backhaul_mb:>13.3f}"
        )
    lines.append(
        "cloud level: a cloud round is edge/cloud edge rounds (the time per round above: "
        "clients and their edge over the radio), then the edges' models up the backhaul and "
        "the cloud's down (backhaul_s); radio_MB and bh_MB are per cloud round, both ways."
    )
    return lines


def _energy_lines(budgets: list[Budget], name_width: int) -> list[str]:
    """With system.energy: joules per round (computing, transmitting, receiving, idle, and of
    those wasted) and over the run, summed over the clients."""
    runs = [b for b in budgets if b.energy_j is not None]
    if not runs:
        return []
    parts = ("compute_j", "tx_j", "rx_j", "idle_j", "wasted_j")
    lines = [
        "",
        f"{'energy':>{name_width}} " + " ".join(f"{p[:-2] + ' J/rnd':>13}" for p in parts)
        + f" {'total J':>13} {'wasted':>8}",
    ]  # fmt: skip
    for b in runs:
        count = max(b.rounds, 1)
        total_j = sum(b.energy_j[p] for p in parts[:-1])
        share = b.energy_j["wasted_j"] / total_j if total_j else 0.0
        lines.append(
            f"{b.algorithm:>{name_width}} "
            + " ".join(f"{b.energy_j[p] / count:>13.4g}" for p in parts)
            + f" {total_j:>13.4g} {share:>8.1%}"
        )
    lines.append(
        "energy: summed over the clients; compute = the cycles model's k c D f^2, tx = transmit "
        "(uplink and D2D) power x air time, rx = receive power x air time; wasted is the part of "
        "those spent on work that was lost (cut, aborted, lost to outage, the air time of failed "
        "transport blocks), and its share of the total."
    )
    return lines
