#include "model/tokenizer/sentencepiece.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "model/tokenizer/unicode.h"

namespace specline {
namespace {

constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // ▁
// What SentencePiece prints for <unk>: " ⁇ ".
constexpr std::string_view kUnkSurface = " \xe2\x81\x87 ";

class SentencePieceTokenizer final : public VocabTokenizer {
 public:
  SentencePieceTokenizer(Vocab vocab, SentencePieceOptions options, const std::string& source)
      : VocabTokenizer(std::move(vocab)),
        options_(options),
        normalizer_(options.normalizer, source) {
    vocab_.Check(source);
    if (vocab_.scores.empty()) vocab_.scores.assign(vocab_.pieces.size(), 0.0f);
    byte_ids_.fill(-1);
    min_score_ = std::numeric_limits<float>::max();
    max_score_ = std::numeric_limits<float>::lowest();
    for (int32_t id = 0; id < vocab_.size(); ++id) {
      const std::string& p = vocab_.pieces[id];
      TokenType t = vocab_.types[id];
      all_.emplace(p, id);
      // Like upstream, only normal and user-defined pieces take part in
      // segmentation; control, unknown and byte pieces are reserved.
      if (t == TokenType::kNormal || t == TokenType::kUserDefined) {
        segment_.emplace(p, id);
        max_piece_bytes_ = std::max(max_piece_bytes_, p.size());
        if (t == TokenType::kNormal) {
          min_score_ = std::min(min_score_, vocab_.scores[id]);
          max_score_ = std::max(max_score_, vocab_.scores[id]);
        }
      }
      unsigned int byte;
      if (t == TokenType::kByte && p.size() == 6 && std::sscanf(p.c_str(), "<0x%2X>", &byte) == 1)
        byte_ids_[byte] = id;
    }
    id_byte_.assign(vocab_.pieces.size(), -1);
    for (int b = 0; b < 256; ++b)
      if (byte_ids_[b] >= 0) id_byte_[byte_ids_[b]] = static_cast<int16_t>(b);
    if (min_score_ > max_score_) min_score_ = max_score_ = 0.0f;
    if (vocab_.unk < 0) {
      for (int32_t id = 0; id < vocab_.size(); ++id)
        if (vocab_.types[id] == TokenType::kUnknown) { vocab_.unk = id; break; }
    }
    splitter_.Build(vocab_);
    if (vocab_.stop_ids.empty()) vocab_.CollectStopIds();
    // The decoder drops the dummy-prefix space at the start of the text.
    strip_leading_space_ = options.normalizer.add_dummy_prefix ||
                           options.normalizer.remove_extra_whitespaces;
  }

  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
    bool starts_text = true;
    for (const auto& frag : splitter_.Split(text, parse_special)) {
      if (frag.id >= 0) {
        ids.push_back(frag.id);
        // As llama.cpp and HF's legacy Llama tokenizer: text after a control
        // token starts afresh and gets its own dummy prefix.
        starts_text = frag.control;
        continue;
      }
      std::string normalized = normalizer_.Normalize(frag.text, starts_text);
      starts_text = false;
      if (normalized.empty()) continue;
      if (options_.algorithm == SentencePieceAlgorithm::kBpe) {
        EncodeBpe(normalized, &ids);
      } else {
        EncodeUnigram(normalized, &ids);
      }
    }
    return ids;
  }

  std::string TokenBytes(int32_t prev, int32_t id) const override {
    if (!vocab_.Valid(id)) return "";
    const std::string& piece = vocab_.pieces[id];
    switch (vocab_.types[id]) {
      case TokenType::kControl:
      case TokenType::kUnused: return "";
      case TokenType::kUnknown: return std::string(kUnkSurface);
      case TokenType::kByte:
        return id_byte_[id] >= 0 ? std::string(1, static_cast<char>(id_byte_[id])) : "";
      default: break;
    }
    std::string_view view = piece;
    const bool at_start = prev < 0 || (vocab_.Valid(prev) && vocab_.types[prev] == TokenType::kControl);
    if (at_start && strip_leading_space_ && view.substr(0, kSpaceSymbol.size()) == kSpaceSymbol)
      view.remove_prefix(kSpaceSymbol.size());
    std::string out;
    out.reserve(view.size());
    for (size_t i = 0; i < view.size();) {
      if (view.substr(i, kSpaceSymbol.size()) == kSpaceSymbol) {
        out.push_back(' ');
        i += kSpaceSymbol.size();
      } else {
        out.push_back(view[i++]);
      }
    }
    return out;
  }


 private:
  // A piece that is not in the vocabulary: its bytes as <0xXX> tokens, or
  // one <unk>.
  void EmitUnknown(std::string_view bytes, std::vector<int32_t>* ids) const {
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : bytes) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : bytes) ids->push_back(byte_ids_[b]);
        return;
      }
    }
    if (vocab_.unk >= 0) ids->push_back(vocab_.unk);
  }

  void EmitPiece(std::string_view piece, std::vector<int32_t>* ids) const {
    auto it = all_.find(piece);
    if (it != all_.end() && vocab_.types[it->second] != TokenType::kUnknown) {
      ids->push_back(it->second);
    } else {
      EmitUnknown(piece, ids);
    }
  }

  // Upstream bpe_model.cc: start from characters and repeatedly merge the
  // adjacent pair whose concatenation is a piece with the highest score,
  // leftmost first on ties. A heap of candidate pairs keeps it O(n log n);
  // stale candidates are recognised on pop by their recorded length.
  void EncodeBpe(const std::string& s, std::vector<int32_t>* ids) const {
    struct Symbol {
      uint32_t start;
      uint32_t len;
      int32_t prev;
      int32_t next;
    };
    std::vector<Symbol> sym;
    sym.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      size_t len = static_cast<size_t>(unicode::Utf8SeqLen(static_cast<unsigned char>(s[i])));
      len = std::min(len, s.size() - i);
      int32_t idx = static_cast<int32_t>(sym.size());
      sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), idx - 1, idx + 1});
      i += len;
    }
    sym.back().next = -1;

    struct Candidate {
      float score;
      int32_t left;
      int32_t right;
      uint32_t len;
      bool operator<(const Candidate& o) const {
        return score < o.score || (score == o.score && left > o.left);
      }
    };
    std::priority_queue<Candidate> heap;
    auto try_pair = [&](int32_t left, int32_t right) {
      if (left < 0 || right < 0) return;
      uint32_t len = sym[left].len + sym[right].len;
      auto it = segment_.find(std::string_view(s).substr(sym[left].start, len));
      if (it == segment_.end()) return;
      heap.push({vocab_.scores[it->second], left, right, len});
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      try_pair(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));

    while (!heap.empty()) {
      Candidate c = heap.top();
      heap.pop();
      Symbol& l = sym[c.left];
      // Stale: one side was merged away or grew since this was pushed.
      if (l.len == 0 || l.next != c.right || sym[c.right].len == 0 ||
          l.len + sym[c.right].len != c.len)
        continue;
      Symbol& r = sym[c.right];
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_pair(l.prev, c.left);
      try_pair(c.left, l.next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
      EmitPiece(std::string_view(s).substr(sym[i].start, sym[i].len), ids);
  }

  // Upstream unigram_model.cc (EncodeOptimized): best-scoring segmentation;
  // a character no piece covers becomes an unknown piece scored below every
  // real piece.
  void EncodeUnigram(const std::string& s, std::vector<int32_t>* ids) const {
    constexpr float kUnkPenalty = 10.0f;
    const float unk_score = min_score_ - kUnkPenalty;
    struct Best {
      float score = std::numeric_limits<float>::lowest();
      int32_t from = -1;  // start byte of the last piece
      int32_t id = -1;    // -1: unknown character
    };
    std::vector<Best> best(s.size() + 1);
    best[0].score = 0.0f;
    std::string_view sv(s);
    for (size_t i = 0; i < s.size();) {
      size_t char_len = std::min<size_t>(unicode::Utf8SeqLen(static_cast<unsigned char>(s[i])),
                                         s.size() - i);
      if (best[i].score != std::numeric_limits<float>::lowest()) {
        bool single_char_piece = false;
        size_t limit = std::min(max_piece_bytes_, s.size() - i);
        for (size_t len = 1; len <= limit; ++len) {
          size_t end = i + len;
          // Pieces end on character boundaries.
          if (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) continue;
          auto it = segment_.find(sv.substr(i, len));
          if (it == segment_.end()) continue;
          int32_t id = it->second;
          float score = vocab_.types[id] == TokenType::kUserDefined
                            ? static_cast<float>(len) * max_score_ - 0.1f
                            : vocab_.scores[id];
          if (len == char_len) single_char_piece = true;
          if (best[i].score + score > best[end].score) {
            best[end] = {best[i].score + score, static_cast<int32_t>(i), id};
          }
        }
        if (!single_char_piece && best[i].score + unk_score > best[i + char_len].score) {
          best[i + char_len] = {best[i].score + unk_score, static_cast<int32_t>(i), -1};
        }
      }
      i += char_len;
    }
    // Walk back, then emit in order; runs of unknown characters are one
    // unknown piece, as upstream reports them.
    std::vector<std::pair<size_t, int32_t>> pieces;  // (start, id)
    for (size_t end = s.size(); end > 0;) {
      const Best& b = best[end];
      if (b.id < 0 && !pieces.empty() && pieces.back().second < 0) {
        pieces.back().first = b.from;
      } else {
        pieces.emplace_back(b.from, b.id);
      }
      end = b.from;
    }
    std::reverse(pieces.begin(), pieces.end());
    for (size_t k = 0; k < pieces.size(); ++k) {
      size_t end = k + 1 < pieces.size() ? pieces[k + 1].first : s.size();
      if (pieces[k].second >= 0) {
        ids->push_back(pieces[k].second);
      } else {
        EmitUnknown(sv.substr(pieces[k].first, end - pieces[k].first), ids);
      }
    }
  }

  SentencePieceOptions options_;
  SentencePieceNormalizer normalizer_;
  SpecialSplitter splitter_;
  std::unordered_map<std::string_view, int32_t> all_;      // every piece
  std::unordered_map<std::string_view, int32_t> segment_;  // normal + user-defined
  std::array<int32_t, 256> byte_ids_;
  std::vector<int16_t> id_byte_;  // byte a <0xXX> piece stands for, or -1
  size_t max_piece_bytes_ = 1;
  float min_score_ = 0.0f, max_score_ = 0.0f;
  bool strip_leading_space_ = true;
};

}  // namespace

std::unique_ptr<Tokenizer> MakeSentencePieceTokenizer(Vocab vocab, SentencePieceOptions options,
                                                      const std::string& source) {
  return std::make_unique<SentencePieceTokenizer>(std::move(vocab), std::move(options), source);
}

}  // namespace specline
