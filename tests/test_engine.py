"""Multi-client engines (Trainer.train_many / evaluate_each) and the World's batched trainings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedsim.config import ScenarioError, parse_scenario
from fedsim.learn import execution
from fedsim.learn.engines import EngineRefused, auto_engines
from fedsim.learn.models import MODEL_NAMES, build_model
from fedsim.learn.optimizers import OptimizerSpec
from fedsim.learn.trainer import Trainer
from fedsim.runner import build_dataset, build_trainers
from tests.conftest import tiny_scenario
from tests.test_fedavg_world import deterministic_compute, make_world, read_metrics, run_world

SMALL = (1, 12, 12)  # keeps the cnn cheap; its layers are the FedAvg CNN's
SGD = OptimizerSpec("sgd", lr=0.05, momentum=0.9, weight_decay=1e-3)
ADAM = OptimizerSpec("adam", lr=1e-3, weight_decay=1e-3, betas=(0.8, 0.99))


def client_data(sizes: list[int], seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(n, *SMALL, generator=g), torch.randint(0, 10, (n,), generator=g))
        for n in sizes
    ]


def trainer_for(name: str, spec: OptimizerSpec, engine: str = "auto") -> Trainer:
    torch.manual_seed(0)
    model = build_model(name, SMALL, 10, hidden_sizes=(32, 16))
    return Trainer(model, spec, batch_size=8, engine=engine)


WORK = {
    "epochs": {"epochs": 2},
    "steps": {"steps": [5, 0, 3, 7]},
    "prox": {"epochs": 1, "prox_mu": 0.5},
}
CASES = [("mlp", spec, work) for spec in (SGD, ADAM) for work in WORK] + [
    ("cnn", SGD, "steps"),
    ("cnn", ADAM, "steps"),
    ("cnn", SGD, "prox"),
]


@pytest.mark.parametrize(
    ("name", "spec", "work"),
    [pytest.param(n, s, WORK[w], id=f"{n}-{s.name}-{w}") for n, s, w in CASES],
)
def test_vmap_equals_loop(name: str, spec: OptimizerSpec, work: dict) -> None:
    """Unequal client sizes (partial batches at different steps), unequal step counts."""
    trainer = trainer_for(name, spec)
    data = client_data([21, 13, 8, 30])  # 3, 2, 1 and 4 batches of 8 per epoch
    params = [trainer.init_params(i) for i in range(4)]
    if "prox_mu" in work:  # a center per client, as FedProx gives its clients
        work = {**work, "prox_center": [trainer.init_params(10 + i) for i in range(4)]}
    loop = trainer.train_many(params, data, seeds=[5, 6, 7, 8], engine="loop", **work)
    vmap = trainer.train_many(params, data, seeds=[5, 6, 7, 8], engine="vmap", **work)
    for start, a, b in zip(params, loop, vmap, strict=True):
        assert (a.steps, a.samples) == (b.steps, b.samples)
        moved = (a.params - start).norm()  # another batch order moves by ~30% of this
        assert (b.params - a.params).norm() <= 1e-4 * moved
        if a.steps:
            assert moved > 0.01 and b.mean_loss == pytest.approx(a.mean_loss, rel=1e-5)
    epochs = work.get("epochs")
    assert [r.steps for r in loop] == (
        [3 * epochs, 2 * epochs, epochs, 4 * epochs] if epochs else [5, 0, 3, 7]
    )


def test_loop_engine_is_train_call_by_call() -> None:
    trainer = trainer_for("mlp", SGD)
    data = client_data([21, 13])
    params = [trainer.init_params(0), trainer.init_params(1)]
    center = trainer.init_params(2)
    many = trainer.train_many(
        params, data, epochs=1, seeds=[3, 4], engine="loop", prox_center=center, prox_mu=0.1
    )
    for p, (x, y), s, result in zip(params, data, [3, 4], many, strict=True):
        one = trainer.train(p, x, y, epochs=1, seed=s, prox_center=center, prox_mu=0.1)
        assert torch.equal(one.params, result.params) and one.mean_loss == result.mean_loss


def test_engine_policy() -> None:
    """auto follows engines.policy per family and device kind; an engine named that cannot
    run the model is refused, naming the layer; auto then takes the next that can."""
    mlp, cnn = trainer_for("mlp", SGD), trainer_for("cnn", SGD)
    # Measured on CPU (engines.policy): the loop is faster for every model family there.
    assert mlp.engine_for(8).name == "loop" and cnn.engine_for(8).name == "loop"
    assert mlp.engine_for(8, "vmap").name == "vmap"
    assert trainer_for("mlp", SGD, "stacked").engine_for(8).name == "stacked"
    assert trainer_for("cnn", SGD, "loop").engine_for(8, None).name == "loop"
    assert auto_engines("cnn", "cuda", 8)[0] == "stacked" and auto_engines("mlp", "cuda", 8)[0]
    assert auto_engines("vgg13", "cuda", 2) == auto_engines("vgg11", "cuda", 2)
    assert auto_engines("cnn", "cuda", 1) == ("loop",)  # one client: nothing to batch
    assert {auto_engines(name, "cpu", 8) for name in (*MODEL_NAMES, None)} == {("loop",)}
    assert all(names[-1] == "loop" for names in (auto_engines(m, "cuda", 9) for m in MODEL_NAMES))
    with pytest.raises(ValueError):
        Trainer(nn.Linear(2, 2), SGD, batch_size=4, engine="gpu")  # type: ignore[arg-type]
    dropout = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(144, 10))
    for engine, why in (("vmap", "draws random numbers"), ("stacked", "not a layer kind")):
        with pytest.raises(EngineRefused, match=rf"layer 1 \(Dropout\)\W+{why}"):
            Trainer(dropout, SGD, 8, engine=engine)  # type: ignore[arg-type]
    stateful = Trainer(dropout, SGD, 8, device="cpu", family="mlp")
    with pytest.raises(EngineRefused, match="Dropout"):
        stateful.engine_for(8, "stacked")
    stateful.device = torch.device("cuda")  # what auto would take there: the loop only
    assert stateful.engine_for(8).name == "loop"


def test_engine_option_and_argument_checks(tmp_path: Path) -> None:
    scenario = parse_scenario(tiny_scenario(tmp_path, training={"engine": "vmap"}))
    assert build_trainers(scenario, build_dataset(scenario))[0].engine == "vmap"
    assert parse_scenario(tiny_scenario(tmp_path)).training.engine == "auto"
    with pytest.raises(ScenarioError):
        parse_scenario(tiny_scenario(tmp_path, training={"engine": "gpu"}))
    trainer = trainer_for("mlp", SGD)
    data, params = client_data([8, 8]), [trainer.init_params(0)] * 2
    with pytest.raises(ValueError, match="prox center"):
        trainer.train_many(params, data, steps=1, seeds=[0, 1], prox_center=[params[0], None])
    with pytest.raises(ValueError):
        trainer.train_many(params, data, steps=[1, 2, 3], seeds=[0, 1])
    assert trainer.train_many([], [], steps=1, seeds=[]) == []


def test_evaluate_each_equals_per_client_evaluate() -> None:
    for name in ("mlp", "cnn"):
        trainer = trainer_for(name, SGD)
        data = client_data([17, 40, 5, 23], seed=1)
        params = [trainer.init_params(i) for i in range(4)]
        xs, ys = [x for x, _ in data], [y for _, y in data]
        single = [trainer.evaluate(p, x, y) for p, x, y in zip(params, xs, ys, strict=True)]
        for engine in ("loop", "vmap"):
            each = trainer.evaluate_each(params, xs, ys, engine=engine)
            for r, s in zip(each, single, strict=True):
                assert r.total == s.total
                assert abs(r.correct - s.correct) <= 1  # a near-tie may round either way
                assert r.loss_sum == pytest.approx(s.loss_sum, rel=1e-5)
        assert len({r.correct for r in single}) > 1  # the counts are informative


# --- the World: queued trainings, batched when the engine is vmap ---


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many clients each Trainer.train_many call trained."""
    sizes: list[int] = []
    original = Trainer.train_many

    def spy(self: Trainer, params, *args, **kwargs):
        sizes.append(len(params))
        return original(self, params, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train_many", spy)
    return sizes


@pytest.mark.parametrize(
    ("algorithm", "engine"),
    [("fedprox", "vmap"), ("ditto", "vmap"), ("local", "vmap"), ("perfed_ckt", "stacked"),
     ("scaffold", "stacked"), ("ditto", "stacked")],
)  # fmt: skip
def test_batched_trainings_give_the_metrics_of_one_by_one(
    tmp_path: Path, batch_sizes: list[int], algorithm: str, engine: str
) -> None:
    """FedProx: a prox center per client; Ditto: two kinds of training per client; Local:
    per-client models (batched evaluation) and trainings that batch across rounds;
    PerFed-CKT: a distillation term with each client's own target; SCAFFOLD: corrections."""
    options = {"public_samples": 100, "public_batch_size": 16} if algorithm == "perfed_ckt" else {}

    def run(engine: str, folder: str) -> tuple[str, list[int]]:
        out = tmp_path / folder
        data = tiny_scenario(
            out, algorithms=[{"name": algorithm, **options}], training={"engine": engine},
            run={"rounds": 2},
        )  # fmt: skip
        run_world(make_world(data, out))
        sizes = list(batch_sizes)
        batch_sizes.clear()
        return (out / "run" / "metrics.csv").read_text(), sizes

    (_, loop_sizes), (batched, batched_sizes) = run("loop", "a"), run(engine, "b")
    assert set(loop_sizes) == {1} and max(batched_sizes) > 1  # batched only by vmap, stacked
    if algorithm == "local":  # batches form across rounds: the same run again, same bytes
        assert run(engine, "c")[0] == batched
    loop_rows, batched_rows = (
        read_metrics(tmp_path / "a" / "run"),
        read_metrics(tmp_path / "b" / "run"),
    )
    assert len(loop_rows) == len(batched_rows) == 2  # one row per round
    # The engines round differently (batched vs one-by-one kernels): a test sample at a
    # near-tie between two classes may flip, so accuracies agree to one sample per client
    # (40 test samples each); times, bytes and participation exactly.
    for a, b in zip(loop_rows, batched_rows, strict=True):
        for key, value in a.items():
            if key == "train_loss":
                expected = pytest.approx(value, rel=1e-4, nan_ok=True)
            elif key.endswith("accuracy"):
                expected = pytest.approx(value, abs=1 / 40 + 1e-9)
            else:
                expected = value
            assert b[key] == expected, key


@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox", "ditto", "cfl", "fedbuff"])
def test_models_that_arrive_one_after_another_still_train_in_one_batch(
    tmp_path: Path, batch_sizes: list[int], algorithm: str
) -> None:
    """A unicast downlink sends the model to one client after another (0.16 s each here), so
    the first client's compute (0.5 s) ends before the last has its model: the trainings are
    queued when the models leave, and the first one due runs with them all."""
    system = deterministic_compute(downlink="unicast", uplink_mbps=1.0)
    options = {"fedbuff": {"max_concurrency": 6, "buffer_size": 6}}.get(algorithm, {})
    data = tiny_scenario(
        tmp_path, system=system, training={"engine": "vmap"}, run={"rounds": 2},
        algorithms=[{"name": algorithm, **options}],
    )  # fmt: skip
    world = make_world(data, tmp_path)
    link = world.network.links[0]
    model_s = 8 * world.model_message_bytes("downlink") / link.downlink_bps
    assert 6 * model_s > 0.5 > model_s  # the last model arrives after the first is trained
    run_world(world)
    assert batch_sizes[0] == 6  # without the early queue: 1 or 2 clients a batch
    if algorithm in ("fedavg", "fedprox", "cfl"):  # one training per client and round
        assert batch_sizes == [6, 6]


def test_cancelled_or_lost_trainings_never_run(tmp_path: Path, batch_sizes: list[int]) -> None:
    data = tiny_scenario(tmp_path, system=deterministic_compute(), training={"engine": "vmap"})
    world = make_world(data, tmp_path)
    params = world.initial_params()
    tasks = {c: world.start_task(c, world.train(c, params)) for c in range(4)}
    world.env.run(until=0.25)  # every compute time (0.5 s) is running
    world.cancel(tasks[0])
    world.presence.set_online(1, False)
    world.env.run(until=1.0)
    assert batch_sizes == [2]  # clients 2 and 3, in one batch; 0 and 1 never trained
    assert not tasks[0].delivered.triggered and not tasks[1].delivered.triggered
    assert tasks[2].delivered.value.steps == tasks[3].delivered.value.steps > 0
    assert not world.trainings


# --- chunks: memory bounded whatever the client count ---


def chunked(name: str, spec: OptimizerSpec, chunk: int | str) -> Trainer:
    torch.manual_seed(0)
    model = build_model(name, SMALL, 10, hidden_sizes=(32, 16))
    return Trainer(model, spec, batch_size=8, engine="vmap", vmap_chunk=chunk)


@pytest.mark.parametrize(("name", "spec"), [("mlp", SGD), ("mlp", ADAM), ("cnn", SGD)])
def test_chunked_vmap_trains_as_one_stack(name: str, spec: OptimizerSpec) -> None:
    """Seven clients of unequal sizes and step counts in chunks of 3 (the chunks hold the
    longest trainings first: 7 5 4 | 3 3 0 | 2 steps), with a prox term and corrections."""
    sizes, steps = [21, 13, 8, 30, 5, 17, 9], [5, 0, 3, 7, 2, 4, 3]
    data = client_data(sizes, seed=1)
    whole, parts = chunked(name, spec, 7), chunked(name, spec, 3)
    params = [whole.init_params(i) for i in range(7)]
    extra = {
        "prox_center": [whole.init_params(20 + i) for i in range(7)],
        "prox_mu": 0.3,
        "correction": [0.01 * torch.randn(whole.num_params) for _ in range(7)],
    }
    seeds = list(range(40, 47))
    one = whole.train_many(params, data, steps=steps, seeds=seeds, **extra)
    three = parts.train_many(params, data, steps=steps, seeds=seeds, **extra)
    for start, a, b, k in zip(params, one, three, steps, strict=True):
        assert (a.steps, a.samples) == (b.steps, b.samples) and a.steps == k
        moved = (a.params - start).norm()
        assert (b.params - a.params).norm() <= 1e-5 * max(float(moved), 1e-3)
        if k:
            assert moved > 0.01 and b.mean_loss == pytest.approx(a.mean_loss, rel=1e-5)
        else:
            assert torch.equal(b.params, start)
        assert b.params.device.type == "cpu" and b.params.untyped_storage().nbytes() == (
            4 * whole.num_params
        )  # its own storage: a client's result does not hold its chunk's memory


def test_chunked_evaluation_equals_one_stack() -> None:
    data = client_data([21, 13, 8, 30, 5], seed=2)
    whole, parts = chunked("cnn", SGD, 5), chunked("cnn", SGD, 2)
    params = [whole.init_params(i) for i in range(5)]
    xs, ys = [x for x, _ in data], [y for _, y in data]
    one, two = whole.evaluate_each(params, xs, ys), parts.evaluate_each(params, xs, ys)
    assert [(r.correct, r.total) for r in one] == [(r.correct, r.total) for r in two]
    assert [r.loss_sum for r in two] == pytest.approx([r.loss_sum for r in one], rel=1e-6)
    assert [r.total for r in two] == [21, 13, 8, 30, 5]


def test_auto_chunks_fit_the_devices_memory(monkeypatch) -> None:
    """auto: as many clients as fit half the device's total memory at the step's estimated
    float count each, never more than MAX_VMAP_CHUNK; on a small device the stack splits."""
    trainer = chunked("cnn", SGD, "auto")
    floats = trainer.engine_for(2, "vmap").training_floats(SMALL, width=8, extra=0)
    # parameters, gradient and momentum, the batch and 4 copies of every layer's output
    assert floats == 3 * trainer.num_params + 8 * (144 + 4 * trainer.activation_floats(SMALL))
    assert trainer.engine_for(2, "loop").training_floats(SMALL, width=8, extra=0) == floats
    monkeypatch.setattr(execution, "device_memory_bytes", lambda device: 2 * 4 * floats * 3)
    assert trainer._chunk_size(10, floats) == 3
    monkeypatch.setattr(execution, "device_memory_bytes", lambda device: 2**50)
    assert trainer._chunk_size(5000, floats) == execution.MAX_VMAP_CHUNK
    assert trainer._chunk_size(7, floats) == 7
    monkeypatch.setattr(execution, "device_memory_bytes", lambda device: 1)
    assert trainer._chunk_size(7, floats) == 1  # never nothing


def test_activation_floats_count_every_layers_output() -> None:
    """LeNet-5 on 28x28, layer by layer: conv 6x24x24 and its ReLU, pool 6x12x12, conv 16x8x8
    and its ReLU, pool 16x4x4, flatten 256, 120 and 84 with their ReLUs, 10 logits."""
    lenet = Trainer(build_model("lenet5", (1, 28, 28), 10), SGD, batch_size=8)
    by_hand = 2 * 6 * 24 * 24 + 6 * 12 * 12 + 2 * 16 * 8 * 8 + 2 * 16 * 4 * 4 + 2 * 120
    assert lenet.activation_floats((1, 28, 28)) == by_hand + 2 * 84 + 10
    assert lenet.activation_floats((1, 28, 28)) == 10_754  # cached, and nothing left hooked
    assert not any(m._forward_hooks for m in lenet._model.modules())


def test_a_bad_vmap_chunk_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="training.vmap_chunk"):
        parse_scenario(tiny_scenario(tmp_path, training={"vmap_chunk": 0}))
    with pytest.raises(ValueError, match="vmap_chunk"):
        Trainer(nn.Linear(2, 2), SGD, batch_size=4, vmap_chunk=0)
    scenario = parse_scenario(tiny_scenario(tmp_path, training={"vmap_chunk": 4}))
    assert build_trainers(scenario, build_dataset(scenario))[0].vmap_chunk == 4


# --- the vmap step captured by torch.compile (training.compile) ---


@pytest.mark.parametrize(
    "engine", ["vmap", pytest.param("stacked", marks=pytest.mark.slow)]
)  # the stacked step compiles for 14 s on the 2-core development CPU
def test_a_compiled_step_trains_as_the_eager_one(tmp_path: Path, engine: str) -> None:
    """Clients of unequal step counts (fixed shapes: the finished ones masked, no recompile)
    give the eager step's parameters and losses within float tolerance."""
    sizes, steps = [21, 13, 30], [3, 1, 2]
    data = client_data(sizes, seed=4)
    eager = Trainer(chunked("mlp", SGD, "auto")._model, SGD, batch_size=8, engine=engine)
    compiled = Trainer(eager._model, SGD, batch_size=8, engine=engine, compile="default")
    assert compiled.compile == "default" and eager.compile == "eager"
    starts = [eager.init_params(c) for c in range(3)]
    want = eager.train_many(starts, data, steps=steps, seeds=range(3))
    got = compiled.train_many(starts, data, steps=steps, seeds=range(3))
    for a, b in zip(want, got, strict=True):
        assert (a.steps, a.samples) == (b.steps, b.samples)
        assert (a.params - b.params).norm() <= 1e-5 * a.params.norm()
        assert b.mean_loss == pytest.approx(a.mean_loss, rel=1e-5)
    assert not (got[0].params == starts[0]).all()  # it trained


def test_a_bad_compile_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="training.compile"):
        parse_scenario(tiny_scenario(tmp_path, training={"compile": "max"}))
    with pytest.raises(ValueError, match="compile mode"):
        Trainer(nn.Linear(2, 2), SGD, batch_size=4, compile="fast")
    scenario = parse_scenario(tiny_scenario(tmp_path, training={"compile": "reduce-overhead"}))
    assert build_trainers(scenario, build_dataset(scenario))[0].compile == "reduce-overhead"
