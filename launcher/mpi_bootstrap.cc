#include "launcher/mpi_bootstrap.h"

// Only MPI's C API is used; keep its deprecated C++ bindings (and their library) out.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/logging.h"

namespace psformer {
namespace {
// Host names and endpoints are short; a longer value is refused rather than cut.
constexpr int kMaxValue = 1024;
// The tag of a stop notice: {signal, rank}. No other point-to-point message is sent.
constexpr int kStopTag = 7;
}  // namespace

struct MpiBootstrap::StopNotices {
  MPI_Request receive = MPI_REQUEST_NULL;
  int received[2] = {0, 0};
  bool announced = false;  // this rank sent its own
  int sent[2] = {0, 0};
  std::vector<MPI_Request> sends;
};

struct MpiBootstrap::Abandoned {
  std::vector<MPI_Request> barriers;
};

struct MpiBootstrap::WorkersFinished {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool entered = false;
  bool everywhere = false;
};

std::string MpiLibraryName() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS || length <= 0) return "MPI (it does not say which)";
  const std::string name(text, static_cast<size_t>(length));
  return name.substr(0, name.find_first_of(",\n"));
}

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
  workers_finished_ = std::make_unique<WorkersFinished>();
  MPI_Comm_dup(MPI_COMM_WORLD, &workers_finished_->comm);
  abandoned_ = std::make_unique<Abandoned>();
}

MpiBootstrap::~MpiBootstrap() {
  // MPI_Finalize wants no request pending. A barrier given up on is complete by now wherever a
  // later collective completed (every rank entered it first); the workers' barrier, once every
  // rank's workers ended. Tested for a bounded time, not waited for: a rank that never comes
  // must not hold this one here (MPI_Finalize then says what it found).
  std::vector<MPI_Request> pending = abandoned_->barriers;
  if (workers_finished_->entered) pending.push_back(workers_finished_->barrier);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int done = pending.empty() ? 1 : 0;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    MPI_Testall(static_cast<int>(pending.size()), pending.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done) PSF_LOG(Warning) << "a barrier of the job was still pending at MPI_Finalize (a rank never reached it)";
  MPI_Finalize();
}

void MpiBootstrap::NoteWorkersFinished() {
  if (workers_finished_->entered) return;
  workers_finished_->entered = true;
  MPI_Ibarrier(workers_finished_->comm, &workers_finished_->barrier);
}

bool MpiBootstrap::WorkersFinishedEverywhere() {
  if (!workers_finished_->entered) return false;
  if (!workers_finished_->everywhere) {
    int done = 0;
    MPI_Test(&workers_finished_->barrier, &done, MPI_STATUS_IGNORE);
    workers_finished_->everywhere = done != 0;
  }
  return workers_finished_->everywhere;
}

void MpiBootstrap::ListenForStop() {
  stop_ = std::make_unique<StopNotices>();
  MPI_Irecv(stop_->received, 2, MPI_INT, MPI_ANY_SOURCE, kStopTag, MPI_COMM_WORLD, &stop_->receive);
}

std::optional<MpiBootstrap::StopNotice> MpiBootstrap::StopAsked() {
  if (!stop_ || stop_->receive == MPI_REQUEST_NULL) return std::nullopt;
  int done = 0;
  MPI_Test(&stop_->receive, &done, MPI_STATUS_IGNORE);  // sets the request to MPI_REQUEST_NULL when done
  if (!done) return std::nullopt;
  return StopNotice{stop_->received[0], stop_->received[1]};
}

void MpiBootstrap::AnnounceStop(int signal) {
  if (!stop_ || stop_->announced) return;
  stop_->announced = true;
  stop_->sent[0] = signal;
  stop_->sent[1] = rank_;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    stop_->sends.emplace_back();
    MPI_Isend(stop_->sent, 2, MPI_INT, r, kStopTag, MPI_COMM_WORLD, &stop_->sends.back());
  }
  // Start them on their way now: a small message goes out eagerly, before this rank calls MPI
  // again.
  int done = 0;
  MPI_Testall(static_cast<int>(stop_->sends.size()), stop_->sends.data(), &done, MPI_STATUSES_IGNORE);
}

void MpiBootstrap::EndStopNotices() {
  if (!stop_) return;
  // How many notices were sent to this rank: every rank but the announcers' own sent one each.
  const int announcers = [&] {
    int mine = stop_->announced ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return all;
  }();
  int to_me = announcers - (stop_->announced ? 1 : 0);
  if (stop_->receive != MPI_REQUEST_NULL) {
    if (to_me > 0) {
      MPI_Wait(&stop_->receive, MPI_STATUS_IGNORE);
    } else {
      MPI_Cancel(&stop_->receive);
      MPI_Wait(&stop_->receive, MPI_STATUS_IGNORE);
    }
  }
  if (to_me > 0) --to_me;  // the one the posted receive took
  for (int buffer[2]; to_me > 0; --to_me) {
    MPI_Recv(buffer, 2, MPI_INT, MPI_ANY_SOURCE, kStopTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Waitall(static_cast<int>(stop_->sends.size()), stop_->sends.data(), MPI_STATUSES_IGNORE);
  stop_.reset();
}

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
  const bool forever = timeout == std::chrono::milliseconds::max();
  const auto deadline = std::chrono::steady_clock::now() + (forever ? std::chrono::milliseconds(0) : timeout);
  while (true) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (!forever && std::chrono::steady_clock::now() >= deadline) {
      abandoned_->barriers.push_back(request);
      return false;
    }
    if (while_waiting) while_waiting();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void MpiBootstrap::Abort(int exit_status) {
  MPI_Abort(MPI_COMM_WORLD, exit_status);
  std::_Exit(exit_status);  // MPI_Abort does not return; this satisfies [[noreturn]].
}

}  // namespace psformer
