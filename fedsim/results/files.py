"""The results contract: the name of every file a run folder holds and the columns of each
table. The recorder and the World write them; ``analysis/`` reads them; each is spelled here
once."""

from __future__ import annotations

SCENARIO_FILE = "scenario.yaml"  # the resolved scenario (in a run folder: of that run alone)
METRICS_FILE = "metrics.csv"
CLIENTS_FILE = "clients.csv"
ROUNDS_FILE = "rounds.csv"
ACTIVITY_FILE = "activity.csv"
SUMMARY_FILE = "summary.json"
EVENTS_FILE = "events.jsonl"
ENERGY_FILE = "energy.csv"  # with system.energy
RADIO_FILE = "radio.csv"  # with system.radio
CHANNEL_FILE = "channel.csv"  # with system.radio
COLLABORATION_FILE = "collaboration.npz"  # algorithms that learn whom to collaborate with
ASYNC_FILE = "async.npz"  # asynchronous servers: update times and staleness

METRICS_COLUMNS = (
    "time_s", "round", "accuracy", "worst_accuracy", "p10_accuracy", "p50_accuracy",
    "p90_accuracy", "train_loss", "uplink_bytes", "downlink_bytes", "d2d_bytes",
    "wasted_bytes", "participants",
)  # fmt: skip
ENERGY_SPENT = ("compute_j", "tx_j", "rx_j", "idle_j")  # joules by category
ENERGY_TOTALS = (*ENERGY_SPENT, "wasted_j")  # metrics.csv's extra columns (wasted: part of spent)
CLIENT_COLUMNS = ("time_s", "round", "client", "group", "accuracy", "num_test")
BREAKDOWN = ("downlink_queue_s", "downlink_s", "compute_s", "uplink_queue_s", "uplink_s")
"""A participant's round time, part by part; ``waiting_s`` (idle until the round closes,
or at a barrier) is the rest."""
ROUND_COLUMNS = (
    "round", "start_s", "end_s", "selected", "completed", "dropped", *BREAKDOWN, "waiting_s",
    "uplink_bytes", "downlink_bytes", "d2d_bytes", "wasted_bytes",
)  # fmt: skip
ACTIVITY_COLUMNS = ("time_s", "present", "online")
ENERGY_COLUMNS = ("time_s", "round", "client", *ENERGY_TOTALS, "battery_j")
RADIO_COLUMNS = (
    "client", "x_m", "y_m", "distance_m", "tx_power_dbm", "uplink_snr_db", "uplink_mbps",
    "downlink_mbps", "rho", "outages", "retransmissions", "given_up",
)  # fmt: skip
CHANNEL_COLUMNS = ("client", "time_s", "snr_db", "rate_mbps")
