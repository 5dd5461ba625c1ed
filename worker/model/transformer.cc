#include "worker/model/transformer.h"

#include <algorithm>
#include <tuple>

#include "common/logging.h"
#include "common/trace.h"
#include "worker/model/dropout_sites.h"

namespace psformer {
namespace {

// [begin, end) of the tensors named prefix*: contiguous, since the layout adds a layer's tensors
// one after another.
std::pair<uint64_t, uint64_t> PrefixRange(const ParamLayout& layout, const std::string& prefix) {
  uint64_t begin = UINT64_MAX, end = 0, size = 0;
  for (const ParamTensor& t : layout.tensors()) {
    if (t.name.compare(0, prefix.size(), prefix) != 0) continue;
    begin = std::min(begin, t.offset);
    end = std::max(end, t.offset + t.size());
    size += t.size();
  }
  PSF_CHECK(size > 0 && end - begin == size);
  return {begin, end};
}

}  // namespace

template <typename T>
Transformer<T>::Transformer(const proto::ModelConfig& config, int vocab, Backend<T>* backend)
    : be_(backend),
      config_(config),
      layout_(config, vocab),
      vocab_(vocab),
      d_(config.d_model()),
      pre_ln_(config.norm_position() == proto::ModelConfig::PRE_LN),
      embedding_(layout_.Get("embedding").offset),
      src_embedding_(backend, layout_, config.dropout(), kSiteEncoderEmbedding),
      tgt_embedding_(backend, layout_, config.dropout(), kSiteDecoderEmbedding) {
  PSF_CHECK(config.heads() > 0 && config.d_model() % config.heads() == 0);
  for (int l = 0; l < config.layers(); ++l) {
    encoder_.push_back(std::make_unique<EncoderLayer<T>>(backend, layout_, config, l));
    decoder_.push_back(std::make_unique<DecoderLayer<T>>(backend, layout_, config, l));
    encoder_ranges_.push_back(PrefixRange(layout_, "encoder." + std::to_string(l) + "."));
    decoder_ranges_.push_back(PrefixRange(layout_, "decoder." + std::to_string(l) + "."));
  }
  if (pre_ln_) {
    encoder_final_ = std::make_unique<LayerNorm<T>>(backend, layout_, "encoder.final_ln.");
    decoder_final_ = std::make_unique<LayerNorm<T>>(backend, layout_, "decoder.final_ln.");
    encoder_final_range_ = PrefixRange(layout_, "encoder.final_ln.");
    decoder_final_range_ = PrefixRange(layout_, "decoder.final_ln.");
  }
  embedding_range_ = PrefixRange(layout_, "embedding");
}

template <typename T>
std::vector<std::pair<uint64_t, uint64_t>> Transformer<T>::forward_ranges() const {
  std::vector<Range> ranges{embedding_range_};
  ranges.insert(ranges.end(), encoder_ranges_.begin(), encoder_ranges_.end());
  if (pre_ln_) ranges.push_back(encoder_final_range_);
  ranges.insert(ranges.end(), decoder_ranges_.begin(), decoder_ranges_.end());
  if (pre_ln_) ranges.push_back(decoder_final_range_);
  std::erase_if(ranges, [](const Range& r) { return r.second <= r.first; });
  return ranges;
}

template <typename T>
StepStats Transformer<T>::Forward(const T* params, const Batch& batch, const DropoutKey* key, bool want_gradient,
                                  const ParamsNeeded* need) {
  const auto needed = [need](const Range& r) {
    if (need != nullptr && *need && r.second > r.first) (*need)(r.first, r.second);
  };
  StepStats stats;
  batch_ = batch.sentences;
  src_len_ = batch.src_len;
  tgt_len_ = batch.tgt_len;
  if (batch_ == 0 || src_len_ == 0 || tgt_len_ == 0) return stats;
  PSF_CHECK(src_len_ <= config_.max_positions() && tgt_len_ <= config_.max_positions());
  const size_t ns = static_cast<size_t>(batch_) * src_len_, nt = static_cast<size_t>(batch_) * tgt_len_;
  PSF_CHECK(batch.src.size() == ns && batch.tgt_in.size() == nt && batch.tgt_out.size() == nt);
  // An id outside the vocabulary would read outside the embedding matrix.
  const auto in_vocab = [this](int32_t id) { return id >= 0 && id < vocab_; };
  PSF_CHECK(std::all_of(batch.src.begin(), batch.src.end(), in_vocab) &&
            std::all_of(batch.tgt_in.begin(), batch.tgt_in.end(), in_vocab) &&
            std::all_of(batch.tgt_out.begin(), batch.tgt_out.end(), in_vocab));
  Backend<T>* be = be_;
  // Staged: the launching thread does not wait for the device to take them.
  src_.Reserve(be, ns);
  src_.Stage(batch.src.data(), ns);
  tgt_in_.Reserve(be, nt);
  tgt_in_.Stage(batch.tgt_in.data(), nt);
  tgt_out_.Reserve(be, nt);
  tgt_out_.Stage(batch.tgt_out.data(), nt);

  needed(embedding_range_);
  const T* x = src_embedding_.Forward(params, src_.data(), batch_, src_len_, key);
  for (size_t l = 0; l < encoder_.size(); ++l) {
    needed(encoder_ranges_[l]);
    x = encoder_[l]->Forward(params, x, src_.data(), batch_, src_len_, key);
  }
  if (pre_ln_) {
    needed(encoder_final_range_);
    x = encoder_final_->Forward(params, x, static_cast<int>(ns));
  }
  memory_ = x;

  const T* y = tgt_embedding_.Forward(params, tgt_in_.data(), batch_, tgt_len_, key);
  for (size_t l = 0; l < decoder_.size(); ++l) {
    needed(decoder_ranges_[l]);
    y = decoder_[l]->Forward(params, y, tgt_in_.data(), tgt_len_, memory_, src_.data(), src_len_, batch_, key);
  }
  if (pre_ln_) {
    needed(decoder_final_range_);
    y = decoder_final_->Forward(params, y, static_cast<int>(nt));
  }
  decoder_out_ = y;

  // logits (nt, V) = y (nt, d) E^T.
  T* logits = logits_.Reserve(be, nt * vocab_);
  be->Gemm(Transpose::kNo, Transpose::kYes, static_cast<int>(nt), vocab_, d_, T(1), y, d_, params + embedding_, d_,
           T(0), logits, vocab_);
  T* loss = token_loss_.Reserve(be, nt);
  T* correct = token_correct_.Reserve(be, nt);
  be->CrossEntropy(static_cast<int>(nt), vocab_, static_cast<T>(config_.label_smoothing()), logits, tgt_out_.data(),
                   kPadId, loss, correct, want_gradient ? logits : nullptr);
  double correct_sum = 0;
  {
    const TraceSpan traced("loss_to_host");  // on a GPU: waits until forward has run
    std::tie(stats.loss_sum, correct_sum) = be->SumPair(nt, loss, correct);  // one wait for both
  }
  stats.nll_sum = stats.loss_sum;
  if (!want_gradient && config_.label_smoothing() > 0) {
    // Evaluation also reports the plain negative log-likelihood, which perplexity is defined from.
    be->CrossEntropy(static_cast<int>(nt), vocab_, T(0), logits, tgt_out_.data(), kPadId, loss, correct, nullptr);
    stats.nll_sum = be->Sum(nt, loss);
  }
  stats.correct = static_cast<int64_t>(correct_sum + 0.5);
  stats.target_tokens = static_cast<int64_t>(
      std::count_if(batch.tgt_out.begin(), batch.tgt_out.end(), [](int32_t t) { return t != kPadId; }));
  return stats;
}

std::vector<std::pair<int, int>> OutputProjectionBlocks(int vocab, int blocks, int max_align) {
  const int count = std::max(1, std::min(blocks, vocab));
  // A block's product reads dlogits from column `first` on: cuBLAS's tensor-core kernels need
  // 16-byte aligned matrices, and slower ones run on any other. So every block begins at a
  // multiple of `align` rows (up to 64 by default: 256 bytes), as large as the blocks' size
  // allows; the ideal boundaries are at least `align` apart, so no block is empty.
  int align = 1;
  while (2 * align <= max_align && 2 * align <= vocab / count) align *= 2;
  const auto start = [&](int b) {
    const int ideal = static_cast<int>(static_cast<int64_t>(vocab) * b / count);
    return ideal / align * align;
  };
  std::vector<std::pair<int, int>> out;
  for (int b = 0; b < count; ++b) out.emplace_back(start(b), b + 1 < count ? start(b + 1) : vocab);
  return out;
}

template <typename T>
StepStats Transformer<T>::Evaluate(const T* params, const Batch& batch) {
  return Forward(params, batch, nullptr, false);
}

template <typename T>
StepStats Transformer<T>::ForwardBackward(const T* params, const Batch& batch, const DropoutKey& key, T* grad,
                                          const GradientReady& ready, const ParamsNeeded& need,
                                          LookupRows<T>* lookups) {
  Backend<T>* be = be_;
  be->Fill(layout_.total_size(), T(0), grad);
  const int32_t *src_ids = nullptr, *tgt_ids = nullptr;
  if (lookups != nullptr) {
    // Each token's row, staged for the device before forward.
    lookups->rows = BatchRows(batch);
    lookups->values = nullptr;
    src_ids = UploadRowIds(batch.src, &src_rows_);
    tgt_ids = UploadRowIds(batch.tgt_in, &tgt_rows_);
  }
  const StepStats stats = Forward(params, batch, &key, true, &need);
  auto report = [&](const Range& range) {
    if (ready && range.second > range.first) ready(range.first, range.second, stats);
  };
  if (batch_ == 0 || src_len_ == 0 || tgt_len_ == 0) {
    report({0, layout_.total_size()});  // all zeros, and final
    return stats;
  }
  const size_t ns = static_cast<size_t>(batch_) * src_len_, nt = static_cast<size_t>(batch_) * tgt_len_;
  const T* dlogits = logits_.data();  // CrossEntropy wrote the gradient over the logits

  // Pre-softmax projection: dE += dlogits^T y; dy = dlogits E.
  T* lookup_grad = nullptr;  // with `lookups`: where the lookups add, in place of grad's E
  if (lookups == nullptr) {
    be->Gemm(Transpose::kYes, Transpose::kNo, vocab_, d_, static_cast<int>(nt), T(1), dlogits, vocab_, decoder_out_, d_,
             T(1), grad + embedding_, d_);
  } else {
    // The output projection's part is all E's range will hold: final block by block of rows.
    const uint64_t width = static_cast<uint64_t>(d_);
    for (const auto& [first, last] :
         OutputProjectionBlocks(vocab_, output_projection_blocks_, output_projection_align_)) {
      be->Gemm(Transpose::kYes, Transpose::kNo, last - first, d_, static_cast<int>(nt), T(1), dlogits + first, vocab_,
               decoder_out_, d_, T(1), grad + embedding_ + first * width, d_);
      report({embedding_ + first * width, embedding_ + last * width});
    }
    // Room for every row: the buffer's address stays, so a copy off the device is aimed once.
    lookup_grad = rows_grad_.Reserve(be, static_cast<size_t>(vocab_) * d_);
    be->Fill(lookups->rows.size() * d_, T(0), lookup_grad);
    lookups->values = lookup_grad;
  }
  T* dy = ddecoder_out_.Reserve(be, nt * d_);
  be->Gemm(Transpose::kNo, Transpose::kNo, static_cast<int>(nt), d_, vocab_, T(1), dlogits, vocab_, params + embedding_,
           d_, T(0), dy, d_);
  const T* d = dy;
  if (pre_ln_) {
    T* dfinal = dfinal_.Reserve(be, std::max(ns, nt) * d_);
    decoder_final_->Backward(params, dy, dfinal, grad);
    report(decoder_final_range_);
    d = dfinal;
  }
  T* dmemory = dmemory_.Reserve(be, ns * d_);
  be->Fill(ns * d_, T(0), dmemory);
  for (int l = static_cast<int>(decoder_.size()) - 1; l >= 0; --l) {
    d = decoder_[l]->Backward(params, d, dmemory, grad);
    report(decoder_ranges_[l]);
  }
  if (lookups != nullptr) {
    tgt_embedding_.BackwardInto(d, tgt_ids, lookup_grad);
  } else {
    tgt_embedding_.Backward(d, grad);  // the embedding's gradient is complete only after the source side
  }

  d = dmemory;
  if (pre_ln_) {
    T* dfinal = dfinal_.Reserve(be, std::max(ns, nt) * d_);
    encoder_final_->Backward(params, dmemory, dfinal, grad);
    report(encoder_final_range_);
    d = dfinal;
  }
  for (int l = static_cast<int>(encoder_.size()) - 1; l >= 0; --l) {
    d = encoder_[l]->Backward(params, d, grad);
    report(encoder_ranges_[l]);
  }
  if (lookups != nullptr) {
    src_embedding_.BackwardInto(d, src_ids, lookup_grad);
  } else {
    src_embedding_.Backward(d, grad);
    report(embedding_range_);
  }
  return stats;
}

template <typename T>
std::vector<int32_t> Transformer<T>::BatchRows(const Batch& batch) {
  row_of_.assign(vocab_, -1);
  const auto mark = [this](int32_t id) {
    PSF_CHECK(id >= 0 && id < vocab_);  // as Forward checks: outside, it would read outside E
    row_of_[id] = 0;
  };
  for (int32_t id : batch.src) mark(id);
  for (int32_t id : batch.tgt_in) mark(id);
  std::vector<int32_t> rows;
  for (int32_t id = 0; id < vocab_; ++id) {
    if (row_of_[id] < 0) continue;
    row_of_[id] = static_cast<int32_t>(rows.size());
    rows.push_back(id);
  }
  return rows;
}

template <typename T>
const int32_t* Transformer<T>::UploadRowIds(const std::vector<int32_t>& tokens, DeviceBuffer<int32_t>* out) {
  std::vector<int32_t> ids(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ids[i] = row_of_[tokens[i]];
  out->Reserve(be_, ids.size());
  out->Stage(ids.data(), ids.size());
  return out->data();
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace psformer
