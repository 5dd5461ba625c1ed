#include "pserver/aggregator/parameter_copies.h"

#include "common/crc32c.h"

namespace psformer {

const ParameterCopy* ParameterCopies::Find(int piece, uint64_t epoch, int64_t step, proto::DType dtype) const {
  for (const ParameterCopy& copy : copies_[piece]) {
    if (copy.step == step && copy.dtype == dtype && copy.epoch == epoch) return &copy;
  }
  return nullptr;
}

std::optional<ParameterCopy> ParameterCopies::CopyOf(int piece, uint64_t epoch, const WireMessage& reply) {
  const proto::Header& h = reply.header;
  ParameterCopy copy;
  copy.epoch = epoch;
  copy.step = h.step();
  copy.dtype = h.dtype();
  copy.reply = h;
  copy.size = reply.PayloadBytes();
  Memory(piece, &copy);
  uint32_t crc = 0;
  size_t at = 0;
  for (const Frame& f : reply.payload) {
    crc = CopyWithCrc32c(static_cast<char*>(copy.bytes.get()) + at, f.data(), f.size(), crc);
    at += f.size();
  }
  if (crc != h.payload_crc32c()) {
    spare_[piece].push_back(std::move(copy));
    return std::nullopt;
  }
  return copy;
}

void ParameterCopies::Keep(int piece, ParameterCopy copy) {
  std::vector<ParameterCopy>& copies = copies_[piece];
  // The two newest steps stay (a restarted worker pulls the one before); older ones are spares.
  for (auto it = copies.begin(); it != copies.end();) {
    if (it->step + 1 >= copy.step) {
      ++it;
      continue;
    }
    spare_[piece].push_back(std::move(*it));
    it = copies.erase(it);
  }
  copies.push_back(std::move(copy));
}

void ParameterCopies::ForgetAll() {
  for (size_t p = 0; p < copies_.size(); ++p) {
    for (ParameterCopy& copy : copies_[p]) spare_[p].push_back(std::move(copy));
    copies_[p].clear();
  }
}

void ParameterCopies::Memory(int piece, ParameterCopy* copy) {
  std::vector<ParameterCopy>& spares = spare_[piece];
  auto best = spares.end();
  for (auto it = spares.begin(); it != spares.end(); ++it) {
    if (it->capacity >= copy->size && it->bytes.use_count() == 1 &&
        (best == spares.end() || it->capacity < best->capacity)) {
      best = it;
    }
  }
  if (best != spares.end()) {
    copy->bytes = std::move(best->bytes);
    copy->capacity = best->capacity;
    spares.erase(best);
    return;
  }
  // A few spares still on loan are kept for later; beyond that the oldest goes.
  if (spares.size() > 4) spares.erase(spares.begin());
  copy->capacity = copy->reply.part() == proto::WHOLE ? copy->size : copy->size + copy->size / 4;
  copy->bytes = van_->AllocatePayload(copy->capacity);
}

}  // namespace psformer
