// Functions that a CUDA body calls on the device and a CPU body on the host
// (the generated Args' range helpers, opgen/elementwise.h, opgen::floor_div).
#pragma once

#if defined(__CUDACC__)
#define OPGEN_HD __host__ __device__ __forceinline__
#else
#define OPGEN_HD inline
#endif
