#pragma once
// IEEE half and bfloat16 <-> float on the host, bit for bit what c10::Half and
// c10::BFloat16 do (round to nearest even; NaN stays NaN), written so that GCC
// vectorises a loop over them: c10's conversions keep a float operation under a
// condition, which GCC compiles to a branch, and a loop with one stays scalar (many
// times slower than ATen's own kernels). Here every operation is unconditional and results
// are picked by bit masks (a ?: is enough for GCC to move the float operation feeding
// it under a branch). Torch-free; tests/test_common.py checks all 65,536 values.
#include <cstdint>

#include "common/scalar_math.h"

namespace ops_common {

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  // Rebias the exponent by a float multiply; subnormal halves come out normal.
  const float scaled = bits_to_float(magnitude << 13) * 0x1p112f;
  const uint32_t inf_or_nan = select(mask_if(magnitude >= 0x7c00u), 0x7f800000u, 0u);
  return bits_to_float(float_to_bits(scaled) | inf_or_nan | sign);
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t magnitude = bits ^ sign;
  // Subnormal half: adding 0.5 (whose ulp is 2^-24, the smallest half subnormal) lets
  // the float adder round the mantissa into the low bits.
  const uint32_t subnormal = float_to_bits(bits_to_float(magnitude) + 0.5f) - 0x3f000000u;
  // Normal half: rebias the exponent by -112 and round to nearest even at bit 13.
  const uint32_t normal = (magnitude + 0xc8000fffu + ((magnitude >> 13) & 1u)) >> 13;
  const uint32_t inf_or_nan = select(mask_if(magnitude > 0x7f800000u), 0x7e00u, 0x7c00u);
  const uint32_t finite = select(mask_if(magnitude < 0x38800000u), subnormal, normal);
  return static_cast<uint16_t>(select(mask_if(magnitude >= 0x47800000u), inf_or_nan, finite) |
                               (sign >> 16));
}

inline float bfloat16_bits_to_float(uint16_t b) {
  return bits_to_float(static_cast<uint32_t>(b) << 16);
}

// Round to nearest even at bit 16; every NaN becomes c10's 0x7fc0 (found by a quiet
// compare: one instruction fewer than testing the bits, which a bfloat16 GELU loop shows).
inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t nan = mask_if(f != f);
  return static_cast<uint16_t>(select(nan, 0x7fc0u, rounded));
}

}  // namespace ops_common
