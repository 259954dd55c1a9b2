"""A/B of one case across two versions of an op's sources on one host: nms of 10000 boxes on the CPU against torchvision, for
the op folder given, loaded alone in this process.

    git archive 8fb94fb ops/detection ops/common | tar -x -C /tmp/old   # an older version
    cp -r /tmp/old/ops/common /tmp/old/ops/detection/                  # its own common headers first
    python -m experiments.ab.time_nms_cpu /tmp/old/ops/detection; python -m experiments.ab.time_nms_cpu ops/detection
"""
import statistics, sys, time, torch, jit_loader
import torchvision
jit_loader.load(sys.argv[1])
torch.manual_seed(0)
n = 10000
xy = torch.rand(n, 2) * 1000
wh = torch.rand(n, 2) * 149 + 1
boxes, scores = torch.cat([xy, xy + wh], 1), torch.rand(n)
assert torch.equal(torch.ops.detection.nms(boxes, scores, 0.5), torchvision.ops.nms(boxes, scores, 0.5))
for name, f in (("ours", lambda: torch.ops.detection.nms(boxes, scores, 0.5)),
                ("torchvision", lambda: torchvision.ops.nms(boxes, scores, 0.5))):
    f()
    ts = []
    for _ in range(15):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    print(sys.argv[1], name, f"median {statistics.median(ts) * 1e3:.2f} ms", flush=True)
