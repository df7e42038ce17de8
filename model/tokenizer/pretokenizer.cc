#include "model/tokenizer/pretokenizer.h"

#include <stdexcept>

#include "model/tokenizer/unicode.h"

namespace specline {
namespace {

// One decoded character with the classes the regexes ask about.
struct Char {
  char32_t cp;
  uint32_t offset;  // byte offset in the text
  bool letter;
  bool number;
  bool space;
  bool Other() const { return !letter && !number && !space; }  // [^\s\p{L}\p{N}]
  bool Newline() const { return cp == '\r' || cp == '\n'; }
};

std::vector<Char> Decode(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    int len;
    char32_t cp = unicode::DecodeUtf8(text, i, &len);
    char cat = unicode::Category(cp);
    chars.push_back({cp, static_cast<uint32_t>(i), cat == 'L', cat == 'N',
                     unicode::IsWhitespace(cp)});
    i += len;
  }
  return chars;
}

// Matchers take the characters of one segment [b, e) and a start i < e, and
// return the length (in characters) of the regex match at i. Every character
// is matched by some alternative, so the result is always >= 1.
using Span = const Char*;

size_t Run(Span c, size_t i, size_t e, bool (*pred)(const Char&)) {
  size_t j = i;
  while (j < e && pred(c[j])) ++j;
  return j - i;
}
bool IsL(const Char& ch) { return ch.letter; }
bool IsN(const Char& ch) { return ch.number; }
bool IsO(const Char& ch) { return ch.Other(); }
bool IsS(const Char& ch) { return ch.space; }
bool IsNl(const Char& ch) { return ch.Newline(); }

char32_t Lower(char32_t cp, bool fold) {
  return (fold && cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive.
size_t Contraction(Span c, size_t i, size_t e, bool fold) {
  if (c[i].cp != '\'' || i + 1 >= e) return 0;
  char32_t a = Lower(c[i + 1].cp, fold);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= e) return 0;
  char32_t b = Lower(c[i + 2].cp, fold);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

//  ?X+ for a class X.
size_t OptSpaceRun(Span c, size_t i, size_t e, bool (*pred)(const Char&)) {
  if (c[i].cp == ' ' && i + 1 < e && pred(c[i + 1])) return 1 + Run(c, i + 1, e, pred);
  return Run(c, i, e, pred);
}

// \s+(?!\S)|\s+ : a whitespace run leaves its last space to the next chunk
// when a non-space follows (so " world" keeps its space).
size_t Spaces(Span c, size_t i, size_t e) {
  size_t k = Run(c, i, e, IsS);
  if (i + k < e && k > 1) return k - 1;
  return k;
}

size_t MatchGpt2(Span c, size_t i, size_t e) {
  if (size_t n = Contraction(c, i, e, false)) return n;
  if (size_t n = OptSpaceRun(c, i, e, IsL)) return n;
  if (size_t n = OptSpaceRun(c, i, e, IsN)) return n;
  if (size_t n = OptSpaceRun(c, i, e, IsO)) return n;
  return Spaces(c, i, e);
}

size_t MatchLlama3(Span c, size_t i, size_t e, size_t max_digits) {
  if (size_t n = Contraction(c, i, e, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!c[i].letter && !c[i].number && !c[i].Newline() && i + 1 < e && c[i + 1].letter)
    return 1 + Run(c, i + 1, e, IsL);
  if (c[i].letter) return Run(c, i, e, IsL);
  // \p{N}{1,max}
  if (c[i].number) return std::min(max_digits, Run(c, i, e, IsN));
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t start = (c[i].cp == ' ' && i + 1 < e && c[i + 1].Other()) ? i + 1 : i;
  if (c[start].Other()) {
    size_t j = start + Run(c, start, e, IsO);
    return j - i + Run(c, j, e, IsNl);
  }
  // \s*[\r\n]+ : through the last newline of the whitespace run.
  size_t k = Run(c, i, e, IsS);
  for (size_t j = i + k; j > i; --j) {
    if (c[j - 1].Newline()) return j - i;
  }
  return Spaces(c, i, e);
}

void SplitSegment(const std::vector<Char>& chars, size_t b, size_t e, PreTokenizerKind kind,
                  std::vector<size_t>* starts) {
  for (size_t i = b; i < e;) {
    starts->push_back(i);
    size_t n;
    switch (kind) {
      case PreTokenizerKind::kGpt2:
      case PreTokenizerKind::kSmolLm: n = MatchGpt2(chars.data(), i, e); break;
      case PreTokenizerKind::kLlama3: n = MatchLlama3(chars.data(), i, e, 3); break;
      case PreTokenizerKind::kQwen2: n = MatchLlama3(chars.data(), i, e, 1); break;
      default: n = e - i; break;
    }
    i += n;
  }
}

}  // namespace

PreTokenizerKind PreTokenizerFromName(const std::string& name) {
  // Names as llama.cpp's convert_hf_to_gguf.py writes them.
  if (name == "default" || name == "gpt2" || name == "gpt-2" || name == "mpt" ||
      name == "olmo" || name == "jais" || name == "trillion")
    return PreTokenizerKind::kGpt2;
  if (name == "llama3" || name == "llama-bpe" || name == "llama-v3" || name == "dbrx" ||
      name == "smaug-bpe" || name == "falcon3" || name == "pixtral" || name == "tekken")
    return PreTokenizerKind::kLlama3;
  if (name == "qwen2" || name == "stablelm2" || name == "deepseek-r1-qwen" ||
      name == "hunyuan")
    return PreTokenizerKind::kQwen2;
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "codeshell" ||
      name == "command-r" || name == "exaone" || name == "minerva-7b")
    return PreTokenizerKind::kSmolLm;
  throw std::invalid_argument("unknown pre-tokenizer '" + name + "'");
}

std::vector<std::string_view> PreTokenize(std::string_view text, PreTokenizerKind kind) {
  std::vector<std::string_view> out;
  if (text.empty()) return out;
  if (kind == PreTokenizerKind::kNone) {
    out.push_back(text);
    return out;
  }
  std::vector<Char> chars = Decode(text);
  std::vector<size_t> starts;
  starts.reserve(chars.size());
  if (kind == PreTokenizerKind::kSmolLm) {
    // Each number character is a segment of its own; the regex runs on the
    // stretches between them as if each were the whole text.
    size_t b = 0;
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (i == chars.size() || chars[i].number) {
        SplitSegment(chars, b, i, kind, &starts);
        if (i < chars.size()) starts.push_back(i);
        b = i + 1;
      }
    }
  } else {
    SplitSegment(chars, 0, chars.size(), kind, &starts);
  }
  out.reserve(starts.size());
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t from = chars[starts[s]].offset;
    size_t to = s + 1 < starts.size() ? chars[starts[s + 1]].offset : text.size();
    out.push_back(text.substr(from, to - from));
  }
  return out;
}

}  // namespace specline
