#include "common/flag_map.h"

#include <string>

namespace specline {

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseFlagList(int argc,
                                                                                char** argv) {
  std::vector<std::pair<std::string, std::string>> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\""));
    }
    std::string name = arg.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    values.emplace_back(std::move(name), std::move(value));
  }
  return values;
}

absl::StatusOr<std::map<std::string, std::string>> ParseFlagMap(int argc, char** argv) {
  auto list = ParseFlagList(argc, argv);
  if (!list.ok()) return list.status();
  std::map<std::string, std::string> values;
  for (auto& [name, value] : *list) values[name] = std::move(value);
  return values;
}

bool HelpRequested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace specline
