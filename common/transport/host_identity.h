// Which processes share a host closely enough to exchange payloads through POSIX shared memory
// and ipc:// sockets. "The address is local" is not enough: the cluster simulator runs its
// hosts as network namespaces of one kernel, and those must still talk TCP. Two processes count
// as one host when they run under the same kernel boot (boot_id) in the same network, PID and
// mount namespaces (the inodes of /proc/self/ns/{net,pid,mnt}): the mount namespace decides which
// /dev/shm a process sees, and the PID namespace whether the pids recorded in a segment (its
// creator, a slot's reader) mean the same process to both sides.
#ifndef PSFORMER_COMMON_TRANSPORT_HOST_IDENTITY_H_
#define PSFORMER_COMMON_TRANSPORT_HOST_IDENTITY_H_

#include <string>

namespace psformer {

// "BOOT_ID/NET/PID/MNT" (namespace inodes) for the calling process; "" when either cannot be read (then the
// process is on a host of its own: nothing is shared with it).
std::string SameHostIdentity();

// True when both identities are known and equal.
bool SameHost(const std::string& a, const std::string& b);

}  // namespace psformer

#endif  // PSFORMER_COMMON_TRANSPORT_HOST_IDENTITY_H_
