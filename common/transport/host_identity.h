// Which processes share a host closely enough to exchange payloads through POSIX shared memory
// and ipc:// sockets. "The address is local" is not enough: the cluster simulator runs its
// hosts as network namespaces of one kernel, and those must still talk TCP. Two processes
// count as one host when they run under the same kernel boot (boot_id) in the same network
// namespace (the inode of /proc/self/ns/net).
#ifndef PSFORMER_COMMON_TRANSPORT_HOST_IDENTITY_H_
#define PSFORMER_COMMON_TRANSPORT_HOST_IDENTITY_H_

#include <string>

namespace psformer {

// "BOOT_ID/NETNS_INODE" for the calling process; "" when either cannot be read (then the
// process is on a host of its own: nothing is shared with it).
std::string SameHostIdentity();

// True when both identities are known and equal.
bool SameHost(const std::string& a, const std::string& b);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_HOST_IDENTITY_H_
