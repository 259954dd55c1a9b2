"""A/B of one case across two versions of an op's sources on one host: scatter max over a sorted index (2Mx64 -> 100k), CUDA events, for
the op folder given, loaded alone in this process.

    git archive 8fb94fb ops/scatter ops/common | tar -x -C /tmp/old   # an older version
    cp -r /tmp/old/ops/common /tmp/old/ops/scatter/                   # its own common headers first
    python -m experiments.ab.time_max_sorted /tmp/old/ops/scatter; python -m experiments.ab.time_max_sorted ops/scatter
"""
import sys, torch, jit_loader
from experiments import benchutil
jit_loader.load(sys.argv[1])
E, F, N = 2_000_000, 64, 100_000
torch.manual_seed(0)
src = torch.randn(E, F, device="cuda")
index = torch.randint(0, N, (E,), device="cuda").sort().values
f = lambda: torch.ops.scatter.reduce(src, index, 0, N, "max", True, False, True, True)
want = src.new_zeros(N, F).scatter_reduce(0, index.view(-1, 1).expand_as(src), src, "amax", include_self=False)
torch.testing.assert_close(f()[0], want)
for i in range(3):
    t = benchutil.measure({"ours": f}, "cuda", flush=True)["ours"]
    print(sys.argv[1], f"median {t.median * 1e6:.1f} us", flush=True)
