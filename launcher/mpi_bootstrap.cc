#include "launcher/mpi_bootstrap.h"

// Only MPI's C API is used; keep its deprecated C++ bindings (and their library) out.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <thread>

namespace psformer {
namespace {
// Host names and endpoints are short; a longer value is refused rather than cut.
constexpr int kMaxValue = 1024;
}  // namespace

bool StartedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr; }

int MpirunRankCount() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(size, &end, 10);
  return end != size && *end == '\0' && n > 0 && n < (1 << 20) ? static_cast<int>(n) : 0;
}

MpiBootstrap::MpiBootstrap() {
  MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiBootstrap::~MpiBootstrap() { MPI_Finalize(); }

StatusOr<std::vector<std::string>> MpiBootstrap::AllGather(const std::string& mine) {
  char local[kMaxValue] = {};
  // Every rank must take part in the collective even when its value is too long.
  const bool fits = mine.size() < static_cast<size_t>(kMaxValue);
  if (fits) std::memcpy(local, mine.data(), mine.size());
  std::vector<char> all(static_cast<size_t>(kMaxValue) * size_);
  MPI_Allgather(local, kMaxValue, MPI_CHAR, all.data(), kMaxValue, MPI_CHAR, MPI_COMM_WORLD);
  if (AllReduceMax(fits ? 0 : 1) != 0) {
    return Status::InvalidArgument("a bootstrap value is longer than " + std::to_string(kMaxValue) + " bytes");
  }
  std::vector<std::string> values;
  for (int r = 0; r < size_; ++r) values.emplace_back(all.data() + static_cast<size_t>(r) * kMaxValue);
  return values;
}

std::string MpiBootstrap::Broadcast(const std::string& value) {
  int length = static_cast<int>(value.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string out = rank_ == 0 ? value : std::string(length, '\0');
  MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return out;
}

int MpiBootstrap::AllReduceMax(int value) {
  int result = 0;
  MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return result;
}

bool MpiBootstrap::BarrierWithin(std::chrono::milliseconds timeout, const std::function<void()>& while_waiting) {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (while_waiting) while_waiting();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void MpiBootstrap::Abort(int exit_status) {
  MPI_Abort(MPI_COMM_WORLD, exit_status);
  std::_Exit(exit_status);  // MPI_Abort does not return; this satisfies [[noreturn]].
}

}  // namespace psformer
