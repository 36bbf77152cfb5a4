// A dense layer whose products run in bfloat16 with float32 accumulation through oneMKL's
// cblas_gemm_bf16bf16f32, for MXNet 1.9's custom-operator library API.
//
// MXNet 1.9.1's oneDNN 2.4.4 never reaches Intel's AMX tiles (its bfloat16 FullyConnected runs
// at 0.5-0.65x float32 on such hosts); oneMKL's bfloat16 product uses them where the CPU has
// them and the process has asked Linux for the tile state. Inputs, weights, outputs and
// gradients stay float32 (master weights as in MXNet's bfloat16 path); only the products'
// operands are rounded to bfloat16 (to nearest, ties to even), in a per-call workspace.
//
//   mtx_mkl_dense(x (..., in), weight (out, in)[, bias (out,)], no_bias) -> y (..., out)
//     y = bf16(x) bf16(weight)^T + bias
//   backward: dx = bf16(dy) bf16(weight), dweight = bf16(dy)^T bf16(x), dbias = sum_rows dy
//
// oneMKL is not linked: `mtx_mkl_open(path)` (called once from Python, mtx.kernels.mkl) opens
// libmkl_rt, puts it on the GNU OpenMP threading layer (the libgomp MXNet and these kernels
// run on, so the two never hold separate thread pools), asks Linux for the AMX tile state and
// returns 0, or a negative code with its reason in ``error``.
#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bfloat16.h"
#include "mxnet/lib_api.h"
#include "op_api.h"

using namespace mxnet::ext;

namespace {

// cblas enums and the LP64 interface (MKL_INT = int), as mkl_cblas.h defines them
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kThreadingGnu = 3, kLp64 = 0;
constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // asm/prctl.h

using GemmBf16 = void (*)(int, int, int, int, int, int, float, const uint16_t*, int,
                          const uint16_t*, int, float, float*, int);
GemmBf16 gemm_bf16 = nullptr;

// out[i] = bf16(in[i]) for i < n, rounded to nearest even: with AVX512-BF16's conversion where
// the build has it (-march=native on such a CPU), 16 values an instruction
inline void to_bf16_serial(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  int64_t i = 0;
#ifdef __AVX512BF16__
  for (; i + 16 <= n; i += 16) {
    const __m256bh packed = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(packed));
  }
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) out[j] = mtx::float_to_bf16(in[j]);
}

void to_bf16(const float* __restrict in, uint16_t* __restrict out, int64_t n) {
  constexpr int64_t kChunk = 1 << 14;
#pragma omp parallel for schedule(static)
  for (int64_t start = 0; start < n; start += kChunk)
    to_bf16_serial(in + start, out + start, n - start < kChunk ? n - start : kChunk);
}

// a workspace of ``n`` bfloat16 values from MXNet's per-call temporary space
uint16_t* workspace(const OpResource& res, int64_t n) {
  return static_cast<uint16_t*>(res.alloc_cpu(static_cast<int>(n * sizeof(uint16_t))));
}

bool has_bias(const std::unordered_map<std::string, std::string>& attrs) {
  auto it = attrs.find("no_bias");
  return it == attrs.end() || !(it->second == "True" || it->second == "1" || it->second == "true");
}

MXReturnValue parse_attrs(const std::unordered_map<std::string, std::string>& attrs,
                          int* num_inputs, int* num_outputs) {
  *num_inputs = has_bias(attrs) ? 3 : 2;
  *num_outputs = 1;
  return MX_SUCCESS;
}

MXReturnValue forward(const std::unordered_map<std::string, std::string>& attrs,
                      std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                      const OpResource& res) {
  MXTensor& x = (*inputs)[0];
  MXTensor& w = (*inputs)[1];
  const int64_t out = w.shape[0], in = w.shape[1], rows = x.size() / in;
  float* y = (*outputs)[0].data<float>();
  if (gemm_bf16 == nullptr) {
    MX_ERROR_MSG << "mtx_mkl_dense: oneMKL is not open (mtx.kernels.mkl.open first)";
    return MX_FAIL;
  }
  uint16_t* xb = workspace(res, rows * in + out * in);
  uint16_t* wb = xb + rows * in;
  to_bf16(x.data<float>(), xb, rows * in);
  to_bf16(w.data<float>(), wb, out * in);
  const bool bias = inputs->size() == 3;
  if (bias) {  // y starts as the bias in every row and the product adds to it (beta 1): one
    const float* b = (*inputs)[2].data<float>();  // pass over y fewer than adding it after
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * out, b, out * sizeof(float));
  }
  gemm_bf16(kRowMajor, kNoTrans, kTrans, rows, out, in, 1.f, xb, in, wb, in, bias ? 1.f : 0.f,
            y, out);
  return MX_SUCCESS;
}

// dyb = bf16(dy) (rows, cols), and with ``db`` its column sums in float32, in one pass over dy:
// each thread sums its rows into its own row of ``partial`` (threads, cols), then the rows add up
void to_bf16_with_column_sums(const float* dy, uint16_t* dyb, float* db, float* partial,
                              int64_t rows, int64_t cols) {
  if (db == nullptr) return to_bf16(dy, dyb, rows * cols);
  const int threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    float* mine = partial + omp_get_thread_num() * cols;
    for (int64_t j = 0; j < cols; ++j) mine[j] = 0.f;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols;
      uint16_t* out = dyb + r * cols;
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) mine[j] += row[j];
      to_bf16_serial(row, out, cols);
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < cols; ++j) {
    float sum = 0.f;
    for (int t = 0; t < threads; ++t) sum += partial[t * cols + j];
    db[j] = sum;
  }
}

// inputs: dy, x, weight[, bias], y;  outputs: dx, dweight[, dbias]
MXReturnValue backward(const std::unordered_map<std::string, std::string>& attrs,
                       std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                       const OpResource& res) {
  MXTensor& dy = (*inputs)[0];
  MXTensor& x = (*inputs)[1];
  MXTensor& w = (*inputs)[2];
  const int64_t out = w.shape[0], in = w.shape[1], rows = x.size() / in;
  const bool bias = outputs->size() == 3;
  const int64_t partial_floats = bias ? omp_get_max_threads() * out : 0;
  uint16_t* space = workspace(res, 2 * partial_floats + rows * in + out * in + rows * out);
  float* partial = reinterpret_cast<float*>(space);  // first: 4-byte aligned
  uint16_t* xb = space + 2 * partial_floats;
  uint16_t* wb = xb + rows * in;
  uint16_t* dyb = wb + out * in;
  to_bf16(x.data<float>(), xb, rows * in);
  to_bf16(w.data<float>(), wb, out * in);
  to_bf16_with_column_sums(dy.data<float>(), dyb, bias ? (*outputs)[2].data<float>() : nullptr,
                           partial, rows, out);
  gemm_bf16(kRowMajor, kNoTrans, kNoTrans, rows, in, out, 1.f, dyb, out, wb, in, 0.f,
            (*outputs)[0].data<float>(), in);
  gemm_bf16(kRowMajor, kTrans, kNoTrans, out, in, rows, 1.f, dyb, out, xb, in, 0.f,
            (*outputs)[1].data<float>(), in);
  return MX_SUCCESS;
}

MXReturnValue infer_type(const std::unordered_map<std::string, std::string>& attrs,
                         std::vector<int>* in_types, std::vector<int>* out_types) {
  return mtx::float32_only("mtx_mkl_dense", *in_types, out_types);
}

MXReturnValue infer_shape(const std::unordered_map<std::string, std::string>& attrs,
                          std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  const std::vector<unsigned int>& x = (*in_shapes)[0];
  const std::vector<unsigned int>& w = (*in_shapes)[1];
  const bool bias_ok = in_shapes->size() == 2 ||
                       ((*in_shapes)[2].size() == 1 && w.size() == 2 && (*in_shapes)[2][0] == w[0]);
  if (x.empty() || w.size() != 2 || x.back() != w[1] || !bias_ok) {
    MX_ERROR_MSG << "mtx_mkl_dense: x (..., in), weight (out, in) and bias (out,)";
    return MX_FAIL;
  }
  std::vector<unsigned int> y(x);
  y.back() = w[0];
  (*out_shapes)[0] = y;
  return MX_SUCCESS;
}

}  // namespace

REGISTER_OP(mtx_mkl_dense)
    .setForward(forward, "cpu")
    .setBackward(backward, "cpu")
    .setParseAttrs(parse_attrs)
    .setInferType(infer_type)
    .setInferShape(infer_shape);

// 0 when oneMKL at ``path`` is open and its bfloat16 product found; otherwise a negative code
// and the reason in ``error`` (``size`` bytes). Once per process; later calls return the first
// answer. AMX: Linux >= 5.16 grants the tile state on request; elsewhere the request fails
// harmlessly and oneMKL runs its AVX-512 or AVX2 code.
extern "C" int mtx_mkl_open(const char* path, char* error, int size) {
  static int status = 1;
  static std::string reason;
  if (status == 1) {
    void* mkl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (mkl == nullptr) {
      status = -1;
      reason = dlerror();
    } else {
      auto set_threading = reinterpret_cast<int (*)(int)>(dlsym(mkl, "MKL_Set_Threading_Layer"));
      auto set_interface = reinterpret_cast<int (*)(int)>(dlsym(mkl, "MKL_Set_Interface_Layer"));
      gemm_bf16 = reinterpret_cast<GemmBf16>(dlsym(mkl, "cblas_gemm_bf16bf16f32"));
      if (set_threading == nullptr || set_interface == nullptr || gemm_bf16 == nullptr) {
        gemm_bf16 = nullptr;
        status = -2;
        reason = "it has no cblas_gemm_bf16bf16f32 or MKL_Set_Threading_Layer";
      } else {
        set_interface(kLp64);
        set_threading(kThreadingGnu);
        syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata);
        status = 0;
      }
    }
  }
  std::snprintf(error, size, "%s", reason.c_str());
  return status;
}
