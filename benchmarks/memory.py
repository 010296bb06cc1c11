"""Resident memory of 1,000 clients with personal models (Ditto-like state).

Each layout is measured in a fresh Python process (so nothing of another layout, or of an
earlier benchmark, is counted), on the same data: Fashion-MNIST partitioned over the
clients by fedsim (the whole training split, so the dataset's share is the same in all).

- ``fedsim``: the global model and one personal model per client, each a flat float32
  vector of the architecture (how fedsim's Ditto keeps them), with the trainer that
  serves every client.
- ``naive``: what an FL library typically keeps: one ``nn.Module`` per client
  (``copy.deepcopy`` of the global one), plus the global module.
- ``fedsim_ditto_round``: a real Ditto round on fedsim's World with every client selected;
  afterwards each client holds its personal model. Its peak also holds what its FedAvg
  server needs at once.
- ``fedavg_topk_ef_round``: the FedAvg round with a top-k 1% uplink and error feedback:
  each client keeps its residual, a flat float32 vector of the model (``codec_state_MB``),
  made at its first upload and dropped when it leaves.
- ``fedavg_round``: a FedAvg round of every client, whose server folds each upload into a
  running sum as it arrives (one model's worth of float64), and ``fedavg_round_stacked``: the
  same round with the server fedsim had before (and most FL code has): it keeps every
  upload of the round, then averages their stack (two copies of all uploads at the peak).

RSS comes from /proc/self/status (VmRSS now, VmHWM the peak; ``resource.getrusage`` where
there is no /proc) and includes importing torch and the dataset, reported separately. The
default model is the small CNN (LeNet-5, 44,426 parameters); the FedAvg paper's CNN
(1.66 M parameters) would need 6.7 GB for 1,000 float32 copies alone.

    python -m benchmarks.memory [--clients 1000] [--model lenet5]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks._common import base_parser, table, write_results

REPO = Path(__file__).resolve().parents[1]
TARGET_BYTES = 1e9
LAYOUTS = (
    "fedsim", "naive", "fedsim_ditto_round", "fedavg_round", "fedavg_round_stacked",
    "fedavg_topk_ef_round",
)  # fmt: skip
ERROR_FEEDBACK = {"uplink": {"codec": "topk", "fraction": 0.01, "error_feedback": True}}


def rss_bytes() -> dict:
    """Resident set size now and at its peak, in bytes."""
    status = Path("/proc/self/status")
    if status.is_file():
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        return {"rss": int(fields["VmRSS"].split()[0]) * 1024,
                "peak": int(fields["VmHWM"].split()[0]) * 1024}  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"rss": peak, "peak": peak}


def _scenario(clients: int, model: str, dataset: str, algorithm: str = "ditto", compression=None):
    from fedsim.config import parse_scenario

    return parse_scenario(
        {
            "name": "memory",
            "seed": 0,
            "dataset": {"name": dataset, "partition": {"kind": "iid"}, "download": False},
            "model": {"name": model},
            "clients": {"count": clients},
            # compute 1 s + Exp(1 s): uploads arrive spread out, as they do on real devices
            "system": {"compute": {"t_min_s": 1.0, "mean_extra_s": 1.0}},
            "training": {"batch_size": 32, "local_epochs": 1},
            "algorithms": [{"name": algorithm, "client_fraction": 1.0, "compression": compression}],
            "run": {"rounds": 1},
        }
    )


def child(layout: str, clients: int, model: str, dataset: str) -> dict:
    """Build one layout in this (fresh) process and report its memory."""
    import torch

    from fedsim.algorithms import ALGORITHMS
    from fedsim.results.recorder import Recorder
    from fedsim.runner import build_dataset, build_trainers
    from fedsim.world import World

    torch.set_num_threads(1)  # the same thread pools (and their stacks) in both layouts
    start = rss_bytes()["rss"]
    sc = _scenario(
        clients, model, dataset, "ditto" if layout.startswith("fedsim") else "fedavg",
        ERROR_FEEDBACK if layout == "fedavg_topk_ef_round" else None,
    )  # fmt: skip
    codec_state = 0
    data = build_dataset(sc)
    trainers = build_trainers(sc, data)
    after_data = rss_bytes()["rss"]
    trainer = trainers[0]
    if layout == "fedsim":
        global_params = trainer.init_params(0)
        personal = {c: trainer.init_params(1 + c) for c in range(clients)}
        held = [global_params, *personal.values()]
    elif layout == "naive":
        from fedsim.learn.models import build_model

        global_model = build_model(model, data.input_shape, data.num_classes)
        modules = [global_model, *(copy.deepcopy(global_model) for _ in range(clients))]
        held = [p for m in modules for p in m.parameters()]
    else:
        algorithm = sc.algorithms[0]
        server = stacked_fedavg if layout == "fedavg_round_stacked" else ALGORITHMS[algorithm.name]
        with tempfile.TemporaryDirectory() as run_dir:
            recorder = Recorder(Path(run_dir), scenario_name=sc.name, label=algorithm.name,
                                target_accuracy=None, resolved_scenario_yaml="")  # fmt: skip
            world = World(sc, algorithm, data, trainers, recorder)
            world.run(server(world, algorithm))
            world.finish(complete=True)
        codec_state = world.compression.state_bytes()
        models = world.models  # the global model, or each client's personal one (Ditto)
        if isinstance(models, torch.Tensor):
            held = [models]
        else:
            held = list({id(models[c]): models[c] for c in models}.values())
    end = rss_bytes()
    return {
        "layout": layout,
        "clients": clients,
        "model": model,
        "tensors_held": len(held),
        "parameter_bytes": sum(t.numel() * t.element_size() for t in held),
        "codec_state_bytes": codec_state,
        "rss_after_imports": start,
        "rss_after_data": after_data,
        "rss_final": end["rss"],
        "rss_peak": end["peak"],
        "models_rss": end["rss"] - after_data,
    }


def stacked_fedavg(world, config):
    """FedAvg's server as it was before the running sum: every kept upload stays until the
    round closes, then the stack of them is averaged (the baseline of ``fedavg_round``)."""
    import torch

    from fedsim.algorithms._sync import client_update, gather_updates

    params = world.initial_params()
    for round_index in world.rounds():
        selected = yield from world.select_clients(config.client_fraction)
        arrivals, _ = world.send_down(selected, params)
        bodies = {c: client_update(world, c, params, arrivals[c]) for c in selected}
        results = yield from gather_updates(world, config, bodies)
        weights = torch.tensor([float(world.num_train(c)) for c in results])
        params = (weights / weights.sum()) @ torch.stack([r.params for r in results.values()])
        world.end_round(round_index, params, participants=len(results))


def measure(layout: str, clients: int, model: str, dataset: str) -> dict:
    """Run ``child`` in a fresh interpreter; its last stdout line is the JSON result."""
    command = [sys.executable, "-m", "benchmarks.memory", "--child", layout,
               "--clients", str(clients), "--model", model, "--dataset", dataset]  # fmt: skip
    done = subprocess.run(
        command, cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{layout} layout failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


COLUMNS = ("layout", "clients", "model", "parameter_MB", "codec_state_MB", "imports_MB",
           "data_MB", "models_MB", "rss_final_MB", "rss_peak_MB", "under_1GB")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--model", default="lenet5")
    parser.add_argument("--dataset", default="fashion_mnist")
    parser.add_argument("--child", choices=LAYOUTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.clients, args.model, args.dataset)))
        return {}
    rows = [measure(layout, args.clients, args.model, args.dataset) for layout in LAYOUTS]
    for row in rows:
        row["under_1GB"] = row["rss_peak"] < TARGET_BYTES
        row["parameter_MB"] = row["parameter_bytes"] / 1e6
        row["codec_state_MB"] = row["codec_state_bytes"] / 1e6
        row["imports_MB"] = row["rss_after_imports"] / 1e6
        row["data_MB"] = (row["rss_after_data"] - row["rss_after_imports"]) / 1e6
        row["models_MB"] = row["models_rss"] / 1e6
        row["rss_final_MB"] = row["rss_final"] / 1e6
        row["rss_peak_MB"] = row["rss_peak"] / 1e6
    fedsim, naive, _, streaming, stacked, feedback = rows
    results = {
        "target_bytes": TARGET_BYTES,
        "rows": rows,
        "naive_over_fedsim_models": naive["models_rss"] / max(fedsim["models_rss"], 1),
        "stacked_over_streaming_round_peak": (stacked["rss_peak"] - stacked["rss_after_data"])
        / max(streaming["rss_peak"] - streaming["rss_after_data"], 1),
        # residuals held over one float32 model per client: 1 when each keeps exactly one
        "error_feedback_state_over_client_models": feedback["codec_state_bytes"]
        / (args.clients * streaming["parameter_bytes"]),
    }
    path = write_results("memory", results, args.out)
    print(table(rows, COLUMNS))
    print(f"written: {path}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
