// SlowLink: a TCP relay on loopback that carries bytes both ways at a fixed rate, standing in for
// a shaped link between hosts inside one test process: a client connects to endpoint(), the
// relay connects to `target` and forwards what each side sends, at most bytes_per_second each
// way. One connection at a time, as a ZmqVan's DEALER makes one. Everything stops, and every
// socket closes, when the SlowLink is destroyed.
#ifndef PSFORMER_TESTS_SLOW_LINK_H_
#define PSFORMER_TESTS_SLOW_LINK_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace psformer::testing {

class SlowLink {
 public:
  // `target`: "tcp://127.0.0.1:PORT".
  SlowLink(const std::string& target, double bytes_per_second) : rate_(bytes_per_second) {
    target_port_ = std::stoi(target.substr(target.rfind(':') + 1));
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listener_, 4);
    socklen_t len = sizeof(a);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~SlowLink() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) close(fd);
    close(listener_);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  // Accepts connections until stopped; each gets a connection to the target and two pumps.
  void Accept() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int in = accept(listener_, nullptr, nullptr);
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Loopback(target_port_);
      if (in < 0 || connect(out, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) continue;
      fds_.push_back(in);
      fds_.push_back(out);
      pumps_.emplace_back([this, in, out] { Pump(in, out); });
      pumps_.emplace_back([this, in, out] { Pump(out, in); });
    }
  }
  // Copies from -> to at rate_ (a token bucket holding at most 64 KiB: an idle link saves up
  // no burst), until stopped or closed.
  void Pump(int from, int to) {
    constexpr double kBurst = 64 * 1024;
    auto last = std::chrono::steady_clock::now();
    double tokens = 0;
    std::vector<char> buffer(64 * 1024);
    while (!stop_) {
      const auto now = std::chrono::steady_clock::now();
      tokens = std::min(kBurst, tokens + rate_ * std::chrono::duration<double>(now - last).count());
      last = now;
      const size_t room = tokens < 4096 ? 0 : static_cast<size_t>(std::min(tokens, double(buffer.size())));
      if (room == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 5) <= 0) continue;
      const ssize_t n = recv(from, buffer.data(), room, 0);
      if (n <= 0) return;
      for (ssize_t sent = 0; sent < n && !stop_;) {
        pollfd w{to, POLLOUT, 0};
        if (poll(&w, 1, 5) <= 0) continue;  // the far side is not reading: ask stop_ again
        const ssize_t k = send(to, buffer.data() + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k <= 0) return;
        sent += k;
      }
      tokens -= static_cast<double>(n);
    }
  }

  double rate_;
  int target_port_ = 0;
  int listener_ = -1;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // written by the acceptor only; joined after it
  std::vector<int> fds_;
};

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_SLOW_LINK_H_
