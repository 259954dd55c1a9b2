// sigmoid: CUDA kernels, torch-free. Memory-bound: the vectorised launcher of
// common/vectorized.cuh does the memory traffic, sigmoid.h the math.
#include "common/vectorized.cuh"
#include "sigmoid.h"

OPS_INSTANTIATE_UNARY(sigmoid_op::Forward)
OPS_INSTANTIATE_BINARY(sigmoid_op::Backward)
