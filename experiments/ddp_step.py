"""How one rank of experiments/train_lltm.py runs: its process group and device, and the
parts of a training step that are switches (the DDP wrapper and its options, the
optimizer, the learning rate of a captured step, the step timer)."""

from __future__ import annotations

import dataclasses
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn


# --------------------------------------------------------------------------------------
# Processes and devices
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Dist:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # process group backend; None when running alone

    @property
    def main(self) -> bool:
        return self.rank == 0


def run_device(args) -> torch.device:
    if args.backend == "cpp":
        return torch.device("cpu")
    if args.backend == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise SystemExit(f"--backend {args.backend} needs a CUDA GPU and none is visible")
        return torch.device("cuda")
    return torch.device(args.device if args.device != "auto" else "cpu")


def pin_cpus(local_rank: int, local_world_size: int) -> list[int]:
    """Keep this process (and the threads it starts from now on: the autograd engine's,
    NCCL's) on its own share of the cores it may use, so that the ranks of one host do
    not take each other's cores. Returns the share."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // local_world_size)
    share = cores[local_rank * per:(local_rank + 1) * per] or cores
    os.sched_setaffinity(0, share)
    return share


def setup_distributed(args) -> Dist:
    """Join torchrun's process group when launched by it; else run alone."""
    device = run_device(args)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if getattr(args, "pin_cpus", False):
        pin_cpus(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if world_size == 1:
        return Dist(0, 1, 0, device, None)
    backend = args.dist_backend or ("nccl" if device.type == "cuda" else "gloo")
    kwargs = {"device_id": device} if backend == "nccl" else {}
    store, _, _ = next(dist.rendezvous("env://", rank, world_size))
    # torchrun keeps one TCP store across restarts (--max-restarts): without a prefix per
    # attempt a new rank can read the address a dead rank of the last attempt published.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(backend, store=dist.PrefixStore(f"attempt-{attempt}", store),
                            rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=args.dist_timeout), **kwargs)
    return Dist(rank, world_size, local_rank, device, backend)


def gather(d: Dist, obj) -> list:
    """``obj`` of every rank, in rank order."""
    if d.world_size == 1:
        return [obj]
    out = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------------------
# The step's switches
# --------------------------------------------------------------------------------------


def check_step_options(args, d: Dist) -> None:
    if args.cuda_graph and d.device.type != "cuda":
        raise SystemExit("--cuda-graph needs a CUDA device")
    if args.cuda_graph and args.checkpoint:
        raise SystemExit("--cuda-graph does not write checkpoints (its replays draw dropout "
                         "masks from other RNG offsets than eager steps): drop --checkpoint")


def make_optimizer(args, model: nn.Module, device: torch.device) -> torch.optim.Optimizer:
    kwargs = {"fused": True} if args.fused_adam else {}
    lr = args.lr
    if args.cuda_graph:
        # A captured step reads the step count and the learning rate from the device; the
        # rate is a tensor that the warm-up schedule fills between replays.
        kwargs["capturable"] = True
        lr = torch.tensor(args.lr, device=device)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=args.weight_decay, **kwargs)


def set_lr(optimizer: torch.optim.Optimizer, value: float) -> None:
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


def wrap_ddp(args, model: nn.Module, d: Dist) -> nn.Module:
    if d.world_size == 1:
        return model
    kwargs = dict(gradient_as_bucket_view=args.grad_as_bucket_view, static_graph=args.static_graph)
    if args.bucket_cap_mb is not None:
        kwargs["bucket_cap_mb"] = args.bucket_cap_mb
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[d.device.index] if d.device.type == "cuda" else None, **kwargs)


class StepTimer:
    """A CUDA event at the start of each timed step and one after the last: the GPU
    timeline's step periods, read once at the end (no synchronisation per step)."""

    def __init__(self, device: torch.device, steps: int):
        self.events = ([torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
                       if device.type == "cuda" and steps > 0 else [])
        self.n = 0

    def mark(self) -> None:
        if self.n < len(self.events):
            self.events[self.n].record()
            self.n += 1

    def step_ms(self) -> list[float]:
        return [a.elapsed_time(b) for a, b in zip(self.events[:self.n - 1], self.events[1:self.n])]
