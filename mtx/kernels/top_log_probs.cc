// The k most probable next tokens of every row and their log-probabilities, from logits, in one
// operator for the beam search (inference only, no backward).
//
// Composed of MXNet operators (log_softmax, then topk) each step writes and reads the whole
// (rows, V) log-probabilities again; this reads each row twice (its maximum and best k, then the
// sum of exponentials), while it is still in the cache, and writes (rows, k).
//
//   mtx_top_log_probs(logits (R, V), k) -> log_probs (R, k), ids (R, k)
//     log_probs[r, j] = z[r, ids[r, j]] - max_v z[r, v] - log sum_v exp(z[r, v] - max_v z[r, v])
//     ids float32 (as MXNet's topk gives them), best first; of equal logits the lower id first.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fast_exp.h"
#include "mxnet/lib_api.h"
#include "op_api.h"

using namespace mxnet::ext;
using mtx::exp_nonpositive;

namespace {

// the k largest of z[0..V) into best_z/best_id, best first (insertion into a sorted list: k is
// a beam width, and after the first few hundred entries almost every entry fails the first test)
void top_k(const float* z, int64_t V, int64_t k, float* best_z, int64_t* best_id) {
  int64_t filled = 0;
  for (int64_t v = 0; v < V; ++v) {
    const float x = z[v];
    if (filled == k && !(x > best_z[k - 1])) continue;
    int64_t j = filled < k ? filled++ : k - 1;
    while (j > 0 && x > best_z[j - 1]) {
      best_z[j] = best_z[j - 1];
      best_id[j] = best_id[j - 1];
      --j;
    }
    best_z[j] = x;
    best_id[j] = v;
  }
}

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  MXTensor& logits = (*inputs)[0];
  const int64_t V = logits.shape.back(), rows = logits.size() / V, k = mtx::int_attr(attrs, "k", 1);
  const float* z = logits.data<float>();
  float* log_probs = (*outputs)[0].data<float>();
  float* ids = (*outputs)[1].data<float>();
#pragma omp parallel
  {
    std::vector<float> best_z(k);
    std::vector<int64_t> best_id(k);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* zr = z + r * V;
      top_k(zr, V, k, best_z.data(), best_id.data());
      const float m = best_z[0];
      float sum_exp = 0.f;
#pragma omp simd reduction(+ : sum_exp)
      for (int64_t v = 0; v < V; ++v) sum_exp += exp_nonpositive(zr[v] - m);
      const float log_sum = std::log(sum_exp);
      for (int64_t j = 0; j < k; ++j) {
        log_probs[r * k + j] = (best_z[j] - m) - log_sum;
        ids[r * k + j] = static_cast<float>(best_id[j]);
      }
    }
  }
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  return mtx::float32_only("mtx_top_log_probs", *in_types, out_types);
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& shape = (*in_shapes)[0];
  const int64_t k = mtx::int_attr(attrs, "k", 1);
  if (shape.size() != 2 || k < 1 || k > static_cast<int64_t>(shape[1])) {
    MX_ERROR_MSG << "mtx_top_log_probs: logits (rows, V) and 1 <= k <= V";
    return MX_FAIL;
  }
  for (auto& s : *out_shapes) s = {shape[0], static_cast<unsigned int>(k)};
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(mtx_top_log_probs)
    .setForward(forward, "cpu")
    .setParseAttrs(mtx::fixed_arity<1, 2>)
    .setInferType(infer_type)
    .setInferShape(infer_shape);
