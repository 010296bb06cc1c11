"""Compressed peer messages (``compression.peer``): public copies as in CHOCO-SGD, resyncs
of a receiver that missed a difference, per-pair residuals, and the serverless algorithms
with a codec, their bytes read back from the event log."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsim.algorithms.dsgd import choco_step
from fedsim.budget import format_budgets
from fedsim.config import CompressionConfig, DsgdConfig, parse_scenario
from fedsim.learn.aggregate import weighted_average
from fedsim.study import run_scenario
from fedsim.world.compression import Compression
from tests.test_compression import MLP_LAYERS, MLP_PARAMS, assert_refused
from tests.test_decentralized import MODEL_BYTES, d2d_sends, decentralized
from tests.test_fedavg_world import read_metrics
from tests.test_system_model import budgets as scenario_budgets


def peer_compression(codec: dict) -> Compression:
    config = CompressionConfig.model_validate({"peer": codec})
    return Compression(config, 32, [MLP_LAYERS], seed=0)


def topk_bytes(k: int) -> int:
    return k * 4 + math.ceil(k * math.ceil(math.log2(MLP_PARAMS)) / 8)


def test_a_model_is_encoded_once_and_a_receiver_that_missed_a_difference_is_resynced():
    compression = peer_compression({"codec": "topk", "count": 100})
    model = torch.randn(MLP_PARAMS, generator=torch.Generator().manual_seed(0))
    to_1 = compression.send_peer(0, 1, [model], own_model=True)
    to_2 = compression.send_peer(0, 2, [model], own_model=True)
    # One encoding for both receivers (both hold the zero copy): the same difference.
    assert to_1.nbytes == to_2.nbytes == topk_bytes(100)
    assert (to_1.encoded_numel, to_2.encoded_numel) == (MLP_PARAMS, 0)
    assert torch.equal(to_1.received[0], to_2.received[0])
    assert int((to_1.received[0] != 0).sum()) == 100  # x̂ = top-100 of x − 0
    compression.delivered(0, 1, to_1.version)  # the message to 2 is lost
    newer = model + 0.01
    again_1 = compression.send_peer(0, 1, [newer], own_model=True)
    again_2 = compression.send_peer(0, 2, [newer], own_model=True)
    assert again_1.nbytes == topk_bytes(100)  # one difference behind: the difference
    assert again_2.nbytes == MLP_PARAMS * 4  # two behind: the whole copy, as it is
    assert torch.equal(again_1.received[0], again_2.received[0])  # both now hold x̂
    assert torch.equal(compression.public_model(0), again_1.received[0])


def test_the_differences_carry_the_error_so_the_copy_reaches_the_model():
    """A quarter of the numbers of x − x̂ (the largest), four times, rebuilds a fixed x
    exactly: each difference takes the largest of what the copy still misses (the error
    stays with the sender)."""
    compression = peer_compression({"codec": "topk", "count": math.ceil(MLP_PARAMS / 4)})
    model = torch.randn(MLP_PARAMS, generator=torch.Generator().manual_seed(1))
    errors = []
    for _ in range(4):
        message = compression.send_peer(0, 1, [model.clone()], own_model=True)
        compression.delivered(0, 1, message.version)
        errors.append(float((model - message.received[0]).norm()))
    assert errors == sorted(errors, reverse=True) and errors[0] > 0
    assert errors[-1] == 0.0


@pytest.mark.parametrize(
    "codec",
    [{"codec": "qsgd", "levels": 4}, {"codec": "randk", "fraction": 0.1, "rescale": True}],
    ids=["qsgd", "randk"],
)
def test_an_unbiased_codecs_differences_are_shrunk_so_the_copy_converges(codec):
    """QSGD s = 4 (ω ≈ 5.7 on buckets of 512) and rescaled rand-k (ω = 9) added as they
    decode would push the copy away; C/(1 + ω) is contractive: E‖x − x̂‖² falls by a factor
    of at most 1 − 1/(1 + ω) a message (exactly that for rand-k)."""
    compression = peer_compression(codec)
    model = torch.randn(MLP_PARAMS, generator=torch.Generator().manual_seed(4))
    omega = compression.codecs["peer"].variance_factor(MLP_PARAMS)
    assert omega == pytest.approx(math.sqrt(512) / 4 if codec["codec"] == "qsgd" else 9, 1e-3)
    sends = 40
    for _ in range(sends):
        message = compression.send_peer(0, 1, [model.clone()], own_model=True)
    error = float((model - message.received[0]).norm() ** 2 / model.norm() ** 2)
    bound = (1 - 1 / (1 + omega)) ** sends  # ω bounds QSGD's variance; rand-k's is ω exactly
    if codec["codec"] == "randk":  # the expectation, within the draw's spread
        assert bound / 2 < error < 2 * bound
    else:
        assert 0 < error < bound


def test_peer_gradients_keep_one_residual_per_receiver_and_leave_with_either_client():
    compression = peer_compression({"codec": "topk", "count": 255, "error_feedback": True})
    gradient = torch.randn(MLP_PARAMS, generator=torch.Generator().manual_seed(2))
    for receiver in (1, 2):
        message = compression.send_peer(0, receiver, [gradient], own_model=False)
        assert message.nbytes == topk_bytes(255)
    residual = MLP_PARAMS * 4
    assert compression.state_bytes() == 2 * residual
    compression.send_peer(0, 1, [torch.zeros(MLP_PARAMS)], own_model=True)
    assert compression.state_bytes() == 3 * residual  # + client 0's public copy
    compression.forget(2)  # the receiver left: 0 drops what it kept for it
    assert compression.state_bytes() == 2 * residual
    compression.forget(0)
    assert compression.state_bytes() == 0


def test_choco_step_with_exact_copies_is_gossip_averaging():
    rng = torch.Generator().manual_seed(3)
    own, a, b = (torch.randn(50, generator=rng) for _ in range(3))
    weights = {1: 0.25, 2: 0.4}
    cast = {"peer": {"codec": "cast"}}
    assert DsgdConfig(name="dsgd", compression=cast).consensus_step == 0.1  # the default
    config = DsgdConfig(name="dsgd", consensus_step=1.0, compression=cast)
    gossip = weighted_average([own, a, b], [0.35, 0.25, 0.4])
    assert torch.allclose(choco_step(own, own, {1: a, 2: b}, weights, config), gossip, atol=1e-6)
    half = DsgdConfig(name="dsgd", consensus_step=0.5, compression=cast)
    stepped = choco_step(own, own, {1: a, 2: b}, weights, half)
    assert torch.allclose(stepped, (own + gossip) / 2, atol=1e-6)


def test_dsgd_with_a_peer_codec_puts_each_encoded_difference_on_the_air(tmp_path):
    """A ring, every message delivered: each client's one encoding per round goes to both
    neighbours at the codec's size (top-k: k values and their indices)."""
    data = decentralized(
        tmp_path,
        {"name": "dsgd", "compression": {"peer": {"codec": "topk", "count": 500}}},
        system={"d2d": {"graph": "ring", "rate_mbps": 5.0}},
        training={"local_steps": None, "local_epochs": 1, "optimizer": "sgd", "lr": 0.1},
        run={"rounds": 3},
    )
    results_dir = run_scenario(parse_scenario(data), show_progress=False)
    sends = d2d_sends(results_dir / "dsgd")
    k = 500
    topk_size = k * 4 + math.ceil(k * math.ceil(math.log2(MODEL_BYTES // 4)) / 8)
    assert len(sends) == 3 * 2 * 6 and {s["bytes"] for s in sends} == {topk_size}
    rows = read_metrics(results_dir / "dsgd")
    assert rows[-1]["d2d_bytes"] == 3 * 2 * 6 * topk_size


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "federico", "neighbours": 2},
        {"name": "cobo", "pair_sampling": "constant", "pair_probability": 0.5},
    ],
    ids=lambda a: a["name"],
)
def test_federico_and_cobo_send_models_as_copies_and_gradients_compressed(tmp_path, algorithm):
    """fp16 casts: a model goes out at half its bytes to a receiver in step with the sender's
    copy and whole to one that is not; a gradient always at half. Nothing else is sent
    model-sized, and the run's accuracy stays close to the uncompressed run's."""
    coded = algorithm | {"compression": {"peer": {"codec": "cast", "dtype": "fp16"}}}
    accuracy = {}
    for name, config in (("plain", algorithm), ("coded", coded)):
        data = decentralized(tmp_path / name, config, run={"rounds": 4})
        results_dir = run_scenario(parse_scenario(data), show_progress=False)
        run_dir = results_dir / algorithm["name"]
        accuracy[name] = np.array([row["accuracy"] for row in read_metrics(run_dir)])
    sends = d2d_sends(run_dir)
    sizes = {s["bytes"] for s in sends}
    assert MODEL_BYTES // 2 in sizes
    # CoBo's reply: the model (half, or whole to a partner out of step) and a half gradient
    reply = {2 * (MODEL_BYTES // 2), MODEL_BYTES + MODEL_BYTES // 2}
    assert sizes <= {MODEL_BYTES // 2, MODEL_BYTES, 4} | reply
    full = sum(1 for s in sends if s["bytes"] == MODEL_BYTES)
    halves = sum(1 for s in sends if s["bytes"] == MODEL_BYTES // 2)
    assert 0 < full < halves  # resyncs happen, but most models go as differences
    assert np.abs(accuracy["coded"] - accuracy["plain"]).max() < 0.1


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ({"name": "dsgd", "compression": {"uplink": {"codec": "cast"}}},
         "compression.uplink: dsgd has no server: compression.peer"),
        ({"name": "fedavg", "compression": {"peer": {"codec": "cast"}}},
         "compression.peer: fedavg sends no peer messages"),
        ({"name": "cobo", "compression": {"peer": {"codec": "signsgd"}}},
         "peer.codec: signsgd is defined with a server's majority vote"),
        ({"name": "dsgd", "consensus_step": 0.5}, "consensus_step: acts only on the public copies"),
    ],
)  # fmt: skip
def test_a_codec_where_it_cannot_go_exits_2_naming_the_field(tmp_path, algorithm, message):
    assert_refused(tmp_path, algorithm, message)


def test_the_budget_counts_peer_messages_at_the_codecs_size(tmp_path):
    plain = {"name": "dsgd", "label": "plain"}
    coded = {
        "name": "dsgd",
        "label": "coded",
        "compression": {"peer": {"codec": "topk", "count": 500}},
    }
    data = decentralized(tmp_path, plain, system={"d2d": {"graph": "ring", "rate_mbps": 5.0}})
    data["algorithms"] = [plain, coded]
    budgets = scenario_budgets(data)
    k = 500
    topk_size = k * 4 + math.ceil(k * math.ceil(math.log2(MODEL_BYTES // 4)) / 8)
    by_label = {b.algorithm: b for b in budgets}
    assert by_label["coded"].message_bytes == {"peer": topk_size}
    assert by_label["plain"].message_bytes is None
    ratio = by_label["plain"].d2d_bytes / by_label["coded"].d2d_bytes
    assert ratio == pytest.approx(MODEL_BYTES / topk_size)
    text = format_budgets(parse_scenario(data), budgets, MODEL_BYTES)
    assert "peer_bytes/msg" in text and f"{topk_size:,}" in text
