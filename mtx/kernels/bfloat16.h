// bfloat16 as MXNet 1.9 stores it: the upper 16 bits of a float32, dtype id 12 (mshadow's
// kBfloat16, which mxnet/lib_api.h's MXDType does not name; the engine passes the id through).
#ifndef MTX_KERNELS_BFLOAT16_H_
#define MTX_KERNELS_BFLOAT16_H_

#include <cstdint>
#include <cstring>

namespace mtx {

constexpr int kBfloat16 = 12;

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// rounded to nearest, ties to even, as mshadow's bf16_t (and so amp_cast) rounds; NaN stays NaN
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace mtx

#endif  // MTX_KERNELS_BFLOAT16_H_
