#include "scheduler/batch_rows.h"

namespace specline::scheduler {

void BatchRows::Add(uint64_t seq_id, int32_t pos, uint32_t epoch, int32_t token, RowModel model) {
  rows_.push_back({seq_id, pos, epoch, token, model});
  any_weight_set_ = any_weight_set_ || model.weight_set != 0;
  any_adapter_ = any_adapter_ || model.adapter != 0;
}

void BatchRows::AppendInputs(std::span<const float> rows) {
  inputs_.append(reinterpret_cast<const char*>(rows.data()), rows.size_bytes());
}

void BatchRows::WriteTo(internal::MicroBatch& batch) const {
  for (const Row& r : rows_) {
    batch.add_seq_ids(r.seq);
    batch.add_positions(r.pos);
    batch.add_epochs(r.epoch);
    batch.add_tokens(r.token);
    if (any_weight_set_) batch.add_weight_set(r.model.weight_set);
    if (any_adapter_) {
      batch.add_adapter(r.model.adapter);
      batch.add_adapter_arg(r.model.adapter_arg);
    }
  }
  if (!inputs_.empty()) batch.set_hidden(inputs_);
}

}  // namespace specline::scheduler
