// The rows of one micro-batch as the policies write them
// (DecodingPolicy::WriteRows), one per position sent, and what each row
// runs with on the stages besides its token.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specline/internal/stage.pb.h"

namespace specline::scheduler {

// What a row runs with on the stages besides its token: the weight set
// and the adapter (ids the stages report in StageInfo; 0 = the base model,
// no adapter) and the adapter's argument. A row on a weight set that takes
// hidden input has its stage-0 input appended with AppendInputs.
struct RowModel {
  uint32_t weight_set = 0;
  uint32_t adapter = 0;
  float adapter_arg = 0.0f;
};

// The rows of one batch being written, in slot order.
class BatchRows {
 public:
  void Add(uint64_t seq_id, int32_t pos, uint32_t epoch, int32_t token, RowModel model = {});
  // Stage-0 input rows of the batch's hidden-input rows, in slot order.
  void AppendInputs(std::span<const float> rows);
  // Writes the rows into `batch` (the extras only when a row uses them).
  void WriteTo(internal::MicroBatch& batch) const;

 private:
  struct Row {
    uint64_t seq = 0;
    int32_t pos = 0;
    uint32_t epoch = 0;
    int32_t token = 0;
    RowModel model;
  };
  std::vector<Row> rows_;
  std::string inputs_;
  bool any_weight_set_ = false, any_adapter_ = false;
};

}  // namespace specline::scheduler
