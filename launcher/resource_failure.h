// What a psformer process says when the machine refuses it a thread or memory. Library code
// reports failures as Status, but two come as exceptions from the C++ library: std::thread's
// std::system_error (pthread_create: EAGAIN, the user or the machine is out of threads, or the
// address space has no room for another stack) and std::bad_alloc. Left alone, the first ended a
// role with "terminate called without an active exception" and SIGABRT, which its supervisor
// took for a crash and restarted five times in eight seconds while the machine was still short.
// Both now end the process with a sentence saying which resource and why, and with
// kExitOutOfResources (common/supervisor_report.h), which supervisors treat as "wait".
#ifndef PSFORMER_LAUNCHER_RESOURCE_FAILURE_H_
#define PSFORMER_LAUNCHER_RESOURCE_FAILURE_H_

#include <exception>
#include <string>

namespace psformer {

// The sentence for an exception that means the machine refused a thread or memory ("cannot
// start a thread: Resource temporarily unavailable; ..."), or "" for any other exception.
std::string OutOfResourcesMessage(const std::exception& e);

// The sentence for a role that died because a library could not start a thread, from the tail
// of its log (its last line last), or "" when the tail does not say so. Two libraries end the
// process themselves, so no exception reaches the handler below; its supervisor reads the log:
//   ZeroMQ    asserts on pthread_create's failure: "Resource temporarily unavailable
//             (src/thread.cpp:269)", then abort() (SIGABRT).
//   OpenBLAS  starts its threads when it is loaded, before main: "OpenBLAS blas_thread_init:
//             pthread_create failed for thread 1 of 2: Resource temporarily unavailable" and a
//             line on RLIMIT_NPROC, then raise(SIGINT) (exit(1) if that fails).
std::string LibraryThreadFailureMessage(const std::string& log_tail);

// Makes std::terminate (an exception escaping a thread, a joinable std::thread destroyed)
// say "psformer COMMAND: error: ..." with what is known, and exit with kExitOutOfResources when
// the exception in flight is one of the above; otherwise it aborts, as before, after saying so.
void InstallTerminateHandler(const std::string& command);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_RESOURCE_FAILURE_H_
