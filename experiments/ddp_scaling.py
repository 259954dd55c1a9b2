"""Weak scaling of experiments/train_lltm.py: many training runs in one torchrun launch, and
the efficiency table of their summaries.

    torchrun --standalone --nproc-per-node N -m experiments.ddp_scaling sweep --out DIR \
        [--sizes compute launch] [--backends cuda reference] [--configs fixed tuned graph] \
        [--steps 140] [--profile-steps 0]
    python -m experiments.ddp_scaling table DIR/*.json [--results $OUT/results/ddp_scaling.json]

``sweep`` joins one process group and runs every (size, backend, configuration) in turn,
each a complete training run (its own model, optimizer and DDP wrapper), so a comparison
of configurations costs one start-up of the ranks. With one rank, configurations that differ
only in DDP options are one run. Rank 0 writes each run's summary to
``DIR/{size}_{backend}_{config}_gpu{N}.json`` as soon as it ends. ``--pin-cpus`` keeps each
rank of the launch on its own share of the host's cores; ``--suffix +pin`` names its runs
apart (``tuned+pin``), and the table compares such a variant with its configuration's run
on one GPU.

Efficiency (weak scaling: every rank keeps its batch) = samples/s on N GPUs /
(N x samples/s of the same size, backend and configuration on one GPU). The
configurations (``CONFIGS``): ``baseline`` is the training step as it used to run (the
batch indices sliced on the host and copied each step, which waits for the GPU; the
losses read every 20 steps) with torch's defaults for DDP and AdamW; ``fixed`` keeps
everything on the device; ``tuned`` (the trainer's defaults) adds the fused AdamW and DDP's
gradient views of its buckets and static graph; ``bucket100`` puts every gradient in one
all-reduce; ``graph`` captures the whole step in a CUDA graph.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from experiments import benchutil, ddp_step, train_lltm

# Per rank: batch, time steps, embedding, state. Weak scaling keeps them on every rank.
SIZES = {
    # GEMM-heavy: a step's GEMMs take milliseconds; the gradients (about 16 MB, the LLTM
    # weights) are reduced once at the end of the backward.
    "compute": ["--batch-size", "256", "--seq-len", "32", "--embed", "256", "--state", "1024"],
    # The tutorial's cell: bound by kernel launches (host time), not by the GPU.
    "launch": ["--batch-size", "32", "--seq-len", "32", "--embed", "32", "--state", "128"],
    # GEMMs of about 8 GFLOP a time step; about 63 MB of gradients.
    "large": ["--batch-size", "512", "--seq-len", "32", "--embed", "512", "--state", "2048"],
    # Seconds on a CPU: the sweep's own check (gloo).
    "tiny": ["--batch-size", "4", "--seq-len", "8", "--embed", "8", "--state", "16",
             "--vocab", "16", "--num-sequences", "256"],
}
TORCH_DEFAULTS = ["--no-fused-adam", "--no-grad-as-bucket-view", "--no-static-graph"]
CONFIGS = {
    "baseline": ["--indices-on", "host", "--log-every", "20", *TORCH_DEFAULTS],
    "fixed": TORCH_DEFAULTS,
    "tuned": [],  # the trainer's defaults
    "bucket100": ["--bucket-cap-mb", "100"],
    "graph": ["--cuda-graph"],
}
TABLE_COLUMNS = ["size", "backend", "config", "device", "ranks", "samples_per_s", "step_ms",
                 "gpu_step_median_ms", "gpu_step_max_ms", "efficiency", "speedup_vs_reference",
                 "final_loss"]


def single_gpu_key(size: str, backend: str, config: str) -> tuple:
    """What a run on one GPU depends on: DDP's options do nothing without DDP."""
    args = train_lltm.parse_args(CONFIGS[config])
    return size, backend, tuple((k, getattr(args, k)) for k in train_lltm.STEP_OPTIONS
                                if k not in train_lltm.DDP_ONLY_OPTIONS)


def sweep(opts) -> int:
    first = train_lltm.parse_args(["--backend", opts.backends[0], "--device", opts.device,
                                   "--dist-timeout", str(opts.dist_timeout)]
                                  + (["--pin-cpus"] if opts.pin_cpus else []))
    d = ddp_step.setup_distributed(first)
    out = Path(opts.out)
    failures = 0
    try:
        done: dict[tuple, str] = {}
        for size in opts.sizes:
            for backend in opts.backends:
                for config in opts.configs:
                    name = config + opts.suffix
                    tag = f"{size}_{backend}_{name}_gpu{d.world_size}"
                    key = single_gpu_key(size, backend, config)
                    if d.world_size == 1 and key in done:
                        if d.main:  # the same run as an earlier configuration's
                            same = json.loads((out / f"{done[key]}.json").read_text())
                            same.update(config=name, same_run_as=done[key])
                            (out / f"{tag}.json").write_text(json.dumps(same, indent=1))
                        continue
                    argv = [*SIZES[size], *CONFIGS[config], "--backend", backend,
                            "--device", opts.device, "--steps", str(opts.steps),
                            "--timing-warmup", str(opts.warmup), "--no-progress",
                            "--dist-timeout", str(opts.dist_timeout), "--tag", tag]
                    if "--log-every" not in CONFIGS[config]:
                        argv += ["--log-every", "0"]
                    if opts.profile_steps:
                        argv += ["--profile-dir", str(out / "profiles"),
                                 "--profile-steps", str(opts.profile_steps)]
                    if d.main:
                        print(f"=== {tag} ({time.strftime('%H:%M:%S')})", flush=True)
                    t0 = time.perf_counter()
                    try:
                        summary = train_lltm.run(train_lltm.parse_args(argv), d)
                    except Exception as e:  # one failed configuration must not end the sweep
                        failures += 1
                        print(f"ddp_scaling: {tag} failed on rank {d.rank}: "
                              f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
                        if d.world_size > 1:
                            raise  # the other ranks may wait in a collective: stop here
                        continue
                    done[key] = tag
                    if d.main:
                        summary.update(config=name, size_name=size, argv=argv,
                                       pinned_cpus=opts.pin_cpus, wall_s=time.perf_counter() - t0)
                        out.mkdir(parents=True, exist_ok=True)
                        (out / f"{tag}.json").write_text(json.dumps(summary, indent=1))
                    if d.device.type == "cuda":
                        torch.cuda.empty_cache()
    finally:
        if d.world_size > 1:
            torch.distributed.destroy_process_group()
    return 1 if failures else 0


def scaling_rows(paths) -> list[dict]:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    by = {(r["size"], r["backend"], r.get("config", "-"), r["device"], r["world_size"]): r
          for r in runs}
    rows = []
    for r in sorted(runs, key=lambda r: (r["size"], r["device"], r["backend"],
                                         r.get("config", "-"), r["world_size"])):
        config = r.get("config", "-")
        # A variant of a configuration ("tuned+pin": the launch's suffix) against the
        # configuration's own run on one GPU.
        one = by.get((r["size"], r["backend"], config.split("+")[0], r["device"], 1))
        ref = by.get((r["size"], "reference", config, r["device"], r["world_size"]))
        k = max(1, min(10, len(r["losses"]) // 4))
        n = r["world_size"]
        rate = r["samples_per_s"]
        rows.append({
            "size": r["size"], "backend": r["backend"], "config": config,
            "device": r["device_name"] or r["device"], "ranks": n,
            "samples_per_s": rate, "step_ms": r["step_ms"],
            "gpu_step_median_ms": r.get("step_ms_gpu_median") or "-",
            "gpu_step_max_ms": r.get("step_ms_gpu_max") or "-",
            "efficiency": rate / (n * one["samples_per_s"]) if one and rate else "-",
            "speedup_vs_reference": rate / ref["samples_per_s"] if ref and rate else "-",
            "final_loss": sum(r["losses"][-k:]) / k if r["losses"] else "-"})
    return rows


def scaling_table(paths) -> str:
    return benchutil.format_table(scaling_rows(paths), TABLE_COLUMNS)


def best_rows(rows: list[dict]) -> str:
    """Per size and backend: the multi-GPU configuration with the most samples/s, with its
    efficiency."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r["ranks"] > 1 and isinstance(r["samples_per_s"], float):
            key = (r["size"], r["backend"], r["ranks"])
            if key not in best or r["samples_per_s"] > best[key]["samples_per_s"]:
                best[key] = r
    return benchutil.format_table(
        [{"size": k[0], "backend": k[1], "ranks": k[2], "best_config": r["config"],
          "samples_per_s": r["samples_per_s"], "efficiency": r["efficiency"]}
         for k, r in sorted(best.items())]) if best else "(no multi-GPU runs)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="run every configuration in one process group")
    s.add_argument("--out", required=True)
    s.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["compute", "launch"])
    s.add_argument("--backends", nargs="+", choices=("cuda", "reference", "cpp"),
                   default=["cuda", "reference"])
    s.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    s.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    s.add_argument("--steps", type=int, default=140)
    s.add_argument("--warmup", type=int, default=20, help="steps left out of samples/s")
    s.add_argument("--profile-steps", type=int, default=0,
                   help="profile this many steps of every run (then timed after them)")
    s.add_argument("--dist-timeout", type=float, default=180)
    s.add_argument("--pin-cpus", action="store_true",
                   help="each rank on its own share of the host's cores (all runs of the launch)")
    s.add_argument("--suffix", default="",
                   help="appended to the configuration names of this launch (e.g. +pin)")
    t = sub.add_parser("table", help="the efficiency table of sweep summaries")
    t.add_argument("json", nargs="+")
    t.add_argument("--results", metavar="PATH",
                   help="also write the table here (the results page reads it)")
    opts = p.parse_args(argv)
    if opts.command == "sweep":
        return sweep(opts)
    rows = scaling_rows(opts.json)
    print(benchutil.format_table(rows, TABLE_COLUMNS))
    if opts.results:
        benchutil.save_json(opts.results, rows, "ddp-scaling", TABLE_COLUMNS)
    print("\nbest multi-GPU configuration per size and backend:")
    print(best_rows(rows))
    return 0


if __name__ == "__main__":
    status = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()  # see train_lltm: skip the teardown that once aborted a done rank
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
