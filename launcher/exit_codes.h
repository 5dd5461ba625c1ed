// The exit statuses of `psformer` and its subcommands, named once (the README's "0 success, 1 a
// failure while running, 2 a usage error"), plus those the supervisors and `psformer launch`
// read back from their children. The role processes' own "do not restart me" status belongs to
// the role/supervisor protocol: kExitDoNotRestart in common/supervisor_report.h.
#ifndef PSFORMER_LAUNCHER_EXIT_CODES_H_
#define PSFORMER_LAUNCHER_EXIT_CODES_H_

namespace psformer {

inline constexpr int kExitSuccess = 0;
// Something failed while running (a file, a peer, a role that died for good); the message says what.
inline constexpr int kExitFailure = 1;
// The command line was wrong: an unknown option, a missing or contradictory argument.
inline constexpr int kExitUsage = 2;
// A forked child could not exec its program (the shells' convention).
inline constexpr int kExitExecFailed = 127;
// Stopped by Ctrl-C or SIGTERM after an orderly stop: 128 + SIGINT, as shells report it, so a
// script can tell an interrupted job (continue it with --resume) from a failed one.
inline constexpr int kExitInterrupted = 130;
// The same orderly stop after SIGHUP (the terminal closed): 128 + SIGHUP.
inline constexpr int kExitHangup = 129;

}  // namespace psformer

#endif  // PSFORMER_LAUNCHER_EXIT_CODES_H_
