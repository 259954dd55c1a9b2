"""Train a small sequence model built on the LLTM op with DistributedDataParallel.

The model embeds tokens, runs one or more LLTM cells over the sequence and predicts the
next token (experiments/lltm_lm.py; experiments/ddp_step.py holds a rank's process group
and the step's switches). The data is generated locally: an order-2 Markov chain over
``--vocab`` symbols (its true model's loss, the floor, is printed next to the uniform
guess), or the characters of any local text file (``--data README.md``). Nothing is
downloaded.

    python -m experiments.train_lltm --backend cpp                          # one process, CPU
    torchrun --standalone --nproc-per-node 2 -m experiments.train_lltm --backend cpp   # gloo
    torchrun --standalone --nproc-per-node 2 -m experiments.train_lltm --backend cuda  # NCCL

Backends: ``reference`` (the plain-PyTorch cell, on ``--device``), ``cpp`` (the op's C++
kernels, CPU) and ``cuda`` (the op's CUDA kernels). The process group is gloo on CPU and
NCCL on GPU. Every rank calls the loader at start-up: one rank compiles the op, the others
wait for its build and load it.

Batches: ``--batch-size`` is per rank. Step ``s`` takes the global batch of
``world_size * batch_size`` sequences from a permutation fixed by ``--seed`` and the
epoch, and rank ``r`` takes its ``r``-th slice; each rank's loss is the mean over its
tokens, and DDP averages the gradients of the ranks, so N ranks compute the same update
as one process with ``N * batch_size`` sequences.

A step never waits for the GPU: the batch indices are sliced on the device, the losses
stay there until a report (``--log-every``, each one a synchronisation of the ranks) or
the end. DDP's options (``--bucket-cap-mb``, ``--[no-]grad-as-bucket-view``,
``--[no-]static-graph``; on by default), the fused AdamW (``--[no-]fused-adam``, on) and
``--cuda-graph`` (forward,
backward with DDP's all-reduce, clipping and the optimizer step captured once and replayed
each step) are switches, so experiments/ddp_scaling.py can compare them in one run;
``--profile-dir`` records a few steps of each rank with torch.profiler and summarises
where the step time went (experiments/step_profile.py).

Checkpoints (``--checkpoint PATH``) hold the step, the model, the optimizer, every rank's
RNG state and the per-step losses; they are written to a temporary file and published by
``os.replace``, so a run killed at any moment leaves the previous checkpoint intact. A run
whose checkpoint exists resumes from it (same step, optimizer state, RNG streams and data
order: the order is a function of the seed and the step), so ``torchrun --max-restarts N``
recovers from a failed rank by itself.

``--json PATH`` writes a summary (losses, samples/s, each rank's build info and parameter
digest); experiments/ddp_scaling.py tabulates such summaries.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from experiments.ddp_step import (Dist, StepTimer, check_step_options, gather,
                                  make_optimizer, set_lr, setup_distributed, sync, wrap_ddp)
from experiments.lltm_lm import (CHECKPOINT_FORMAT, RESUME_KEYS, BatchOrder, Data,
                                 LLTMLanguageModel, check_resumable, load_checkpoint, loss_fn,
                                 make_data, param_digest, remove_stale_temporaries, rng_state,
                                 save_checkpoint, set_rng_state)

# What changes how a step runs, not what it computes: the DDP options and the step mode.
# experiments/ddp_scaling.py compares them; a checkpoint does not pin them.
STEP_OPTIONS = ("indices_on", "fused_adam", "bucket_cap_mb", "grad_as_bucket_view",
                "static_graph", "cuda_graph")
DDP_ONLY_OPTIONS = ("bucket_cap_mb", "grad_as_bucket_view", "static_graph")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--backend", choices=("reference", "cpp", "cuda"), default="cpp",
                   help="LLTM cell: plain-PyTorch reference, the op's C++ or CUDA kernels")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="device of the reference backend (auto: cuda when visible)")
    p.add_argument("--dist-backend", choices=("gloo", "nccl"),
                   help="process group backend (default: gloo on CPU, nccl on GPU)")
    p.add_argument("--dist-timeout", type=float, default=300,
                   help="seconds a collective may wait for the other ranks before failing")
    p.add_argument("--pin-cpus", action="store_true",
                   help="keep each rank of a host on its own share of the cores")
    data = p.add_argument_group("data")
    data.add_argument("--data", default="markov",
                      help="'markov' (generated order-2 chain) or the path of a text file")
    data.add_argument("--vocab", type=int, default=32, help="symbols of the Markov chain")
    data.add_argument("--seq-len", type=int, default=32)
    data.add_argument("--num-sequences", type=int, default=16384,
                      help="Markov sequences generated (a text gives what it has)")
    model = p.add_argument_group("model")
    model.add_argument("--embed", type=int, default=32)
    model.add_argument("--state", type=int, default=128, help="LLTM state size")
    model.add_argument("--layers", type=int, default=1)
    model.add_argument("--dropout", type=float, default=0.1)
    model.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    model.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on GPU")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--steps", type=int, default=300, help="total steps (a resumed run "
                     "continues up to this step)")
    opt.add_argument("--batch-size", type=int, default=32, help="sequences per rank per step")
    opt.add_argument("--lr", type=float, default=2e-2)
    opt.add_argument("--warmup", type=int, default=10, help="steps of linear lr warm-up")
    opt.add_argument("--weight-decay", type=float, default=0.01)
    opt.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: off)")
    opt.add_argument("--seed", type=int, default=0)
    step = p.add_argument_group("how a step runs (the same update either way)")
    step.add_argument("--indices-on", choices=("device", "host"), default="device",
                      help="where a step's batch indices are sliced; host: a copy per step "
                      "from pageable memory, which waits for the GPU (for comparison)")
    on = dict(action=argparse.BooleanOptionalAction, default=True)
    step.add_argument("--fused-adam", **on,
                      help="AdamW's fused implementation (one kernel per step for all parameters)")
    step.add_argument("--bucket-cap-mb", type=float,
                      help="DDP gradient bucket size in MiB (default: DDP's, 25)")
    step.add_argument("--grad-as-bucket-view", **on,
                      help="DDP: gradients are views of the all-reduce buckets (no copy)")
    step.add_argument("--static-graph", **on,
                      help="DDP: the same parameters are used every step")
    step.add_argument("--cuda-graph", action="store_true",
                      help="capture forward, backward (with DDP's all-reduce), clipping and the "
                      "optimizer step as one CUDA graph after --graph-warmup eager steps, and "
                      "replay it (CUDA only; no checkpoints)")
    step.add_argument("--graph-warmup", type=int, default=11,
                      help="eager steps before the capture (DDP needs 11)")
    run = p.add_argument_group("run")
    run.add_argument("--checkpoint", help="checkpoint file: resumed from when it exists, "
                     "rewritten every --checkpoint-every steps and at the end")
    run.add_argument("--checkpoint-every", type=int, default=100)
    run.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    run.add_argument("--log-every", type=int, default=10,
                     help="steps between loss reports (each one synchronises the ranks; "
                     "0: only at checkpoints and at the end)")
    run.add_argument("--timing-warmup", type=int, default=5,
                     help="first steps of this run left out of samples/s")
    run.add_argument("--profile-dir",
                     help="record --profile-steps steps after the warm-up with torch.profiler "
                     "(CPU and CUDA activity) and write each rank's trace and summary here; "
                     "samples/s is then timed after them")
    run.add_argument("--profile-steps", type=int, default=5)
    run.add_argument("--tag", default="run", help="name of this run in profile files")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--threads", type=int, help="CPU threads per rank (torch.set_num_threads); "
                     "torchrun sets OMP_NUM_THREADS=1 itself when it starts several ranks")
    run.add_argument("--json", help="write a summary of the run here (rank 0)")
    run.add_argument("--fail-at-step", type=int,
                     help="fault injection: the last rank kills itself (SIGKILL) after this "
                     "step, on the first attempt only (TORCHELASTIC_RESTART_COUNT=0)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------


def load_cell(args):
    """The LLTM cell class of the backend, and this rank's loader BuildInfo (or None)."""
    if args.backend == "reference":
        from ops.lltm.reference import LLTMReference
        return LLTMReference, None
    import jit_loader
    # Every rank loads: one compiles under the loader's build lock, the others wait for
    # the lock and then find the finished build in the cache.
    op = jit_loader.load("lltm")
    build = dataclasses.asdict(op.build)
    # Whether calls take the loader's fast entry (a shared piece; torch.ops until it is built).
    build["fast_entry"] = op.module._FORWARD is not torch.ops.lltm.forward.default
    return op.LLTM, build


def run_config(args, data: Data, d: Dist) -> dict:
    config = {k: getattr(args, k) for k in RESUME_KEYS if hasattr(args, k)}
    config.update(vocab=data.vocab, num_sequences=len(data.tokens), world_size=d.world_size,
                  data_sha256=data.sha256, backend=args.backend, device=d.device.type)
    return config


def describe_builds(builds: list) -> str:
    if builds[0] is None:
        return "reference backend: no op to load"
    compiled = [r for r, b in enumerate(builds) if b["compiled"]]
    keys = {b["key"] for b in builds}
    who = (f"compiled by rank {', '.join(map(str, compiled))} in "
           f"{max(builds[r]['seconds'] for r in compiled):.1f} s, the other ranks waited and "
           "loaded it" if compiled else "loaded from the cache by every rank")
    fast = sum(bool(b.get("fast_entry")) for b in builds)
    return (f"lltm op build {', '.join(sorted(keys))}: {who}; the fast call entry on {fast} of "
            f"{len(builds)} rank(s)")


def progress_bar(args, d: Dist, start_step: int):
    if not d.main or args.no_progress:
        return None
    from tqdm import tqdm
    return tqdm(total=args.steps, initial=start_step, unit="step", mininterval=1.0,
                desc=f"{args.backend} x{d.world_size}", file=sys.stderr, dynamic_ncols=True)


def train(args) -> dict | None:
    d = setup_distributed(args)
    try:
        return run(args, d)
    finally:
        if d.world_size > 1:
            dist.destroy_process_group()


def run(args, d: Dist) -> dict | None:
    """One training run on this rank, in the process group ``d`` (experiments/ddp_scaling.py
    runs several in one group); returns the summary on rank 0."""
    check_step_options(args, d)
    if args.threads:
        torch.set_num_threads(args.threads)
    if d.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    cell, build = load_cell(args)
    builds = gather(d, build)
    data = make_data(args)
    config = run_config(args, data, d)
    dtype = getattr(torch, args.dtype)

    torch.manual_seed(args.seed)  # the same initial parameters on every rank
    model = LLTMLanguageModel(cell, data.vocab, args.embed, args.state, args.layers,
                              args.dropout).to(d.device, dtype)
    optimizer = make_optimizer(args, model, d.device)
    torch.manual_seed(args.seed + 1 + d.rank)  # each rank its own dropout stream
    random.seed(args.seed + 1 + d.rank)

    start_step, losses, resumed = 0, [], None
    if args.checkpoint and d.main:
        remove_stale_temporaries(args.checkpoint)
    if args.checkpoint and os.path.exists(args.checkpoint) and not args.fresh:
        checkpoint = load_checkpoint(args.checkpoint)
        check_resumable(checkpoint, config, args.checkpoint)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        set_rng_state(checkpoint["rng"][d.rank], d.device)
        start_step, losses = checkpoint["step"], list(checkpoint["losses"])
        resumed = start_step
        del checkpoint

    # A captured step runs on a side stream from the start: DDP is built there and the
    # eager warm-up steps run there too (cuBLAS and DDP set up their state for that stream).
    stream = torch.cuda.Stream(d.device) if args.cuda_graph else None
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream(d.device))
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        ddp = wrap_ddp(args, model, d)
        if d.main:
            n_params = sum(p.numel() for p in model.parameters())
            print(f"train_lltm: backend {args.backend} on {d.device.type}, {d.world_size} "
                  f"rank(s){f' ({d.backend})' if d.backend else ''} x batch {args.batch_size}; "
                  f"model: embed {args.embed}, state {args.state}, {args.layers} LLTM layer(s), "
                  f"{n_params} parameters, {args.dtype}; data: {data.description}; step: "
                  + ", ".join(f"{k} {getattr(args, k)}" for k in STEP_OPTIONS), flush=True)
            print(f"train_lltm: {describe_builds(builds)}", flush=True)
            if resumed is not None:
                print(f"train_lltm: resumed from {args.checkpoint} at step {resumed}", flush=True)
        result = _loop(args, d, model, ddp, optimizer, data, config, start_step, losses, stream)
    if result is None:
        return None
    result.update(builds=builds, resumed_from=resumed, start_step=start_step)
    report(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


def _loop(args, d: Dist, model, ddp, optimizer, data: Data, config: dict, start_step: int,
          losses: list, stream) -> dict | None:
    from experiments import step_profile

    order = BatchOrder(len(data.tokens), args.batch_size, d.rank, d.world_size, args.seed,
                       device=d.device if args.indices_on == "device" else None)
    tokens = data.tokens.to(d.device)
    params = list(model.parameters())

    def checkpoint_now(step: int) -> None:
        rngs = gather(d, rng_state(d.device))
        if d.main:
            save_checkpoint(args.checkpoint, {
                "format": CHECKPOINT_FORMAT, "step": step, "config": config,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rngs, "losses": list(losses)})

    pending: list[torch.Tensor] = []

    def flush_losses() -> None:
        """Move the losses of the last steps to the host, averaged over the ranks."""
        if not pending:
            return
        window = torch.stack(pending).double()
        if d.world_size > 1:
            dist.all_reduce(window)
            window /= d.world_size
        losses.extend(window.tolist())
        pending.clear()

    profiler = None
    phase = contextlib.nullcontext  # torch.profiler.record_function while profiling

    def batch_indices(step: int) -> torch.Tensor:
        return order.indices(step).to(d.device)  # a no-op where the order lives on the device

    def eager_step(step: int) -> torch.Tensor:
        with phase("data"):
            batch = tokens[batch_indices(step)]
        with phase("forward"):
            loss = loss_fn(ddp, batch)
        with phase("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with phase("optimizer"):
            if args.clip:
                nn.utils.clip_grad_norm_(params, args.clip)
            optimizer.step()
        return loss.detach()

    graph = None
    graph_from = start_step + args.graph_warmup if args.cuda_graph else None
    static_batch = static_loss = None

    def capture() -> None:
        nonlocal graph, static_batch, static_loss
        static_batch = tokens[batch_indices(graph_from)]
        optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the grads
        sync(d.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            static_loss = loss_fn(ddp, static_batch)
            static_loss.backward()
            if args.clip:
                nn.utils.clip_grad_norm_(params, args.clip)
            optimizer.step()

    def graph_step(step: int) -> torch.Tensor:
        with phase("data"):
            torch.index_select(tokens, 0, batch_indices(step), out=static_batch)
        with phase("replay"):
            graph.replay()
        return static_loss.detach().clone()

    bar = progress_bar(args, d, start_step)
    ddp.train()
    first_timed = start_step + max(args.timing_warmup,
                                   args.graph_warmup + 1 if args.cuda_graph else 0)
    profile_from = min(first_timed, args.steps) if args.profile_dir else None
    profile_to = min(first_timed + args.profile_steps, args.steps) if args.profile_dir else None
    timed_from = min(profile_to if args.profile_dir else first_timed, args.steps)
    timer = StepTimer(d.device, args.steps - timed_from)
    profile = None
    t_timed = time.perf_counter()
    t_window, window_start = time.perf_counter(), start_step
    for step in range(start_step, args.steps):
        if step == profile_from:
            sync(d.device)
            profiler = step_profile.start(d.device)
            phase = torch.profiler.record_function
        if step == timed_from:
            sync(d.device)
            t_timed = time.perf_counter()
        if step >= timed_from:
            timer.mark()
        if step == graph_from:
            capture()
        with phase("train_step"):
            set_lr(optimizer, args.lr * min(1.0, (step + 1) / max(1, args.warmup)))
            loss = graph_step(step) if graph is not None else eager_step(step)
            pending.append(loss)
        done = step + 1
        if done == profile_to:
            sync(d.device)
            profile = step_profile.finish(profiler, Path(args.profile_dir),
                                          f"{args.tag}_rank{d.rank}", done - profile_from)
            profiler, phase = None, contextlib.nullcontext
        if (args.log_every and done % args.log_every == 0) or done == args.steps:
            flush_losses()
            if bar is not None:
                now = time.perf_counter()
                rate = (done - window_start) * order.global_batch / (now - t_window)
                t_window, window_start = now, done
                bar.set_postfix(loss=f"{losses[-1]:.3f}", samples_per_s=f"{rate:.0f}", refresh=False)
        if bar is not None:
            bar.update(1)
        if args.checkpoint and (done % args.checkpoint_every == 0 or done == args.steps):
            flush_losses()
            checkpoint_now(done)
        if args.fail_at_step == done and d.rank == d.world_size - 1 \
                and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
    timer.mark()
    sync(d.device)
    elapsed = time.perf_counter() - t_timed
    if bar is not None:
        bar.close()
    flush_losses()

    timed_steps = args.steps - timed_from
    step_ms = timer.step_ms()
    digests = gather(d, param_digest(model))
    profiles = gather(d, profile) if args.profile_dir else None
    if not d.main:
        return None
    return {
        "backend": args.backend, "device": d.device.type,
        "device_name": torch.cuda.get_device_name(d.device) if d.device.type == "cuda" else None,
        "dist_backend": d.backend, "world_size": d.world_size,
        "batch_per_rank": args.batch_size, "global_batch": order.global_batch,
        "size": f"b{args.batch_size}xT{args.seq_len}xE{args.embed}xS{args.state}xL{args.layers}",
        "dtype": args.dtype, "tf32": args.tf32,
        "step_options": {k: getattr(args, k) for k in STEP_OPTIONS},
        "steps": args.steps, "timed_steps": timed_steps,
        "samples_per_s": timed_steps * order.global_batch / elapsed if timed_steps > 0 else None,
        "step_ms": elapsed / timed_steps * 1e3 if timed_steps > 0 else None,
        # The GPU timeline's step periods (CUDA events): the median is robust to a rare
        # stall, the max shows one.
        "step_ms_gpu_median": statistics.median(step_ms) if step_ms else None,
        "step_ms_gpu_max": max(step_ms) if step_ms else None,
        "uniform_loss": math.log(data.vocab), "floor_loss": data.floor, "losses": losses,
        "param_sha256": digests, "torch": torch.__version__, "profile": profiles,
    }


def report(s: dict) -> None:
    losses = s["losses"]
    k = max(1, min(10, len(losses) // 4))
    if losses:
        floor = f", true-model floor {s['floor_loss']:.3f}" if s["floor_loss"] is not None else ""
        print(f"train_lltm: loss {sum(losses[:k]) / k:.3f} (mean of the first {k} steps) -> "
              f"{sum(losses[-k:]) / k:.3f} (last {k}); uniform guess {s['uniform_loss']:.3f}"
              f"{floor}", flush=True)
    if s["samples_per_s"]:
        gpu = (f"; GPU step median {s['step_ms_gpu_median']:.2f} ms, max "
               f"{s['step_ms_gpu_max']:.2f} ms" if s["step_ms_gpu_median"] else "")
        print(f"train_lltm: {s['samples_per_s']:.0f} samples/s, {s['step_ms']:.2f} ms/step over "
              f"{s['timed_steps']} steps ({s['world_size']} rank(s) x batch "
              f"{s['batch_per_rank']}){gpu}", flush=True)


def main(argv=None) -> None:
    train(parse_args(argv))


if __name__ == "__main__":
    main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A torchrun worker whose work is done: its process group is destroyed and its
        # outputs are written. Interpreter teardown then destroys torch's distributed
        # objects in an order that once aborted a rank ("terminate called without an active
        # exception") after a complete run, failing a finished job; skip that teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
