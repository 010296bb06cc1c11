"""The radio's figures: ``channel.png`` from a run's ``radio.csv`` and ``channel.csv``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from analysis import style
from analysis.results import read_columns
from fedsim.results.files import (
    CELLULAR_COLUMNS,
    CHANNEL_COLUMNS,
    CHANNEL_FILE,
    RADIO_COLUMNS,
    RADIO_FILE,
)

CHANNEL_PLOT = "channel.png"


def plot_channel(run_dir: Path, out_path: Path | None = None) -> Path:
    """Left: the uplink rate on the whole band over time for a few clients (fading, moves).
    Middle: every client's mean uplink SNR against its distance, coloured by the rate its
    uploads actually got (the band shared with the others, outages included). With cellular
    columns (TR 38.901 law, cells, PRB scheduler, power control), right: the map of the sites
    and the clients, coloured by that rate."""
    run_dir = Path(run_dir)
    header = (run_dir / RADIO_FILE).read_text().split("\n", 1)[0].split(",")
    cellular = all(name in header for name in CELLULAR_COLUMNS)
    radio = read_columns(
        run_dir / RADIO_FILE, RADIO_COLUMNS + (CELLULAR_COLUMNS if cellular else ())
    )
    channel = read_columns(run_dir / CHANNEL_FILE, CHANNEL_COLUMNS)
    figure = Figure(figsize=(16.5 if cellular else 11, 4), layout="constrained")  # colour bar apart
    panels = figure.subplots(1, 3 if cellular else 2)
    over_time, by_distance = panels[0], panels[1]
    for i, client in enumerate(np.unique(channel["client"]).astype(int)):
        mine = channel["client"] == client
        distance = radio["distance_m"][radio["client"] == client]
        over_time.plot(
            channel["time_s"][mine], channel["rate_mbps"][mine], color=style.colour(i), lw=0.8,
            label=f"client {client} ({distance[0]:.0f} m)",
        )  # fmt: skip
    if (channel["rate_mbps"] > 0).any():  # a radio that let nothing through has no log scale
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
    if cellular:
        _map(panels[2], radio, used, points.norm)
    figure.suptitle(f"radio channel: {run_dir.name}")
    return style.save(figure, out_path or run_dir / CHANNEL_PLOT)


def _map(axes: Axes, radio: dict[str, np.ndarray], used: np.ndarray, norm: Normalize) -> None:
    """The sites (triangles) and the clients where they started, coloured by the uplink rate
    their uploads got (hollow: never uploaded), each joined to its serving site."""
    sites = np.unique(np.column_stack([radio["site_x_m"], radio["site_y_m"]]), axis=0)
    for x_m, y_m, site_x_m, site_y_m in zip(
        radio["x_m"], radio["y_m"], radio["site_x_m"], radio["site_y_m"], strict=True
    ):
        axes.plot([x_m, site_x_m], [y_m, site_y_m], color="0.85", lw=0.5, zorder=0)
    axes.scatter(
        radio["x_m"][used], radio["y_m"][used], c=radio["uplink_mbps"][used], s=14,
        cmap="viridis", norm=norm,
    )  # fmt: skip
    axes.scatter(
        radio["x_m"][~used], radio["y_m"][~used], s=14, facecolors="none", edgecolors="0.5"
    )
    axes.scatter(sites[:, 0], sites[:, 1], marker="^", s=60, color="black", label="site")
    axes.set_aspect("equal")
    axes.set_xlabel("x (m)")
    axes.set_ylabel("y (m)")
    axes.legend(fontsize=8)
