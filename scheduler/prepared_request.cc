#include "scheduler/prepared_request.h"

#include <cstdlib>

#include "spdlog/spdlog.h"

namespace specline::scheduler {

void PreparedTypeMismatch(const std::type_info& wanted) {
  spdlog::critical("a decoding policy was handed a request prepared by another (wanted {})",
                   wanted.name());
  std::abort();
}

}  // namespace specline::scheduler
