#include "launcher/port_reservation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace psformer {
namespace {

bool IsWildcard(const std::string& host) { return host == "0.0.0.0" || host == "*" || host.empty(); }

}  // namespace

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

StatusOr<int> ReservePort(const std::string& host, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::IoError("cannot create a socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (IsWildcard(host)) {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    return Status::InvalidArgument("cluster.bind_host = \"" + host + "\": not an IPv4 address");
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return Status::Unavailable("cannot bind " + host + ":" + std::to_string(port) + ": " + strerror(err) +
                               (err == EADDRINUSE ? " (the port is in use; choose another cluster.base_port)" : ""));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

StatusOr<std::string> ServerEndpoint(const proto::ClusterConfig& cluster, int index, int hosts) {
  if (hosts > 1 && cluster.bind_host().rfind("127.", 0) == 0) {
    return Status::InvalidArgument("cluster.bind_host = \"" + cluster.bind_host() +
                                   "\" cannot be reached from other hosts; set it to this network's interface "
                                   "address or 0.0.0.0");
  }
  const int wanted = cluster.base_port() == 0 ? 0 : cluster.base_port() + index;
  PSF_ASSIGN_OR_RETURN(const int port, ReservePort(cluster.bind_host(), wanted));
  const std::string host = IsWildcard(cluster.bind_host()) ? HostName() : cluster.bind_host();
  return "tcp://" + host + ":" + std::to_string(port);
}

}  // namespace psformer
