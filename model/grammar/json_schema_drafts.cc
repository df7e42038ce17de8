#include "model/grammar/json_schema_drafts.h"

#include <nlohmann/json.hpp>

namespace specline::grammar {
namespace {

using nlohmann::ordered_json;

bool IsData(const std::string& key) {
  return key == "enum" || key == "const" || key == "default" || key == "examples";
}

// Rewrites `node` and everything below it; true when anything changed.
bool Rewrite(ordered_json& node) {
  bool changed = false;
  if (node.is_array()) {
    for (ordered_json& v : node) changed |= Rewrite(v);
    return changed;
  }
  if (!node.is_object()) return false;
  if (auto items = node.find("items"); items != node.end() && items->is_array() &&
                                       !node.contains("prefixItems")) {
    ordered_json tuple = std::move(*items);
    node.erase("items");
    node["prefixItems"] = std::move(tuple);
    if (auto extra = node.find("additionalItems"); extra != node.end()) {
      ordered_json rest = std::move(*extra);
      node.erase("additionalItems");
      node["items"] = std::move(rest);
    }
    changed = true;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!IsData(it.key())) changed |= Rewrite(it.value());
  }
  return changed;
}

}  // namespace

std::string TupleItemsAsPrefixItems(const std::string& schema) {
  // Cheap test first: most schemas have no list after "items".
  if (schema.find("items") == std::string::npos) return schema;
  ordered_json parsed = ordered_json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !Rewrite(parsed)) return schema;
  return parsed.dump();
}

}  // namespace specline::grammar
