"""The cells of 05_debug_and_profile.ipynb, as (kind, source) pairs: make_notebooks.py
writes the notebook from them. On a machine without a GPU (or without compute-sanitizer
and ncu) the GPU steps say why they are skipped, and the rest runs.
"""

CELLS = [
    ("md", """
        # Debug and profile a kernel: plant a bug, find it, fix it live, measure it

        A kernel that writes one element too far rarely fails where it is: PyTorch's caching
        allocator hands out blocks larger than asked for, so the stray write lands in memory
        torch owns, the result looks right, and something else is corrupted, to fail later or
        never. This notebook scaffolds an op, plants such a bug, finds it with
        `jit_loader.sanitize` (compute-sanitizer in a fresh process, with the op's debug build
        and the caching allocator off) at the line where it was planted, fixes it while the
        notebook keeps running, and profiles the fixed kernel against a copy with
        `jit_loader.profile` (Nsight Compute).

        The GPU steps need a CUDA GPU and NVIDIA's tools; elsewhere they say why they are
        skipped and the rest runs.
        """),
    ("setup", None),
    ("md", """
        ## A new op

        `python -m jit_loader new NAME --cuda` writes an op that builds and passes its tests:
        here `squash`, `y = x * |x|`, in a temporary folder.
        """),
    ("code", """
        import subprocess, sys, tempfile

        workdir = Path(tempfile.mkdtemp(prefix="debug_demo_"))
        subprocess.run([sys.executable, "-m", "jit_loader", "new", "squash", "--cuda", "--dir", str(workdir)],
                       check=True, capture_output=True)
        op_dir = workdir / "squash"
        op = jit_loader.load(op_dir)
        cu = op_dir / "squash_cuda.cu"
        x = torch.randn(4096, device=device)
        torch.testing.assert_close(op.squash(x), x * x.abs())
        print(f"squash works on {device}; its kernels are in {cu.name}")
        """),
    ("md", """
        ## Plant a bug

        The forward kernel's grid-stride loop writes `y[i + 1]` instead of `y[i]`: the last
        thread writes one element past the output.
        """),
    ("code", """
        good = "y[i] = ops_common::from_acc<T>(forward(ops_common::to_acc(x[i])));"
        bad = good.replace("y[i]", "y[i + 1]")
        cu.write_text(cu.read_text().replace(good, bad))
        planted = cu.read_text().splitlines().index("    " + bad) + 1
        print(f"planted at {cu.name}:{planted}: {bad}")
        """),
    ("md", """
        ## Find it

        `sanitize(fn, *args)` builds the op's debug build, runs the call (and its backward
        where an input requires grad) in a fresh Python process under compute-sanitizer's
        memcheck, and reports each finding with the op's own source line. This notebook's
        process never runs the broken kernel.
        """),
    ("code", """
        def on_gpu(step):
            \"\"\"Run a GPU step where it can run; say why not elsewhere.\"\"\"
            if not torch.cuda.is_available():
                print("skipped: no CUDA GPU here (this step runs the kernel under an NVIDIA tool)")
                return None
            try:
                return step()
            except jit_loader.JitLoaderError as e:  # e.g. compute-sanitizer or ncu not installed
                print(f"skipped: {e}")
                return None

        report = on_gpu(lambda: jit_loader.sanitize(op.squash, x))
        report
        """),
    ("md", """
        ## Fix it live

        Put the line back. The extension (`%load_ext jit_loader`) reloads the op before the
        next cell runs; on a GPU an edit of a kernel body is swapped in without a build
        (NVRTC), and the next call runs it. Then the same check again, and racecheck for
        shared-memory races.
        """),
    ("code", """
        cu.write_text(cu.read_text().replace(bad, good))
        print(f"fixed at {cu.name}:{planted}: {good}")
        """),
    ("code", """
        torch.testing.assert_close(op.squash(x), x * x.abs())
        how = ("swapped in without a build" if op.build.swapped_over else "compiled" if op.build.compiled
               else "the earlier build of these sources, from the cache")
        print("the fixed kernel runs:", how)
        for tool in ("memcheck", "racecheck"):
            report = on_gpu(lambda: jit_loader.sanitize(op.squash, x, tool=tool))
            if report is not None:
                print(report)
        """),
    ("md", """
        ## Debug builds and NaN checks

        `load(op, debug=True)` (or `JIT_LOADER_DEBUG=1`) is a build of its own, never served
        for a release load: host code at `-O0 -g`, device code with line info, and `OPS_DEBUG`,
        which turns on `OPS_ASSERT` and `OPS_INDEX` (`ops/common/debug.h`) and makes the launch
        helper check each launch and wait for each kernel, so a fault is raised by the op that
        caused it. `check_finite()` checks every result of the loader's ops for NaN and Inf.
        """),
    ("code", """
        debug = jit_loader.load(op_dir, debug=True)
        print("debug build", debug.build.key, "- release build", jit_loader.op_key(op_dir)[0])
        op = jit_loader.load(op_dir)  # the release build again

        with jit_loader.check_finite():
            try:
                op.squash(torch.tensor([1.0, 2e19, 3.0], device=device))  # (2e19)^2 overflows float32
            except FloatingPointError as e:
                print("check_finite:", e)
        """),
    ("md", """
        ## Profile against the copy bandwidth

        `profile(fn, *args)` reports each kernel the call launches: time, DRAM bandwidth and
        FLOP rate against the device's peaks, occupancy, registers, shared memory, grid and
        block; a table and a roofline plot. A memory-bound kernel is as fast as it can be when
        it moves its bytes as fast as a copy (`torch.clone`) does.
        """),
    ("code", """
        def measure():
            big = torch.randn(2**26, device="cuda")
            return jit_loader.profile(op.squash, big, backward=False), jit_loader.profile(torch.clone, big)

        found = on_gpu(measure)
        if found:
            ours, copy = found
            moved = 2 * 2**26 * 4  # bytes read and written by each
            k, c = ours.kernels[0], copy.kernels[0]
            for name, kernel in (("squash", k), ("copy", c)):
                print(f"{name:6s} {kernel.duration_us:8.1f} us  {moved / kernel.duration_us / 1e3:6.0f} GB/s of its tensors"
                      + (f", {kernel.bandwidth_gbs:6.0f} GB/s DRAM of {kernel.peak_bandwidth_gbs:.0f}" if kernel.bandwidth_gbs else ""))
            print(f"squash runs at {c.duration_us / k.duration_us:.0%} of the copy's speed")
        found[0] if found else None
        """),
]
