"""The stacked engine (every shipped model, every option, against the loop), the batched
engines' fixed-shape step (padding and masking change nothing), the distillation term in a
batch, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedsim.config import ScenarioError, parse_scenario
from fedsim.learn.engines import Distillation, EngineRefused
from fedsim.learn.engines.captured import CapturedStep
from fedsim.learn.engines.lockstep import padded_clients
from fedsim.learn.engines.stacked import interpret
from fedsim.learn.models import build_model
from fedsim.learn.optimizers import SGD as SGDStep
from fedsim.learn.optimizers import Adam, OptimizerSpec
from fedsim.learn.trainer import Trainer
from fedsim.runner import build_dataset, build_trainers
from tests.conftest import tiny_scenario

MOMENTUM = OptimizerSpec("sgd", lr=0.05, momentum=0.9, weight_decay=1e-3)
PLAIN = OptimizerSpec("sgd", lr=0.05)
ADAM = OptimizerSpec("adam", lr=1e-3, weight_decay=1e-3, betas=(0.8, 0.99))
SHAPES = {"mlp": (1, 12, 12), "lenet5": (1, 16, 16), "cnn": (1, 12, 12), "vgg11": (3, 32, 32)}


def make(name: str, spec: OptimizerSpec = MOMENTUM, batch: int = 8, **options) -> Trainer:
    torch.manual_seed(0)
    model = build_model(name, SHAPES[name], 10, hidden_sizes=(32, 16))
    return Trainer(model, spec, batch_size=batch, **options)


def client_data(name: str, sizes: list[int], seed: int = 0) -> list[tuple]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(n, *SHAPES[name], generator=g), torch.randint(0, 10, (n,), generator=g))
        for n in sizes
    ]


def distillations(name: str, count: int, weight: float = 2.0) -> list[Distillation]:
    """Per-client targets (PerFed-CKT's nearest centroids) on one public set."""
    g = torch.Generator().manual_seed(6)
    public = torch.randn(40, *SHAPES[name], generator=g)
    targets = [torch.softmax(torch.randn(40, 10, generator=g), dim=1) for _ in range(count)]
    return [Distillation(public, t, weight, batch_size=16) for t in targets]


def options(trainer: Trainer, name: str, which: str, count: int) -> dict:
    """FedProx / Ditto: a prox center per client; SCAFFOLD: a correction per client;
    PerFed-CKT: its co-distillation term with per-client targets."""
    if which == "prox":
        centers = [trainer.init_params(20 + i) for i in range(count)]
        return {"prox_center": centers, "prox_mu": 0.3}
    if which == "correction":
        return {"correction": [0.01 * torch.randn(trainer.num_params) for _ in range(count)]}
    if which == "distill":
        return {"distill": distillations(name, count)}
    return {}


def assert_close(starts: list, want: list, got: list, rel: float) -> None:
    for start, a, b in zip(starts, want, got, strict=True):
        assert (a.steps, a.samples) == (b.steps, b.samples)
        moved = (a.params - start).norm()  # another batch order moves by ~30% of this
        assert (b.params - a.params).norm() <= rel * max(float(moved), 1e-3)
        if a.steps:
            assert moved > 0.01 and b.mean_loss == pytest.approx(a.mean_loss, rel=1e-5)
        else:
            assert torch.equal(b.params, start)


TOLERANCE = {"sgd": 1e-5, "adam": 1e-4}
"""Relative to how far a client moved. Adam divides each gradient by its own magnitude plus
1e-8, so an element whose gradient is at rounding level in one engine and 0 in the other (a
ReLU input at a near-cancellation) moves by up to lr·|g|/(|g| + 1e-8): the cnn's im2col
products round that way in 4 of 295,000 linear weights after one step (3e-5 relative)."""

CASES = [
    *[(name, MOMENTUM, "plain") for name in ("mlp", "lenet5", "cnn", "vgg11")],
    *[(name, ADAM, "plain") for name in ("mlp", "cnn")],
    ("lenet5", MOMENTUM, "prox"),
    ("cnn", PLAIN, "correction"),  # the correction joins the gradient (plain SGD)
    ("cnn", MOMENTUM, "correction"),  # a step of its own beside the momentum
    ("lenet5", MOMENTUM, "distill"),
    ("cnn", ADAM, "distill"),
]


@pytest.mark.parametrize(
    ("name", "spec", "which"),
    [pytest.param(n, s, w, id=f"{n}-{s.name}{s.momentum or ''}-{w}") for n, s, w in CASES],
)
def test_stacked_equals_the_loop(name: str, spec: OptimizerSpec, which: str) -> None:
    """Unequal client sizes (partial batches at different steps), unequal step counts (the
    stack shrinks), every option, every shipped model (GroupNorm, max and average pooling)."""
    trainer = make(name, spec)
    sizes, steps = ([9, 5, 12], [2, 1, 0]) if name == "vgg11" else ([21, 13, 8, 30], [5, 0, 3, 7])
    data = client_data(name, sizes)
    starts = [trainer.init_params(i) for i in range(len(sizes))]
    extra = options(trainer, name, which, len(sizes))
    seeds = list(range(len(sizes)))
    loop = trainer.train_many(starts, data, steps=steps, seeds=seeds, engine="loop", **extra)
    stacked = trainer.train_many(starts, data, steps=steps, seeds=seeds, engine="stacked", **extra)
    assert_close(starts, loop, stacked, TOLERANCE[spec.name])
    if which != "plain":  # the option did something
        bare = trainer.train_many(starts, data, steps=steps, seeds=seeds, engine="loop")
        assert (bare[0].params - loop[0].params).norm() > 1e-3 * (loop[0].params - starts[0]).norm()


def test_the_vmap_engine_trains_the_distillation_term_too() -> None:
    trainer = make("cnn")
    data = client_data("cnn", [21, 13, 30])
    starts = [trainer.init_params(i) for i in range(3)]
    extra = {**options(trainer, "cnn", "distill", 3), **options(trainer, "cnn", "prox", 3)}
    loop = trainer.train_many(starts, data, epochs=1, seeds=[1, 2, 3], engine="loop", **extra)
    vmap = trainer.train_many(starts, data, epochs=1, seeds=[1, 2, 3], engine="vmap", **extra)
    assert_close(starts, loop, vmap, TOLERANCE["sgd"])
    with pytest.raises(ValueError, match="share their public set"):
        other = Distillation(torch.zeros(5, *SHAPES["cnn"]), torch.zeros(5, 10), 2.0)
        trainer.train_many(starts[:2], data[:2], steps=1, seeds=[0, 1],
                           distill=[extra["distill"][0], other])  # fmt: skip


def test_stacked_runs_in_bf16_like_the_loop() -> None:
    trainer = make("lenet5", precision="bf16")
    data = client_data("lenet5", [32, 32, 20])
    starts = [trainer.init_params(k) for k in range(3)]
    loop = trainer.train_many(starts, data, steps=2, seeds=[0, 1, 2], engine="loop")
    stacked = trainer.train_many(starts, data, steps=2, seeds=[0, 1, 2], engine="stacked")
    for a, b in zip(loop, stacked, strict=True):
        assert torch.allclose(a.params, b.params, atol=0.02)
        assert b.mean_loss == pytest.approx(a.mean_loss, rel=0.02)


@pytest.mark.parametrize("engine", ["stacked", "vmap"])
def test_fixed_shapes_train_as_the_shrinking_stack(engine: str) -> None:
    """What a captured step runs: 5 clients padded to 8 (padded_clients), batches of at most
    8 samples padded to the batch size 16, finished clients masked and copied out as they
    finish, momentum and a prox term, then a second call at the same shape (state reset)."""
    trainer = make("lenet5", batch=16, vmap_chunk=8)
    sizes, steps = [21, 13, 8, 30, 5], [5, 0, 3, 7, 2]
    data = client_data("lenet5", sizes, seed=3)
    starts = [trainer.init_params(i) for i in range(5)]
    extra = {**options(trainer, "lenet5", "prox", 5), **options(trainer, "lenet5", "distill", 5)}
    fixed_trainer = make("lenet5", batch=16, vmap_chunk=8)
    fixed_trainer._engines[engine].fixed_shapes = True  # as every compile mode but eager runs
    eager = trainer.train_many(starts, data, steps=steps, seeds=range(5), engine=engine, **extra)
    for _ in range(2):
        fixed = fixed_trainer.train_many(
            starts, data, steps=steps, seeds=range(5), engine=engine, **extra
        )
        assert_close(starts, eager, fixed, 1e-6)
    assert padded_clients(5, 8) == 8 and padded_clients(3, 8) == 4 and padded_clients(1, 8) == 1


class Replay:
    """A stand-in for a CUDA graph on a CPU: replaying runs the recorded step again."""

    def __init__(self, captured: CapturedStep) -> None:
        self.replay = captured.step


@pytest.mark.parametrize("spec", [MOMENTUM, ADAM], ids=["sgd", "adam"])
def test_a_captured_step_feeds_reloads_and_reuses_its_buffers(
    spec: OptimizerSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile graph, all but the capture (CUDA only, tests/test_cuda.py): the inputs
    gathered into fixed buffers, the state reloaded for each chunk at its addresses (Adam's
    step count a tensor), one graph per shape kept and reused: the eager fixed-shape step's
    results, call after call."""
    monkeypatch.setattr(CapturedStep, "_capture", lambda captured: Replay(captured))
    eager, captured = make("lenet5", spec, vmap_chunk=4), make("lenet5", spec, vmap_chunk=4)
    eager._engines["stacked"].fixed_shapes = True
    engine = captured._engines["stacked"]
    engine.fixed_shapes, captured._setup.compile = True, "graph"  # what a CUDA trainer has
    data = client_data("lenet5", [21, 13, 8, 30, 5, 17], seed=5)
    starts = [eager.init_params(i) for i in range(6)]
    extra = {**options(eager, "lenet5", "prox", 6), **options(eager, "lenet5", "distill", 6)}
    run = {"steps": [5, 0, 3, 7, 2, 4], "seeds": range(6), "engine": "stacked", **extra}
    want = eager.train_many(starts, data, **run)
    rel = 1e-6 if spec.name == "sgd" else 1e-5  # Adam: its device-scalar form rounds otherwise
    for _ in range(2):  # chunks of 4 and 2 clients: two shapes, captured once each
        assert_close(starts, want, captured.train_many(starts, data, **run), rel)
    assert sorted(key[0] for key in engine._captured) == [(2, 8), (4, 8)]  # (rows, width)


def test_a_chunk_does_not_change_a_clients_arithmetic() -> None:
    """At a given shape, a client's rows are its own matrix products: trained with other
    clients or alone (padded to the same shape), the same bits (on this machine)."""
    trainer = make("cnn", vmap_chunk=4)
    engine = trainer._engines["stacked"]
    engine.fixed_shapes = True
    data = client_data("cnn", [21, 13, 30, 17])
    starts = [trainer.init_params(i) for i in range(4)]
    together = trainer.train_many(starts, data, epochs=1, seeds=range(4), engine="stacked")
    for i in range(4):  # one client: padded to 1 row, so pad it by hand to 4 with a twin
        pair = trainer.train_many(
            [starts[i]] + starts[:3], [data[i]] + data[:3], epochs=1, seeds=[i, 0, 1, 2],
            engine="stacked",
        )  # fmt: skip
        assert torch.equal(pair[0].params, together[i].params)


def test_chunks_give_one_stacks_results() -> None:
    sizes, steps = [21, 13, 8, 30, 5, 17, 9], [5, 0, 3, 7, 2, 4, 3]
    data = client_data("cnn", sizes, seed=1)
    whole, parts = make("cnn", vmap_chunk=7), make("cnn", vmap_chunk=3)
    starts = [whole.init_params(i) for i in range(7)]
    extra = options(whole, "cnn", "correction", 7)
    one = whole.train_many(starts, data, steps=steps, seeds=range(7), engine="stacked", **extra)
    three = parts.train_many(starts, data, steps=steps, seeds=range(7), engine="stacked", **extra)
    assert_close(starts, one, three, 1e-6)


def test_stacked_evaluation_equals_per_client_evaluation() -> None:
    for name in ("mlp", "cnn"):
        trainer = make(name)
        data = client_data(name, [17, 40, 5, 23], seed=1)
        params = [trainer.init_params(i) for i in range(4)]
        xs, ys = [x for x, _ in data], [y for _, y in data]
        single = [trainer.evaluate(p, x, y) for p, x, y in zip(params, xs, ys, strict=True)]
        each = trainer.evaluate_each(params, xs, ys, engine="stacked")
        for r, s in zip(each, single, strict=True):
            assert r.total == s.total and abs(r.correct - s.correct) <= 1
            assert r.loss_sum == pytest.approx(s.loss_sum, rel=1e-5)


def test_optimizers_started_in_place_step_as_fresh_ones() -> None:
    """A captured step's optimizer state lives at fixed addresses: zero momentum gives the
    first step's copy of the gradient exactly; Adam's device step count its formula."""
    g = torch.Generator().manual_seed(0)
    grads = [[torch.randn(3, 4, generator=g)] for _ in range(4)]
    makers = {"sgd": lambda: SGDStep(MOMENTUM), "adam": lambda: Adam(ADAM, [torch.zeros(3, 4)])}
    for name, make_optimizer in makers.items():
        fresh, placed = make_optimizer(), make_optimizer()
        w_fresh, w_placed = [torch.ones(3, 4)], [torch.ones(3, 4)]
        placed.start_in_place(w_placed)
        placed.step(w_placed, [torch.randn(3, 4, generator=g)])  # a chunk before this one
        w_placed = [torch.ones(3, 4)]
        state = placed.momentum_buffer if name == "sgd" else placed.exp_avg + [placed.step_count]
        placed.start_in_place(w_placed)  # a new chunk: the same tensors, zeroed
        now = placed.momentum_buffer if name == "sgd" else placed.exp_avg + [placed.step_count]
        assert all(a is b for a, b in zip(state, now, strict=True))
        for gs in grads:
            fresh.step(w_fresh, [t.clone() for t in gs])
            placed.step(w_placed, [t.clone() for t in gs])
        if name == "sgd":
            assert torch.equal(w_fresh[0], w_placed[0])
        else:
            assert isinstance(placed.step_count, torch.Tensor) and int(placed.step_count) == 4
            assert torch.allclose(w_fresh[0], w_placed[0], rtol=0, atol=1e-7)


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) + self.body(x)


def test_what_the_stacked_engine_cannot_run_is_named() -> None:
    assert interpret(build_model("vgg13", (3, 32, 32), 10))[1] is None
    cases = {
        "layer 0 (Conv2d): a convolution with groups": nn.Sequential(
            nn.Conv2d(4, 4, 3, groups=2), nn.Flatten(), nn.Linear(4, 2)
        ),
        "layer 0 (Linear): a linear layer on unflattened": nn.Sequential(nn.Linear(4, 2)),
        "layer 3 (Conv2d): an image layer after the flatten": nn.Sequential(
            nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Conv2d(2, 2, 1)
        ),
        "not flattened": nn.Sequential(nn.Conv2d(1, 2, 3)),
        "not a sequence": Residual(),
    }
    for why, model in cases.items():
        assert why in interpret(model)[1]
    with pytest.raises(EngineRefused, match="BatchNorm2d"):
        Trainer(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten()), PLAIN, 4,
                engine="stacked")  # fmt: skip


def test_engine_settings_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = parse_scenario(tiny_scenario(tmp_path, training={"engine": "stacked"}))
    assert build_trainers(scenario, build_dataset(scenario))[0].engine == "stacked"
    refusals = {
        "needs device cuda": {"compile": "graph"},
        "cannot train in fp16": {"engine": "stacked", "precision": "fp16", "device": "cuda"},
    }
    for why, training in refusals.items():
        with pytest.raises(ScenarioError, match=why):
            parse_scenario(tiny_scenario(tmp_path, training=training))
    with pytest.raises(ValueError, match="needs a CUDA device"):
        make("mlp", compile="graph")
    # a model an engine cannot run: refused when the trainers are built, the layer named
    dropout = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(784, 10))
    monkeypatch.setattr("fedsim.runner.build_model", lambda *args, **kwargs: dropout)
    vmap = parse_scenario(tiny_scenario(tmp_path, training={"engine": "vmap"}))
    with pytest.raises(ScenarioError, match=r"training.engine: .*layer 1 \(Dropout\)"):
        build_trainers(vmap, build_dataset(vmap))
