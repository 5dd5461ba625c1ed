#include "launcher/resource_failure.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string_view>
#include <system_error>

#include "common/supervisor_report.h"

namespace psformer {
namespace {

std::string& TerminatingCommand() {
  static std::string command = "psformer";  // NOLINT: read by the terminate handler only.
  return command;
}

[[noreturn]] void SayWhyAndEnd() {
  const std::string who = TerminatingCommand();
  if (const std::exception_ptr in_flight = std::current_exception()) {
    try {
      std::rethrow_exception(in_flight);
    } catch (const std::exception& e) {
      const std::string resources = OutOfResourcesMessage(e);
      if (!resources.empty()) {
        std::cerr << who << ": error: " << resources << std::endl;
        _exit(kExitOutOfResources);
      }
      std::cerr << who << ": internal error: uncaught exception: " << e.what() << std::endl;
    } catch (...) {
      std::cerr << who << ": internal error: uncaught exception of an unknown type" << std::endl;
    }
  } else {
    std::cerr << who << ": internal error: std::terminate without an exception (a thread was left running)"
              << std::endl;
  }
  std::abort();
}

}  // namespace

std::string OutOfResourcesMessage(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return std::string("cannot allocate memory (") + e.what() +
           "): the machine, or this process's address-space limit (ulimit -v), has no more to give";
  }
  const auto* system = dynamic_cast<const std::system_error*>(&e);
  if (system != nullptr && system->code() == std::errc::resource_unavailable_try_again) {
    return std::string("cannot start a thread (") + e.what() +
           "): the machine or this user is out of threads (ulimit -u, kernel.threads-max), or the address space "
           "has no room for another thread's stack (ulimit -v)";
  }
  return "";
}

std::string LibraryThreadFailureMessage(const std::string& log_tail) {
  std::string tail = log_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const size_t newline = tail.rfind('\n');
  const std::string last_line = newline == std::string::npos ? tail : tail.substr(newline + 1);
  const std::string advice = "the machine or this user is out of threads (ulimit -u, kernel.threads-max)";
  // ZeroMQ's posix_assert: "<strerror> (<file>:<line>)", from its thread.cpp.
  const std::string eagain = std::error_code(EAGAIN, std::generic_category()).message();
  if (last_line.rfind(eagain + " (", 0) == 0 && last_line.find("thread.cpp:") != std::string::npos) {
    return "cannot start a thread (ZeroMQ: " + last_line + "): " + advice;
  }
  static constexpr std::string_view kOpenBlas = "OpenBLAS blas_thread_init: ";
  if (last_line.rfind(kOpenBlas, 0) != 0) return "";
  const size_t failed = tail.rfind(std::string(kOpenBlas) + "pthread_create failed");
  if (failed == std::string::npos) return "";
  const std::string why = tail.substr(failed + kOpenBlas.size(), tail.find('\n', failed) - failed - kOpenBlas.size());
  return "cannot start a thread (OpenBLAS, while loading: " + why + "): " + advice;
}

void InstallTerminateHandler(const std::string& command) {
  TerminatingCommand() = command;
  std::set_terminate(SayWhyAndEnd);
}

}  // namespace psformer
