#include "model/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace specline::unicode {
namespace {

struct CategoryRange {
  char32_t first;
  char32_t last;
  char major;
};

constexpr CategoryRange kCategories[] = {
#include "model/tokenizer/unicode_tables.inc"
};

// ASCII is most of what gets tokenized; answer it from a flat table.
const std::array<char, 128>& AsciiCategories() {
  static const std::array<char, 128> table = [] {
    std::array<char, 128> t{};
    for (char32_t c = 0; c < 128; ++c) {
      auto it = std::upper_bound(
          std::begin(kCategories), std::end(kCategories), c,
          [](char32_t v, const CategoryRange& r) { return v < r.first; });
      t[c] = (it != std::begin(kCategories) && c <= (it - 1)->last) ? (it - 1)->major : 'C';
    }
    return t;
  }();
  return table;
}

}  // namespace

int Utf8SeqLen(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

char32_t DecodeUtf8(std::string_view s, size_t pos, int* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  size_t avail = s.size() - pos;
  unsigned char c = p[0];
  *len = 1;
  if (c < 0x80) return c;
  int n = Utf8SeqLen(c);
  if (n == 1 || static_cast<size_t>(n) > avail) return 0xFFFD;
  char32_t cp = c & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  // Reject overlong forms, surrogates and values past U+10FFFF.
  static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFD;
  *len = n;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Only the last three bytes can belong to an unfinished character.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    int need = Utf8SeqLen(c);
    return (need > 1 && static_cast<size_t>(need) > back) ? n - back : n;
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int len;
    char32_t cp = DecodeUtf8(s, i, &len);
    if (cp == 0xFFFD && len == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return false;
    i += len;
  }
  return true;
}

char Category(char32_t cp) {
  if (cp < 128) return AsciiCategories()[cp];
  auto it = std::upper_bound(std::begin(kCategories), std::end(kCategories), cp,
                             [](char32_t v, const CategoryRange& r) { return v < r.first; });
  if (it == std::begin(kCategories)) return 'C';
  --it;
  return cp <= it->last ? it->major : 'C';
}

bool IsWhitespace(char32_t cp) {
  // The White_Space property (PropList.txt); stable since Unicode 6.3.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace specline::unicode
