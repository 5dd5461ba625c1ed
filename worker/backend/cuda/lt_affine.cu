#include <cstdint>
#include <string>

#include "common/logging.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/lt_affine.h"

namespace psformer {
namespace {

// The largest power of two up to 16 that divides the address: what cuBLASLt's vectorised loads
// may assume of it.
int Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  for (int a = 16; a > 1; a /= 2) {
    if (address % a == 0) return a;
  }
  return 1;
}

}  // namespace

StatusOr<std::unique_ptr<LtAffine>> LtAffine::Create() {
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t st = cublasLtCreate(&handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Status::Unavailable(std::string("cannot start cuBLASLt: ") + cublasGetStatusString(st));
  }
  return std::unique_ptr<LtAffine>(new LtAffine(handle));
}

LtAffine::~LtAffine() {
  for (auto& [key, plan] : plans_) Destroy(&plan);
  cublasLtDestroy(handle_);
}

void LtAffine::Destroy(Plan* plan) {
  if (plan->a != nullptr) cublasLtMatrixLayoutDestroy(plan->a);
  if (plan->b != nullptr) cublasLtMatrixLayoutDestroy(plan->b);
  if (plan->d != nullptr) cublasLtMatrixLayoutDestroy(plan->d);
  if (plan->desc != nullptr) cublasLtMatmulDescDestroy(plan->desc);
  *plan = Plan();
}

LtAffine::Plan LtAffine::MakePlan(const Key& key, const float* bias, size_t workspace_bytes) const {
  const auto [m, n, k, relu, math, align_x, align_w, align_y] = key;
  Plan plan;
  auto ok = [](cublasStatus_t st) { return st == CUBLAS_STATUS_SUCCESS; };
  // Row-major y = x W is column-major y^T = W^T x^T: cuBLASLt's A is W seen as (n, k) with
  // leading dimension n, B is x seen as (k, m), D is y seen as (n, m). The bias runs along D's
  // rows, which are y's columns.
  bool made = ok(cublasLtMatmulDescCreate(&plan.desc, CublasComputeType(math), CUDA_R_32F)) &&
              ok(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, n, k, n)) &&
              ok(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, k, m, k)) &&
              ok(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, n, m, n));
  const cublasLtEpilogue_t epilogue = relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  made =
      made && ok(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  // The heuristic reads the bias pointer's value (not what it points to) for its alignment.
  made = made && ok(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  cublasLtMatmulPreference_t pref = nullptr;
  made = made && ok(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = workspace_bytes;
  const uint32_t alignments[4] = {static_cast<uint32_t>(align_w), static_cast<uint32_t>(align_x),
                                  static_cast<uint32_t>(align_y), static_cast<uint32_t>(align_y)};
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  made = made && ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                         sizeof(max_workspace)));
  for (int i = 0; i < 4 && made; ++i) {
    made =
        ok(cublasLtMatmulPreferenceSetAttribute(pref, alignment_attributes[i], &alignments[i], sizeof(alignments[i])));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  made = made && ok(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, 1, &result,
                                                   &returned));
  if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  if (made && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan.algo = result.algo;
    plan.usable = true;
  } else {
    PSF_LOG(Info) << "cuBLASLt offers no fused bias" << (relu ? "+ReLU" : "") << " product for (" << m << " x " << k
                  << ") (" << k << " x " << n << ") in " << GemmMathName(math)
                  << "; this shape runs the product and the bias separately";
  }
  return plan;
}

bool LtAffine::Run(cudaStream_t stream, GemmMath math, int m, int n, int k, const float* x, const float* w,
                   const float* bias, bool relu, float* y, void* workspace, size_t workspace_bytes) {
  // The bias must be 16-byte aligned: the heuristic does not see its alignment requirement, and
  // other users of the epilogue report misaligned-address faults below that (Marian's GPU
  // backend notes it for A100). Parameters at other offsets take the unfused path.
  if (Alignment(bias) < 16) return false;
  const Key key{m, n, k, relu, math, Alignment(x), Alignment(w), Alignment(y)};
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, MakePlan(key, bias, workspace_bytes)).first;
  Plan& plan = it->second;
  if (!plan.usable) return false;
  PSF_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.d, y,
                                           plan.d, &plan.algo, workspace, workspace_bytes, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    // Refused at launch although the heuristic offered it: stop asking for this case.
    PSF_LOG(Warning) << "cuBLASLt refused its fused bias product for (" << m << " x " << k << ") (" << k << " x " << n
                     << "); this shape runs the product and the bias separately";
    Destroy(&plan);
    return false;
  }
  PSF_CUBLAS_CHECK(st);
  return true;
}

}  // namespace psformer
