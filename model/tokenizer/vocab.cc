#include "model/tokenizer/vocab.h"

#include <algorithm>
#include <stdexcept>

namespace specline {

void Vocab::Check(const std::string& source) const {
  if (pieces.empty()) throw std::runtime_error(source + ": empty vocabulary");
  if (types.size() != pieces.size() || (!scores.empty() && scores.size() != pieces.size()))
    throw std::runtime_error(source + ": vocabulary arrays differ in length");
  for (int32_t id : {bos, eos, unk, pad}) {
    if (id != -1 && !Valid(id))
      throw std::runtime_error(source + ": special token id " + std::to_string(id) +
                               " outside the vocabulary of " + std::to_string(size()));
  }
}

void Vocab::CollectStopIds() {
  stop_ids.clear();
  if (eos >= 0) stop_ids.push_back(eos);
  // End-of-turn markers of the chat formats we render (ChatML, Llama 3,
  // Gemma, Phi-3): generation must stop there even when EOS differs.
  static const char* const kEndOfTurn[] = {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>",
                                           "<end_of_turn>", "<|end|>", "<|endoftext|>"};
  for (int32_t id = 0; id < size(); ++id) {
    if (types[id] != TokenType::kControl && types[id] != TokenType::kUserDefined) continue;
    for (const char* marker : kEndOfTurn) {
      if (pieces[id] == marker &&
          std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end())
        stop_ids.push_back(id);
    }
  }
}

void SpecialSplitter::Add(Table* table, const std::string& piece, int32_t id) {
  if (piece.empty()) return;
  auto& list = (*table)[static_cast<unsigned char>(piece[0])];
  list.emplace_back(piece, id);
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void SpecialSplitter::Build(const Vocab& vocab) {
  always_.clear();
  control_.clear();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.types[id] == TokenType::kUserDefined) Add(&always_, vocab.pieces[id], id);
    if (vocab.types[id] == TokenType::kControl) Add(&control_, vocab.pieces[id], id);
  }
}

int32_t SpecialSplitter::Match(const Table& t, std::string_view rest, size_t* len) {
  auto it = t.find(static_cast<unsigned char>(rest[0]));
  if (it == t.end()) return -1;
  for (const auto& [piece, id] : it->second) {
    if (rest.substr(0, piece.size()) == piece) {
      *len = piece.size();
      return id;
    }
  }
  return -1;
}

std::vector<SpecialSplitter::Fragment> SpecialSplitter::Split(std::string_view text,
                                                              bool parse_special) const {
  std::vector<Fragment> out;
  size_t text_start = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len_a = 0, len_c = 0;
    int32_t a = always_.empty() ? -1 : Match(always_, text.substr(i), &len_a);
    int32_t c = (parse_special && !control_.empty()) ? Match(control_, text.substr(i), &len_c) : -1;
    if (a < 0 && c < 0) {
      ++i;
      continue;
    }
    bool use_control = c >= 0 && len_c >= len_a;
    if (i > text_start) out.push_back({text.substr(text_start, i - text_start), -1, false});
    out.push_back({{}, use_control ? c : a, use_control});
    i += use_control ? len_c : len_a;
    text_start = i;
  }
  if (text_start < text.size() || out.empty())
    out.push_back({text.substr(text_start), -1, false});
  return out;
}

}  // namespace specline
