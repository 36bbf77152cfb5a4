// What every mtx operator tells MXNet 1.9's custom-operator library API (mxnet/lib_api.h) the
// same way: its attributes, its fixed number of inputs and outputs, float32 outputs.
#ifndef MTX_KERNELS_OP_API_H_
#define MTX_KERNELS_OP_API_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"

namespace mtx {

using Attrs = std::unordered_map<std::string, std::string>;

// the operator's attribute ``name`` (Python's str() of the value it was given), or ``fallback``
inline float float_attr(const Attrs& attrs, const char* name, float fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : std::stof(it->second);
}

inline int64_t int_attr(const Attrs& attrs, const char* name, int64_t fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : std::stoll(it->second);
}

// setParseAttrs of an operator with ``In`` inputs and ``Out`` outputs
template <int In, int Out>
mxnet::ext::MXReturnValue fixed_arity(const Attrs& attrs, int* num_inputs, int* num_outputs) {
  *num_inputs = In;
  *num_outputs = Out;
  return mxnet::ext::MX_SUCCESS;
}

// the end of an infer_type that accepted its inputs: every output float32
inline mxnet::ext::MXReturnValue float32_outputs(std::vector<int>* out_types) {
  for (auto& t : *out_types) t = mxnet::ext::kFloat32;
  return mxnet::ext::MX_SUCCESS;
}

// an infer_type of an operator whose inputs must all be float32: ``op``'s error otherwise
inline mxnet::ext::MXReturnValue float32_only(const char* op, const std::vector<int>& in_types,
                                              std::vector<int>* out_types) {
  for (int t : in_types) {
    if (t != mxnet::ext::kFloat32) {
      MX_ERROR_MSG << op << ": float32 inputs only";
      return mxnet::ext::MX_FAIL;
    }
  }
  return float32_outputs(out_types);
}

}  // namespace mtx

#endif  // MTX_KERNELS_OP_API_H_
