"""jit_loader as a drop-in for ``torch.utils.cpp_extension.load`` and ``load_inline``.

The LLTM tutorial's C++ (tests/fixtures/lltm_tutorial, pybind11 + torch/extension.h)
goes through torch's ``load`` and through ours with the same arguments, and the two
modules must compute the same thing. ``load_inline`` with ``functions`` builds the
bindings as torch does; a function taken from the module before a reload runs the new
build. Flags are part of the build's identity, on the command line too. Every build
runs in a fresh process against a private cache.
"""

from __future__ import annotations

import shutil
import textwrap

import pytest
import torch

import jit_loader
from subproc import json_result, private_env, run_cli, run_python
from toy_ops import FIXTURES

TORCH_VS_OURS = """
    import json, sys, types, torch, jit_loader
    from torch.utils import cpp_extension
    source, torch_build = sys.argv[1], sys.argv[2]
    ours = jit_loader.load(name="lltm_cpp", sources=[source], extra_cflags=["-O2"], verbose=False)
    theirs = cpp_extension.load(name="lltm_cpp_torch", sources=[source], extra_cflags=["-O2"],
                                build_directory=torch_build, verbose=False)
    torch.manual_seed(0)
    batch, features, state = 4, 6, 5
    x, h, c = torch.randn(batch, features), torch.randn(batch, state), torch.randn(batch, state)
    W, b = torch.randn(3 * state, features + state), torch.randn(3 * state)
    fwd_ours, fwd_theirs = ours.forward(x, W, b, h, c), theirs.forward(x, W, b, h, c)
    grads = [torch.randn_like(fwd_ours[0]), torch.randn_like(fwd_ours[1])]
    bwd_ours = ours.backward(*grads, *fwd_ours[1:], W)
    bwd_theirs = theirs.backward(*grads, *fwd_theirs[1:], W)
    (op,) = [o for o in jit_loader.loaded_ops() if o.name == "lltm_cpp"]
    print(json.dumps({
        "module": isinstance(ours, types.ModuleType),
        "file_in_cache": ours.__file__.startswith(str(jit_loader.cache_dir())),
        "forward_equal": [torch.equal(a, b) for a, b in zip(fwd_ours, fwd_theirs)],
        "backward_equal": [torch.equal(a, b) for a, b in zip(bwd_ours, bwd_theirs)],
        "doc": ours.forward.__doc__,
        "compiled": op.build.compiled,
    }))
"""


def test_lltm_tutorial_through_torch_and_ours_gives_the_same_results(tmp_path):
    source = tmp_path / "src" / "lltm.cpp"
    source.parent.mkdir()
    shutil.copy2(FIXTURES / "lltm_tutorial" / "lltm.cpp", source)
    cache = tmp_path / "cache"
    (tmp_path / "torch_build").mkdir()  # torch's load expects its build_directory to exist
    out = json_result(run_python(TORCH_VS_OURS, source, tmp_path / "torch_build", cache=cache))
    assert out["module"] and out["file_in_cache"]
    assert out["forward_equal"] == [True] * 7
    assert out["backward_equal"] == [True] * 5
    assert "LLTM forward" in out["doc"]
    assert out["compiled"] is True

    # A new process finds the build in the cache; sources given relative to its folder.
    again = json_result(run_python("""
        import json, jit_loader
        m = jit_loader.load(name="lltm_cpp", sources=["lltm.cpp"], extra_cflags=["-O2"])
        (op,) = jit_loader.loaded_ops()
        print(json.dumps({"compiled": op.build.compiled, "has": hasattr(m, "backward")}))
    """, cache=cache, cwd=source.parent))
    assert again == {"compiled": False, "has": True}


INLINE_RELOAD = """
    import json, torch, jit_loader
    def source(version):
        return f'''
    at::Tensor sin_add(at::Tensor x, at::Tensor y) {{ return x.sin() + y.sin(); }}
    int version() {{ return {version}; }}
    '''
    m = jit_loader.load_inline("inline_ext", source(1), functions=["sin_add", "version"])
    version = m.version                      # a handle taken before the reload
    x, y = torch.randn(8), torch.randn(8)
    out = {"sin_add": torch.allclose(m.sin_add(x, y), x.sin() + y.sin()), "v1": version()}
    m2 = jit_loader.load_inline("inline_ext", source(2), functions={"sin_add": "sin(x) + sin(y)",
                                                                     "version": "the version"})
    out.update(v2_handle=version(), v2_module=m.version(), v2_new=m2.version(),
               doc=m2.sin_add.__doc__)
    try:
        m.sin_add(x, "not a tensor")
    except TypeError as e:
        out["type_error"] = "incompatible function arguments" in str(e)
    print(json.dumps(out))
"""


def test_load_inline_functions_bind_like_torch_and_handles_follow_reloads(tmp_path):
    out = json_result(run_python(INLINE_RELOAD, cache=tmp_path / "cache"))
    assert out["sin_add"] is True
    assert out["v1"] == 1
    # The function handle, the module taken first and the new one all run build 2.
    assert out["v2_handle"] == out["v2_module"] == out["v2_new"] == 2
    assert "sin(x) + sin(y)" in out["doc"]
    assert out["type_error"] is True


# A flag set that only adds a macro compiles with the header set precompiled without it
# (the loader's default), instead of first precompiling one of its own, as the suite's
# JIT_LOADER_SHARED_NOW=1 would (a 400 MB header these tests do not need).
SIBLING_HEADER = {"JIT_LOADER_SHARED_NOW": "0"}

FLAGS = """
    import json, sys, jit_loader
    op_dir = sys.argv[1]
    flagged = jit_loader.load(op_dir, extra_cflags=["-DTOY_UNUSED_FLAG=1"])
    first = {"compiled": flagged.build.compiled, "key": flagged.build.key}
    plain = jit_loader.load(op_dir)
    print(json.dumps({"flagged": first, "plain": {"compiled": plain.build.compiled,
                                                  "key": plain.build.key}}))
"""


def test_flags_make_another_build_on_the_command_line_too(tmp_path):
    op_dir = tmp_path / "toy_op"
    shutil.copytree(FIXTURES / "toy_op", op_dir)
    cache = tmp_path / "cache"
    env = private_env(cache, **SIBLING_HEADER)
    built = run_cli("build", op_dir, "--extra-cflags=-DTOY_UNUSED_FLAG=1", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    key = jit_loader.op_key(op_dir, extra_cflags=["-DTOY_UNUSED_FLAG=1"])[0]
    assert f"key {key}" in built.stdout
    assert key != jit_loader.op_key(op_dir)[0]

    out = json_result(run_python(FLAGS, op_dir, env=env))
    assert out["flagged"] == {"compiled": False, "key": key}  # the command line's build
    # The same op without the flag in the same process: not the flagged build.
    assert out["plain"]["key"] != key and out["plain"]["compiled"] is True


@pytest.mark.parametrize("kwargs, named", [
    ({"build_directory": "/tmp/elsewhere"}, "build_directory"),
    ({"is_standalone": True}, "is_standalone"),
    ({"with_sycl": True}, "with_sycl"),
])
def test_unsupported_torch_arguments_are_named(tmp_path, kwargs, named):
    source = tmp_path / "x.cpp"
    source.write_text("int x() { return 1; }\n")
    with pytest.raises(jit_loader.JitLoaderError, match=f"does not support .*{named}"):
        jit_loader.load(name="x", sources=[str(source)], **kwargs)


def test_torch_only_arguments_need_sources_and_a_name():
    with pytest.raises(TypeError, match="is_python_module: only with sources"):
        jit_loader.load("gelu", is_python_module=False)
    with pytest.raises(TypeError, match="sources=.* is missing"):
        jit_loader.load(name="lltm_cpp")
    with pytest.raises(jit_loader.OpNotFoundError, match="no_such.cpp"):
        jit_loader.load(name="lltm_cpp", sources=["no_such.cpp"])


INLINE_CUDA = '''
    import json, torch, jit_loader
    cuda = r"""
    __global__ void add_one(const float* x, float* y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = x[i] + 1.0f;
    }
    torch::Tensor plus_one(torch::Tensor x) {
      auto y = torch::empty_like(x);
      int64_t n = x.numel();
      add_one<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
      return y;
    }
    """
    m = jit_loader.load_inline("inline_cuda", cpp_sources="torch::Tensor plus_one(torch::Tensor x);",
                               cuda_sources=cuda, functions=["plus_one"])
    x = torch.randn(1000, device="cuda")
    print(json.dumps({"ok": torch.equal(m.plus_one(x), x + 1)}))
'''


@pytest.mark.cuda
def test_load_inline_cuda_sources_like_torch(tmp_path):
    assert json_result(run_python(INLINE_CUDA, cache=tmp_path / "cache")) == {"ok": True}


WITH_CUDA_NO_CU = """
    import json, sys, jit_loader
    m = jit_loader.load(name="cuda_runtime_host", sources=[sys.argv[1]], with_cuda=True)
    (op,) = [o for o in jit_loader.loaded_ops() if o.name == "cuda_runtime_host"]
    print(json.dumps({"version": m.runtime_version(), "with_cuda": op.build.with_cuda}))
"""


@pytest.mark.skipif(jit_loader.why_no_cuda() is not None, reason="CUDA cannot be built here")
def test_with_cuda_builds_host_code_without_a_cu_file_like_torch(tmp_path):
    """torch's with_cuda=True: C++-only sources get CUDA's headers and libraries."""
    source = tmp_path / "runtime.cpp"
    source.write_text(textwrap.dedent("""\
        #include <torch/extension.h>
        #include <cuda_runtime_api.h>

        int runtime_version() {
          int version = 0;
          cudaRuntimeGetVersion(&version);  // needs no GPU
          return version;
        }
        PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("runtime_version", &runtime_version); }
        """))
    out = json_result(run_python(WITH_CUDA_NO_CU, source, cache=tmp_path / "cache"))
    major = int(torch.version.cuda.split(".")[0])
    assert out["with_cuda"] and out["version"] // 1000 == major, out


def test_list_names_the_load_call_of_a_source_list_build(tmp_path):
    """A build made by load(name=..., sources=[...], flags) is listed with that call and
    its own key, not as the folder's op (which `build FOLDER` would make)."""
    source = tmp_path / "src" / "tiny.cpp"
    source.parent.mkdir()
    source.write_text("int tiny() { return 1; }\n")
    cache = tmp_path / "cache"
    code = """
        import json, sys, jit_loader
        jit_loader.load(name="tiny_ext", sources=[sys.argv[1]], extra_cflags=["-DTINY=1"],
                        is_python_module=False)
        (op,) = [o for o in jit_loader.loaded_ops() if o.name == "tiny_ext"]
        print(json.dumps({"key": op.build.key}))
    """
    key = json_result(run_python(code, source, env=private_env(cache, **SIBLING_HEADER)))["key"]
    out = run_cli("list", env=private_env(cache), timeout=600)
    assert out.returncode == 0, out.stderr
    assert ("a new process calling jit_loader.load(name='tiny_ext', sources=['tiny.cpp'], "
            f"extra_cflags=['-DTINY=1']) loads build {key} (cached, no compile)") in out.stdout
    assert f"jit_loader build {source.parent}" not in out.stdout
    source.write_text("int tiny() { return 2; }\n")
    out = run_cli("list", env=private_env(cache), timeout=600)
    assert "extra_cflags=['-DTINY=1']) compiles build " in out.stdout
    assert "run that call once to prebuild it" in out.stdout
