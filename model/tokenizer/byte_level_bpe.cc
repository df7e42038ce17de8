#include "model/tokenizer/byte_level_bpe.h"

#include <array>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "model/tokenizer/unicode.h"

namespace specline {
namespace {

struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteTables() {
    // Printable Latin-1 bytes stand for themselves; the other 68 bytes are
    // given U+0100 upwards in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_unicode[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_unicode[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

class ByteLevelBpeTokenizer final : public VocabTokenizer {
 public:
  ByteLevelBpeTokenizer(Vocab vocab, const MergeList& merges, ByteLevelBpeOptions options,
                        const std::string& source)
      : VocabTokenizer(std::move(vocab)), options_(options) {
    vocab_.Check(source);
    index_.reserve(vocab_.pieces.size());
    for (int32_t id = 0; id < vocab_.size(); ++id) index_.emplace(vocab_.pieces[id], id);
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      unicode::AppendUtf8(Tables().to_unicode[b], &ch);
      auto it = index_.find(ch);
      byte_token_[b] = it == index_.end() ? -1 : it->second;
    }
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      auto ia = index_.find(a), ib = index_.find(b), im = index_.find(a + b);
      if (ia == index_.end() || ib == index_.end() || im == index_.end())
        throw std::runtime_error(source + ": merge " + std::to_string(rank) + " '" + a + " " + b +
                                 "' names a piece outside the vocabulary");
      // The first (lowest-rank) occurrence of a pair wins, as in HF.
      merges_.emplace(PairKey(ia->second, ib->second),
                      Merge{static_cast<int32_t>(rank), im->second});
    }
    bytes_.resize(vocab_.pieces.size());
    for (int32_t id = 0; id < vocab_.size(); ++id) bytes_[id] = SpellBytes(id);
    splitter_.Build(vocab_);
    if (vocab_.stop_ids.empty()) vocab_.CollectStopIds();
  }

  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_bos && vocab_.bos >= 0) ids.push_back(vocab_.bos);
    for (const auto& frag : splitter_.Split(text, parse_special)) {
      if (frag.id >= 0) {
        ids.push_back(frag.id);
        continue;
      }
      for (std::string_view chunk : PreTokenize(frag.text, options_.pre_tokenizer))
        EncodeChunk(chunk, &ids);
    }
    return ids;
  }

  std::string TokenBytes(int32_t prev, int32_t id) const override {
    return vocab_.Valid(id) ? bytes_[id] : std::string();
  }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  // The raw bytes a token stands for: byte-level spelling undone for
  // ordinary tokens; added (user-defined) tokens are stored as plain text.
  std::string SpellBytes(int32_t id) const {
    const std::string& piece = vocab_.pieces[id];
    switch (vocab_.types[id]) {
      case TokenType::kControl:
      case TokenType::kUnused: return "";
      case TokenType::kUserDefined: return piece;
      default: break;
    }
    std::string out;
    for (size_t i = 0; i < piece.size();) {
      int len;
      char32_t cp = unicode::DecodeUtf8(piece, i, &len);
      auto it = Tables().to_byte.find(cp);
      if (it != Tables().to_byte.end()) {
        out.push_back(static_cast<char>(it->second));
      } else {
        out.append(piece, i, len);
      }
      i += len;
    }
    return out;
  }

  void EncodeChunk(std::string_view chunk, std::vector<int32_t>* ids) const {
    if (options_.ignore_merges) {
      std::string spelled;
      for (unsigned char b : chunk) unicode::AppendUtf8(Tables().to_unicode[b], &spelled);
      auto it = index_.find(spelled);
      if (it != index_.end()) {
        ids->push_back(it->second);
        return;
      }
    }
    // One symbol per byte, then merges lowest rank first (leftmost on ties),
    // with a heap of candidate pairs; stale entries are skipped on pop.
    struct Symbol {
      int32_t id;
      int32_t prev;
      int32_t next;
    };
    std::vector<Symbol> sym;
    sym.reserve(chunk.size());
    for (unsigned char b : chunk) {
      int32_t idx = static_cast<int32_t>(sym.size());
      sym.push_back({byte_token_[b], idx - 1, idx + 1});
    }
    sym.back().next = -1;
    struct Candidate {
      int32_t rank;
      int32_t left;
      int32_t left_id;
      int32_t right_id;
      bool operator>(const Candidate& o) const {
        return rank > o.rank || (rank == o.rank && left > o.left);
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    auto try_pair = [&](int32_t left) {
      if (left < 0) return;
      int32_t right = sym[left].next;
      if (right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
      auto it = merges_.find(PairKey(sym[left].id, sym[right].id));
      if (it != merges_.end()) heap.push({it->second.rank, left, sym[left].id, sym[right].id});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) try_pair(i);
    while (!heap.empty()) {
      Candidate c = heap.top();
      heap.pop();
      Symbol& l = sym[c.left];
      if (l.id != c.left_id || l.next < 0 || sym[l.next].id != c.right_id) continue;
      Symbol& r = sym[l.next];
      l.id = merges_.at(PairKey(c.left_id, c.right_id)).result;
      r.id = -2;  // merged away
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_pair(l.prev);
      try_pair(c.left);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
      if (sym[i].id >= 0) {
        ids->push_back(sym[i].id);
      } else if (vocab_.unk >= 0) {
        ids->push_back(vocab_.unk);  // a byte the vocabulary cannot spell
      }
    }
  }

  ByteLevelBpeOptions options_;
  std::unordered_map<std::string, int32_t> index_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_token_;
  std::vector<std::string> bytes_;
  SpecialSplitter splitter_;
};

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

int UnicodeToByte(char32_t cp) {
  auto it = Tables().to_byte.find(cp);
  return it == Tables().to_byte.end() ? -1 : it->second;
}

std::unique_ptr<Tokenizer> MakeByteLevelBpeTokenizer(Vocab vocab, const MergeList& merges,
                                                     ByteLevelBpeOptions options,
                                                     const std::string& source) {
  return std::make_unique<ByteLevelBpeTokenizer>(std::move(vocab), merges, options, source);
}

}  // namespace specline
