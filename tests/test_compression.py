"""Update compression: each codec against its paper's properties and a hand count of its
bits, error feedback's bookkeeping, the majority vote, and codecs in a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml

from fedsim.config import CompressionConfig
from fedsim.learn import codecs
from fedsim.learn.aggregate import MajorityVote
from fedsim.world.compression import Compression
from tests.conftest import run_fedsim, tiny_scenario
from tests.test_fedavg_world import make_world, run_world

MLP_LAYERS = [torch.Size([32, 784]), torch.Size([32]), torch.Size([10, 32]), torch.Size([10])]
MLP_PARAMS = 784 * 32 + 32 + 32 * 10 + 10  # tiny_scenario's model


def context(shapes=(), seed: int = 0) -> codecs.Context:
    return codecs.Context(list(shapes), torch.Generator().manual_seed(seed))


def roundtrip(
    codec: codecs.Codec, x: torch.Tensor, ctx: codecs.Context | None = None
) -> tuple[int, torch.Tensor]:
    ctx = ctx or context([x.shape])
    data = codec.encode(x, ctx)
    return len(data), codec.decode(data, x.numel(), ctx)


# --- QSGD (Alistarh et al. 2017) ---


@pytest.mark.parametrize("coding", ["fixed", "elias"])
def test_qsgd_is_unbiased_and_within_the_papers_variance_bound(coding):
    d, s, draws = 64, 4, 4000
    x = torch.randn(d, generator=torch.Generator().manual_seed(1))
    codec = codecs.QSGD(s, None, coding)
    ctx = context([x.shape], seed=2)
    decoded = torch.stack([roundtrip(codec, x, ctx)[1] for _ in range(draws)]).double()
    mean, var = decoded.mean(0), decoded.var(0)
    z = (mean - x.double()) / (var / draws).sqrt().clamp_min(1e-12)
    assert z.abs().max() < 5  # each coordinate's mean within 5 standard errors
    error = ((decoded - x.double()) ** 2).sum(1).mean()
    bound = min(d / s**2, math.sqrt(d) / s) * float(x.norm() ** 2)
    assert 0.2 * bound < error <= bound


def test_qsgd_levels_and_bucket_norms_decode_exactly():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3))
    codec = codecs.QSGD(4, 512, "elias")
    norms, levels, negative = codec.quantize(x, torch.Generator().manual_seed(9))
    _, decoded = roundtrip(codec, x, context([x.shape], seed=9))
    norm_of = norms.repeat_interleave(512)[:1000].double()
    expected = norm_of * levels / 4 * torch.where(negative, -1.0, 1.0).double()
    assert torch.equal(decoded, expected.float())
    assert norms[0] == pytest.approx(float(x[:512].norm()), rel=1e-6)


def test_elias_gamma_round_trips_every_value_and_sign():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.integers(1, 40, 5000), [1, 1, 2, 3, 4, 7, 8, 33]])
    sign = np.where(values > 1, rng.integers(0, 2, len(values)), -1)
    bits = codecs._elias_gamma(values, sign)
    assert len(bits) == sum(2 * int(math.log2(v)) + 1 for v in values) + (values > 1).sum()
    decoded, negative = codecs._elias_gamma_decode(bits, len(values))
    assert decoded.tolist() == values.tolist()
    assert negative.tolist() == (sign == 1).tolist()
    # the codes of 1, 2, 5 (+), 4 (−) by hand: 1 | 010 0 | 00101 0 | 00100 1
    hand = codecs._elias_gamma(np.array([1, 2, 5, 4]), np.array([-1, 0, 0, 1]))
    assert "".join(map(str, hand)) == "1" + "0100" + "001010" + "001001"


# --- sparsifiers ---


def test_topk_keeps_exactly_the_k_largest_magnitudes():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    _, decoded = roundtrip(codecs.TopK(None, 25), x)
    kept = decoded.nonzero().squeeze(1)
    assert set(kept.tolist()) == set(x.abs().argsort(descending=True)[:25].tolist())
    assert torch.equal(decoded[kept], x[kept])


def test_randk_rescaled_is_unbiased_and_sends_seed_and_values():
    x = torch.randn(50, generator=torch.Generator().manual_seed(5))
    codec = codecs.RandK(0.1, None, rescale=True)
    ctx = context([x.shape], seed=6)
    decoded = torch.stack([roundtrip(codec, x, ctx)[1] for _ in range(6000)]).double()
    z = (decoded.mean(0) - x.double()) / (decoded.var(0) / 6000).sqrt()
    assert z.abs().max() < 5
    assert (decoded[0] != 0).sum() == 5


# --- error feedback (Karimireddy et al. 2019) ---


def test_error_feedback_residual_plus_sent_is_update_plus_old_residual():
    feedback, codec = codecs.ErrorFeedback(), codecs.TopK(0.05, None)
    ctx = context([torch.Size([400])])
    generator = torch.Generator().manual_seed(7)
    for _ in range(5):
        update = torch.randn(400, generator=generator)
        old = feedback.residuals.get((0, 0), torch.zeros(400))
        corrected = feedback.corrected((0, 0), update)
        _, sent = roundtrip(codec, corrected, ctx)
        feedback.keep((0, 0), corrected, sent)
        assert torch.equal(feedback.residuals[0, 0] + sent, update + old)
    feedback.forget(0)
    assert feedback.residuals == {}


# --- signs ---


def test_signsgd_majority_vote_by_hand():
    base = torch.tensor([1.0, 1.0, 1.0, 1.0])
    codec = codecs.SignSGD(server_lr=0.5)
    votes = MajorityVote(base, step=0.5)
    updates = [[0.3, -0.1, 0.0, -2.0], [0.2, 0.4, -0.5, -1.0], [-0.9, -0.2, 0.5, 0.1]]
    for update in updates:
        _, decoded = roundtrip(codec, torch.tensor(update))
        assert decoded.tolist() == [0.5 if u >= 0 else -0.5 for u in update]
        votes.add(base + decoded, weight=100.0)  # the vote ignores sample counts
    # signs (+ + −), (− + −), (+ − +), (− − +): majority +, −, +, −
    assert votes.result().tolist() == [1.5, 0.5, 1.5, 0.5]


def test_scaled_sign_is_mean_magnitude_times_sign():
    x = torch.tensor([2.0, -1.0, 0.5, -0.5])
    size, decoded = roundtrip(codecs.ScaledSign(), x)
    assert decoded.tolist() == [1.0, -1.0, 1.0, -1.0]
    assert size == 4 + 1


# --- PowerSGD (Vogels et al. 2019) ---


def test_powersgd_rank_r_of_a_rank_r_matrix_is_exact_and_warm_starts():
    generator = torch.Generator().manual_seed(8)
    matrix = torch.randn(30, 2, generator=generator) @ torch.randn(2, 40, generator=generator)
    bias = torch.randn(30, generator=generator)
    shapes = [torch.Size([30, 40]), torch.Size([30])]
    ctx = context(shapes)
    x = torch.cat([matrix.reshape(-1), bias])
    size, decoded = roundtrip(codecs.PowerSGD(2), x, ctx)
    torch.testing.assert_close(decoded, x, rtol=1e-4, atol=1e-4)
    assert size == 4 * (2 * (30 + 40) + 30)
    warm = ctx.state["powersgd_q"]
    assert warm[0].shape == (40, 2) and warm[1] is None  # the bias goes as it is


# --- sizes by hand ---


def test_every_codec_encoded_size_equals_a_hand_count():
    x = torch.randn(20, generator=torch.Generator().manual_seed(10))
    shapes = [torch.Size([4, 4]), torch.Size([4])]
    ctx = context(shapes)
    sizes = {
        "fp16": codecs.Cast("fp16"),
        "bf16": codecs.Cast("bf16"),
        "int8": codecs.Cast("int8"),
        "qsgd_fixed": codecs.QSGD(4, 8, "fixed"),
        "topk": codecs.TopK(None, 3),
        "randk": codecs.RandK(None, 3, rescale=True),
        "signsgd": codecs.SignSGD(0.1),
        "ef_signsgd": codecs.ScaledSign(),
        "powersgd": codecs.PowerSGD(1),
    }
    measured = {name: roundtrip(codec, x, ctx)[0] for name, codec in sizes.items()}
    assert measured == {
        "fp16": 40,
        "bf16": 40,
        "int8": 2 * 4 + 20,  # a float32 scale per layer, a byte per number
        "qsgd_fixed": 3 * 4 + math.ceil(20 * (1 + 3) / 8),  # 3 bucket norms, sign + 3 bits
        "topk": 3 * 4 + math.ceil(3 * 5 / 8),  # 3 float32 values, 3 indices of 5 bits
        "randk": 4 + 3 * 4,  # the seed, 3 values
        "signsgd": math.ceil(20 / 8),
        "ef_signsgd": 4 + math.ceil(20 / 8),
        "powersgd": 4 * (1 * (4 + 4) + 4),  # P 4x1, Q 4x1, the bias as it is
    }
    codec = codecs.QSGD(2, None, "elias")
    norms, levels, _ = codec.quantize(x, torch.Generator().manual_seed(11))
    bits = 32 + sum(2 * int(math.log2(int(v) + 1)) + 1 + (v > 0) for v in levels)
    assert roundtrip(codec, x, context(shapes, seed=11))[0] == math.ceil((bits - 32) / 8) + 4


# --- in a run ---


def compressed_run(tmp_path, compression: dict | None, **extra):
    algorithm = {"name": "fedavg", "compression": compression, **extra}
    data = tiny_scenario(tmp_path, algorithms=[algorithm], run={"rounds": 2})
    world = make_world(data, tmp_path)
    return world, run_world(world)


def test_a_run_with_topk_uplink_puts_the_encoded_bytes_on_the_air(tmp_path):
    world, rows = compressed_run(tmp_path, {"uplink": {"codec": "topk", "count": 100}})
    topk_bytes = 100 * 4 + math.ceil(100 * math.ceil(math.log2(MLP_PARAMS)) / 8)
    assert rows[-1]["uplink_bytes"] == 2 * 6 * topk_bytes
    assert rows[-1]["downlink_bytes"] == 2 * MLP_PARAMS * 4  # broadcast, uncompressed


def test_the_server_averages_what_the_decoder_gives(tmp_path, monkeypatch):
    """A top-k uplink: each decoded upload differs from the model it started from in at
    most k numbers, and the new global model is their sample-weighted average."""
    from fedsim.algorithms import _sync

    kept = []
    add = _sync.ServerModels.add
    monkeypatch.setattr(
        _sync.ServerModels, "add", lambda self, key, c, p: (kept.append(p), add(self, key, c, p))
    )
    world, _ = compressed_run(tmp_path, {"uplink": {"codec": "topk", "count": 50}})
    start = world.initial_params()
    first_round = kept[:6]
    for params in first_round:
        assert 0 < int((params != start).sum()) <= 50


def test_no_codec_sends_what_it_always_sent(tmp_path):
    _, plain = compressed_run(tmp_path / "a", None)
    _, empty = compressed_run(tmp_path / "b", {})
    np.testing.assert_equal(plain, empty)


def test_error_feedback_residuals_leave_with_their_client():
    config = CompressionConfig.model_validate(
        {"uplink": {"codec": "topk", "fraction": 0.01, "error_feedback": True}}
    )
    compression = Compression(config, 32, [MLP_LAYERS], seed=0)
    model = torch.randn(MLP_PARAMS)
    for client in (0, 1):
        compression.send("uplink", client, [model + 1], [model])
    assert compression.state_bytes() == 2 * MLP_PARAMS * 4
    compression.forget(0)
    assert compression.state_bytes() == MLP_PARAMS * 4
    nbytes, (small,) = compression.send("uplink", 1, [torch.ones(3)])
    assert nbytes == 12 and torch.equal(small, torch.ones(3))  # not a model: as it is


@pytest.mark.parametrize(
    ("algorithm", "message"),
    [
        ({"name": "local", "compression": {"uplink": {"codec": "cast"}}},
         "compression.uplink: local sends nothing on the uplink"),
        ({"name": "perfed_ckt", "compression": {"downlink": {"codec": "cast"}}},
         "perfed_ckt sends softmax outputs"),
        ({"name": "fedavg", "compression": {"downlink": {"codec": "topk", "fraction": 0.1,
          "error_feedback": True}}}, "downlink.error_feedback"),
        ({"name": "fedavg", "compression": {"uplink": {"codec": "signsgd"},
          "downlink": {"codec": "cast"}}}, "signsgd's server votes"),
        ({"name": "fedavg", "compression": {"uplink": {"codec": "topk"}}},
         "give exactly one of fraction and count"),
        ({"name": "fedavg", "compression": {"uplink": {"codec": "zip"}}}, "zip"),
    ],
)  # fmt: skip
def test_bad_compression_exits_2_naming_the_field(tmp_path, algorithm, message):
    assert_refused(tmp_path, algorithm, message)


def assert_refused(tmp_path, algorithm: dict, message: str, data: dict | None = None) -> None:
    """``fedsim validate`` of a scenario with this algorithm (in ``data``, else the tiny
    scenario) exits 2 with the message."""
    path = tmp_path / "s.yaml"
    data = tiny_scenario(tmp_path) if data is None else data
    path.write_text(yaml.safe_dump({**data, "algorithms": [algorithm]}))
    result = run_fedsim("validate", str(path))
    assert result.returncode == 2
    assert message in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_codec_time_runs_on_the_clients_clock_once_per_encode_and_decode(tmp_path):
    """codec_s_per_mparam: each participant decodes the downlink model before it trains and
    encodes its upload before it sends, both as compute time; nothing else moves."""
    fp16 = {"codec": "cast", "dtype": "fp16"}
    plain_world, _ = compressed_run(tmp_path / "a", {"uplink": fp16, "downlink": fp16})
    timed_world, _ = compressed_run(
        tmp_path / "b", {"uplink": fp16, "downlink": fp16, "codec_s_per_mparam": 10.0}
    )
    codec_s = 2 * 10.0 * MLP_PARAMS / 1e6  # decode one model, encode one update
    plain, timed = plain_world.recorder.round_rows, timed_world.recorder.round_rows
    assert len(plain) == len(timed) == 2
    for before, after in zip(plain, timed, strict=True):
        assert after["compute_s"] - before["compute_s"] == pytest.approx(codec_s)
        assert after["downlink_s"] == pytest.approx(before["downlink_s"])
        assert after["uplink_s"] == pytest.approx(before["uplink_s"])
