"""Train a small sequence model built on the LLTM op with DistributedDataParallel.

The model embeds tokens, runs one or more LLTM cells over the sequence and predicts the
next token. The data is generated locally: an order-2 Markov chain over ``--vocab``
symbols (its true model's loss, the floor, is printed next to the uniform guess), or
the characters of any local text file (``--data README.md``). Nothing is downloaded.

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

Checkpoints (``--checkpoint PATH``) hold the step, the model, the optimizer, every rank's
RNG state and the per-step losses; they are written to a temporary file and published by
``os.replace``, so a run killed at any moment leaves the previous checkpoint intact. A run
whose checkpoint exists resumes from it (same step, optimizer state, RNG streams and data
order: the order is a function of the seed and the step), so ``torchrun --max-restarts N``
recovers from a failed rank by itself.

``--json PATH`` writes a summary (losses, samples/s, each rank's build info and parameter
digest); ``--table FILE...`` prints the samples/s table of such summaries
(experiments/ddp_run.sh).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import json
import math
import os
import random
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from experiments import benchutil

CHECKPOINT_FORMAT = 1
# Settings a checkpoint must share with the run that resumes it: they fix the model, the
# data and its order. Backend, device and the number of steps may change.
RESUME_KEYS = ("data", "data_sha256", "vocab", "seq_len", "num_sequences", "batch_size",
               "world_size", "embed", "state", "layers", "dropout", "lr", "warmup",
               "weight_decay", "clip", "seed", "dtype")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--backend", choices=("reference", "cpp", "cuda"), default="cpp",
                   help="LLTM cell: plain-PyTorch reference, the op's C++ or CUDA kernels")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="device of the reference backend (auto: cuda when visible)")
    p.add_argument("--dist-backend", choices=("gloo", "nccl"),
                   help="process group backend (default: gloo on CPU, nccl on GPU)")
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
    run = p.add_argument_group("run")
    run.add_argument("--checkpoint", help="checkpoint file: resumed from when it exists, "
                     "rewritten every --checkpoint-every steps and at the end")
    run.add_argument("--checkpoint-every", type=int, default=100)
    run.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    run.add_argument("--log-every", type=int, default=10,
                     help="steps between loss reports (each one synchronises the ranks)")
    run.add_argument("--timing-warmup", type=int, default=5,
                     help="first steps of this run left out of samples/s")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--threads", type=int, help="CPU threads per rank (torch.set_num_threads); "
                     "torchrun sets OMP_NUM_THREADS=1 itself when it starts several ranks")
    run.add_argument("--json", help="write a summary of the run here (rank 0)")
    run.add_argument("--fail-at-step", type=int,
                     help="fault injection: the last rank kills itself (SIGKILL) after this "
                     "step, on the first attempt only (TORCHELASTIC_RESTART_COUNT=0)")
    run.add_argument("--table", nargs="+", metavar="JSON",
                     help="print the samples/s table of these summaries and exit")
    return p.parse_args(argv)


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


def setup_distributed(args) -> Dist:
    """Join torchrun's process group when launched by it; else run alone."""
    device = run_device(args)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
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
                            rank=rank, world_size=world_size, **kwargs)
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


def load_cell(args, d: Dist):
    """The LLTM cell class of the backend, and this rank's loader BuildInfo (or None)."""
    if args.backend == "reference":
        from ops.lltm.reference import LLTMReference
        return LLTMReference, None
    import jit_loader
    # Every rank loads: one compiles under the loader's build lock, the others wait for
    # the lock and then find the finished build in the cache.
    op = jit_loader.load("lltm")
    return op.LLTM, dataclasses.asdict(op.build)


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Data:
    tokens: torch.Tensor        # (num_sequences, seq_len + 1) int64
    vocab: int
    description: str
    floor: float | None         # mean loss of the true model on these targets, if known
    sha256: str | None          # of the text file, so a resumed run checks it is unchanged


def markov_data(vocab: int, seq_len: int, num_sequences: int, seed: int) -> Data:
    """Sequences of an order-2 Markov chain with a random, peaked transition table.

    The first two symbols are uniform; each later one depends on the two before it, so
    the model has to carry state across steps to reach the floor.
    """
    g = torch.Generator().manual_seed(seed)
    table = torch.softmax(3.0 * torch.randn(vocab, vocab, vocab, generator=g, dtype=torch.float64), -1)
    seqs = torch.empty(num_sequences, seq_len + 1, dtype=torch.int64)
    seqs[:, :2] = torch.randint(vocab, (num_sequences, 2), generator=g)
    nll = torch.full((num_sequences,), math.log(vocab), dtype=torch.float64)  # target 1
    for t in range(2, seq_len + 1):
        probs = table[seqs[:, t - 2], seqs[:, t - 1]]
        seqs[:, t] = torch.multinomial(probs, 1, generator=g).squeeze(1)
        nll -= probs.gather(1, seqs[:, t:t + 1]).squeeze(1).log()
    return Data(seqs, vocab, f"order-2 Markov chain, vocab {vocab}, {num_sequences} sequences "
                f"of {seq_len}", floor=(nll.sum() / (num_sequences * seq_len)).item(), sha256=None)


def text_data(path: str, seq_len: int) -> Data:
    """Non-overlapping windows of ``seq_len + 1`` characters of a local text file."""
    raw = Path(path).read_bytes()
    text = raw.decode("utf-8", errors="replace")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise SystemExit(f"{path}: {len(ids)} characters, too short for --seq-len {seq_len}")
    seqs = ids[: n * seq_len + 1].unfold(0, seq_len + 1, seq_len)
    return Data(seqs.contiguous(), len(chars), f"characters of {path}, vocab {len(chars)}, "
                f"{n} sequences of {seq_len}", floor=None, sha256=hashlib.sha256(raw).hexdigest())


def make_data(args) -> Data:
    if args.data == "markov":
        return markov_data(args.vocab, args.seq_len, args.num_sequences, args.seed)
    return text_data(args.data, args.seq_len)


class BatchOrder:
    """Which sequences each rank trains on at each step: a pure function of the seed and
    the step, so a resumed run continues the very same order."""

    def __init__(self, num_sequences: int, batch_size: int, d: Dist, seed: int):
        self.global_batch = batch_size * d.world_size
        if self.global_batch > num_sequences:
            raise SystemExit(f"global batch {self.global_batch} exceeds the {num_sequences} "
                             "sequences of the data")
        self.steps_per_epoch = num_sequences // self.global_batch
        self.n, self.b, self.rank, self.seed = num_sequences, batch_size, d.rank, seed
        self._epoch, self._perm = -1, None

    def indices(self, step: int) -> torch.Tensor:
        epoch, i = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._perm = epoch, torch.randperm(self.n, generator=g)
        start = i * self.global_batch + self.rank * self.b
        return self._perm[start:start + self.b]


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------


class LLTMLanguageModel(nn.Module):
    """Embedding, ``layers`` LLTM cells unrolled over time, and a next-token head."""

    def __init__(self, cell, vocab: int, embed: int, state: int, layers: int, dropout: float):
        super().__init__()
        self.state = state
        self.embed = nn.Embedding(vocab, embed)
        self.cells = nn.ModuleList(cell(embed if i == 0 else state, state) for i in range(layers))
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(state, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` (batch, time) -> logits (time, batch, vocab)."""
        x = self.drop(self.embed(tokens.t()))  # time-major: each step reads a contiguous slice
        for cell in self.cells:
            h = c = x.new_zeros(x.shape[1], self.state)
            outputs = []
            for x_t in x.unbind(0):
                h, c = cell(x_t, (h, c))
                outputs.append(h)
            x = self.drop(torch.stack(outputs))
        return self.head(x)


def loss_fn(model, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].t().flatten())


# --------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------


def rng_state(device: torch.device) -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "python": random.getstate()}


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)
    random.setstate(state["python"])


def save_checkpoint(path: str | os.PathLike, checkpoint: dict) -> None:
    """Write to a temporary file beside ``path``, flush it to disk, then ``os.replace``:
    readers see the old checkpoint or the new one, never a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # make the rename itself durable
    finally:
        os.close(fd)


def remove_stale_temporaries(path: str | os.PathLike) -> None:
    """Temporary files of writers killed mid-write (they are never read)."""
    path = Path(path)
    for stale in glob.glob(str(path.with_name(f".{path.name}.tmp-*"))):
        Path(stale).unlink(missing_ok=True)


def load_checkpoint(path: str | os.PathLike) -> dict:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise SystemExit(f"{path}: checkpoint format {checkpoint.get('format')!r}, "
                         f"this script reads format {CHECKPOINT_FORMAT}")
    return checkpoint


def check_resumable(checkpoint: dict, config: dict, path) -> None:
    diffs = [f"{k}={checkpoint['config'].get(k)!r} (this run: {config[k]!r})"
             for k in RESUME_KEYS if checkpoint["config"].get(k) != config[k]]
    if diffs:
        raise SystemExit(f"{path} was written by a run with other settings: {', '.join(diffs)}."
                         " Resume with the same settings, or pass --fresh to start over.")


def param_digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------


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
    return f"lltm op build {', '.join(sorted(keys))}: {who}"


def progress_bar(args, d: Dist, start_step: int):
    if not d.main or args.no_progress:
        return None
    from tqdm import tqdm
    return tqdm(total=args.steps, initial=start_step, unit="step", mininterval=1.0,
                desc=f"{args.backend} x{d.world_size}", file=sys.stderr, dynamic_ncols=True)


def train(args) -> dict | None:
    d = setup_distributed(args)
    try:
        return _train(args, d)
    finally:
        if d.world_size > 1:
            dist.destroy_process_group()


def _train(args, d: Dist) -> dict | None:
    if args.threads:
        torch.set_num_threads(args.threads)
    if d.device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    cell, build = load_cell(args, d)
    builds = gather(d, build)
    data = make_data(args)
    config = run_config(args, data, d)
    dtype = getattr(torch, args.dtype)

    torch.manual_seed(args.seed)  # the same initial parameters on every rank
    model = LLTMLanguageModel(cell, data.vocab, args.embed, args.state, args.layers,
                              args.dropout).to(d.device, dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
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

    ddp = model
    if d.world_size > 1:
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    order = BatchOrder(len(data.tokens), args.batch_size, d, args.seed)
    tokens = data.tokens.to(d.device)

    if d.main:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"train_lltm: backend {args.backend} on {d.device.type}, {d.world_size} rank(s)"
              f"{f' ({d.backend})' if d.backend else ''} x batch {args.batch_size}; model: "
              f"embed {args.embed}, state {args.state}, {args.layers} LLTM layer(s), "
              f"{n_params} parameters, {args.dtype}; data: {data.description}", flush=True)
        print(f"train_lltm: {describe_builds(builds)}", flush=True)
        if resumed is not None:
            print(f"train_lltm: resumed from {args.checkpoint} at step {resumed}", flush=True)

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

    bar = progress_bar(args, d, start_step)
    ddp.train()
    timed_from = min(start_step + args.timing_warmup, args.steps)
    t_timed = time.perf_counter()
    t_window, window_start = time.perf_counter(), start_step
    for step in range(start_step, args.steps):
        if step == timed_from:
            sync(d.device)
            t_timed = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / max(1, args.warmup))
        batch = tokens[order.indices(step).to(d.device)]
        loss = loss_fn(ddp, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        pending.append(loss.detach())
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
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
    sync(d.device)
    elapsed = time.perf_counter() - t_timed
    if bar is not None:
        bar.close()
    flush_losses()

    timed_steps = args.steps - timed_from
    digests = gather(d, param_digest(model))
    if not d.main:
        return None
    summary = {
        "backend": args.backend, "device": d.device.type,
        "device_name": torch.cuda.get_device_name(d.device) if d.device.type == "cuda" else None,
        "dist_backend": d.backend, "world_size": d.world_size,
        "batch_per_rank": args.batch_size, "global_batch": order.global_batch,
        "size": f"b{args.batch_size}xT{args.seq_len}xE{args.embed}xS{args.state}xL{args.layers}",
        "dtype": args.dtype, "tf32": args.tf32,
        "steps": args.steps, "start_step": start_step, "resumed_from": resumed,
        "timed_steps": timed_steps,
        "samples_per_s": timed_steps * order.global_batch / elapsed if timed_steps > 0 else None,
        "step_ms": elapsed / timed_steps * 1e3 if timed_steps > 0 else None,
        "uniform_loss": math.log(data.vocab), "floor_loss": data.floor, "losses": losses,
        "builds": builds, "param_sha256": digests, "torch": torch.__version__,
    }
    report(summary)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return summary


def report(s: dict) -> None:
    losses = s["losses"]
    k = max(1, min(10, len(losses) // 4))
    if losses:
        floor = f", true-model floor {s['floor_loss']:.3f}" if s["floor_loss"] is not None else ""
        print(f"train_lltm: loss {sum(losses[:k]) / k:.3f} (mean of the first {k} steps) -> "
              f"{sum(losses[-k:]) / k:.3f} (last {k}); uniform guess {s['uniform_loss']:.3f}"
              f"{floor}", flush=True)
    if s["samples_per_s"]:
        print(f"train_lltm: {s['samples_per_s']:.0f} samples/s, {s['step_ms']:.2f} ms/step over "
              f"{s['timed_steps']} steps ({s['world_size']} rank(s) x batch "
              f"{s['batch_per_rank']})", flush=True)


# --------------------------------------------------------------------------------------
# Scaling table of several runs (experiments/ddp_run.sh)
# --------------------------------------------------------------------------------------

TABLE_COLUMNS = ["size", "backend", "device", "ranks", "samples_per_s", "step_ms",
                 "scaling_vs_1", "speedup_vs_reference", "final_loss"]


def scaling_table(paths) -> str:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    by = {(r["size"], r["backend"], r["device"], r["world_size"]): r for r in runs}
    rows = []
    for r in sorted(runs, key=lambda r: (r["size"], r["device"], r["backend"], r["world_size"])):
        one = by.get((r["size"], r["backend"], r["device"], 1))
        ref = by.get((r["size"], "reference", r["device"], r["world_size"]))
        k = max(1, min(10, len(r["losses"]) // 4))
        rows.append({
            "size": r["size"], "backend": r["backend"],
            "device": r["device_name"] or r["device"], "ranks": r["world_size"],
            "samples_per_s": r["samples_per_s"], "step_ms": r["step_ms"],
            "scaling_vs_1": r["samples_per_s"] / one["samples_per_s"] if one else "-",
            "speedup_vs_reference": r["samples_per_s"] / ref["samples_per_s"] if ref else "-",
            "final_loss": sum(r["losses"][-k:]) / k})
    return benchutil.format_table(rows, TABLE_COLUMNS)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.table:
        print(scaling_table(args.table))
        return
    train(args)


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
