#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/crc32c.h"
#include "common/logging.h"
#include "common/trace.h"
#include "pserver/aggregator/host_aggregator.h"
#include "pserver/wire/gradient_rows.h"
#include "pserver/wire/wire_message.h"

// HostAggregator: the group's shares of each piece, and the sums sent to the servers.

namespace psformer {

void HostAggregator::TakeShare(int local, int slot, WireMessage msg) {
  const proto::Header& h = msg.header;
  GroupSum& s = sums_[slot];
  const Requester from{msg.peer, h};
  // The group's sum of this step is known to be applied, or held by its server: nothing to add.
  if (h.step() <= answered_step_[slot] || h.step() < s.shares.step()) {
    stats_.duplicate_shares.fetch_add(1);
    return answers_.Ack(from, /*duplicate=*/true);
  }
  if (h.step() > s.shares.step()) {
    // A share of a later step means the earlier one's parameters were pulled: its sum was
    // applied, even if the server's answer to it has not come (it may follow on another stream).
    for (auto& waiting : s.waiting) {
      if (waiting) answers_.Ack(*waiting);
    }
    if (s.sequence != 0) upstream_.Erase(s.sequence);
    s.Begin(h.epoch(), h.step());
  }
  stats_.shares.fetch_add(1);
  Trace::AtStep(h.step());
  s.waiting[local] = from;  // a resend (or a restarted worker's) is answered instead of the first
  if (s.shares.Has(local, h.part()) || s.sequence != 0) {
    stats_.duplicate_shares.fetch_add(1);
    return;
  }
  // A named DENSE share's run table leaves the frames it sums (GradientAggregator::Add): its CRC
  // is taken now, to be combined with the values' in the summing pass.
  s.table_crc[local] = 0;
  if (h.part() == proto::DENSE && h.named()) {
    ForEachPayloadSpan(msg.payload, 1, 0, uint64_t{h.runs()} * kRunBytes, [&](const uint8_t* p, uint64_t, uint64_t n) {
      s.table_crc[local] = Crc32c(s.table_crc[local], p, n);
    });
  }
  s.shares.Add(local, std::move(msg));
  if (s.shares.Complete()) SendSum(slot);
}

void HostAggregator::SendSum(int slot) {
  GroupSum& s = sums_[slot];
  const Piece& p = table_.pieces()[s.piece];
  const TraceSpan traced("send_sum", s.shares.step(), static_cast<int64_t>(p.begin));
  const bool bf16 = options_.config.cluster().gradient_dtype() == proto::ClusterConfig::BF16;
  // A ROWS part's sum is its own (the server adds it to the DENSE parts' sum, as a flat job's).
  // A DENSE sum names what its workers' parts named, all of them (else nothing).
  const std::optional<std::vector<ElementRun>> named = s.part == proto::DENSE ? s.shares.NamedUnion() : std::nullopt;
  std::vector<uint32_t> share_crcs;
  SummedShares sum =
      s.part == proto::ROWS
          ? SumRowShares(s.shares.gradient().rows, bf16)
          : SumShares(s.shares.gradient(), p.size(), bf16, threads_,
                      named ? std::span<const ElementRun>(*named) : std::span<const ElementRun>(), &share_crcs);
  if (!RefuseDamagedShares(slot, share_crcs)) return;  // the sum is dropped: it waits for resends
  s.shares.Consumed();  // the workers' slots go back
  Upstream up;
  up.kind = Upstream::kSum;
  up.piece = s.piece;
  up.header.set_type(proto::PUSH);
  up.header.set_part(s.part);
  if (s.part == proto::ROWS || named) up.header.set_runs(sum.runs);
  up.header.set_named(named.has_value());
  up.header.set_shard(static_cast<uint32_t>(p.shard));
  up.header.set_step(s.shares.step());
  up.header.set_epoch(s.epoch);
  up.header.set_dtype(bf16 ? proto::BFLOAT16 : proto::FLOAT32);
  up.header.set_begin(p.begin);
  up.header.set_end(p.end);
  up.header.set_target_tokens(s.shares.total_tokens());
  up.header.set_loss_sum(s.shares.loss_sum());
  up.elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  up.payload_bytes = sum.size;
  up.table_bytes = sum.runs * kRunBytes;
  up.payload_crc = sum.crc32c;
  up.payload = std::move(sum.bytes);
  stats_.sums_sent.fetch_add(1);
  s.sequence = upstream_.Send(std::move(up));
  // A fault aimed at this aggregator strikes halfway through a step's sums.
  const int64_t step = s.shares.step();
  const int sent = ++sums_sent_of_step_[step];
  sums_sent_of_step_.erase(sums_sent_of_step_.begin(), sums_sent_of_step_.lower_bound(step));
  if (sent == std::max<int>(1, static_cast<int>(sums_.size()) / 2)) faults_.KillOrStallAt(step);
}

bool HostAggregator::RefuseDamagedShares(int slot, const std::vector<uint32_t>& share_crcs) {
  GroupSum& s = sums_[slot];
  const PieceGradient shares = s.shares.gradient();
  std::vector<std::pair<int, std::string>> damaged;  // worker, what is wrong
  for (size_t w = 0; w < share_crcs.size(); ++w) {
    const WireMessage& share = *shares.parts[w];
    const proto::Header& h = share.header;
    const uint32_t crc = h.named() ? Crc32cCombine(s.table_crc[w], share_crcs[w], share.PayloadBytes()) : share_crcs[w];
    if (crc == h.payload_crc32c()) continue;
    damaged.emplace_back(static_cast<int>(w), "payload CRC-32C " + std::to_string(crc) + " differs from the header's " +
                                                  std::to_string(h.payload_crc32c()) + " (found in the summing pass)");
  }
  for (const auto& [w, why] : damaged) {
    // Refused as the validator refuses a damaged payload on arrival: the worker's push fails as
    // it would at a server, and its share, sent again, is taken into the sum still waiting.
    if (s.waiting[w]) {
      const Requester from = *s.waiting[w];
      answers_.Refuse(from.peer, &from.request, {RejectReason::kBadChecksum, why});
      s.waiting[w].reset();
    }
    s.shares.Drop(w);
  }
  return damaged.empty();
}

void HostAggregator::SumAnswered(const Upstream& up, const WireMessage& reply) {
  const int slot = SlotOf(up.piece, up.header.part());
  GroupSum& s = sums_[slot];
  stats_.sums_answered.fetch_add(1);
  answered_step_[slot] = std::max(answered_step_[slot], up.header.step());
  for (const auto& r : s.waiting) {
    if (r) answers_.Answer(*r, reply.header);
  }
  s.waiting.assign(s.waiting.size(), std::nullopt);
  s.sequence = 0;
}

}  // namespace psformer
