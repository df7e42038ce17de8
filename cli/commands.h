// Subcommands of the `specline` binary. Each takes main's argv (the
// subcommand name at argv[1]) and returns the exit code.
#pragma once

namespace specline::cli {

int GenerateCommand(int argc, char** argv);
int RandomModelCommand(int argc, char** argv);
int RandomHeadCommand(int argc, char** argv);  // draft heads of the right shapes
int InfoCommand(int argc, char** argv);
int ChatTemplateCommand(int argc, char** argv);  // the prompt a conversation becomes
int ServeCommand(int argc, char** argv);   // launcher: gateway + scheduler + stages
int ClientCommand(int argc, char** argv);  // streams from a running gateway
int HealthCommand(int argc, char** argv);  // grpc.health.v1 Check of any process

}  // namespace specline::cli
