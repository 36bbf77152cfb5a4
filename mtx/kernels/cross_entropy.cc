// Label-smoothed cross-entropy from logits, fused, for MXNet 1.9's custom-operator library API.
//
// Composed of MXNet operators (log_softmax, pick, a product with a 1/V vector for the smoothing
// term, and their backward passes plus an add_n of the two gradients) the loss walks the
// (rows, V) logits about eight times; this walks each row twice forward (max, then the sums)
// and once backward, and writes zeros without arithmetic for rows whose gradient is zero (the
// padded target positions, masked after the loss).
//
//   mtx_smoothed_ce(logits (..., V), labels (...), eps) -> loss (...), nll (...), lse (...)
//     nll  = lse - z[label]                  lse = log sum_v exp(z[v])
//     loss = (1 - eps) * nll + eps * (lse - mean_v z[v])
//   labels are float32 or int32 class ids (clamped to [0, V)); lse is kept for the backward.
//   d logits[v] = (g_loss + g_nll) * softmax(z)[v] - g_loss * eps / V
//                 - [v == label] * (g_loss * (1 - eps) + g_nll)
// The logits may be bfloat16 (the output layer's product with bfloat16 products): each row is
// widened to float32 in a per-thread buffer and its gradient written back in bfloat16, so the
// (rows, V) array, the step's largest, is never cast as a whole in either direction.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bfloat16.h"
#include "fast_exp.h"
#include "mxnet/lib_api.h"
#include "op_api.h"

using namespace mxnet::ext;
using mtx::exp_nonpositive;

namespace {

// out[v] = g * exp(z[v] - lse) - shift: the softmax's share of a row's gradient
void softmax_gradient(const float* __restrict z, float* __restrict out, int64_t V, float lse,
                      float g, float shift) {
  for (int64_t v = 0; v < V; ++v) out[v] = g * exp_nonpositive(z[v] - lse) - shift;
}

// row r of the logits (rows, V) as float32: the row itself, or its widened copy in ``buffer``
const float* row_as_float(MXTensor& logits, int64_t r, int64_t V, std::vector<float>& buffer) {
  if (logits.dtype != mtx::kBfloat16) return logits.data<float>() + r * V;
  const uint16_t* zr = logits.data<uint16_t>() + r * V;
  buffer.resize(V);
#pragma omp simd
  for (int64_t v = 0; v < V; ++v) buffer[v] = mtx::bf16_to_float(zr[v]);
  return buffer.data();
}

int64_t label_of(MXTensor& labels, int64_t r, int64_t V) {
  const int64_t y = labels.dtype == kInt32 ? labels.data<int32_t>()[r]
                                           : static_cast<int64_t>(labels.data<float>()[r]);
  return y < 0 ? 0 : (y >= V ? V - 1 : y);
}

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  MXTensor& logits = (*inputs)[0];
  const int64_t V = logits.shape.back(), rows = logits.size() / V;
  float* loss = (*outputs)[0].data<float>();
  float* nll = (*outputs)[1].data<float>();
  float* lse_out = (*outputs)[2].data<float>();
  const float eps = mtx::float_attr(attrs, "eps", 0.f);
#pragma omp parallel
  {
    std::vector<float> buffer;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* zr = row_as_float(logits, r, V, buffer);
      float m = zr[0];
#pragma omp simd reduction(max : m)
      for (int64_t v = 1; v < V; ++v) m = zr[v] > m ? zr[v] : m;
      float sum_exp = 0.f, sum_z = 0.f;
#pragma omp simd reduction(+ : sum_exp, sum_z)
      for (int64_t v = 0; v < V; ++v) {
        sum_exp += exp_nonpositive(zr[v] - m);
        sum_z += zr[v];
      }
      const float lse = m + std::log(sum_exp);
      const float nll_r = lse - zr[label_of((*inputs)[1], r, V)];
      nll[r] = nll_r;
      loss[r] = (1.f - eps) * nll_r + eps * (lse - sum_z / V);
      lse_out[r] = lse;
    }
  }
  return MX_SUCCESS;
}

// inputs: d_loss, d_nll, d_lse (ignored), logits, labels, loss, nll, lse
// outputs: d_logits, d_labels (zeros)
MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                       std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  MXTensor& logits = (*inputs)[3];
  const int64_t V = logits.shape.back(), rows = logits.size() / V;
  const float* g_loss = (*inputs)[0].data<float>();
  const float* g_nll = (*inputs)[1].data<float>();
  const float* lse = (*inputs)[7].data<float>();
  MXTensor& d_logits = (*outputs)[0];  // the logits' dtype
  const bool bf16 = d_logits.dtype == mtx::kBfloat16;
  const size_t row_bytes = V * (bf16 ? sizeof(uint16_t) : sizeof(float));
  const float eps = mtx::float_attr(attrs, "eps", 0.f);
#pragma omp parallel
  {
    std::vector<float> z_buffer, dz_buffer;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float gl = g_loss[r], gn = g_nll[r], g = gl + gn;
      if (gl == 0.f && gn == 0.f) {
        std::memset(static_cast<char*>(d_logits.data_ptr) + r * row_bytes, 0, row_bytes);
        continue;
      }
      if (bf16) dz_buffer.resize(V);
      float* dzr = bf16 ? dz_buffer.data() : d_logits.data<float>() + r * V;
      softmax_gradient(row_as_float(logits, r, V, z_buffer), dzr, V, lse[r], g, gl * eps / V);
      dzr[label_of((*inputs)[4], r, V)] -= gl * (1.f - eps) + gn;
      if (bf16) {
        uint16_t* out = d_logits.data<uint16_t>() + r * V;
#pragma omp simd
        for (int64_t v = 0; v < V; ++v) out[v] = mtx::float_to_bf16(dzr[v]);
      }
    }
  }
  MXTensor& d_labels = (*outputs)[1];
  std::memset(d_labels.data_ptr, 0, d_labels.size() * 4);  // float32 or int32
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  const int logits = (*in_types)[0], labels = (*in_types)[1];
  if ((logits != kFloat32 && logits != mtx::kBfloat16) ||
      (labels != kFloat32 && labels != kInt32)) {
    MX_ERROR_MSG << "mtx_smoothed_ce: float32 or bfloat16 logits and float32 or int32 labels";
    return MX_FAIL;
  }
  return mtx::float32_outputs(out_types);
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& shape = (*in_shapes)[0];
  std::vector<unsigned int> rows(shape.begin(), shape.end() - (shape.empty() ? 0 : 1));
  if (shape.size() < 2 || (*in_shapes)[1] != rows) {
    MX_ERROR_MSG << "mtx_smoothed_ce: labels must have the shape of logits without the last axis";
    return MX_FAIL;
  }
  for (auto& s : *out_shapes) s = rows;
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(mtx_smoothed_ce)
    .setForward(forward, "cpu")
    .setBackward(backward, "cpu")
    .setParseAttrs(mtx::fixed_arity<2, 3>)
    .setInferType(infer_type)
    .setInferShape(infer_shape);
