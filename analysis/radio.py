"""The radio's figures: ``channel.png`` from a run's ``radio.csv`` and ``channel.csv``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from analysis import style
from analysis.results import read_columns
from fedsim.results.files import CHANNEL_COLUMNS, CHANNEL_FILE, RADIO_COLUMNS, RADIO_FILE

CHANNEL_PLOT = "channel.png"


def plot_channel(run_dir: Path, out_path: Path | None = None) -> Path:
    """Left: the uplink rate on the whole band over time for a few clients (fading, moves).
    Right: every client's mean uplink SNR against its distance, coloured by the rate its
    uploads actually got (the band shared with the others, outages included)."""
    run_dir = Path(run_dir)
    radio = read_columns(run_dir / RADIO_FILE, RADIO_COLUMNS)
    channel = read_columns(run_dir / CHANNEL_FILE, CHANNEL_COLUMNS)
    figure = Figure(figsize=(11, 4))
    over_time, by_distance = figure.subplots(1, 2)
    for i, client in enumerate(np.unique(channel["client"]).astype(int)):
        mine = channel["client"] == client
        distance = radio["distance_m"][radio["client"] == client]
        over_time.plot(
            channel["time_s"][mine], channel["rate_mbps"][mine], color=style.colour(i), lw=0.8,
            label=f"client {client} ({distance[0]:.0f} m)",
        )  # fmt: skip
    over_time.set_yscale("log")
    over_time.set_xlabel("simulated time (s)")
    over_time.set_ylabel("uplink rate alone on the band (Mbit/s)")
    over_time.legend(fontsize=8)
    rates = radio["uplink_mbps"]
    used = np.isfinite(rates)
    points = by_distance.scatter(
        radio["distance_m"][used], radio["uplink_snr_db"][used], c=rates[used], s=14,
        cmap="viridis", norm="log" if used.any() and rates[used].min() > 0 else None,
    )  # fmt: skip
    by_distance.scatter(
        radio["distance_m"][~used], radio["uplink_snr_db"][~used], s=14, facecolors="none",
        edgecolors="0.5", label="never uploaded",
    )  # fmt: skip
    if used.any():
        figure.colorbar(points, ax=by_distance, label="uplink rate its uploads got (Mbit/s)")
    if (~used).any():
        by_distance.legend(fontsize=8)
    by_distance.set_xlabel("distance to the base station (m)")
    by_distance.set_ylabel("uplink SNR on the whole band, no fading (dB)")
    figure.suptitle(f"radio channel: {run_dir.name}")
    return style.save(figure, out_path or run_dir / CHANNEL_PLOT)
