"""A small message-passing network whose aggregation is the scatter op, trained on a
synthetic graph made here (nothing downloaded): node classification on a planted
partition (nodes of one class link mostly to each other; features are a noisy view of the
class). Two graph-convolution layers with mean aggregation of neighbour messages. The same
model with index_add_ aggregation is timed beside it.

    python -m experiments.gnn_scatter                       # GPU: 100k nodes, 2M edges
    python -m experiments.gnn_scatter --nodes 5000 --epochs 20
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

import jit_loader
from experiments.benchutil import default_device, environment, sync


def planted_partition(nodes: int, edges: int, classes: int, features: int, p_in: float,
                      device) -> tuple:
    """Labels, noisy features and directed edges (source, target), sorted by target."""
    labels = torch.randint(0, classes, (nodes,), device=device)
    centers = torch.randn(classes, features, device=device)
    x = centers[labels] * 0.4 + torch.randn(nodes, features, device=device)
    target = torch.randint(0, nodes, (edges,), device=device)
    # Same-class sources with probability p_in: pick a random node of the target's class.
    by_class = labels.argsort()
    starts = torch.searchsorted(labels[by_class], torch.arange(classes, device=device))
    sizes = torch.bincount(labels, minlength=classes)
    t_class = labels[target]
    same = by_class[starts[t_class] + (torch.rand(edges, device=device) * sizes[t_class]).long()]
    source = torch.where(torch.rand(edges, device=device) < p_in, same,
                         torch.randint(0, nodes, (edges,), device=device))
    order = target.argsort()
    return labels, x, source[order], target[order]


class GraphConv(torch.nn.Module):
    """h_i' = W_self h_i + W_neigh mean_{j -> i} h_j."""

    def __init__(self, d_in: int, d_out: int, aggregate):
        super().__init__()
        self.self_lin = torch.nn.Linear(d_in, d_out)
        self.neigh_lin = torch.nn.Linear(d_in, d_out, bias=False)
        self.aggregate = aggregate

    def forward(self, h, source, target):
        return self.self_lin(h) + self.neigh_lin(self.aggregate(h[source], target, h.shape[0]))


class GNN(torch.nn.Module):
    def __init__(self, d_in: int, hidden: int, classes: int, aggregate):
        super().__init__()
        self.conv1 = GraphConv(d_in, hidden, aggregate)
        self.conv2 = GraphConv(hidden, classes, aggregate)

    def forward(self, x, source, target):
        return self.conv2(torch.relu(self.conv1(x, source, target)), source, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--degree", type=int, default=20)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--p-in", type=float, default=0.7)
    args = parser.parse_args()
    dev = args.device
    nodes = args.nodes or (100_000 if torch.device(dev).type == "cuda" else 5_000)
    edges = nodes * args.degree
    torch.manual_seed(0)

    op = jit_loader.load("scatter")
    print(" ".join(f"{k}={v}" for k, v in environment().items()))
    labels, x, source, target = planted_partition(nodes, edges, args.classes, args.features,
                                                  args.p_in, dev)
    train = torch.rand(nodes, device=dev) < 0.5
    print(f"graph: {nodes} nodes, {edges} edges, {args.classes} classes, "
          f"{args.features} features; training on {int(train.sum())} nodes")

    degree = torch.bincount(target, minlength=nodes).clamp_min(1).unsqueeze(1).to(x.dtype)
    aggregations = {
        "scatter mean (sorted index)":
            lambda m, t, n: op.scatter(m, t, 0, None, n, "mean", index_sorted=True),
        "index_add_ / degree":
            lambda m, t, n: m.new_zeros(n, m.shape[1]).index_add_(0, t, m) / degree,
    }
    for name, aggregate in aggregations.items():
        torch.manual_seed(1)
        model = GNN(args.features, args.hidden, args.classes, aggregate).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        times = []
        bar = tqdm(range(args.epochs), desc=name, leave=False)
        for epoch in bar:
            sync(dev)
            t0 = time.perf_counter()
            opt.zero_grad()
            logits = model(x, source, target)
            loss = torch.nn.functional.cross_entropy(logits[train], labels[train])
            loss.backward()
            opt.step()
            sync(dev)
            times.append(time.perf_counter() - t0)
            if epoch == 0 or (epoch + 1) % 5 == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}")
                tqdm.write(f"  [{name}] epoch {epoch + 1:3d}  loss {loss.item():.4f}")
        with torch.no_grad():
            pred = model(x, source, target).argmax(1)
        acc = (pred[~train] == labels[~train]).float().mean().item()
        steady = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
        print(f"{name}: final loss {loss.item():.4f}, test accuracy {acc:.3f}, "
              f"median epoch {steady * 1e3:.2f} ms (forward + backward + Adam)")


if __name__ == "__main__":
    main()
