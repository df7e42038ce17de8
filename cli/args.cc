#include "cli/args.h"

#include <algorithm>
#include <stdexcept>

namespace specline::cli {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

template <typename T, typename Parse>
T Convert(const std::string& name, const std::string& text, Parse parse) {
  try {
    size_t used = 0;
    T v = parse(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing characters");
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument("--" + name + ": not a valid number: '" + text + "'");
  }
}

}  // namespace

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& options,
           const std::vector<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument: " + a);
    std::string name = a.substr(2), value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (Contains(options, name)) {
      if (i + 1 >= argc) throw std::invalid_argument("--" + name + " needs a value");
      value = argv[++i];
    }
    if (!Contains(options, name) && !Contains(flags, name)) {
      throw std::invalid_argument("unknown option --" + name);
    }
    values_[name] = value;
    all_[name].push_back(value);
  }
}

std::vector<std::string> Args::All(const std::string& name) const {
  auto it = all_.find(name);
  return it == all_.end() ? std::vector<std::string>() : it->second;
}

std::string Args::Str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int Args::Int(const std::string& name, int fallback) const {
  if (!Has(name)) return fallback;
  return Convert<int>(name, Str(name), [](const std::string& s, size_t* u) { return std::stoi(s, u); });
}

double Args::Float(const std::string& name, double fallback) const {
  if (!Has(name)) return fallback;
  return Convert<double>(name, Str(name), [](const std::string& s, size_t* u) { return std::stod(s, u); });
}

uint64_t Args::U64(const std::string& name, uint64_t fallback) const {
  if (!Has(name)) return fallback;
  return Convert<uint64_t>(name, Str(name),
                           [](const std::string& s, size_t* u) { return std::stoull(s, u); });
}

}  // namespace specline::cli
