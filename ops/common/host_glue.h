#pragma once
// Included first by a unit that holds host glue only: schema and registration, argument
// checks, dtype dispatch, allocation, the call of a kernel compiled elsewhere. GCC
// compiles the rest of such a unit at -O1: 15-30% faster than the build's -O3 on the
// stable ABI's templates (the argument unboxing of TORCH_BOX, the checks' message
// formatting), on the critical path of every edit of the file (experiments/RESULTS.md,
// section cpp-edit; the call-overhead section was measured with it). Loops and
// kernels live in units of their own (<op>_cpu.cpp, <op>_cuda.cu) at the build's level.
// Clang does not know the pragma and compiles at the build's level.
// A debug build (OPS_DEBUG) keeps its -O0.
#if defined(__GNUC__) && !defined(__clang__) && !defined(OPS_DEBUG)
#pragma GCC optimize("O1")
#endif
