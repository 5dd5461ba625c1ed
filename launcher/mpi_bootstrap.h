// The MPI side of cluster mode: MPI carries only the bootstrap (who is where, which endpoints,
// the job id and run directory), a stop one rank began, and the final shutdown. Role processes
// never call MPI, because Open MPI aborts the whole job when one of its processes dies
// (docs/failure-model.md).
#ifndef PSFORMER_LAUNCHER_MPI_BOOTSTRAP_H_
#define PSFORMER_LAUNCHER_MPI_BOOTSTRAP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace psformer {

// True when this process was started by mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE; PMIx
// launchers set PMIX_RANK).
bool StartedByMpirun();
// The number of ranks mpirun started (Open MPI's OMPI_COMM_WORLD_SIZE), read without starting
// MPI (--dry-run); 0 where it does not say.
int MpirunRankCount();
// The MPI library's name for itself, up to its first comma ("Open MPI v4.1.4"); callable
// without starting MPI.
std::string MpiLibraryName();

class MpiBootstrap {
 public:
  MpiBootstrap();   // MPI_Init
  ~MpiBootstrap();  // MPI_Finalize, unless Abort was called.
  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Every rank's value of `mine`, in rank order (MPI_Allgather of bounded strings).
  StatusOr<std::vector<std::string>> AllGather(const std::string& mine);
  // Rank 0's value of `value`, on every rank.
  std::string Broadcast(const std::string& value);
  // The largest of every rank's `value` (ranks agree on the job's exit status).
  int AllReduceMax(int value);
  // Waits until every rank has called this (a non-blocking barrier), calling `while_waiting`
  // every few ms; false if `timeout` passed first (the barrier then stays pending, and the ranks
  // still agree on the order of later collectives: it completes before any later one can, and
  // the destructor waits for it before MPI_Finalize); milliseconds::max() waits for ever.
  bool BarrierWithin(std::chrono::milliseconds timeout, const std::function<void()>& while_waiting);
  // Ends every rank of the job with `exit_status` (after this rank printed why).
  [[noreturn]] void Abort(int exit_status);

  // An orderly stop one rank began (a stop signal that reached it alone), passed on to the
  // others, point to point: ListenForStop posts the receive of one notice, StopAsked tests it
  // (non-blocking), AnnounceStop sends this rank's to every other rank, and EndStopNotices (a
  // collective, once supervision ended) receives those sent and not yet received and cancels
  // what waits for none, so that MPI_Finalize finds nothing pending.
  struct StopNotice {
    int signal = 0;
    int rank = 0;  // the rank that began the stop
  };
  void ListenForStop();
  std::optional<StopNotice> StopAsked();
  void AnnounceStop(int signal);
  void EndStopNotices();

  // Whether the workers of every rank have finished (a rank with none has at once), for the
  // supervisors of ranks that outlive them (SupervisionHooks::every_worker_finished): a
  // non-blocking barrier on a communicator of its own, so that it takes no part in the order of
  // the other collectives. NoteWorkersFinished enters it once this rank's workers have finished
  // or stopped (repeats change nothing); WorkersFinishedEverywhere tests it, not blocking.
  void NoteWorkersFinished();
  bool WorkersFinishedEverywhere();

 private:
  struct StopNotices;  // MPI's requests and buffers (mpi.h stays in the .cc)
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<StopNotices> stop_;
  struct WorkersFinished;  // the communicator and request of NoteWorkersFinished
  std::unique_ptr<WorkersFinished> workers_finished_;
  struct Abandoned;  // the requests of barriers BarrierWithin stopped waiting for
  std::unique_ptr<Abandoned> abandoned_;
};

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_MPI_BOOTSTRAP_H_
