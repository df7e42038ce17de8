// The little Unicode the tokenizers need: UTF-8 stepping and encoding, and the
// major general category / White_Space property of a code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specline::unicode {

// Length of the UTF-8 sequence that starts with byte `lead` (1 for stray
// continuation bytes and invalid leads, so callers always make progress).
int Utf8SeqLen(unsigned char lead);

// Decodes the code point at s[pos]; sets *len to the bytes it takes. Invalid
// or truncated sequences decode as U+FFFD with *len = 1.
char32_t DecodeUtf8(std::string_view s, size_t pos, int* len);

void AppendUtf8(char32_t cp, std::string* out);

// Bytes of `s` that form a complete prefix of UTF-8 characters: a trailing
// incomplete (but so far valid) sequence is excluded.
size_t CompleteUtf8Prefix(std::string_view s);

bool IsValidUtf8(std::string_view s);

// Major general category: 'L', 'M', 'N', 'P', 'S', 'Z' or 'C' (other and
// unassigned).
char Category(char32_t cp);
inline bool IsLetter(char32_t cp) { return Category(cp) == 'L'; }
inline bool IsNumber(char32_t cp) { return Category(cp) == 'N'; }
// Unicode White_Space, which is what \s means in the Rust and Oniguruma
// regexes that Hugging Face tokenizers run.
bool IsWhitespace(char32_t cp);

}  // namespace specline::unicode
