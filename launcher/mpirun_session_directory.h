// The session directory of an mpirun that was killed. Open MPI's mpirun (4.x) keeps its files on
// the host it runs on in TMP/ompi.HOST.UID/pid.PID (PID: its own process id; contact.txt there
// names it on its second line) and removes them when it exits; killed with SIGKILL, it leaves
// them in /tmp for good. The launch kills mpirun that way only when a lost host keeps it from
// ending (launcher/watched_mpirun.h), and then removes what it left.
#ifndef PSFORMER_LAUNCHER_MPIRUN_SESSION_DIRECTORY_H_
#define PSFORMER_LAUNCHER_MPIRUN_SESSION_DIRECTORY_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace psformer {

// Where mpirun process `pid` of this user on this host keeps its session directory, in the order
// Open MPI picks a base: OMPI_MCA_orte_local_tmpdir_base, OMPI_MCA_orte_tmpdir_base, TMPDIR, TEMP,
// TMP, /tmp (each base with the host's name as given and without its domain).
std::vector<std::string> MpirunSessionDirectoryCandidates(pid_t pid);

// Removes the session directory that mpirun `pid`, killed and reaped, left: the candidate whose
// contact.txt names that pid (and no other path), then its ompi.HOST.UID parent once empty.
// Returns the directory removed, or "" when there was none.
std::string RemoveKilledMpirunSessionDirectory(pid_t pid);

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_MPIRUN_SESSION_DIRECTORY_H_
