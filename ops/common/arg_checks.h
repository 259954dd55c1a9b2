#pragma once
// The argument checks of every op, for both ABIs, and an op's argument rules declared once.
// Included through common/checks.h (ATen) or common/stable_checks.h (the stable ABI), which
// give it OPS_CHECK and, in ops_common, is_floating(scalar type), shape_of(tensor) (prints
// as [3, 4]) and device_name(tensor) (prints as cpu, cuda:0). Each check names the op, the
// argument and the bad value; jit_tools/fake.py raises the same texts in fake kernels.

#define OP_CHECK_FLOATING(op, name, t)                                                   \
  OPS_CHECK(::ops_common::is_floating((t).scalar_type()), op, ": ", name,                 \
            " must be a floating-point tensor, got ", (t).scalar_type())

#define OP_CHECK_DIM(op, name, t, d)                                                     \
  OPS_CHECK((t).dim() == (d), op, ": ", name, " must be a ", d, "-D tensor, got ",        \
            (t).dim(), "-D with shape ", ::ops_common::shape_of(t))

#define OP_CHECK_DIM_AT_LEAST(op, name, t, d)                                            \
  OPS_CHECK((t).dim() >= (d), op, ": ", name, " must be at least ", d, "-D, got ",         \
            (t).dim(), "-D with shape ", ::ops_common::shape_of(t))

#define OP_CHECK_SIZE(op, name, t, dim, expected)                                        \
  OPS_CHECK((t).size(dim) == (expected), op, ": ", name, ".size(", dim, ") must be ",     \
            expected, ", got ", (t).size(dim), " (shape ", ::ops_common::shape_of(t), ")")

#define OP_CHECK_SIZE_AS(op, name, t, dim, ref_name, ref, ref_dim)                       \
  OPS_CHECK((t).size(dim) == (ref).size(ref_dim), op, ": ", name, ".size(", dim,          \
            ") must be ", ref_name, ".size(", ref_dim, ") = ", (ref).size(ref_dim),       \
            ", got ", (t).size(dim), " (shape ", ::ops_common::shape_of(t), ")")

#define OP_CHECK_SAME_DEVICE(op, name, t, ref_name, ref)                                 \
  OPS_CHECK(::ops_common::device_name(t) == ::ops_common::device_name(ref), op, ": ",     \
            name, " is on ", ::ops_common::device_name(t), " but ", ref_name, " is on ",  \
            ::ops_common::device_name(ref))

#define OP_CHECK_SAME_DTYPE(op, name, t, ref_name, ref)                                  \
  OPS_CHECK((t).scalar_type() == (ref).scalar_type(), op, ": ", name, " has dtype ",      \
            (t).scalar_type(), " but ", ref_name, " has dtype ", (ref).scalar_type())

#define OP_CHECK_SAME_SHAPE(op, name, t, ref_name, ref)                                  \
  OPS_CHECK(::ops_common::shape_of(t) == ::ops_common::shape_of(ref), op, ": ", name,     \
            " has shape ", ::ops_common::shape_of(t), " but ", ref_name, " has shape ",   \
            ::ops_common::shape_of(ref))

#define OP_CHECK_NONNEGATIVE(op, name, v) \
  OPS_CHECK((v) >= 0, op, ": ", name, " must be >= 0, got ", v)

#define OP_CHECK_POSITIVE(op, name, v) OPS_CHECK((v) > 0, op, ": ", name, " must be > 0, got ", v)

// ---- an op's argument rules, declared once --------------------------------------------------
//
// An op lists its rules in <op>_checks.h, one RULE(kind, arguments...) per line of a macro
// named <OP>_<GROUP>_RULES (no comments inside it: a // would swallow the line's backslash):
//
//   #define MY_OP_FORWARD_RULES(RULE) \
//     RULE(floating, x)               \
//     RULE(same_device, weight, x)    \
//     RULE(size_as, weight, 0, x, -1)
//
// Its C++ checks expand them where `op` (a const char*) and the arguments are in scope:
//
//   inline void check_forward(const char* op, const Tensor& x, const Tensor& weight) {
//     MY_OP_FORWARD_RULES(OPS_CHECK_RULE)
//   }
//
// and its fake kernels read the same lines (jit_loader.op_rules, jit_tools/fake.py), so the
// two cannot drift. A group may start with another group's macro, MY_OP_FORWARD_RULES(RULE).
// The kinds, each the check above of the same name:
//   floating(t)  dim(t, d)  dim_at_least(t, d)  size(t, dim, n)  size_as(t, dim, ref, ref_dim)
//   same_device(t, ref)  same_dtype(t, ref)  same_shape(t, ref)  nonnegative(v)  positive(v)
#define OPS_CHECK_RULE(kind, ...) OPS_RULE_##kind(__VA_ARGS__);
#define OPS_RULE_floating(t) OP_CHECK_FLOATING(op, #t, t)
#define OPS_RULE_dim(t, d) OP_CHECK_DIM(op, #t, t, d)
#define OPS_RULE_dim_at_least(t, d) OP_CHECK_DIM_AT_LEAST(op, #t, t, d)
#define OPS_RULE_size(t, dim, n) OP_CHECK_SIZE(op, #t, t, dim, n)
#define OPS_RULE_size_as(t, dim, ref, ref_dim) OP_CHECK_SIZE_AS(op, #t, t, dim, #ref, ref, ref_dim)
#define OPS_RULE_same_device(t, ref) OP_CHECK_SAME_DEVICE(op, #t, t, #ref, ref)
#define OPS_RULE_same_dtype(t, ref) OP_CHECK_SAME_DTYPE(op, #t, t, #ref, ref)
#define OPS_RULE_same_shape(t, ref) OP_CHECK_SAME_SHAPE(op, #t, t, #ref, ref)
#define OPS_RULE_nonnegative(v) OP_CHECK_NONNEGATIVE(op, #v, v)
#define OPS_RULE_positive(v) OP_CHECK_POSITIVE(op, #v, v)
