"""The code ``python -m jit_loader new`` derives from an op's schema: the fields the template
files of jit_tools/tools/templates/ take (``fields``). The templates are the op's files with
``$field`` where the schema decides (string.Template); this module only computes those
pieces.

Two kinds of op (``KINDS``) and two host ABIs (``ABIS``):

* ``elementwise``: any schema of Tensor, float, int and bool arguments (the first a Tensor)
  with one Tensor result, default ``NAME(Tensor x) -> Tensor``. The placeholder math works
  for every such schema, elementwise over tensors of one shape:

      y = scale * sum over tensor arguments t of t * |t|,   scale = product of the numeric
                                                            scalar arguments (none: 1)

  so d y / d t = grad * scale * 2 |t|.
* ``rowwise``: ``NAME(Tensor x, Tensor weight, float eps=1e-06) -> Tensor``, a reduction over
  the last dimension of x with a weight broadcast over the rows (RMSNorm-shaped); its
  templates are written for that schema.

The ABI decides the host side only (``stable``: ``STABLE_TORCH_LIBRARY``, ``TORCH_BOX``, the
headeronly dispatch; ``aten``: ``TORCH_LIBRARY``, ``AT_DISPATCH``); the math, the kernels,
the checks, the Python surface, the reference and the tests are the same for both.
"""

from __future__ import annotations

from jit_tools.tools.op_schema import Schema, parse_schema

KINDS = ("elementwise", "rowwise")
ABIS = ("stable", "aten")
DEFAULT_SCHEMA = {"elementwise": "{name}(Tensor x) -> Tensor",
                  "rowwise": "{name}(Tensor x, Tensor weight, float eps=1e-06) -> Tensor"}

# Sample values of scalar arguments in example_inputs (the tests use them).
SAMPLE_SCALARS = {"float": "0.75", "int": "3", "bool": "True"}

# What differs between the ABIs in the files both share (the checks header, the CPU loops):
# field -> (its text for the stable ABI, its text for ATen), in the order of ABIS.
_ABI_TEXTS = {
    "Tensor": ("torch::stable::Tensor", "at::Tensor"),
    "tensor": ("Tensor", "at::Tensor"),
    "checks_header": ("common/stable_checks.h", "common/checks.h"),
    "opmath": ("ops_common::opmath_t<T>", "at::opmath_type<T>"),
    "parallel_for": ("torch::stable::parallel_for", "at::parallel_for"),
    "cpu_includes": ("#include <torch/csrc/stable/ops.h>\n#include <torch/headeronly/util/BFloat16.h>\n"
                     "#include <torch/headeronly/util/Half.h>\n\n#include \"common/stable_ops.h\"",
                     "#include <ATen/OpMathType.h>\n#include <ATen/Parallel.h>\n"
                     "#include <c10/util/BFloat16.h>\n#include <c10/util/Half.h>"),
    "contiguous": ("const Tensor {t}_c = torch::stable::contiguous({t});",
                   "const at::Tensor {t}_c = {t}.contiguous();"),
    "empty_like": ("Tensor {g} = torch::stable::empty_like({t}_c);",
                   "at::Tensor {g} = at::empty_like({t}_c);"),
}
ABI_FIELDS = {abi: {field: texts[i] for field, texts in _ABI_TEXTS.items()}
              for i, abi in enumerate(ABIS)}


def _lines(items, indent: str = "", sep: str = "\n") -> str:
    return sep.join(indent + item for item in items)


def schema_for(name: str, kind: str, schema: str | None) -> Schema:
    """The op's parsed schema: ``schema`` where given (elementwise only), else the kind's."""
    if kind == "rowwise" and schema is not None:
        raise ValueError("--kind rowwise takes its own schema, "
                         f"\"{DEFAULT_SCHEMA['rowwise'].format(name=name)}\"; leave --schema out")
    return parse_schema(schema or DEFAULT_SCHEMA[kind].format(name=name), name)


def fields(schema: Schema, kind: str, abi: str) -> dict[str, str]:
    """Every field the templates of ``kind`` and ``abi`` take, from the schema."""
    f = dict(ABI_FIELDS[abi])
    contiguous, empty_like, tensor = f.pop("contiguous"), f.pop("empty_like"), f.pop("tensor")
    name = schema.name
    tensors = [a.name for a in schema.tensors]
    first, multi = tensors[0], len(tensors) > 1
    f.update(
        name=name, NAME=name.upper(), first=first,
        schema_forward=f"forward({schema.declaration()}) -> Tensor",
        schema_backward=(f"backward(Tensor grad, {schema.declaration(False)}) -> "
                         + (f"({', '.join(['Tensor'] * len(tensors))})" if multi else "Tensor")),
        cpp_params=", ".join((f"const {tensor}& " if a.is_tensor else a.cpp_type + " ") + a.name
                             for a in schema.arguments),
        arg_names=", ".join(a.name for a in schema.arguments),
        arg_name_list=", ".join(f'"{a.name}"' for a in schema.arguments),
        py_params=", ".join(f"{a.name}: {a.py_type}" + (f" = {a.py_default}" if a.default else "")
                            for a in schema.arguments),
        fake_params=", ".join(a.name + (f"={a.py_default}" if a.default else "") for a in schema.arguments),
        rule_kwargs=", ".join(f"{a.name}={a.name}" for a in schema.arguments),
        backward_args=", ".join(f'"{n}"' for n in ["grad", *(a.name for a in schema.arguments)]),
        # register_autograd_op's gives: the first tensor unless said otherwise.
        gives_kwarg=("\n" + " " * 32 + "gives=[" + ", ".join(f'"{t}"' for t in tensors) + "],"
                     if multi else ""),
        tensor_list=", ".join(tensors),
        tensor_names=", ".join(f'"{t}"' for t in tensors) + ("," if not multi else ""),
        fake_backward_return=(
            f"return tuple(torch.empty_like(t, memory_format=torch.contiguous_format)\n"
            f"                 for t in ({', '.join(tensors)}))" if multi else
            f"return torch.empty_like({first}, memory_format=torch.contiguous_format)"),
        doc_line=(f"The {name} op, differentiable in {' and '.join(tensors)}."),
    )
    if kind == "elementwise":
        f.update(_elementwise(schema, contiguous, empty_like, tensor))
    return f


def _elementwise(schema: Schema, contiguous: str, empty_like: str, tensor: str) -> dict[str, str]:
    """The pieces of the elementwise templates: one loop over the elements of every tensor."""
    name = schema.name
    tensors = [a.name for a in schema.tensors]
    first, multi = tensors[0], len(tensors) > 1
    grads = [f"{t}_grad" for t in tensors]
    numeric = [a for a in schema.scalars if a.type in ("float", "int")]
    flags = [a.name for a in schema.scalars if a.type == "bool"]
    scaled = bool(numeric)  # the math takes a scale: the product of the numeric scalars
    scale_arg = ", scale" if scaled else ""
    squares = [f"signed_square({t})" for t in tensors]
    formula = " + ".join(f"{t} * |{t}|" for t in tensors)
    if scaled:
        formula = f"scale * ({formula}), scale = {' * '.join(a.name for a in numeric)}"
    if flags:
        formula += f" ({', '.join(flags)} unused by the placeholder)"
    math_params = ", ".join([f"T {t}" for t in tensors] + (["T scale"] if scaled else []))

    def values(to_acc: str, scale: str) -> str:
        """The arguments of the math at element i (CPU loop or CUDA kernel): every input
        converted by ``to_acc``, then the scale."""
        return ", ".join([f"{to_acc}({t}[i])" for t in tensors] + ([scale] if scaled else []))

    def backward_lines(to_acc: str, scale: str, from_acc: str, indent: str) -> str:
        return _lines([f"{t}_grad[i] = {from_acc}(backward_{t}(g, {values(to_acc, scale)}));"
                       for t in tensors], indent)

    f = dict(
        formula=formula, math_params=math_params,
        forward_expr=(f"scale * ({' + '.join(squares)})" if scaled else " + ".join(squares)),
        math_backward=_lines(
            [f"// d y / d {t}\ntemplate <typename T>\n"
             f"OPS_HOST_DEVICE T backward_{t}(T grad, {math_params}) {{\n"
             f"  return grad{' * scale' if scaled else ''} * T(2) * ({t} < T(0) ? -{t} : {t});\n}}"
             for t in tensors], sep="\n\n"),
        forward_rules=_lines(
            [f"RULE(floating, {first})"]
            + [f"RULE({kind}, {t}, {first})" for t in tensors[1:]
               for kind in ("same_device", "same_dtype", "same_shape")], "  ", sep=" \\\n"),
        # Launchers and CPU loops (torch-free): pointers, then the scale.
        c_inputs=", ".join([f"const T* {t}" for t in tensors] + (["double scale"] if scaled else [])),
        c_grads=", ".join(f"T* {g}" for g in grads),
        inst_inputs=", ".join(["const T*"] * len(tensors) + (["double"] if scaled else [])),
        inst_grads=", ".join(["T*"] * len(tensors)),
        acc_scale="  const acc acc_scale = static_cast<acc>(scale);\n" if scaled else "",
        cpu_values=values("static_cast<acc>", "acc_scale"),
        cpu_backward_lines=backward_lines("static_cast<acc>", "acc_scale", "static_cast<T>", "      "),
        cuda_inputs=", ".join([f"const T* __restrict__ {t}" for t in tensors]
                              + (["ops_common::acc_t<T> scale"] if scaled else [])),
        cuda_grads=", ".join(f"T* __restrict__ {g}" for g in grads),
        cuda_values=values("ops_common::to_acc", "scale"),
        cuda_backward_lines=backward_lines("ops_common::to_acc", "scale", "ops_common::from_acc<T>",
                                           "    "),
        launch_args=", ".join(tensors) + scale_arg,
        grad_names=", ".join(grads),
        # The host side.
        contiguous=_lines([contiguous.format(t=t) for t in tensors], "  "),
        grad_allocs=_lines([empty_like.format(g=g, t=t) for g, t in zip(grads, tensors)], "  "),
        scale_decl=("  const double scale = " + " * ".join(
            a.name if a.type == "float" else f"static_cast<double>({a.name})" for a in numeric)
            + ";\n") if scaled else "",
        data_args=", ".join(f"{t}_c.const_data_ptr<scalar_t>()" for t in tensors) + scale_arg,
        grad_data=", ".join(f"{g}.mutable_data_ptr<scalar_t>()" for g in grads),
        cuda_data_args=", ".join(f"cuda_ptr<scalar_t>({t}_c)" for t in tensors) + scale_arg,
        cuda_grad_data=", ".join(f"cuda_ptr<scalar_t>({g})" for g in grads),
        backward_type=f"std::tuple<{', '.join([tensor] * len(tensors))}>" if multi else tensor,
        return_grads="{" + ", ".join(grads) + "}" if multi else grads[0],
        # The reference.
        reference_expr=(f"{' * '.join(a.name for a in numeric)} * ({' + '.join(f'{t} * {t}.abs()' for t in tensors)})"
                        if scaled else " + ".join(f"{t} * {t}.abs()" for t in tensors)),
        reference_grads=", ".join(
            f"grad{' * ' + ' * '.join(a.name for a in numeric) if scaled else ''} * 2 * {t}.abs()"
            for t in tensors) + ("," if not multi else ""),
        example_tensors=_lines([f"{t} = (torch.randn(shape, device=device) * 2).to(dtype)"
                                for t in tensors], "    "),
    )
    example = tensors + [SAMPLE_SCALARS[a.type] for a in schema.scalars]
    f["example_return"] = ", ".join(example) + ("," if len(example) == 1 else "")
    return f
