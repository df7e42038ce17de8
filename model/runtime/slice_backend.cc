#include "model/runtime/slice_backend.h"

#include <algorithm>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace specline {

absl::Status ValidateAndReserve(const SliceInput& in, bool embeds, const ModelConfig& config,
                                int begin, int end, PagedKvCache& kv, bool hidden_elsewhere,
                                std::span<const std::shared_ptr<const SliceAdapter>> adapters) {
  const size_t n = in.slots.size();
  if (!in.adapter.empty() && in.adapter.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter has ", in.adapter.size(), " ids for ", n, " slots"));
  }
  if (!in.adapter_arg.empty() && in.adapter_arg.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("adapter_arg has ", in.adapter_arg.size(), " values for ", n, " slots"));
  }
  for (size_t i = 0; i < in.adapter.size(); ++i) {
    const uint32_t id = in.adapter[i];
    if (id == 0) continue;
    if (id > adapters.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "slot ", i, " asks for adapter ", id, " but this stage has ", adapters.size(),
          " (start every stage with the same --adapter flags)"));
    }
    const float arg = in.adapter_arg.empty() ? 0.0f : in.adapter_arg[i];
    if (absl::Status st = adapters[id - 1]->CheckArg(arg); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", i, ": ", st.message()));
    }
  }
  if (embeds) {
    if (in.tokens.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("first slice needs one token per slot: ", in.tokens.size(),
                       " tokens for ", n, " slots"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (in.tokens[i] < 0 || in.tokens[i] >= config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "slot ", i, ": token ", in.tokens[i], " outside vocabulary of ", config.vocab_size));
      }
    }
  } else if (!hidden_elsewhere && in.hidden.size() != n * config.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden input has ", in.hidden.size(), " values, expected ", n, " x ", config.dim));
  }
  // Per sequence: first position, count, and that positions run consecutively.
  struct Run {
    int32_t first = 0, count = 0;
  };
  std::unordered_map<uint64_t, Run> runs;
  std::vector<uint64_t> order;
  for (size_t i = 0; i < n; ++i) {
    const SlotRef& s = in.slots[i];
    if (s.pos < 0 || s.pos >= config.max_seq_len) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", i, ": position ", s.pos,
                                                     " outside [0, ", config.max_seq_len, ")"));
    }
    auto [it, fresh] = runs.try_emplace(s.seq_id, Run{s.pos, 0});
    if (fresh) order.push_back(s.seq_id);
    Run& r = it->second;
    if (s.pos != r.first + r.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", i, ": sequence ", s.seq_id, " position ", s.pos,
                       " does not follow its previous slot (", r.first + r.count - 1, ")"));
    }
    ++r.count;
  }
  // Capacity: sequences that give blocks back go first, and the net demand
  // must fit, so no Reserve below can fail half-way.
  int64_t net = 0;
  std::vector<std::pair<int64_t, uint64_t>> by_net;
  for (uint64_t seq : order) {
    absl::StatusOr<int64_t> demand = kv.NetDemand(seq, runs[seq].first, runs[seq].count);
    if (!demand.ok()) return demand.status();
    by_net.emplace_back(*demand, seq);
    net += *demand;
  }
  if (net > kv.free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache of layers [", begin, ", ", end, ") is full: need ", net, " blocks, ",
        kv.free_blocks(), " free"));
  }
  std::sort(by_net.begin(), by_net.end());
  for (const auto& [_, seq] : by_net) {
    absl::Status st = kv.Reserve(seq, runs[seq].first, runs[seq].count);
    if (!st.ok()) return st;  // unreachable after the checks above
  }
  return absl::OkStatus();
}

AdaptedRows RowsByAdapter(const SliceInput& in, size_t n_adapters) {
  AdaptedRows rows(n_adapters);
  for (size_t i = 0; i < in.adapter.size(); ++i) {
    if (in.adapter[i] != 0) rows.at(in.adapter[i] - 1).push_back(static_cast<int32_t>(i));
  }
  return rows;
}

void EmbedAdapted(std::span<const std::shared_ptr<const SliceAdapter>> adapters,
                  const AdaptedRows& rows, std::span<const float> args, int64_t dim, float* x) {
  for (size_t k = 0; k < rows.size(); ++k) {
    if (!adapters[k]->ReplacesEmbedding()) continue;
    for (int32_t r : rows[k]) adapters[k]->Embed(args.empty() ? 0.0f : args[r], x + r * dim);
  }
}

void ApplyAdapters(std::span<const std::shared_ptr<const SliceAdapter>> adapters,
                   const AdaptedRows& rows, int layer, Projection target, const float* x,
                   int64_t x_width, float* y, int64_t y_width) {
  for (size_t k = 0; k < rows.size(); ++k) {
    if (rows[k].empty()) continue;
    adapters[k]->Apply(layer, target, rows[k], x, x_width, y, y_width);
  }
}

}  // namespace specline
