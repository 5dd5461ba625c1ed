// Host <-> device copies for tests of any backend: a vector into a new DeviceBuffer, and back.
#ifndef PSFORMER_TESTS_DEVICE_TEST_UTIL_H_
#define PSFORMER_TESTS_DEVICE_TEST_UTIL_H_

#include <vector>

#include "worker/backend/device_buffer.h"

namespace psformer::testing {

// `host` in a new buffer of `memory` (a backend).
template <typename E>
DeviceBuffer<E> ToDevice(DeviceMemory* memory, const std::vector<E>& host) {
  DeviceBuffer<E> d(memory, host.size());
  if (!host.empty()) d.Upload(host.data(), host.size());
  return d;
}

template <typename E>
std::vector<E> ToHost(const DeviceBuffer<E>& d) {
  std::vector<E> host(d.size());
  if (!host.empty()) d.Download(host.data(), host.size());
  return host;
}

}  // namespace psformer::testing

#endif  // PSFORMER_TESTS_DEVICE_TEST_UTIL_H_
