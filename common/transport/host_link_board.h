// HostLinkBoard: a few bytes shared by the processes of one host, in a file beside a server's
// Unix socket (its ipc:// endpoint's path + ".link", in the run directory), through which each
// host aggregator of that host tells the server the first, by (step, offset within its shard), of
// the sums it still has on their way to other hosts' servers (sent and not yet acknowledged).
//
// What it is for (cluster.sums_first; docs/architecture.md, "Send priority"): a host's link
// carries two senders, its aggregator's sums to the other hosts' servers and its server's
// answers to the other hosts' aggregators, each ranked in its own process and sharing the link
// half and half as TCP does. The next forward waits on both crossings of a layer (its sum, then
// its answer), so a sum should not wait behind answers the other host needs later. With the
// board the server holds back a ranked answer to a tcp:// peer while a sum of its host ranked no
// later is on its way (an earlier step's, or one of its step no later in forward order): one
// ranked queue per link, over two processes.
//
// It never holds anything for long: a slot that has not changed for kStaleMs (an aggregator that
// died, or whose sums wait on a server that does not answer) counts as empty, so the worst a
// stale board costs is that long once. Its content is advisory: any bytes in the file are read
// as some state, never trusted further.
//
// Thread safety: Publish from one thread per slot; SumsPending from any; across processes the
// slots are atomics in a shared mapping.
#ifndef PSFORMER_COMMON_TRANSPORT_HOST_LINK_BOARD_H_
#define PSFORMER_COMMON_TRANSPORT_HOST_LINK_BOARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace psformer {

class HostLinkBoard {
 public:
  // A slot that has not changed for this long counts as empty.
  static constexpr int64_t kStaleMs = 1000;

  // The board's file for the server listening on `ipc_endpoint` (ipc://PATH): PATH.link.
  // InvalidArgument for another kind of endpoint.
  static StatusOr<std::string> PathFor(const std::string& ipc_endpoint);
  // Maps the board at `path` with `slots` slots (one per host group), making the file (mode 0600)
  // where it does not exist yet: whichever of the server and the aggregators starts first.
  // Refuses anything at `path` that is not a regular file, naming it.
  static StatusOr<std::shared_ptr<HostLinkBoard>> Open(const std::string& path, int slots);
  ~HostLinkBoard();
  HostLinkBoard(const HostLinkBoard&) = delete;
  HostLinkBoard& operator=(const HostLinkBoard&) = delete;

  // Slot `slot`: `count` sums on their way (count 0: none), the first of them by (step, offset):
  // offset = where it begins within its shard, which orders a shard's pieces as forward needs
  // them whichever shard it is. The slot's time moves only when what it says changes.
  void Publish(int slot, int64_t step, uint64_t offset, uint64_t count);
  // Whether any slot changed within kStaleMs has a sum on its way ranked no later than (step,
  // offset).
  bool SumsPending(int64_t step, uint64_t offset) const;

 private:
  struct Slot;
  HostLinkBoard(void* map, size_t bytes, int slots);

  void* map_;
  size_t bytes_;
  int slots_;
};

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_HOST_LINK_BOARD_H_
