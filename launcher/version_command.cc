// `psformer version` (also `psformer --version`): the commit this psformer was built from and
// the libraries it runs with (launcher/build_info.h), for a bug report or a run's record.
#include <iostream>

#include "launcher/build_info.h"
#include "launcher/command_line.h"
#include "launcher/exit_codes.h"

namespace psformer {

int RunVersionCommand(const Args& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "usage: psformer version   (also psformer --version)\n\n"
              << "Prints the commit this psformer was built from, the OpenBLAS and CUDA it computes with,\n"
              << "and the versions of ZeroMQ, Protocol Buffers, Boost and MPI it runs with.\n";
    return kExitSuccess;
  }
  if (!args.empty()) {
    return ReportError("version", "it takes no arguments (got '" + args[0] + "')", kExitUsage);
  }
  std::cout << BuildDescription();
  return kExitSuccess;
}

}  // namespace psformer
