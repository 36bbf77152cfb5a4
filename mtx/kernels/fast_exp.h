// exp(x) for x <= 0, shared by mtx's softmax kernels (cross_entropy.cc, top_log_probs.cc).
#ifndef MTX_KERNELS_FAST_EXP_H_
#define MTX_KERNELS_FAST_EXP_H_

#include <cstdint>

namespace mtx {

// exp(x) for x <= 0 to about 2 ulp, in plain arithmetic so that the compiler vectorises the
// loops that call it (std::exp is a library call per element): Cephes' expf polynomial.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  // n = x / ln 2 rounded to the nearest integer, by the 1.5 * 2^23 trick (floorf would not
  // vectorise without -fno-trapping-math)
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  x = x - n * 0.693359375f + n * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * x * x + x + 1.0f;
  union {
    int32_t bits;
    float value;
  } scale;
  scale.bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  return y * scale.value;
}

}  // namespace mtx

#endif  // MTX_KERNELS_FAST_EXP_H_
