#pragma once
// Argument checks shared by every op: each names the argument and shows the bad value.
// common/stable_checks.h gives the stable-ABI ops the same names and the same texts.
#include <ATen/ATen.h>

// OPS_CHECK(condition, message parts...): TORCH_CHECK, under the name the stable ops use.
#define OPS_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)

#define OP_CHECK_FLOATING(op, name, t)                                              \
  TORCH_CHECK((t).is_floating_point(), op, ": ", name,                               \
              " must be a floating-point tensor, got ", (t).scalar_type())

#define OP_CHECK_DIM(op, name, t, d)                                                \
  TORCH_CHECK((t).dim() == (d), op, ": ", name, " must be a ", d,                    \
              "-D tensor, got ", (t).dim(), "-D with shape ", (t).sizes())

#define OP_CHECK_SAME_DEVICE(op, name, t, ref_name, ref)                            \
  TORCH_CHECK((t).device() == (ref).device(), op, ": ", name, " is on ",            \
              (t).device(), " but ", ref_name, " is on ", (ref).device())

#define OP_CHECK_SAME_DTYPE(op, name, t, ref_name, ref)                             \
  TORCH_CHECK((t).scalar_type() == (ref).scalar_type(), op, ": ", name, " has dtype ", \
              (t).scalar_type(), " but ", ref_name, " has dtype ", (ref).scalar_type())

#define OP_CHECK_SIZE(op, name, t, dim, expected)                                   \
  TORCH_CHECK((t).size(dim) == (expected), op, ": ", name, ".size(", dim,           \
              ") must be ", expected, ", got ", (t).size(dim), " (shape ", (t).sizes(), ")")

#define OP_CHECK_SAME_SHAPE(op, name, t, ref_name, ref)                             \
  TORCH_CHECK((t).sizes() == (ref).sizes(), op, ": ", name, " has shape ", (t).sizes(), \
              " but ", ref_name, " has shape ", (ref).sizes())
