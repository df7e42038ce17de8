// JSON Schema written for older drafts, rewritten into the 2020-12 forms
// xgrammar reads. Draft 4-7 tuples: "items" as a list of schemas (one per
// position) and "additionalItems" for the rest, which 2020-12 spells
// "prefixItems" and "items" (llama.cpp's server and OpenAI's clients still
// send the older form).
#pragma once

#include <string>

namespace specline::grammar {

// `schema` (JSON text) with every tuple "items": [...] turned into
// "prefixItems": [...], and its "additionalItems" into "items" (dropped
// when absent, so that strict mode allows no items past the tuple, as it
// does for prefixItems). Values of enum, const, default and examples are
// data, not schemas, and stay as they are. Text that is not JSON comes
// back unchanged, for the compiler to refuse.
std::string TupleItemsAsPrefixItems(const std::string& schema);

}  // namespace specline::grammar
