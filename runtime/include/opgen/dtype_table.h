// opgen's dtype table, the one place that lists the dtypes and their names:
// the runtime (opgen/dtypes.h, the XLA and torch bindings) and the generator
// (generator/model/model.cc, whence every generated file) expand it. A row's place
// is its code, which legacy descriptors carry: add a dtype at the end.
// Preprocessor only (no includes), so that the generator, which is not built
// against the runtime, reads it too.
//
// OPGEN_DTYPE(enumerator, name, cpp, xla, python, size, dlpack):
//   enumerator    opgen::DType's: kF32
//   name          the spec's spelling: f32
//   cpp           the C++ type a kernel sees: float (opgen::f16 where C++ has none)
//   xla           xla::ffi::DataType's enumerator: F32
//   python        numpy's, jax.numpy's and torch's name (torch.<python>, the stable
//                 ABI's aoti_torch_dtype_<python>()): float32
//   size          bytes per element
//   dlpack        DLPack's type code, kDL<dlpack> (its bits: 8 x size)
#pragma once

// clang-format off
#define OPGEN_DTYPES(OPGEN_DTYPE) \
  OPGEN_DTYPE(kF16, f16, opgen::f16, F16, float16, 2, Float) \
  OPGEN_DTYPE(kBF16, bf16, opgen::bf16, BF16, bfloat16, 2, Bfloat) \
  OPGEN_DTYPE(kF32, f32, float, F32, float32, 4, Float) \
  OPGEN_DTYPE(kF64, f64, double, F64, float64, 8, Float) \
  OPGEN_DTYPE(kI32, i32, int32_t, S32, int32, 4, Int) \
  OPGEN_DTYPE(kI64, i64, int64_t, S64, int64, 8, Int) \
  OPGEN_DTYPE(kU8, u8, uint8_t, U8, uint8, 1, UInt) \
  OPGEN_DTYPE(kBool, bool, bool, PRED, bool, 1, Bool) \
  /* 8-bit floats (storage only: the body converts, e.g. with cuda_fp8.h). */ \
  OPGEN_DTYPE(kF8E4M3FN, f8e4m3fn, opgen::f8e4m3fn, F8E4M3FN, float8_e4m3fn, 1, Float8_e4m3fn) \
  OPGEN_DTYPE(kF8E5M2, f8e5m2, opgen::f8e5m2, F8E5M2, float8_e5m2, 1, Float8_e5m2) \
  OPGEN_DTYPE(kI8, i8, int8_t, S8, int8, 1, Int)
// clang-format on
