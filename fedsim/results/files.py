"""The results contract: the name of every file a run folder holds, the columns of each table,
and the study manifest of a scenario's folder. The recorder, the World and the study write them;
``analysis/`` reads them; each is spelled here once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

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
PASSES_FILE = "passes.csv"  # with system.constellation
SATELLITES_FILE = "satellites.csv"  # with system.constellation
COLLABORATION_FILE = "collaboration.npz"  # algorithms that learn whom to collaborate with
ASYNC_FILE = "async.npz"  # asynchronous servers: update times and staleness
RUN_FILES = (
    SCENARIO_FILE, METRICS_FILE, CLIENTS_FILE, ROUNDS_FILE, ACTIVITY_FILE, SUMMARY_FILE,
    EVENTS_FILE, ENERGY_FILE, RADIO_FILE, CHANNEL_FILE, COLLABORATION_FILE, ASYNC_FILE,
    PASSES_FILE, SATELLITES_FILE,
)  # fmt: skip
"""Every file a run writes into its folder: a run started again removes them first, so that
no file of an earlier run (an event log it wrote, a run of other settings) stays beside it."""

STUDY_FILE = "study.json"
"""In a scenario's results folder, written before a study's runs start: which runs make up the
study last started there, so a reader can tell them from run folders left by an earlier one.
Its fields are ``STUDY_FIELDS``."""
STUDY_FIELDS = ("scenario", "scenario_sha256", "runs")
"""``scenario``: the scenario's name; ``scenario_sha256``: ``scenario_sha256`` of the study's
resolved scenario (the folder's ``scenario.yaml``, sweep and every algorithm included);
``runs``: ``{label: scenario_sha256 of that run's scenario.yaml}``, in the study's order."""

METRICS_COLUMNS = (
    "time_s", "round", "accuracy", "worst_accuracy", "p10_accuracy", "p50_accuracy",
    "p90_accuracy", "train_loss", "uplink_bytes", "downlink_bytes", "d2d_bytes",
    "wasted_bytes", "participants", "samples_trained",
)  # fmt: skip
SAMPLES_COLUMN = "samples_trained"
"""Samples processed so far by every client's finished local work, in training samples
(forward and backward; a loss-only pass counts as the algorithm's share of one, e.g. a third
under FedeRiCo; work without samples as its steps' batches): the axis on which "equal
rounds" of algorithms that do different amounts of local work compare fairly. Work cut by
a dropout or a deadline is not counted. Runs written before it existed lack it
(``analysis`` reads them without it)."""
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
AIR_COLUMNS = ("air_transmitters", "air_truncated", "air_slot_s", "air_snr_db", "air_mse")
"""rounds.csv's extra columns under an over-the-air uplink: clients that transmitted in the
round's slot, participants that did not (truncated by their channel, or offline), the slot's
seconds, the effective SNR of the aggregate (dB) and the mean squared error per number of what
the server received against an error-free uplink from every participant (obda: of the vote's
signs). Empty in a round without a slot."""
BACKHAUL_COLUMNS = ("backhaul_up_bytes", "backhaul_down_bytes")
"""metrics.csv's and rounds.csv's extra columns with several cells: bytes the sites' backhaul
carried to the cloud and from it so far (``fedsim.sim.backhaul``); summary.json has the totals."""
HIERARCHY_COLUMNS = ("cloud_rounds",)
"""metrics.csv's and rounds.csv's extra column under hierarchical FL (``hierfavg``): the cloud
aggregations so far (a row's round counts edge rounds); summary.json has the total."""
ACTIVITY_COLUMNS = ("time_s", "present", "online")
ENERGY_COLUMNS = ("time_s", "round", "client", *ENERGY_TOTALS, "battery_j")
RADIO_COLUMNS = (
    "client", "x_m", "y_m", "distance_m", "tx_power_dbm", "uplink_snr_db", "uplink_mbps",
    "downlink_mbps", "rho", "outages", "retransmissions", "given_up", "blocks", "bler",
    "mean_mcs", "harq_retransmissions",
)  # fmt: skip
"""radio.csv: outages, retransmissions and given_up count whole transfers (whole_transfer and
per_upload links); blocks, bler, mean_mcs and harq_retransmissions the transport blocks of the
harq link (sent, the share that failed, their mean MCS index, the failed ones sent again)."""
CELLULAR_COLUMNS = (
    "los", "site", "site_x_m", "site_y_m", "handovers", "prb_share", "mean_tx_power_dbm",
)  # fmt: skip
"""radio.csv's further columns with a TR 38.901 law, cells, a PRB scheduler or power control:
line of sight to the serving site at the start (1/0), the serving site at the end and where it
is, handovers, the share of the uplink's PRB·seconds the client got (PRB scheduler), and the
mean power it radiated while uploading (dBm); distance_m is to the serving site."""
CHANNEL_COLUMNS = ("client", "time_s", "snr_db", "rate_mbps")


def scenario_identity(document: Mapping[str, Any]) -> dict[str, Any]:
    """What makes a resolved scenario (``scenario.yaml`` read with YAML) the one it is: all of
    it but ``output.dir``, the results root it was written under. That is where a run is, not
    what it is (``results``, ``./results`` and its absolute path hold one study, and a copied
    results folder resumes). Everything else counts, ``training.threads`` and ``output.events``
    included: they change the files a run writes."""
    data = dict(document)
    if isinstance(data.get("output"), Mapping):
        data["output"] = {k: v for k, v in data["output"].items() if k != "dir"}
    return data


def scenario_sha256(document: Mapping[str, Any]) -> str:
    """The hash of ``scenario_identity``: sha256 of it as JSON with sorted keys (the document,
    not its text, so that YAML's formatting does not count)."""
    text = json.dumps(scenario_identity(document), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# With system.constellation: every pass of the run (a satellite's window to one server node),
# the bytes it carried each way and its largest Doppler shift (magnitude) at each direction's
# carrier; per satellite, its passes, contact time, bytes and the time its transfers spent
# waiting for a pass.
PASSES_COLUMNS = (
    "satellite", "node", "start_s", "end_s", "duration_s", "uplink_bytes", "downlink_bytes",
    "uplink_max_doppler_hz", "downlink_max_doppler_hz",
)  # fmt: skip
SATELLITES_COLUMNS = (
    "satellite", "passes", "passes_per_day", "contact_s", "passes_used", "uplink_bytes",
    "downlink_bytes", "bytes_per_pass_used", "waiting_s",
)  # fmt: skip
