// The bottom of both stacks (docs/paper.md): x = Dropout(sqrt(d_model) * E[token] + PE(position)),
// with E the embedding matrix shared by source, target and the pre-softmax projection.
#ifndef PSFORMER_WORKER_MODEL_EMBEDDING_H_
#define PSFORMER_WORKER_MODEL_EMBEDDING_H_

#include "common/param_layout.h"
#include "worker/backend/backend.h"
#include "worker/model/dropout.h"

namespace psformer {

template <typename T>
class Embedding {
 public:
  Embedding(Backend<T>* backend, const ParamLayout& layout, float dropout, uint32_t site);

  // tokens: (batch, len) ids, valid until Backward. Returns (batch*len, d).
  const T* Forward(const T* params, const int32_t* tokens, int batch, int len, const DropoutKey* key);
  // Adds the gradient w.r.t. E to grad.
  void Backward(const T* dout, T* grad);
  // Adds it to `rows` instead, a table of the rows `ids` name in place of the tokens (per token of
  // the last Forward, its row there): the lookups' part of E's gradient kept apart.
  void BackwardInto(const T* dout, const int32_t* ids, T* rows);

 private:
  Backend<T>* be_;
  int d_;
  uint64_t table_;
  T scale_;  // sqrt(d_model)
  Dropout<T> dropout_;
  const int32_t* tokens_ = nullptr;
  size_t n_ = 0;
  DeviceBuffer<T> out_;  // (batch*len, d)
};

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_EMBEDDING_H_
