"""experiments/train_lltm.py under torchrun on CPU (gloo), with a tiny model.

* several ranks starting on a fresh cache compile the op once and all load that build;
* two DDP ranks end with identical parameters, equal to one process fed the same global
  batch;
* a run interrupted by a dead rank and started again ends exactly where an uninterrupted
  run ends: same step, parameters, optimizer state, RNG states and losses;
* checkpoints are published atomically.

Every training run is a real torchrun (or python) subprocess. The module's first run
starts 4 ranks on a fresh cache and builds the op there, once; the other runs reuse it.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from experiments import ddp_scaling, lltm_lm, step_profile, train_lltm
from subproc import private_env, run_interpreter

ROOT = Path(__file__).resolve().parents[1]

# Small enough that a step takes milliseconds on one core; the order-2 chain over 16
# symbols still leaves room below the uniform loss.
TINY = ["--backend", "cpp", "--vocab", "16", "--seq-len", "8", "--embed", "8", "--state", "16",
        "--num-sequences", "64", "--warmup", "3", "--log-every", "2", "--no-progress"]


def make_env(cache: Path) -> dict:
    # A CPU-only build: the op's CUDA sources are compiled by its own tests; here only the
    # number of compiles matters, and nvcc would triple the cost of the one build.
    return private_env(cache, CUDA_HOME=str(cache / "no-cuda-toolkit"), CUDA_VISIBLE_DEVICES="")


def run(argv: list[str], env: dict, expect_ok: bool = True) -> subprocess.CompletedProcess:
    """``python *argv`` with this interpreter; asserts success unless told otherwise."""
    proc = run_interpreter(*argv, env=env)
    if expect_ok:
        assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def torchrun(nproc: int, args: list[str], env: dict, expect_ok: bool = True):
    return run(["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                "-m", "experiments.train_lltm", *args], env, expect_ok)


def single_process(args: list[str], env: dict):
    return run(["-m", "experiments.train_lltm", *args], env)


def summary(path: Path) -> dict:
    return json.loads(path.read_text())


def checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def cold_start(once):
    """Four ranks start training at once on an empty cache."""
    def make(work: Path) -> dict:
        env = make_env(work / "cache")
        proc = torchrun(4, [*TINY, "--batch-size", "2", "--steps", "2", "--json", str(work / "s.json")],
                        env)
        # What the cold start published, read before other tests use the cache.
        published = sorted(p.name for p in (work / "cache" / "lltm" / "builds").iterdir()
                           if (p / "manifest.json").is_file())
        return {"env": env, "cache": work / "cache", "summary": summary(work / "s.json"), "proc": proc,
                "published": published}

    return once("train_lltm_cold_start", make)


def test_four_ranks_on_a_fresh_cache_compile_the_op_once(cold_start):
    builds = cold_start["summary"]["builds"]
    assert len(builds) == 4  # every rank called the loader
    assert sum(b["compiled"] for b in builds) == 1
    assert len({b["key"] for b in builds}) == 1
    assert cold_start["published"] == [builds[0]["key"]]
    assert "compiled by rank" in cold_start["proc"].stdout


def test_two_gloo_ranks_match_one_process_fed_the_same_global_batch(cold_start, tmp_path):
    env = cold_start["env"]
    common = [*TINY, "--dtype", "float64", "--dropout", "0", "--steps", "20"]
    torchrun(2, [*common, "--batch-size", "4", "--checkpoint", str(tmp_path / "ddp.pt"),
                 "--json", str(tmp_path / "ddp.json")], env)
    single_process([*common, "--batch-size", "8", "--checkpoint", str(tmp_path / "one.pt"),
                    "--json", str(tmp_path / "one.json")], env)
    ddp, one = summary(tmp_path / "ddp.json"), summary(tmp_path / "one.json")

    assert ddp["world_size"] == 2 and ddp["dist_backend"] == "gloo" and ddp["global_batch"] == 8
    assert ddp["builds"][0]["compiled"] is False  # the module's first run built it
    # DDP leaves bit-identical replicas.
    assert ddp["param_sha256"][0] == ddp["param_sha256"][1]
    # Each rank's loss is the mean over its half of the batch and DDP averages the two
    # gradients: the mean over the whole batch, as in one process. Only the order of the
    # float64 sums differs.
    want, got = checkpoint(tmp_path / "one.pt")["model"], checkpoint(tmp_path / "ddp.pt")["model"]
    assert list(got) == list(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-10, atol=1e-12,
                                   msg=lambda m: f"{name}: {m}")
    assert ddp["losses"] == pytest.approx(one["losses"], rel=1e-10)
    # and it learns: the last steps beat the first ones and the uniform guess.
    first, last = sum(one["losses"][:3]) / 3, sum(one["losses"][-3:]) / 3
    assert last < first - 0.05 and last < math.log(16) - 0.05


def test_interrupted_run_resumes_exactly(cold_start, tmp_path):
    env = cold_start["env"]
    # Dropout makes every step draw from each rank's RNG, so the RNG states must be restored.
    common = [*TINY, "--batch-size", "4", "--dropout", "0.2", "--steps", "10",
              "--checkpoint-every", "3"]
    torchrun(2, [*common, "--checkpoint", str(tmp_path / "straight.pt")], env)

    resumed = tmp_path / "resumed.pt"
    crashed = torchrun(2, [*common, "--checkpoint", str(resumed), "--fail-at-step", "8"], env,
                       expect_ok=False)
    assert crashed.returncode != 0
    assert checkpoint(resumed)["step"] == 6  # the last one written before rank 1 died
    again = torchrun(2, [*common, "--checkpoint", str(resumed)], env)
    assert f"resumed from {resumed} at step 6" in again.stdout

    want, got = checkpoint(tmp_path / "straight.pt"), checkpoint(resumed)
    assert got["step"] == want["step"] == 10
    assert got["losses"] == want["losses"]
    for name in want["model"]:
        assert torch.equal(got["model"][name], want["model"][name]), name
    assert got["optimizer"]["param_groups"] == want["optimizer"]["param_groups"]
    for index, state in want["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(got["optimizer"]["state"][index][key], value), (index, key)
    for rank, (g, w) in enumerate(zip(got["rng"], want["rng"])):
        assert torch.equal(g["torch"], w["torch"]), rank
        assert g["python"] == w["python"]
    assert not list(tmp_path.glob(".*.tmp-*"))


def test_sweep_compares_configurations_in_one_launch_per_rank_count(cold_start, tmp_path):
    """experiments/ddp_scaling.py on 1 and 2 gloo ranks: every configuration is a complete
    run; on one rank the configurations that differ in DDP options only are one run; DDP's
    bucket size changes how the gradients travel, not the update (bit-identical
    parameters); the table gives each 2-rank run its efficiency."""
    env = cold_start["env"]
    base = ["-m", "experiments.ddp_scaling", "sweep", "--out", str(tmp_path), "--device", "cpu",
            "--sizes", "tiny", "--backends", "cpp", "--steps", "8", "--warmup", "3"]
    sweep = [*base, "--configs", "fixed", "tuned", "bucket100"]
    two_ranks = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    run(sweep, env)
    run([*two_ranks, *sweep], env)
    run([*two_ranks, *base, "--configs", "tuned", "--pin-cpus", "--suffix", "+pin"], env)
    one = {c: summary(tmp_path / f"tiny_cpp_{c}_gpu1.json") for c in ("fixed", "tuned", "bucket100")}
    two = {c: summary(tmp_path / f"tiny_cpp_{c}_gpu2.json") for c in ("fixed", "tuned", "bucket100")}
    assert one["bucket100"]["same_run_as"] == "tiny_cpp_tuned_gpu1"
    assert "same_run_as" not in one["tuned"] and "same_run_as" not in one["fixed"]
    assert two["bucket100"]["step_options"]["bucket_cap_mb"] == 100
    assert two["tuned"]["step_options"]["grad_as_bucket_view"] is True
    assert two["tuned"]["param_sha256"] == two["bucket100"]["param_sha256"]
    assert all(s["world_size"] == 2 and s["timed_steps"] == 5 for s in two.values())
    rows = ddp_scaling.scaling_rows(sorted(tmp_path.glob("tiny_*.json")))
    efficiency = {(r["config"], r["ranks"]): r["efficiency"] for r in rows}
    assert efficiency[("fixed", 1)] == pytest.approx(1.0)
    assert efficiency[("tuned", 2)] == pytest.approx(
        two["tuned"]["samples_per_s"] / (2 * one["tuned"]["samples_per_s"]))
    # A launch's variant (each rank on its own cores) against its configuration's 1-GPU run.
    pinned = summary(tmp_path / "tiny_cpp_tuned+pin_gpu2.json")
    assert pinned["config"] == "tuned+pin" and pinned["pinned_cpus"] is True
    assert pinned["param_sha256"] == two["tuned"]["param_sha256"]
    assert efficiency[("tuned+pin", 2)] == pytest.approx(
        pinned["samples_per_s"] / (2 * one["tuned"]["samples_per_s"]))


def test_profile_summarises_a_real_trace(cold_start, tmp_path):
    """--profile-dir records the steps after the warm-up, writes the trace and a summary
    whose phases are the training step's, and times samples/s after the recorded steps."""
    env = cold_start["env"]
    single_process([*TINY, "--batch-size", "4", "--steps", "9", "--timing-warmup", "2",
                    "--profile-dir", str(tmp_path), "--profile-steps", "3", "--tag", "cpu",
                    "--json", str(tmp_path / "s.json")], env)
    s = summary(tmp_path / "s.json")
    assert s["timed_steps"] == 9 - 2 - 3
    prof = json.loads((tmp_path / "summary_cpu_rank0.json").read_text())
    assert s["profile"] == [prof]
    assert prof["steps"] == prof["steps_recorded"] == 3
    assert set(prof["phase_cpu_ms"]) == {"data", "forward", "backward", "optimizer"}
    assert all(v > 0 for v in prof["phase_cpu_ms"].values())
    assert sum(prof["phase_cpu_ms"].values()) <= prof["step_cpu_ms"]
    assert prof["gpu_busy_ms"] is None and prof["device_item_calls"] == 0  # CPU only
    assert (tmp_path / "trace_cpu_rank0.json.gz").stat().st_size > 0


# --------------------------------------------------------------------------------------
# In-process: no op build, no subprocess.
# --------------------------------------------------------------------------------------


def test_checkpoint_write_interrupted_midway_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    lltm_lm.save_checkpoint(path, {"step": 3, "w": torch.arange(4.0)})

    def dies_midway(obj, f):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(lltm_lm.torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        lltm_lm.save_checkpoint(path, {"step": 6, "w": torch.zeros(4)})
    monkeypatch.undo()
    kept = torch.load(path, weights_only=True)
    assert kept["step"] == 3 and torch.equal(kept["w"], torch.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]

    # A writer killed by SIGKILL leaves its temporary file; the next run removes it.
    (tmp_path / ".ckpt.pt.tmp-12345").write_bytes(b"partial")
    lltm_lm.remove_stale_temporaries(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_resuming_with_other_settings_is_refused(tmp_path):
    ckpt = str(tmp_path / "ckpt.pt")
    args = ["--backend", "reference", "--device", "cpu", *TINY[2:], "--batch-size", "2",
            "--steps", "2", "--checkpoint", ckpt]
    train_lltm.main(args)
    with pytest.raises(SystemExit, match=r"batch_size=2 \(this run: 3\).*--fresh"):
        train_lltm.main([*args, "--batch-size", "3"])
    train_lltm.main([*args, "--batch-size", "3", "--fresh"])
    assert checkpoint(tmp_path / "ckpt.pt")["config"]["batch_size"] == 3


def test_batches_split_the_global_batch_across_ranks():
    def order(rank, world, batch):
        return lltm_lm.BatchOrder(40, batch, rank, world, seed=5)

    one = order(0, 1, 8)
    for step in (0, 4, 5, 11):  # 5 steps per epoch: 5 and 11 are in later epochs
        halves = torch.cat([order(r, 2, 4).indices(step) for r in range(2)])
        assert torch.equal(halves, one.indices(step))
    epoch0 = torch.cat([one.indices(s) for s in range(5)])
    assert sorted(epoch0.tolist()) == list(range(40))  # an epoch visits every sequence once
    assert not torch.equal(one.indices(5), one.indices(0))  # and each epoch reshuffles


def test_scaling_table_reports_efficiency_per_configuration(tmp_path):
    def run_json(backend, config, ranks, rate):
        data = {"size": "b64", "backend": backend, "config": config, "device": "cuda",
                "device_name": "GPU", "world_size": ranks, "samples_per_s": rate,
                "step_ms": 1.0, "losses": [2.0]}
        path = tmp_path / f"{backend}{config}{ranks}.json"
        path.write_text(json.dumps(data))
        return path

    paths = [run_json("reference", "fixed", 1, 100.0), run_json("reference", "fixed", 2, 190.0),
             run_json("cuda", "fixed", 1, 300.0), run_json("cuda", "fixed", 2, 480.0),
             run_json("cuda", "graph", 1, 400.0), run_json("cuda", "graph", 2, 760.0)]
    rows = {(r["backend"], r["config"], r["ranks"]): r for r in ddp_scaling.scaling_rows(paths)}
    assert rows[("cuda", "fixed", 2)]["efficiency"] == pytest.approx(480 / 600)
    assert rows[("cuda", "graph", 2)]["efficiency"] == pytest.approx(760 / 800)  # its own 1-GPU run
    assert rows[("cuda", "fixed", 1)]["speedup_vs_reference"] == pytest.approx(3.0)
    assert rows[("reference", "fixed", 2)]["efficiency"] == pytest.approx(0.95)
    assert rows[("cuda", "graph", 2)]["speedup_vs_reference"] == "-"  # no reference graph run
    best = ddp_scaling.best_rows(list(rows.values()))
    assert "graph" in best.splitlines()[2] and "760" in best


def test_step_profile_summary_of_a_trace():
    """The summary's arithmetic on a trace of two steps, hand-made: GPU work belongs to the
    step and phase of its launch; busy time is the union over streams; NCCL time is split
    into what ran beside compute kernels and what ran alone; the tail is how long the last
    NCCL kernel ended after the backward's last kernel."""
    def x(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 0,
                "args": args}

    events = []
    for k, t0 in enumerate((0.0, 1000.0)):
        c = 10 * k
        events += [
            x("user_annotation", "train_step", t0, 900.0),
            x("user_annotation", "data", t0, 10.0),
            x("user_annotation", "forward", t0 + 10, 190.0),
            x("user_annotation", "backward", t0 + 200, 500.0),
            x("user_annotation", "optimizer", t0 + 700, 100.0),
            x("cuda_runtime", "cudaLaunchKernel", t0 + 20, 5.0, correlation=c + 1),
            x("cuda_runtime", "cudaLaunchKernel", t0 + 300, 5.0, correlation=c + 2),
            x("cuda_driver", "cuLaunchKernelEx", t0 + 400, 5.0, correlation=c + 3),
            x("cuda_runtime", "cudaLaunchKernel", t0 + 710, 5.0, correlation=c + 4),
            # a .item() that waits (a copy inside it) and one that does not (a CPU tensor's)
            x("cpu_op", "aten::_local_scalar_dense", t0 + 4, 6.0),
            x("cuda_runtime", "cudaStreamSynchronize", t0 + 5, 4.0),
            x("cpu_op", "aten::_local_scalar_dense", t0 + 800, 1.0),
            # forward GEMM 100-300, backward LLTM kernel 300-600, NCCL 500-650 on its own
            # stream (100 beside the LLTM kernel, 50 alone), optimizer 650-700
            x("kernel", "sm90_xmma_gemm_f32", t0 + 100, 200.0, correlation=c + 1, device=1),
            x("kernel", "lltm::backward_kernel<float>", t0 + 300, 300.0, correlation=c + 2),
            x("kernel", "ncclDevKernel_AllReduce_Sum_f32", t0 + 500, 150.0, correlation=c + 3),
            x("kernel", "multi_tensor_apply_kernel", t0 + 650, 50.0, correlation=c + 4),
        ]
    s = step_profile.summarize({"traceEvents": events})
    assert s["steps"] == 2 and s["step_cpu_ms"] == pytest.approx(0.9)
    assert s["phase_cpu_ms"] == pytest.approx({"data": 0.01, "forward": 0.19,
                                               "backward": 0.5, "optimizer": 0.1})
    assert s["gpu_busy_ms"] == pytest.approx(0.6)  # 100 to 700, no gap
    assert s["gpu_idle_in_step_ms"] == pytest.approx(0.0)
    assert s["gpu_idle_between_steps_ms"] == pytest.approx(0.4)  # 700 to 1100
    assert s["gpu_period_ms"] == pytest.approx(1.0)
    assert s["family_ms"] == pytest.approx({"gemm": 0.2, "lltm": 0.3, "nccl": 0.15, "other": 0.05})
    assert s["phase_gpu_ms"] == pytest.approx({"forward": 0.2, "backward": 0.3, "optimizer": 0.05})
    assert s["nccl_ms"] == pytest.approx(0.15) and s["nccl_calls"] == 1
    assert s["nccl_overlapped_ms"] == pytest.approx(0.1)
    assert s["nccl_exposed_ms"] == pytest.approx(0.05)
    assert s["nccl_tail_after_backward_ms"] == pytest.approx(0.05)  # 650 after 600
    assert s["host_waits"] == {"cudaStreamSynchronize": pytest.approx({"calls": 1, "ms": 0.004})}
    assert s["device_item_calls"] == 1
    assert s["gpu_devices"] == [1]
    assert s["top_kernels"][0]["name"] == "lltm::backward_kernel<float>"
    assert step_profile.summarize({"traceEvents": []}) == {"steps": 0}
