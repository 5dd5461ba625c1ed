// PendingRequests: requests a shard cannot answer yet (a pull or a checkpoint of a step not yet
// reached), kept in arrival order until the shard gets there, a rollback or the job's end.
//
// Thread safety: one thread (the server loop).
#ifndef PSFORMER_PSERVER_SERVER_PENDING_REQUESTS_H_
#define PSFORMER_PSERVER_SERVER_PENDING_REQUESTS_H_

#include <string>
#include <utility>
#include <vector>

#include "common/proto/wire.pb.h"

namespace psformer {

class PendingRequests {
 public:
  struct Entry {
    std::string peer;  // whom to answer.
    proto::Header request;
  };

  // Keeps `request` from `peer` waiting; returns false, keeping nothing, when it is a resend of
  // one already waiting (same peer, sequence, sender, incarnation and epoch): it is answered
  // once.
  bool Add(std::string peer, proto::Header request) {
    for (const Entry& e : entries_) {
      if (e.peer == peer && SameRequest(e.request, request)) return false;
    }
    entries_.push_back({std::move(peer), std::move(request)});
    return true;
  }
  size_t size() const { return entries_.size(); }

  // Hands each request that `ready(header)` accepts to `serve(entry)`, in arrival order, and
  // keeps the others waiting.
  template <typename Ready, typename Serve>
  void ServeReady(Ready ready, Serve serve) {
    std::vector<Entry> waiting;
    for (Entry& e : entries_) {
      if (ready(e.request)) {
        serve(e);
      } else {
        waiting.push_back(std::move(e));
      }
    }
    entries_ = std::move(waiting);
  }

  // Hands every waiting request to `drop(entry)` and forgets them all.
  template <typename Drop>
  void DropAll(Drop drop) {
    std::vector<Entry> entries = std::move(entries_);
    entries_.clear();
    for (const Entry& e : entries) drop(e);
  }

 private:
  static bool SameRequest(const proto::Header& a, const proto::Header& b) {
    return a.sequence() == b.sequence() && a.sender_id() == b.sender_id() && a.sender_role() == b.sender_role() &&
           a.incarnation() == b.incarnation() && a.epoch() == b.epoch() && a.type() == b.type();
  }

  std::vector<Entry> entries_;
};

}  // namespace psformer

#endif  // PSFORMER_PSERVER_SERVER_PENDING_REQUESTS_H_
