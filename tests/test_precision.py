"""Mixed precision and memory format: fp32 untouched, bf16 deterministic and as accurate as
fp32 within a small margin on real Fashion-MNIST, the measured channels-last policy, fp16 and tf32
refused off CUDA, and the fp16 loss scaler's rules."""

from __future__ import annotations

import pytest
import torch

from fedsim.config import ScenarioError, parse_scenario
from fedsim.learn.execution import cpu_has_native_bf16, uses_channels_last
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import LossScaler, OptimizerSpec
from fedsim.learn.trainer import Trainer
from fedsim.study import run_scenario, run_study
from tests.conftest import tiny_scenario
from tests.test_fedavg_world import read_metrics

OPTIMIZER = OptimizerSpec(name="sgd", lr=0.05, momentum=0.9)


def fashion_run(tmp_path, precision: str, memory_format: str = "auto") -> list[dict]:
    data = tiny_scenario(
        tmp_path,
        dataset={"name": "fashion_mnist", "num_samples": 2400,
                 "partition": {"kind": "iid"}, "download": False},
        model={"name": "lenet5"},
        training={"lr": 0.05, "momentum": 0.9, "batch_size": 32, "precision": precision,
                  "memory_format": memory_format},
        run={"rounds": 10},
    )  # fmt: skip
    data["evaluation"] = {"every_rounds": 10}
    return read_metrics(run_scenario(parse_scenario(data), show_progress=False) / "fedavg")


def test_bf16_learns_as_well_as_fp32_on_real_data_and_is_deterministic(tmp_path):
    fp32 = fashion_run(tmp_path / "fp32", "fp32")[-1]["accuracy"]
    bf16 = [fashion_run(tmp_path / f"bf16_{i}", "bf16")[-1]["accuracy"] for i in range(2)]
    assert fp32 > 0.6  # it learned
    assert bf16[0] == bf16[1]  # same machine, same seed: the same numbers
    assert abs(bf16[0] - fp32) < 0.05


def trainer(model: str, **options) -> Trainer:
    return Trainer(build_model(model, (1, 28, 28), 10), OPTIMIZER, batch_size=16, **options)


def batch(count: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(count, 1, 28, 28, generator=generator), torch.randint(10, (count,))


def test_fp32_is_untouched_by_the_options_and_bf16_is_close():
    x, y = batch()
    plain = trainer("lenet5")
    start = plain.init_params(1)
    reference = plain.train(start, x, y, steps=3, seed=2).params
    explicit = trainer("lenet5", precision="fp32", memory_format="contiguous")
    assert torch.equal(explicit.train(start, x, y, steps=3, seed=2).params, reference)
    assert not plain.channels_last  # auto keeps fp32 in the layout it always had
    assert not trainer("lenet5", precision="bf16").channels_last  # one channel: no gain
    mixed = trainer("lenet5", precision="bf16", memory_format="channels_last")
    assert mixed.channels_last
    result = mixed.train(start, x, y, steps=3, seed=2).params
    assert result.dtype == torch.float32  # the client state stays fp32
    assert not torch.equal(result, reference)  # bf16 does change the numbers...
    assert torch.allclose(result, reference, atol=0.02)  # ...by little
    evaluation = mixed.evaluate(result, x, y)
    assert evaluation.total == 48 and evaluation.loss_sum > 0


def test_vmap_engine_runs_in_bf16_like_the_loop():
    x, y = batch(32)
    mixed = trainer("lenet5", precision="bf16", memory_format="channels_last")
    starts = [mixed.init_params(k) for k in range(3)]
    datasets = [(x, y)] * 3
    loop = mixed.train_many(starts, datasets, steps=2, seeds=[0, 1, 2], engine="loop")
    vmapped = mixed.train_many(starts, datasets, steps=2, seeds=[0, 1, 2], engine="vmap")
    for a, b in zip(loop, vmapped, strict=True):
        assert torch.allclose(a.params, b.params, atol=0.02)


def test_the_memory_format_policy():
    assert uses_channels_last("auto", "bf16", 3) and not uses_channels_last("auto", "fp32", 3)
    assert not uses_channels_last("auto", "bf16", 1)  # a one-channel first convolution
    assert uses_channels_last("channels_last", "fp32", 1)
    assert not uses_channels_last("contiguous", "bf16", 3)
    assert not trainer("mlp", precision="bf16").channels_last  # no convolution to feed
    rgb = Trainer(build_model("cnn", (3, 32, 32), 10), OPTIMIZER, 8, precision="bf16")
    assert rgb.channels_last


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_gpu_precisions_are_refused_off_cuda(tmp_path, precision):
    with pytest.raises(ValueError, match="CUDA"):
        trainer("mlp", precision=precision)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(tiny_scenario(tmp_path, training={"precision": precision}))
    assert any(p.startswith("training") and "cuda" in p for p in caught.value.problems)


def test_the_loss_scaler_skips_overflowing_steps_and_grows_after_good_ones():
    scaler = LossScaler(scale=8.0, growth_interval=2)
    g = torch.tensor([8.0, -16.0])
    assert scaler.unscale(g) and g.tolist() == [1.0, -2.0]
    assert not scaler.unscale(torch.tensor([float("inf"), 0.0]))
    assert scaler.scale == 4.0
    assert scaler.unscale(torch.tensor([1.0])) and scaler.unscale(torch.tensor([1.0]))
    assert scaler.scale == 8.0


@pytest.mark.parametrize(
    ("cpuinfo", "native"),
    [
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni\n", False),
        ("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 avx_vnni\n", True),
        ("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile\n", True),
        ("processor\t: 0\nFeatures\t: fp asimd sve i8mm bf16\n", True),
        ("processor\t: 0\nFeatures\t: fp asimd crc32 atomics\n", False),
    ],
)
def test_native_bf16_is_read_from_the_cpus_flags(tmp_path, cpuinfo, native):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    assert cpu_has_native_bf16(path) is native
    assert cpu_has_native_bf16(tmp_path / "missing") is None  # not Linux: cannot tell


@pytest.mark.parametrize("native", [False, True, None])
def test_bf16_on_a_cpu_that_emulates_it_is_warned_once(tmp_path, monkeypatch, capsys, native):
    monkeypatch.setattr("fedsim.study.cpu_has_native_bf16", lambda: native)
    data = tiny_scenario(tmp_path, training={"precision": "bf16"}, run={"rounds": 1})
    data["sweep"] = {"seed": [1, 2]}
    run_study(parse_scenario(data), show_progress=False)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "native bf16" in line]
    assert len(warnings) == (1 if native is False else 0)
    assert all(w.startswith("warning: training.precision bf16:") for w in warnings)


@pytest.mark.parametrize("user_setting", [True, False])
def test_fp32_computes_without_tf32_whatever_the_process_set(user_setting: bool) -> None:
    """PyTorch lets cuDNN convolutions round to TF32 by default: a trainer in fp32 turns it
    off for its forward and backward passes and restores the process's settings after."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    matmul.allow_tf32 = cudnn.allow_tf32 = user_setting
    seen: list[tuple[bool, bool]] = []
    try:
        lenet = trainer("lenet5")
        lenet._model.register_forward_hook(
            lambda *_: seen.append((matmul.allow_tf32, cudnn.allow_tf32))
        )
        x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
        lenet.train(lenet.init_params(0), x, y, steps=1, seed=0)
        lenet.evaluate(lenet.init_params(0), x, y)
        assert seen == [(False, False)] * 2
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (user_setting, user_setting)
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved
