#include "proto/policy_names.h"

#include <vector>

namespace specline {
namespace {

struct Named {
  std::string name;
  v1::DecodingPolicy policy;
  bool lossless;
};

// Read once from the descriptor, in the enum's order.
const std::vector<Named>& Policies() {
  static const std::vector<Named> policies = [] {
    std::vector<Named> out;
    const google::protobuf::EnumDescriptor* e = v1::DecodingPolicy_descriptor();
    for (int i = 0; i < e->value_count(); ++i) {
      const google::protobuf::EnumValueOptions& o = e->value(i)->options();
      if (!o.HasExtension(v1::short_name)) continue;  // UNSPECIFIED
      out.push_back({o.GetExtension(v1::short_name),
                     static_cast<v1::DecodingPolicy>(e->value(i)->number()),
                     o.GetExtension(v1::lossless)});
    }
    return out;
  }();
  return policies;
}

const Named* Find(v1::DecodingPolicy policy) {
  for (const Named& p : Policies()) {
    if (policy == p.policy) return &p;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<v1::DecodingPolicy> PolicyFromName(std::string_view name) {
  if (name.empty()) return v1::DECODING_POLICY_UNSPECIFIED;
  for (const Named& p : Policies()) {
    if (name == p.name) return p.policy;
  }
  return absl::InvalidArgumentError("--policy: \"" + std::string(name) + "\" is not " +
                                    PolicyNames());
}

const char* PolicyShortName(v1::DecodingPolicy policy) {
  const Named* p = Find(policy);
  return p ? p->name.c_str() : "";
}

const std::string& PolicyNames() {
  static const std::string names = [] {
    std::string out;
    const std::vector<Named>& all = Policies();
    for (size_t i = 0; i < all.size(); ++i) {
      if (i > 0) out += i + 1 == all.size() ? " or " : ", ";
      out += all[i].name;
    }
    return out;
  }();
  return names;
}

bool PolicyIsLossless(v1::DecodingPolicy policy) {
  const Named* p = Find(policy);
  return p && p->lossless;
}

}  // namespace specline
