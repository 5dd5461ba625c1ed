// Numbers of the model's dropout sites: the `tensor` part of a dropout mask's Philox key
// (common/philox.h). Fixed, so that any backend draws the same mask for the same site.
#ifndef PSFORMER_WORKER_MODEL_DROPOUT_SITES_H_
#define PSFORMER_WORKER_MODEL_DROPOUT_SITES_H_

#include <cstdint>

namespace psformer {

constexpr uint32_t kSiteEncoderEmbedding = 0;
constexpr uint32_t kSiteDecoderEmbedding = 1;
// Each layer owns 16 consecutive ids from kSiteLayerBase + 16 * layer_index, where encoder layers
// are 0..N-1 and decoder layers N..2N-1; the offsets inside the block follow.
constexpr uint32_t kSiteLayerBase = 16;
constexpr uint32_t kSitesPerLayer = 16;
constexpr uint32_t kSiteSelfAttnOut = 0;
constexpr uint32_t kSiteSelfAttnProbs = 1;
constexpr uint32_t kSiteCrossAttnOut = 2;
constexpr uint32_t kSiteCrossAttnProbs = 3;
constexpr uint32_t kSiteFfnOut = 4;
constexpr uint32_t kSiteFfnRelu = 5;

inline uint32_t LayerSite(int layer_index, uint32_t offset) {
  return kSiteLayerBase + kSitesPerLayer * static_cast<uint32_t>(layer_index) + offset;
}

}  // namespace psformer

#endif  // PSFORMER_WORKER_MODEL_DROPOUT_SITES_H_
