#include "model/drafters/token_recycling.h"

#include <stdexcept>

namespace specline {

TokenRecycling::TokenRecycling(int32_t vocab_size, int k) : vocab_size_(vocab_size), k_(k) {
  if (vocab_size <= 0 || k <= 0) {
    throw std::invalid_argument("TokenRecycling needs vocab_size > 0 and k > 0");
  }
  const size_t n = static_cast<size_t>(vocab_size) * k;
  if (vocab_size <= kEmpty16) {
    narrow_ = std::make_unique<std::atomic<uint16_t>[]>(n);
  } else {
    wide_ = std::make_unique<std::atomic<int32_t>[]>(n);
  }
  Clear();
}

int32_t TokenRecycling::Get(size_t index) const {
  if (narrow_) {
    const uint16_t v = narrow_[index].load(std::memory_order_relaxed);
    return v == kEmpty16 ? kEmpty32 : v;
  }
  return wide_[index].load(std::memory_order_relaxed);
}

void TokenRecycling::Set(size_t index, int32_t value) {
  if (narrow_) {
    narrow_[index].store(value < 0 ? kEmpty16 : static_cast<uint16_t>(value),
                         std::memory_order_relaxed);
  } else {
    wide_[index].store(value, std::memory_order_relaxed);
  }
}

void TokenRecycling::Clear() {
  const size_t n = static_cast<size_t>(vocab_size_) * k_;
  for (size_t i = 0; i < n; ++i) Set(i, kEmpty32);
}

void TokenRecycling::Update(int32_t input_token, std::span<const int32_t> top_candidates) {
  if (input_token < 0 || input_token >= vocab_size_) return;
  const size_t row = static_cast<size_t>(input_token) * k_;
  // Valid candidates are packed to the front so a row never has a hole
  // before a valid entry (Draft reads entry 0 as "the" next token).
  int j = 0;
  for (int32_t c : top_candidates) {
    if (j == k_) break;
    if (c < 0 || c >= vocab_size_) continue;
    Set(row + j++, c);
  }
  for (; j < k_; ++j) Set(row + j, kEmpty32);
}

std::vector<int32_t> TokenRecycling::Draft(std::span<const int32_t> context, int n) const {
  std::vector<int32_t> out;
  if (context.empty() || n <= 0) return out;
  int32_t t = context.back();
  out.reserve(n);
  while (static_cast<int>(out.size()) < n) {
    if (t < 0 || t >= vocab_size_) break;
    const int32_t next = Get(static_cast<size_t>(t) * k_);
    if (next < 0) break;
    out.push_back(next);
    t = next;
  }
  return out;
}

std::vector<int32_t> TokenRecycling::Candidates(int32_t token) const {
  std::vector<int32_t> out;
  if (token < 0 || token >= vocab_size_) return out;
  const size_t row = static_cast<size_t>(token) * k_;
  for (int j = 0; j < k_; ++j) {
    const int32_t c = Get(row + j);
    if (c < 0) break;
    out.push_back(c);
  }
  return out;
}

bool TokenRecycling::Seen(int32_t token) const {
  return token >= 0 && token < vocab_size_ && Get(static_cast<size_t>(token) * k_) >= 0;
}

size_t TokenRecycling::bytes() const {
  const size_t n = static_cast<size_t>(vocab_size_) * k_;
  return narrow_ ? n * sizeof(std::atomic<uint16_t>) : n * sizeof(std::atomic<int32_t>);
}

}  // namespace specline
