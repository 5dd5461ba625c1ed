// The psformer command: parse the subcommand, hand over to it (launcher/commands.h).
#include "launcher/commands.h"

int main(int argc, char** argv) { return psformer::RunCommandLine(argc, argv); }
