// R-Drop's consistency term, fused, for MXNet 1.9's custom-operator library API: the symmetric KL
// divergence between the output distributions of a batch's two dropout passes.
//
// Composed of MXNet operators (log_softmax, two slices, exp, differences, a product and a sum,
// and their backward passes) the term walks the (rows, V) logits some twenty times and allocates
// as many (rows, V) arrays every step; this walks each pair of rows three times forward and once
// backward, and writes zeros without arithmetic for pairs whose gradient is zero (the padded
// target positions, masked after the term).
//
//   mtx_symmetric_kl(logits (2N, ..., V)) -> kl (N, ...), lse (2N, ...), kl_first (N, ...)
//     row r of the first half (distribution p, log-probabilities a) is paired with row r + R of
//     the second (q, b), R = the first half's number of rows:
//     kl = KL(p || q) + KL(q || p) = sum_v (p[v] - q[v]) (a[v] - b[v]);  kl_first = KL(p || q)
//     lse = log sum_v exp(z[v]) of every row; lse and kl_first are kept for the backward.
//   d z_first[v]  = g * (p[v] (a[v] - b[v] - KL(p || q)) + p[v] - q[v])
//   d z_second[v] = g * (q[v] (b[v] - a[v] - KL(q || p)) + q[v] - p[v])
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fast_exp.h"
#include "mxnet/lib_api.h"
#include "op_api.h"

using namespace mxnet::ext;
using mtx::exp_nonpositive;

namespace {

// log sum_v exp(z[v]), two walks of the row (its max, then the sum)
float log_sum_exp(const float* __restrict z, int64_t V) {
  float m = z[0];
#pragma omp simd reduction(max : m)
  for (int64_t v = 1; v < V; ++v) m = z[v] > m ? z[v] : m;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t v = 0; v < V; ++v) sum += exp_nonpositive(z[v] - m);
  return m + std::log(sum);
}

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  MXTensor& logits = (*inputs)[0];
  const int64_t V = logits.shape.back(), R = logits.size() / V / 2;
  const float* z = logits.data<float>();
  float* kl = (*outputs)[0].data<float>();
  float* lse = (*outputs)[1].data<float>();
  float* kl_first = (*outputs)[2].data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    const float* x = z + r * V;
    const float* y = z + (r + R) * V;
    const float lse_x = log_sum_exp(x, V), lse_y = log_sum_exp(y, V);
    float pq = 0.f, qp = 0.f;
#pragma omp simd reduction(+ : pq, qp)
    for (int64_t v = 0; v < V; ++v) {
      const float a = x[v] - lse_x, b = y[v] - lse_y;
      pq += exp_nonpositive(a) * (a - b);
      qp += exp_nonpositive(b) * (b - a);
    }
    kl[r] = pq + qp;
    kl_first[r] = pq;
    lse[r] = lse_x;
    lse[r + R] = lse_y;
  }
  return MX_SUCCESS;
}

// inputs: d_kl, d_lse (ignored), d_kl_first (ignored), logits, kl, lse, kl_first
// outputs: d_logits
MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                       std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  MXTensor& logits = (*inputs)[3];
  const int64_t V = logits.shape.back(), R = logits.size() / V / 2;
  const float* g_kl = (*inputs)[0].data<float>();
  const float* z = logits.data<float>();
  const float* kl = (*inputs)[4].data<float>();
  const float* lse = (*inputs)[5].data<float>();
  const float* kl_first = (*inputs)[6].data<float>();
  float* dz = (*outputs)[0].data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    float* __restrict dx = dz + r * V;
    float* __restrict dy = dz + (r + R) * V;
    const float g = g_kl[r];
    if (g == 0.f) {
      std::memset(dx, 0, V * sizeof(float));
      std::memset(dy, 0, V * sizeof(float));
      continue;
    }
    const float* x = z + r * V;
    const float* y = z + (r + R) * V;
    const float lse_x = lse[r], lse_y = lse[r + R];
    const float pq = kl_first[r], qp = kl[r] - kl_first[r];
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) {
      const float a = x[v] - lse_x, b = y[v] - lse_y;
      const float p = exp_nonpositive(a), q = exp_nonpositive(b);
      dx[v] = g * (p * (a - b - pq) + p - q);
      dy[v] = g * (q * (b - a - qp) + q - p);
    }
  }
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  return mtx::float32_only("mtx_symmetric_kl", *in_types, out_types);
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& shape = (*in_shapes)[0];
  if (shape.size() < 2 || shape[0] % 2 != 0) {
    MX_ERROR_MSG << "mtx_symmetric_kl: logits (2N, ..., V), the two passes stacked on axis 0";
    return MX_FAIL;
  }
  std::vector<unsigned int> rows(shape.begin(), shape.end() - 1), half(rows);
  half[0] /= 2;
  (*out_shapes)[0] = half;
  (*out_shapes)[1] = rows;
  (*out_shapes)[2] = half;
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(mtx_symmetric_kl)
    .setForward(forward, "cpu")
    .setBackward(backward, "cpu")
    .setParseAttrs(mtx::fixed_arity<1, 3>)
    .setInferType(infer_type)
    .setInferShape(infer_shape);
