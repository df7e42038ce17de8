#include "scheduler/policies/policy_flag.h"

#include "absl/strings/str_split.h"

namespace specline::scheduler {

std::string PolicyFlagUsage(std::span<const PolicyFlag> flags, int help_column) {
  const std::string indent(help_column, ' ');
  std::string out;
  for (const PolicyFlag& f : flags) {
    std::string line = absl::StrCat("  --", f.name, " ", f.value);
    // Too long for the column: the help starts on the next line.
    line += line.size() + 1 > indent.size() ? "\n" + indent
                                             : std::string(indent.size() - line.size(), ' ');
    std::string help = f.help;
    if (*f.default_shown) absl::StrAppend(&help, " (default ", f.default_shown, ")");
    bool first = true;
    for (absl::string_view part : absl::StrSplit(help, '\n')) {
      absl::StrAppend(&out, first ? line : indent, part, "\n");
      first = false;
    }
  }
  return out;
}

}  // namespace specline::scheduler
