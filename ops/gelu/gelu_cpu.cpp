// gelu: the CPU loops over gelu.h's math (common/cpu_loops.h: vectorised, one clone per
// CPU capability), for the host side in gelu.cpp. A unit of its own, so that an edit of
// the schema or the host side compiles no loop, and an edit here no host code.
#include "common/cpu_loops.h"
#include "gelu.h"

OPS_INSTANTIATE_CPU_UNARY(gelu_op::Forward)
OPS_INSTANTIATE_CPU_BINARY(gelu_op::Backward)
