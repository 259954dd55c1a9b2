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

from experiments import train_lltm
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
def cold_start(tmp_path_factory):
    """Four ranks start training at once on an empty cache."""
    work = tmp_path_factory.mktemp("cold_start")
    env = make_env(work / "cache")
    proc = torchrun(4, [*TINY, "--batch-size", "2", "--steps", "2", "--json", str(work / "s.json")],
                    env)
    return {"env": env, "cache": work / "cache", "summary": summary(work / "s.json"), "proc": proc}


def test_four_ranks_on_a_fresh_cache_compile_the_op_once(cold_start):
    builds = cold_start["summary"]["builds"]
    assert len(builds) == 4  # every rank called the loader
    assert sum(b["compiled"] for b in builds) == 1
    assert len({b["key"] for b in builds}) == 1
    published = [p for p in (cold_start["cache"] / "lltm" / "builds").iterdir()
                 if (p / "manifest.json").is_file()]
    assert [p.name for p in published] == [builds[0]["key"]]
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


# --------------------------------------------------------------------------------------
# In-process: no op build, no subprocess.
# --------------------------------------------------------------------------------------


def test_checkpoint_write_interrupted_midway_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    train_lltm.save_checkpoint(path, {"step": 3, "w": torch.arange(4.0)})

    def dies_midway(obj, f):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(train_lltm.torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        train_lltm.save_checkpoint(path, {"step": 6, "w": torch.zeros(4)})
    monkeypatch.undo()
    kept = torch.load(path, weights_only=True)
    assert kept["step"] == 3 and torch.equal(kept["w"], torch.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]

    # A writer killed by SIGKILL leaves its temporary file; the next run removes it.
    (tmp_path / ".ckpt.pt.tmp-12345").write_bytes(b"partial")
    train_lltm.remove_stale_temporaries(path)
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
        d = train_lltm.Dist(rank, world, 0, torch.device("cpu"), None)
        return train_lltm.BatchOrder(40, batch, d, seed=5)

    one = order(0, 1, 8)
    for step in (0, 4, 5, 11):  # 5 steps per epoch: 5 and 11 are in later epochs
        halves = torch.cat([order(r, 2, 4).indices(step) for r in range(2)])
        assert torch.equal(halves, one.indices(step))
    epoch0 = torch.cat([one.indices(s) for s in range(5)])
    assert sorted(epoch0.tolist()) == list(range(40))  # an epoch visits every sequence once
    assert not torch.equal(one.indices(5), one.indices(0))  # and each epoch reshuffles


def test_scaling_table_reports_ratios(tmp_path):
    def run_json(backend, ranks, rate):
        data = {"size": "b64", "backend": backend, "device": "cuda", "device_name": "GPU",
                "world_size": ranks, "samples_per_s": rate, "step_ms": 1.0, "losses": [2.0]}
        path = tmp_path / f"{backend}{ranks}.json"
        path.write_text(json.dumps(data))
        return path

    paths = [run_json("reference", 1, 100.0), run_json("reference", 2, 190.0),
             run_json("cuda", 1, 300.0), run_json("cuda", 2, 570.0)]
    table = train_lltm.scaling_table(paths)
    rows = {tuple(c.strip() for c in line.split("|")[2:5]): line for line in table.splitlines()[2:]}
    assert "| 1.9 " in rows[("cuda", "GPU", "2")]  # 570 / 300
    assert "| 3 " in rows[("cuda", "GPU", "1")]    # 300 / 100
