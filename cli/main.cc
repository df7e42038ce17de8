// specline: command-line entry point.
#include <cstring>
#include <exception>
#include <iostream>

#include "cli/commands.h"

namespace {

const char kUsage[] = R"(usage: specline COMMAND [options]
commands:
  generate            stream a completion from a local model
  make-random-model   write a randomly initialised Llama-shaped model
  make-random-head    write a randomly initialised draft head (PPSD / SPD) for a model
  info                print a model's config and tensors
  chat-template       print the prompt a model's chat template makes of a conversation
  serve               run gateway + scheduler + stage workers on localhost
  client              stream a generation from a running gateway
  health              ask a running process's grpc.health.v1 service (exit 0 = SERVING)
Run `specline COMMAND --help` for a command's options.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  try {
    const std::string cmd = argv[1];
    if (cmd == "generate") return specline::cli::GenerateCommand(argc, argv);
    if (cmd == "make-random-model") return specline::cli::RandomModelCommand(argc, argv);
    if (cmd == "make-random-head") return specline::cli::RandomHeadCommand(argc, argv);
    if (cmd == "chat-template") return specline::cli::ChatTemplateCommand(argc, argv);
    if (cmd == "info") return specline::cli::InfoCommand(argc, argv);
    if (cmd == "serve") return specline::cli::ServeCommand(argc, argv);
    if (cmd == "client") return specline::cli::ClientCommand(argc, argv);
    if (cmd == "health") return specline::cli::HealthCommand(argc, argv);
    std::cerr << "unknown command: " << cmd << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
