// What a policy prepares once per request, before the request queues
// (DecodingPolicy::Prepare), and hands to each of its attempts
// (DecodingPolicy::Attach): PIPO's compressed prompt. Kept with the request
// (Sequence::prepared) so that a restart does not redo it.
#pragma once

#include <typeinfo>

namespace specline::scheduler {

// Each policy that prepares derives its own and reads it back with
// PreparedAs.
struct PreparedRequest {
  virtual ~PreparedRequest() = default;
};

// Ends the process: a policy was handed a preparation it did not make.
[[noreturn]] void PreparedTypeMismatch(const std::type_info& wanted);

// `prepared` as the type the policy's Prepare made. Checked: the engine
// hands a policy only its own preparation, so anything else is a bug, and
// ends the process rather than read another type's fields.
template <typename T>
const T& PreparedAs(const PreparedRequest* prepared) {
  const T* typed = dynamic_cast<const T*>(prepared);
  if (typed == nullptr) PreparedTypeMismatch(typeid(T));
  return *typed;
}

}  // namespace specline::scheduler
