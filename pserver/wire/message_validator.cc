#include "pserver/wire/message_validator.h"

#include <algorithm>

#include "common/param_layout.h"
#include "pserver/wire/gradient_rows.h"

namespace psformer {
namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

Refusal Reject(RejectReason reason, std::string detail) { return Rejection{reason, std::move(detail)}; }

// Payload size against dtype and range, element-aligned frames, then the checksum (unless the
// caller checks it in its copy). The size of a payload with a run table (a ROWS push, a named
// DENSE push, PARAMS of a part: gradient_rows.h) depends on the table, which is read once its
// bytes are known good: after the checksum (so a client that checks in its copy reads it there).
// check_table: a run table's parse and its value count (a receiver that defers the CRC may still
// need the table now).
Refusal CheckPayload(const WireMessage& msg, bool carries_elements, int threads, bool check_crc, bool check_table) {
  const proto::Header& h = msg.header;
  const uint64_t got = msg.PayloadBytes();
  if (got != h.payload_bytes()) {
    return Reject(RejectReason::kBadPayload,
                  "header announces " + Str(h.payload_bytes()) + " payload bytes, " + Str(got) + " arrived");
  }
  if (!carries_elements) {
    if (got != 0) return Reject(RejectReason::kBadPayload, Str(got) + " payload bytes on a message that carries none");
    return std::nullopt;
  }
  const size_t elem = DTypeBytes(h.dtype());
  if (elem == 0) return Reject(RejectReason::kBadPayload, "unsupported dtype " + Str(static_cast<uint64_t>(h.dtype())));
  const bool rows = HasRunTable(h);
  const uint64_t want = (h.end() - h.begin()) * elem;
  if (!rows && got != want) {
    return Reject(RejectReason::kBadPayload, Str(got) + " payload bytes for " + Str(h.end() - h.begin()) +
                                                 " elements of " + Str(elem) + " bytes (want " + Str(want) + ")");
  }
  for (size_t i = 0; i < msg.payload.size() && !rows; ++i) {
    if (msg.payload[i].size() % elem != 0) {
      return Reject(RejectReason::kBadPayload,
                    "payload frame " + Str(i) + " of " + Str(msg.payload[i].size()) + " bytes splits an element");
    }
  }
  if (check_crc) {
    const uint32_t crc = PayloadCrc32c(msg.payload, threads);
    if (crc != h.payload_crc32c()) {
      return Reject(RejectReason::kBadChecksum,
                    "payload CRC-32C " + Str(crc) + " differs from the header's " + Str(h.payload_crc32c()));
    }
  }
  if (!rows || !check_table) return std::nullopt;
  RunTable table;
  if (Refusal bad = ParseRunTable(msg, &table)) return bad;
  const uint64_t want_values = TabledValues(h, table.named);
  if (table.values.PayloadBytes() != want_values * elem) {
    return Reject(RejectReason::kBadPayload, Str(table.values.PayloadBytes()) + " value bytes after a table of " +
                                                 Str(table.runs.size()) + " runs (" + Str(table.named) +
                                                 " elements); want " + Str(want_values) + " elements of " + Str(elem) +
                                                 " bytes");
  }
  return std::nullopt;
}

// A push of a piece of the shared embedding in a job that splits its gradient is one of its two
// parts, and every other push is whole (proto::PushPart).
Refusal CheckPart(const proto::Header& h, const ServerScope& scope) {
  if (h.part() != proto::WHOLE && h.part() != proto::DENSE && h.part() != proto::ROWS) {
    return Reject(RejectReason::kBadPayload, "unknown push part " + Str(static_cast<uint64_t>(h.part())));
  }
  const std::vector<uint64_t>& bounds = scope.piece_bounds;
  const auto piece = [&](uint64_t x) { return std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin(); };
  const auto first = bounds.empty() ? 0 : piece(h.begin()), last = bounds.empty() ? 1 : piece(h.end());
  const auto split = [&](std::ptrdiff_t p) {
    return static_cast<size_t>(p) < scope.split_pieces.size() && scope.split_pieces[p] != 0;
  };
  std::string range = "[";  // (one append at a time: GCC 12 warns falsely on "[" + string)
  range += Str(h.begin());
  range += ", " + Str(h.end()) + ")";
  if (h.part() == proto::WHOLE && h.type() == proto::PUSH) {
    for (auto p = first; p < last; ++p) {
      if (split(p)) {
        return Reject(RejectReason::kBadPayload, "whole push of " + range + ", which holds a piece of the shared " +
                                                     "embedding: this job pushes its gradient in two parts " +
                                                     "(cluster.split_embedding)");
      }
    }
  } else if (last != first + 1 || !split(first)) {
    return Reject(RejectReason::kBadPayload, proto::PushPart_Name(h.part()) + " " +
                                                 proto::MessageType_Name(h.type()) + " of " + range +
                                                 ", which is not one piece of the shared embedding in a job that " +
                                                 "splits its gradient (cluster.split_embedding)");
  }
  return std::nullopt;
}

}  // namespace

Refusal ValidateAtServer(const WireMessage& msg, const ServerScope& scope, bool defer_element_checksum) {
  const proto::Header& h = msg.header;
  if (h.job_id() != scope.job_id) {
    return Reject(RejectReason::kWrongJob, "job " + Str(h.job_id()) + ", this server serves job " + Str(scope.job_id));
  }
  const proto::MessageType type = h.type();
  bool from_worker = h.sender_role() == proto::WORKER && h.sender_id() < static_cast<uint32_t>(scope.workers);
  const bool from_aggregator =
      h.sender_role() == proto::AGGREGATOR && h.sender_id() < static_cast<uint32_t>(scope.aggregators);
  bool from_control =
      (h.sender_role() == proto::COORDINATOR || h.sender_role() == proto::SUPERVISOR) && h.sender_id() < 1u << 16;
  bool sender_ok = false;
  bool carries_elements = false;
  switch (type) {
    case proto::PUSH:  // with host summing only a group's sum (a worker's share goes to its aggregator)
      sender_ok = scope.aggregators > 0 ? from_aggregator : from_worker;
      carries_elements = true;
      break;
    case proto::PULL:
      sender_ok = from_worker || from_aggregator || (h.sender_role() == proto::COORDINATOR && from_control);
      break;
    case proto::HEARTBEAT:
      sender_ok = from_worker || from_aggregator || from_control;
      break;
    case proto::HELLO:
    case proto::ROLLBACK:
      sender_ok = from_worker || from_control;
      break;
    case proto::CHECKPOINT:
      sender_ok = from_control;
      break;
    case proto::SHUTDOWN:  // from a worker: "I am done"; from the coordinator: "end the job".
      sender_ok = from_worker || from_control;
      break;
    default:
      return Reject(RejectReason::kUnknownType,
                    "message type " + Str(static_cast<uint64_t>(type)) + " is not one a server handles");
  }
  if (!sender_ok) {
    return Reject(RejectReason::kUnknownSender, proto::Role_Name(h.sender_role()) + " " + Str(h.sender_id()) +
                                                    " may not send " + proto::MessageType_Name(type) + " in a job of " +
                                                    Str(scope.workers) + " workers" +
                                                    (scope.aggregators > 0 ? " summed in " + Str(scope.aggregators) +
                                                                                 " host groups"
                                                                           : std::string()));
  }
  if (h.shard() != static_cast<uint32_t>(scope.shard)) {
    return Reject(RejectReason::kWrongShard, "addressed to shard " + Str(h.shard()) + ", this is shard " +
                                                 Str(static_cast<uint64_t>(scope.shard)));
  }
  if (type == proto::PUSH || type == proto::PULL) {
    const std::vector<uint64_t>& bounds = scope.piece_bounds;
    const auto is_bound = [&](uint64_t x) {
      return bounds.empty() ? x == scope.begin || x == scope.end : std::binary_search(bounds.begin(), bounds.end(), x);
    };
    if (h.begin() < scope.begin || h.end() > scope.end || h.begin() >= h.end() || !is_bound(h.begin()) ||
        !is_bound(h.end())) {
      return Reject(RejectReason::kBadRange, "range [" + Str(h.begin()) + ", " + Str(h.end()) +
                                                 ") is not a run of whole pieces of this shard's [" + Str(scope.begin) +
                                                 ", " + Str(scope.end) + ")");
    }
    if (h.step() < (type == proto::PUSH ? 1 : 0)) {
      return Reject(RejectReason::kStaleStep, "step " + std::to_string(h.step()) + " is below the first step");
    }
    if (type == proto::PUSH || h.part() != proto::WHOLE) {
      if (Refusal wrong = CheckPart(h, scope)) return wrong;
    }
    if (h.named() && (type != proto::PUSH || h.part() != proto::DENSE)) {
      return Reject(RejectReason::kBadPayload, "only a DENSE push names rows");
    }
    // A PULL's dtype is the element type it wants back (unspecified: FLOAT32).
    if (type == proto::PULL && h.dtype() != proto::DTYPE_UNSPECIFIED && DTypeBytes(h.dtype()) == 0) {
      return Reject(RejectReason::kBadPayload,
                    "pull asks for unsupported dtype " + Str(static_cast<uint64_t>(h.dtype())));
    }
  }
  const bool defer = defer_element_checksum && type == proto::PUSH && h.part() != proto::ROWS;
  return CheckPayload(msg, carries_elements, scope.threads, /*check_crc=*/!defer, /*check_table=*/true);
}

Refusal ValidateAtClient(const WireMessage& msg, const ClientScope& scope, bool defer_checksum) {
  const proto::Header& h = msg.header;
  if (h.job_id() != scope.job_id) {
    return Reject(RejectReason::kWrongJob, "job " + Str(h.job_id()) + ", this client is in job " + Str(scope.job_id));
  }
  const proto::MessageType type = h.type();
  if (type != proto::PARAMS && type != proto::ACK && type != proto::ERROR && type != proto::HEARTBEAT) {
    return Reject(RejectReason::kUnknownType,
                  "message type " + Str(static_cast<uint64_t>(type)) + " is not one a client handles");
  }
  if (h.sender_role() != proto::SERVER || h.sender_id() >= static_cast<uint32_t>(scope.shards) ||
      h.shard() != h.sender_id()) {
    return Reject(RejectReason::kUnknownSender, proto::Role_Name(h.sender_role()) + " " + Str(h.sender_id()) +
                                                    " (shard " + Str(h.shard()) + ") is not a server of this job");
  }
  if (type == proto::PARAMS) {
    const ShardRange r = ShardOf(scope.total, scope.shards, static_cast<int>(h.shard()));
    if (h.begin() < r.begin || h.end() > r.end || h.begin() >= h.end()) {
      return Reject(RejectReason::kBadRange, "parameters for [" + Str(h.begin()) + ", " + Str(h.end()) +
                                                 ") from shard " + Str(h.shard()) + ", whose range is [" +
                                                 Str(r.begin) + ", " + Str(r.end) + ")");
    }
    if (h.dtype() != proto::FLOAT32 && h.dtype() != proto::BFLOAT16) {
      return Reject(RejectReason::kBadPayload, "parameters must be FLOAT32 or BFLOAT16");
    }
  }
  return CheckPayload(msg, type == proto::PARAMS, 1, !defer_checksum, !defer_checksum);
}

}  // namespace psformer
