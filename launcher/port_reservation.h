// Where a parameter server listens: a TCP port reserved on cluster.bind_host before the role
// process starts, so that a port already taken is reported by the supervisor (with the setting to
// change) instead of by a role that would then restart in vain.
#ifndef PSFORMER_LAUNCHER_PORT_RESERVATION_H_
#define PSFORMER_LAUNCHER_PORT_RESERVATION_H_

#include <string>

#include "common/proto/config.pb.h"
#include "common/status.h"

namespace psformer {

// This machine's host name, as the other hosts of a job reach it.
std::string HostName();

// Binds a TCP socket to host:port (port 0 = any free port; host "", "*" or "0.0.0.0" = every
// interface) and returns the port it got; the socket is closed again, so that the role process can
// bind the same port right after. InvalidArgument when host is not an IPv4 address, Unavailable
// when the port cannot be bound (in use: the message names cluster.base_port).
StatusOr<int> ReservePort(const std::string& host, int port);

// The endpoint "tcp://HOST:PORT" server `index` of a job on `hosts` hosts binds, as workers reach
// it: port cluster.base_port + index (any free one when base_port is 0) on cluster.bind_host, this
// machine's name standing for a wildcard. InvalidArgument when a job of several hosts binds a
// loopback address, which the other hosts cannot reach.
StatusOr<std::string> ServerEndpoint(const proto::ClusterConfig& cluster, int index, int hosts);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_PORT_RESERVATION_H_
