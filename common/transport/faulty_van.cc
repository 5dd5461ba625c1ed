#include "common/transport/faulty_van.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "common/enum_name.h"
#include "common/logging.h"
#include "common/philox.h"

namespace psformer {
namespace {

Status CheckFraction(const char* field, double value) {
  if (!(value >= 0.0 && value <= 1.0)) {  // also refuses NaN.
    return Status::InvalidArgument(std::string(field) + " = " + std::to_string(value) + ": must be in [0, 1]");
  }
  return Status::Ok();
}

// A uniform double in [0, 1) with 53 random bits from two Philox words.
double Uniform53(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace

FaultyVanOptions FaultyVanOptions::FromConfig(const proto::FaultConfig& fault, uint64_t stream) {
  return {.drop_fraction = fault.drop_fraction(),
          .duplicate_fraction = fault.duplicate_fraction(),
          .delay_fraction = fault.delay_fraction(),
          .reorder_fraction = fault.reorder_fraction(),
          .delay_ms = fault.delay_ms(),
          .seed = fault.seed(),
          .stream = stream};
}

Status FaultyVanOptions::Validate() const {
  PSF_RETURN_IF_ERROR(CheckFraction("fault.drop_fraction", drop_fraction));
  PSF_RETURN_IF_ERROR(CheckFraction("fault.duplicate_fraction", duplicate_fraction));
  PSF_RETURN_IF_ERROR(CheckFraction("fault.delay_fraction", delay_fraction));
  PSF_RETURN_IF_ERROR(CheckFraction("fault.reorder_fraction", reorder_fraction));
  const double sum = drop_fraction + duplicate_fraction + delay_fraction + reorder_fraction;
  if (sum > 1.0 + 1e-6) {
    return Status::InvalidArgument(
        "fault.drop_fraction + duplicate_fraction + delay_fraction + reorder_fraction = " + std::to_string(sum) +
        ": a message meets at most one fault, so the sum must be <= 1");
  }
  if (delay_ms < 0) return Status::InvalidArgument("fault.delay_ms = " + std::to_string(delay_ms) + ": must be >= 0");
  return Status::Ok();
}

const char* FaultActionName(FaultAction action) {
  static constexpr const char* kNames[] = {"deliver", "drop", "duplicate", "delay", "reorder"};
  static_assert(std::size(kNames) == static_cast<size_t>(FaultAction::kReorder) + 1, "a name for every action");
  return EnumName(action, kNames, "?");
}

FaultAction DecideFault(const FaultyVanOptions& o, uint64_t counter) {
  const PhiloxCounter words =
      Philox4x32_10(PhiloxCounter{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32),
                                   static_cast<uint32_t>(o.stream), static_cast<uint32_t>(o.stream >> 32)}},
                    PhiloxKey{{static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32)}});
  // One uniform draw cut into consecutive intervals, one per fault, so each fault's share is
  // exactly its fraction and a message meets at most one.
  const double u = Uniform53(words.v[0], words.v[1]);
  double edge = o.drop_fraction;
  if (u < edge) return FaultAction::kDrop;
  edge += o.duplicate_fraction;
  if (u < edge) return FaultAction::kDuplicate;
  edge += o.delay_fraction;
  if (u < edge) return FaultAction::kDelay;
  edge += o.reorder_fraction;
  if (u < edge) return FaultAction::kReorder;
  return FaultAction::kDeliver;
}

FaultyVan::FaultyVan(std::unique_ptr<Van> inner, FaultyVanOptions options)
    : ForwardingVan(std::move(inner)), options_(options) {
  PSF_CHECK(inner_ != nullptr);
  PSF_CHECK(options_.Validate().ok());
}

FaultyVan::~FaultyVan() {
  while (!held_.empty()) {
    SendNow(std::move(held_.front().message));
    held_.pop_front();
  }
}

void FaultyVan::SendNow(RawMessage message) {
  const Status s = inner_->Send(std::move(message));
  if (!s.ok()) PSF_LOG(Warning) << "faulty van: a held message could not be sent: " << s.message();
}

void FaultyVan::SendHeld(const std::string* after_peer) {
  if (held_.empty()) return;
  const Clock::time_point now = Clock::now();
  std::deque<Held> keep;
  for (Held& h : held_) {
    const bool next_went = h.until_next && after_peer != nullptr && h.message.peer == *after_peer;
    if (next_went || h.due <= now) {
      SendNow(std::move(h.message));
    } else {
      keep.push_back(std::move(h));
    }
  }
  held_ = std::move(keep);
}

Status FaultyVan::Send(RawMessage message) {
  SendHeld(nullptr);
  const FaultAction action = DecideFault(options_, counter_++);
  ++stats_.messages;
  const std::string peer = message.peer;
  const Clock::time_point due = Clock::now() + std::chrono::milliseconds(options_.delay_ms);
  Status status;
  switch (action) {
    case FaultAction::kDrop:
      // Lost on the way, as a network would lose it: the sender sees a successful send.
      ++stats_.dropped;
      return Status::Ok();
    case FaultAction::kDelay:
      ++stats_.delayed;
      held_.push_back({std::move(message), due, false});
      return Status::Ok();
    case FaultAction::kReorder:
      ++stats_.reordered;
      held_.push_back({std::move(message), due, true});
      return Status::Ok();
    case FaultAction::kDuplicate: {
      ++stats_.duplicated;
      RawMessage copy = message;  // frames share their owners: no payload is copied.
      status = inner_->Send(std::move(copy));
      if (status.ok()) status = inner_->Send(std::move(message));
      break;
    }
    case FaultAction::kDeliver:
      ++stats_.delivered;
      status = inner_->Send(std::move(message));
      break;
  }
  SendHeld(&peer);
  return status;
}

StatusOr<std::optional<RawMessage>> FaultyVan::Recv(int timeout_ms) {
  SendHeld(nullptr);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(std::max(timeout_ms, 0));
  while (true) {
    int wait_ms = timeout_ms;
    const Clock::time_point now = Clock::now();
    if (timeout_ms >= 0) {
      wait_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()));
    }
    if (!held_.empty()) {
      Clock::time_point next_due = held_.front().due;
      for (const Held& h : held_) next_due = std::min(next_due, h.due);
      // Rounded up so that the held message is due when the wait ends.
      const int64_t until_due = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next_due - now + std::chrono::microseconds(999))
                 .count());
      if (wait_ms < 0 || until_due < wait_ms) wait_ms = static_cast<int>(until_due);
    }
    auto received = inner_->Recv(wait_ms);
    if (!received.ok() || received->has_value()) return received;
    SendHeld(nullptr);
    if ((timeout_ms >= 0 && Clock::now() >= deadline) || Woken()) return std::optional<RawMessage>();
  }
}

}  // namespace psformer
