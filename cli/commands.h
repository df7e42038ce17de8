// Subcommands of the `specline` binary. Each takes main's argv (the
// subcommand name at argv[1]) and returns the exit code.
#pragma once

namespace specline::cli {

int GenerateCommand(int argc, char** argv);
int RandomModelCommand(int argc, char** argv);
int InfoCommand(int argc, char** argv);

}  // namespace specline::cli
