// A small "--name value" / "--flag" command-line parser for the subcommands.
// Every option must be declared, so a typo is an error rather than ignored.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace specline::cli {

class Args {
 public:
  // `flags` take no value; `options` take one.
  Args(int argc, char** argv, int first, const std::vector<std::string>& options,
       const std::vector<std::string>& flags);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  // The last value given (a repeated option's earlier ones are in All).
  std::string Str(const std::string& name, const std::string& fallback = "") const;
  // Every value of a repeatable option, in command-line order.
  std::vector<std::string> All(const std::string& name) const;
  int Int(const std::string& name, int fallback) const;
  double Float(const std::string& name, double fallback) const;
  uint64_t U64(const std::string& name, uint64_t fallback) const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_;
};

}  // namespace specline::cli
