"""One client's uplink gain over time and frequency, as the radio draws it: flat Rayleigh
fading (one gain over the band) beside TR 38.901 TDL-A at 30 ns and TDL-C at 300 ns (a gain
per RBG), all with a 5 Hz Doppler sampled every 10 ms, on a 20 MHz NR carrier at 30 kHz
(51 PRBs, 13 RBGs of 4). The README's figure:

    python scenarios/figures/subband_gain.py [--out scenarios/figures/subband_gain.png]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedsim.sim.draws import FADING, Fading  # noqa: E402
from fedsim.sim.radio import UPLINK  # noqa: E402
from fedsim.sim.selective import SelectiveFading, SubbandGrid, tdl_profile  # noqa: E402

KEY, CLIENT = 2026, 3  # any link: the figure is one realisation
BLOCK_S, DOPPLER_HZ, SECONDS = 0.01, 5.0, 2.0
GRID = SubbandGrid.of(51, 360e3)  # 20 MHz at 30 kHz: 13 RBGs of 4 PRBs (the last of 3)


def gains_db(profile: str | None, delay_spread_s: float = 0.0) -> np.ndarray:
    """(blocks, subbands) gains in dB; flat: one gain per block repeated over the band."""
    blocks = range(round(SECONDS / BLOCK_S))
    link = (FADING, UPLINK, CLIENT)
    if profile is None:
        flat = Fading("rayleigh", coherence_s=BLOCK_S, doppler_hz=DOPPLER_HZ)
        gains = np.array([[flat.power_gain(KEY, *link, b)] * GRID.count for b in blocks])
    else:
        fading = SelectiveFading(tdl_profile(profile, delay_spread_s), BLOCK_S, DOPPLER_HZ)
        gains = np.array([fading.gains(KEY, GRID, *link, b) for b in blocks])
    return 10.0 * np.log10(gains)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_suffix(".png"))
    args = parser.parse_args(argv)
    panels = [
        ("flat (one gain over the band)", gains_db(None)),
        ("TDL-A, 30 ns", gains_db("TDL-A", 30e-9)),
        ("TDL-C, 300 ns", gains_db("TDL-C", 300e-9)),
    ]
    figure, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True, constrained_layout=True)
    extent = (0, GRID.num_prbs * GRID.prb_hz / 1e6, SECONDS, 0)
    for ax, (title, gains) in zip(axes, panels, strict=True):
        image = ax.imshow(
            np.repeat(gains, GRID.prbs, axis=1), aspect="auto", extent=extent, cmap="viridis",
            vmin=-20, vmax=8, interpolation="nearest",
        )  # fmt: skip
        ax.set_title(title)
        ax.set_xlabel("frequency in the band [MHz]")
    axes[0].set_ylabel("time [s]")
    figure.colorbar(image, ax=axes, label="|H|² [dB] (mean 0 dB)")
    figure.suptitle(f"one client's uplink gain per RBG, {DOPPLER_HZ:g} Hz Doppler, 10 ms blocks")
    figure.savefig(args.out, dpi=110)
    plt.close(figure)
    return args.out


if __name__ == "__main__":
    print(main(sys.argv[1:]))
