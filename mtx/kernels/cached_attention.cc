// Attention of one decoding step over cached keys and values, in one operator (inference only,
// no backward): what batch_dot, masked softmax and batch_dot again do, reading each cached key
// and value once and only the positions that are valid.
//
//   mtx_cached_attention(q (N, Q, Dh), keys (N, L, Dh), values (N, L, Dh), lens (N,),
//                        new_keys (N, Q', Dh), new_values (N, Q', Dh), scale, with_new)
//     -> context (N, Q, Dh)
//   Each of the Q queries of group n attends to the first lens[n] - Q' keys of ``keys`` and,
//   with ``with_new`` (Q' = 1), to the one new key beside them (scored first); weights are the
//   softmax of scale * q.k over those keys. Without ``with_new`` the last two inputs are not read
//   (pass any float32 arrays) and every query attends to the first lens[n] keys.
//   lens float32 holding whole numbers; a group with no key gets a zero context.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "mxnet/lib_api.h"
#include "op_api.h"

using namespace mxnet::ext;

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void add_scaled(float* out, const float* x, float w, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] += w * x[i];
}

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  MXTensor& q = (*inputs)[0];
  MXTensor& keys = (*inputs)[1];
  const int64_t N = q.shape[0], Q = q.shape[1], Dh = q.shape[2], L = keys.shape[1];
  const float scale = mtx::float_attr(attrs, "scale", 1.f);
  const bool with_new = mtx::int_attr(attrs, "with_new", 0) != 0;
  const float* qd = q.data<float>();
  const float* kd = keys.data<float>();
  const float* vd = (*inputs)[2].data<float>();
  const float* lens = (*inputs)[3].data<float>();
  const float* new_k = (*inputs)[4].data<float>();
  const float* new_v = (*inputs)[5].data<float>();
  float* out = (*outputs)[0].data<float>();
#pragma omp parallel
  {
    std::vector<float> w(L + 1);
#pragma omp for schedule(static)
    for (int64_t nq = 0; nq < N * Q; ++nq) {
      const int64_t n = nq / Q;
      const float* qr = qd + nq * Dh;
      float* o = out + nq * Dh;
      std::fill(o, o + Dh, 0.f);
      const int64_t first = with_new ? 1 : 0;  // w[0]: the new key's
      const int64_t cached = std::max<int64_t>(
          0, std::min<int64_t>(L, static_cast<int64_t>(lens[n]) - first));
      const int64_t count = first + cached;
      if (count == 0) continue;
      if (with_new) w[0] = scale * dot(qr, new_k + nq * Dh, Dh);
      const float* kn = kd + n * L * Dh;
      for (int64_t j = 0; j < cached; ++j) w[first + j] = scale * dot(qr, kn + j * Dh, Dh);
      const float m = *std::max_element(w.begin(), w.begin() + count);
      float sum = 0.f;
      for (int64_t j = 0; j < count; ++j) sum += (w[j] = std::exp(w[j] - m));
      const float inv = 1.f / sum;
      if (with_new) add_scaled(o, new_v + nq * Dh, w[0] * inv, Dh);
      const float* vn = vd + n * L * Dh;
      for (int64_t j = 0; j < cached; ++j) add_scaled(o, vn + j * Dh, w[first + j] * inv, Dh);
    }
  }
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  return mtx::float32_only("mtx_cached_attention", *in_types, out_types);
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const auto& q = (*in_shapes)[0];
  const auto& k = (*in_shapes)[1];
  const auto& v = (*in_shapes)[2];
  const auto& lens = (*in_shapes)[3];
  const bool with_new = mtx::int_attr(attrs, "with_new", 0) != 0;
  const auto& nk = (*in_shapes)[4];
  const auto& nv = (*in_shapes)[5];
  const bool ok = q.size() == 3 && k.size() == 3 && k == v && k[0] == q[0] && k[2] == q[2] &&
                  lens.size() == 1 && lens[0] == q[0] &&
                  (!with_new || (nk == q && nv == q && q[1] == 1));
  if (!ok) {
    MX_ERROR_MSG << "mtx_cached_attention: q (N, Q, Dh), keys and values (N, L, Dh), lens (N,)"
                    " and, with with_new, new keys and values (N, 1, Dh) like q";
    return MX_FAIL;
  }
  (*out_shapes)[0] = q;
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(mtx_cached_attention)
    .setForward(forward, "cpu")
    .setParseAttrs(mtx::fixed_arity<6, 1>)
    .setInferType(infer_type)
    .setInferShape(infer_shape);
