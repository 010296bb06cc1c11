"""Smoke test of the benchmark scripts at tiny sizes: they run and report sane fields.

No timing is asserted: figures depend on the machine; only their presence and signs are.
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import gpu, radio_throughput, run_all
from tests.conftest import requires_real_data


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


@requires_real_data
@pytest.mark.parametrize("name", list(run_all.BENCHMARKS))
def test_benchmark_runs_and_writes_its_fields(tmp_path, name):
    results = run_all.main(["--quick", "--only", name, "--out", str(tmp_path)])[name]
    written = json.loads((tmp_path / f"{name}.json").read_text())
    assert written["benchmark"] == name and "cpu" in written["machine"]
    assert name in json.loads((tmp_path / "all.json").read_text())
    if name == "training_throughput":
        assert _positive(results["matmul_peak_gflops"])
        for row in results["rows"]:
            assert "error" in row or (_positive(row["samples_per_s"]) and _positive(row["gflops"]))
    elif name == "naive_vs_fedsim":
        (row,) = results["rows"]
        assert _positive(row["speedup"]) and _positive(row["naive_s_per_round"])
        assert row["same_results"], row
    elif name == "event_throughput":
        timing = results["timing_only"]
        assert timing["events"] > 0 and _positive(timing["events_per_s"])
        assert timing["share_of_bare_simpy"] > 0
        full = results["full_run"]
        assert 0 <= full["overhead_share"] < 1 and full["torch_s"] > 0
    elif name == "radio_throughput":
        fixed, *radios = results["rows"]
        assert [r["variant"] for r in results["rows"]] == [
            "fixed",
            "radio",
            "whole_transfer",
            "harq",
            "pf",
            "pf_per_prb",
            "cells7",
        ]
        assert all(r["events"] > 0 and _positive(r["events_per_s"]) for r in results["rows"])
        assert fixed["band_wakeups"] == fixed["upload_replans"] == 0
        for radio in radios:
            assert 0 < radio["band_wakeups"] < radio["events"] and radio["upload_replans"] > 0
            assert 0 <= radio["fading_changes"] <= radio["upload_replans"]
        assert radios[0]["wasted_mb"] < radios[1]["wasted_mb"]  # ideal loses only cut uploads
        for label in ("radio_over_fixed", "harq_over_whole_transfer", "pf_over_radio",
                      "pf_over_pf_per_prb", "cells7_over_radio"):  # fmt: skip
            ratios = results[label]
            assert all(_positive(v) for k, v in ratios.items() if k != "ratio")
        selective = results["selective"]  # flat and TDL-C, equal shares and PF
        assert [r["variant"] for r in selective["rows"]] == list(radio_throughput.SELECTIVE)
        assert all(r["sent_mb"] > 0 and _positive(r["wall_s_per_round"]) for r in selective["rows"])
        assert [r["ratio"] for r in selective["ratios"]] == ["harq_tdl/harq", "harq_pf_tdl/harq_pf"]
        assert all(_positive(r["wall_s_per_round"]) for r in selective["ratios"])
        caches = results["caches"]  # multicell.yaml at its period and at 1 ms, caches on/off
        rows = {(r["variant"], r["caches"]): r for r in caches["rows"]}
        assert set(rows) == {(v, c) for v in ("multicell", "multicell_1ms") for c in ("on", "off")}
        for variant in ("multicell", "multicell_1ms"):
            on, off = rows[variant, "on"], rows[variant, "off"]
            assert (on["rounds"], on["sent_mb"]) == (off["rounds"], off["sent_mb"])  # same run
            assert 0 < on["loss_computations"] < off["loss_computations"]  # what it saves
            assert on["allocations"] == off["allocations"] > 0
        assert rows["multicell_1ms", "on"]["period_s"] == 0.001
        assert all(_positive(r["wall_s_off_over_on"]) for r in caches["ratios"])
    elif name == "precision":
        features = results["cpu_features"]
        assert features["capability"] and features["bf16_native"] in (True, False, "unknown")
        assert written["cpu_features"] == features
        assert all(_positive(results["matmul_peak_gflops"][p]) for p in ("fp32", "bf16"))
        rows = results["rows"]  # lenet5: fp32/bf16 x contiguous/channels_last x loop/vmap
        assert len({(r["precision"], r["memory_format"], r["engine"]) for r in rows}) == 8
        assert rows[0]["speedup"] == rows[0]["speedup_paired_median"] == 1  # fp32 NCHW loop
        for row in rows:
            assert "error" in row or all(
                _positive(row[k]) for k in ("ms_per_step", "speedup", "gflops", "share_of_peak")
            )
    elif name == "whole_run":
        (row,) = results["rows"]
        phases = ("startup", "training", "evaluation", "other_trainer", "rest")
        assert all(row[f"{p}_s"] >= 0 for p in phases)
        assert math.isclose(sum(row[f"{p}_s"] for p in phases), row["total_s"])
        assert all(_positive(row[f"{p}_s"]) for p in ("startup", "training", "evaluation"))
        assert row["train_steps"] > 0 and _positive(row["training_gflops"])
        assert _positive(row["training_share_of_peak"])
        assert row["run_samples_per_s"] == row["train_samples"] / row["training_s"]
        assert _positive(row["train_many_samples_per_s"])
        assert row["run_over_train_many"] == pytest.approx(
            row["run_samples_per_s"] / row["train_many_samples_per_s"]
        )
        assert _positive(results["matmul_peak_gflops"][row["precision"]])
    elif name == "gpu":
        rows = results["rows"]  # mlp and lenet5 x 3 clients (every engine), 5 (batched only)
        assert [(r["model"], r["clients"], r["engine"]) for r in rows] == [
            (model, clients, engine) for model in ("mlp", "lenet5")
            for clients, engines in ((3, ("loop", "vmap", "stacked")), (5, ("vmap", "stacked")))
            for engine in engines
        ]  # fmt: skip
        keys = ("client_samples_per_s", "gflops", "share_of_peak", "first_call_s")
        assert all(_positive(r[k]) for r in rows for k in keys)
        batched = [r for r in rows if r["engine"] != "loop"]
        assert all(r["chunk"] == r["clients"] and _positive(r["estimate_mb"]) for r in batched)
        loops = {r["model"]: r["client_samples_per_s"] for r in rows if r["engine"] == "loop"}
        rates = {(r["model"], r["clients"], r["engine"]): r["client_samples_per_s"] for r in rows}
        for row in batched:  # the 5-client rows over the loop's rate at 3
            assert row["over_loop"] == row["client_samples_per_s"] / loops[row["model"]]
            if row["engine"] == "stacked":
                vmap = rates[row["model"], row["clients"], "vmap"]
                assert row["stacked_over_vmap"] == row["client_samples_per_s"] / vmap
        estimates = {(r["model"], r["engine"]): r["estimate_mb"] for r in batched}
        # the stacked engine also holds each convolution's columns (im2col)
        assert estimates["lenet5", "stacked"] > estimates["lenet5", "vmap"]
        assert estimates["mlp", "stacked"] == estimates["mlp", "vmap"]
        assert results["device"] == "cpu" and "peak_mb" not in rows[0]  # CUDA only
        assert "gpu_busy_share" not in rows[0]
        assert gpu.busy_seconds([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    else:
        fedsim, naive, ditto, streaming, stacked, feedback = results["rows"]
        assert fedsim["tensors_held"] == 11  # the global model and 10 personal ones
        assert all(_positive(r["rss_peak"]) and r["rss_peak"] >= r["rss_after_data"]
                   for r in results["rows"])  # fmt: skip
        assert ditto["tensors_held"] == 10  # every client trained its personal model
        assert streaming["tensors_held"] == stacked["tensors_held"] == 1  # the global model
        # error feedback: each of the 10 clients keeps one float32 residual of the model
        assert feedback["codec_state_bytes"] == 10 * streaming["parameter_bytes"]
        assert results["error_feedback_state_over_client_models"] == 1.0
