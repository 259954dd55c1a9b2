"""experiments/profile_call.py, the layer-by-layer view of a call's host time: its LLTM
ladder (the kernel suite's protocol) in loops and in single calls, on the CPU."""

from __future__ import annotations

import json
import math

import pytest
import torch

from experiments import profile_call


def _ladder(tmp_path, *flags):
    path = tmp_path / "profile.json"
    threads = torch.get_num_threads()  # main() sets one thread; the worker's share comes back
    try:
        assert profile_call.main(["--ops", "lltm", "--calls", "40", "--batch", "5",
                                  "--json", str(path), *flags]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads(path.read_text())["tables"]


def test_lltm_ladder_in_loops(tmp_path):
    tables = _ladder(tmp_path)
    rows = tables["ladder"]
    by_pass = {p: [r for r in rows if r["pass"] == p] for p in ("forward", "forward+backward")}
    top = profile_call.LLTM_TOP
    for pass_, got in by_pass.items():
        names = [r["entered at"] for r in got]
        assert top in names and names[-1].startswith("native twin"), pass_
        assert all(r["us per call"] > 0 and math.isfinite(r["us per call"]) for r in got)
        # Each rung above the first says what its layer adds: its time minus the one below.
        layered = [r for r in got if r["entered at"].startswith("+ ")]
        for below, above in zip(layered, layered[1:]):
            assert above["layer adds us"] == pytest.approx(above["us per call"] - below["us per call"])
    assert {"the backward op alone, no engine: torch.ops.lltm.backward.default",
            "engine floor: autograd.grad(W.clone(), W, g)"} <= {
        r["entered at"] for r in by_pass["forward+backward"]}
    assert tables["cprofile"] and tables["torch.profiler"]


def test_lltm_ladder_in_single_calls(tmp_path):
    tables = _ladder(tmp_path, "--cold")
    assert tables["cprofile"] == [] and tables["torch.profiler"] == []
    rows = tables["ladder"]
    timer = [r for r in rows if r["entered at"] == profile_call.TIMER_RUNG]
    assert len(timer) == 2  # one per pass, the first rung of each
    for r in rows:
        assert r["median call us"] > 0 and r["third quartile us"] >= r["median call us"]
    # The timer's own rung calls nothing: it is the cheapest of its pass.
    for pass_ in ("forward", "forward+backward"):
        got = [r for r in rows if r["pass"] == pass_]
        assert min(got, key=lambda r: r["median call us"])["entered at"] == profile_call.TIMER_RUNG


def test_any_op_with_a_reference_takes_its_call_from_check_cases(tmp_path):
    """An op with no case written here (gelu) is profiled on its reference.py's first check
    case: its surface function, the dispatcher op that calls, the reference as the twin."""
    case = profile_call.cases("gelu", "cpu")
    assert case.surface_name == "gelu" and case.overload is torch.ops.gelu.forward.default
    assert case.twin == "reference (eager)"
    path = tmp_path / "profile.json"
    threads = torch.get_num_threads()
    try:
        assert profile_call.main(["--ops", "gelu", "--calls", "40", "--batch", "5", "--cold",
                                  "--json", str(path)]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(path.read_text())["tables"]["ladder"]
    for pass_ in ("forward", "forward+backward"):
        names = [r["entered at"] for r in rows if r["pass"] == pass_]
        assert "+ handle: op.gelu(...)" in names and "reference (eager)" in names
        assert "+ torch.ops lookups: torch.ops.gelu.forward(*args)" in names
