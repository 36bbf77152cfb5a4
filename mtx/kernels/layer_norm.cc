// LayerNorm over the last axis for MXNet 1.9's custom-operator library API (mx.library.load).
//
// MXNet 1.9.1's own CPU LayerNorm backward runs generic broadcast/reduce kernels: 15 ms for a
// (3500, 256) float32 input on 2 cores, 15-18% of a Transformer training step. This one walks
// each row once forward and once backward, rows split over OpenMP threads (the libgomp MXNet
// itself uses), with the same results to float rounding.
//
//   mtx_layer_norm(data (..., D), gamma (D,), beta (D,), eps) -> out (..., D), mean (rows,),
//   rstd (rows,)   with rows = size / D; mean and 1 / std are kept for the backward pass.
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "mxnet/lib_api.h"
#include "op_api.h"

using namespace mxnet::ext;

namespace {

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  MXTensor& data = (*inputs)[0];
  const int64_t D = data.shape.back(), rows = data.size() / D;
  const float* x = data.data<float>();
  const float* gamma = (*inputs)[1].data<float>();
  const float* beta = (*inputs)[2].data<float>();
  float* out = (*outputs)[0].data<float>();
  float* mean = (*outputs)[1].data<float>();
  float* rstd = (*outputs)[2].data<float>();
  const float eps = mtx::float_attr(attrs, "eps", 1e-5f);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = out + r * D;
    float sum = 0.f;
    for (int64_t j = 0; j < D; ++j) sum += xr[j];
    const float mu = sum / D;
    float sq = 0.f;
    for (int64_t j = 0; j < D; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const float inv = 1.f / std::sqrt(sq / D + eps);
    for (int64_t j = 0; j < D; ++j) yr[j] = (xr[j] - mu) * inv * gamma[j] + beta[j];
    mean[r] = mu;
    rstd[r] = inv;
  }
  return MX_SUCCESS;
}

// inputs: d_out, d_mean, d_rstd (ignored), data, gamma, beta, out, mean, rstd
// outputs: d_data, d_gamma, d_beta
MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                       std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  MXTensor& data = (*inputs)[3];
  const int64_t D = data.shape.back(), rows = data.size() / D;
  const float* dy = (*inputs)[0].data<float>();
  const float* x = data.data<float>();
  const float* gamma = (*inputs)[4].data<float>();
  const float* mean = (*inputs)[7].data<float>();
  const float* rstd = (*inputs)[8].data<float>();
  float* dx = (*outputs)[0].data<float>();
  float* dgamma = (*outputs)[1].data<float>();
  float* dbeta = (*outputs)[2].data<float>();
  const int threads = omp_get_max_threads();
  // per-thread partial sums of d_gamma and d_beta, added up at the end
  std::vector<float> partial(2 * threads * D, 0.f);
#pragma omp parallel num_threads(threads)
  {
    float* pg = partial.data() + 2 * omp_get_thread_num() * D;
    float* pb = pg + D;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * D;
      const float* gr = dy + r * D;
      float* dxr = dx + r * D;
      const float mu = mean[r], inv = rstd[r];
      float sum_g = 0.f, sum_gx = 0.f;  // sums of gamma * dy and of gamma * dy * xhat
      for (int64_t j = 0; j < D; ++j) {
        const float xhat = (xr[j] - mu) * inv, g = gr[j] * gamma[j];
        sum_g += g;
        sum_gx += g * xhat;
        pg[j] += gr[j] * xhat;
        pb[j] += gr[j];
      }
      const float a = sum_g / D, b = sum_gx / D;
      for (int64_t j = 0; j < D; ++j) {
        const float xhat = (xr[j] - mu) * inv;
        dxr[j] = inv * (gr[j] * gamma[j] - a - xhat * b);
      }
    }
  }
  for (int64_t j = 0; j < D; ++j) {
    float sg = 0.f, sb = 0.f;
    for (int t = 0; t < threads; ++t) {
      sg += partial[2 * t * D + j];
      sb += partial[(2 * t + 1) * D + j];
    }
    dgamma[j] = sg;
    dbeta[j] = sb;
  }
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  return mtx::float32_only("mtx_layer_norm", *in_types, out_types);
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& shape = (*in_shapes)[0];
  if (shape.empty() || (*in_shapes)[1].size() != 1 || (*in_shapes)[1][0] != shape.back()) {
    MX_ERROR_MSG << "mtx_layer_norm: gamma and beta must have the last axis of data";
    return MX_FAIL;
  }
  unsigned int rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  (*out_shapes)[0] = shape;
  (*out_shapes)[1] = {rows};
  (*out_shapes)[2] = {rows};
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(mtx_layer_norm)
    .setForward(forward, "cpu")
    .setBackward(backward, "cpu")
    .setParseAttrs(mtx::fixed_arity<3, 3>)
    .setInferType(infer_type)
    .setInferShape(infer_shape);

MXReturnValue initialize(int version) {
  return version >= 10900 ? MX_SUCCESS : MX_FAIL;
}
