#pragma once
// OPS_HOST_DEVICE marks math compiled for both the CPU and the CUDA kernels of an op.
// It needs no torch header, so torch-free .cu files (which compile in about a second
// instead of half a minute) can include the op's shared math.
#if defined(__CUDACC__)
#define OPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define OPS_HOST_DEVICE inline
#endif
