"""Compare tensors saved by the C++ runner with those Python computed.

    python -m deploy.compare EXPECTED.pt ACTUAL.pt [--rtol R --atol A]

Both files hold a list of tensors (``torch.save`` / ``torch::pickle_save``). Exit status
0 when every pair has the same shape and dtype and agrees within the tolerance.
"""

from __future__ import annotations

import argparse
import sys

import torch


def compare(expected_path: str, actual_path: str, rtol: float = 1e-4, atol: float = 1e-5) -> list[str]:
    """Messages for the pairs that differ; empty when all agree."""
    expected = torch.load(expected_path)
    actual = torch.load(actual_path)
    if len(expected) != len(actual):
        return [f"{len(actual)} outputs, expected {len(expected)}"]
    problems = []
    for i, (e, a) in enumerate(zip(expected, actual)):
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol)
        except AssertionError as err:
            problems.append(f"output {i}: {err}")
        else:
            print(f"output {i}: {tuple(a.shape)} {a.dtype} max abs diff "
                  f"{(a.double() - e.double()).abs().max().item():.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("expected")
    parser.add_argument("actual")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--atol", type=float, default=1e-5)
    args = parser.parse_args(argv)
    problems = compare(args.expected, args.actual, args.rtol, args.atol)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
