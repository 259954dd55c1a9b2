// gelu (x * sigmoid(1.702 x)): CUDA kernels, torch-free. Memory-bound: the vectorised
// launcher of common/vectorized.cuh does the memory traffic, gelu.h the math.
#include "common/vectorized.cuh"
#include "gelu.h"

OPS_INSTANTIATE_UNARY(gelu_op::Forward)
OPS_INSTANTIATE_BINARY(gelu_op::Backward)
