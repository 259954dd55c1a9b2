"""The sequence model that experiments/train_lltm.py trains: its data (an order-2 Markov
chain or a local text), the order of its batches, the model (embedding, LLTM cells over
time, next-token head) and its checkpoints (atomic writes, exact resume)."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import math
import os
import random
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

CHECKPOINT_FORMAT = 1
# Settings a checkpoint must share with the run that resumes it: they fix the model, the
# data and its order. Backend, device, the number of steps and the DDP and step options
# (which change how a step runs, not what it computes) may change.
RESUME_KEYS = ("data", "data_sha256", "vocab", "seq_len", "num_sequences", "batch_size",
               "world_size", "embed", "state", "layers", "dropout", "lr", "warmup",
               "weight_decay", "clip", "seed", "dtype")


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
    the step, so a resumed run continues the very same order.

    The permutation of an epoch is drawn on the host (the same on every device) and, for a
    CUDA ``device``, copied there once per epoch from pinned memory without waiting; a
    step's indices are then a slice of it on the device. Slicing on the host and copying
    each step's indices instead (``device`` None) costs a copy from pageable memory per
    step, which waits for the GPU to finish all the work queued before it: a host
    synchronisation per step.
    """

    def __init__(self, num_sequences: int, batch_size: int, rank: int, world_size: int,
                 seed: int, device: torch.device | None = None):
        self.global_batch = batch_size * world_size
        if self.global_batch > num_sequences:
            raise SystemExit(f"global batch {self.global_batch} exceeds the {num_sequences} "
                             "sequences of the data")
        self.steps_per_epoch = num_sequences // self.global_batch
        self.n, self.b, self.rank, self.seed = num_sequences, batch_size, rank, seed
        self.device = device
        self._epoch, self._perm = -1, None

    def indices(self, step: int) -> torch.Tensor:
        epoch, i = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            perm = torch.randperm(self.n, generator=g)
            if self.device is not None and self.device.type == "cuda":
                perm = perm.pin_memory().to(self.device, non_blocking=True)
            self._epoch, self._perm = epoch, perm
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
