#include "model/runtime/slice_backend.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace specline {

absl::Status ValidateAndReserve(const SliceInput& in, bool embeds, const ModelConfig& config,
                                int begin, int end, PagedKvCache& kv, bool hidden_elsewhere,
                                bool ptp) {
  const size_t n = in.slots.size();
  if (!in.aux_u.empty()) {
    if (in.aux_u.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("aux_u has ", in.aux_u.size(),
                                                     " values for ", n, " slots"));
    }
    if (!ptp && !AuxRows(in).empty()) {
      return absl::FailedPreconditionError(
          "the batch has PTP auxiliary rows but this stage has no PTP adapter (start every "
          "stage with --ptp-head)");
    }
    for (size_t i = 0; i < n; ++i) {
      // u < 1 in double may round to 1 in float: [0, 1] is valid.
      if (in.aux_u[i] > 1.0f || std::isnan(in.aux_u[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("slot ", i, ": aux_u ", in.aux_u[i], " is neither in [0, 1] nor negative"));
      }
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
  const int bs = kv.shape().block_size;
  std::vector<std::pair<int64_t, uint64_t>> by_net;
  for (uint64_t seq : order) {
    const Run& r = runs[seq];
    const int32_t len = kv.Length(seq);
    if (r.first > len) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": position ", r.first,
                                                     " leaves a gap after cached length ", len));
    }
    const int64_t held = (len + bs - 1) / bs;
    const int64_t need = (int64_t{r.first} + r.count + bs - 1) / bs;
    by_net.emplace_back(need - held, seq);
    net += need - held;
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

std::vector<int32_t> AuxRows(const SliceInput& in) {
  std::vector<int32_t> rows;
  for (size_t i = 0; i < in.aux_u.size(); ++i) {
    if (in.aux_u[i] >= 0.0f) rows.push_back(static_cast<int32_t>(i));
  }
  return rows;
}

}  // namespace specline
