#include "model/tokenizer/unicode.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {
namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

// Copies the complete characters of `in` to `out`, replacing each invalid
// byte with U+FFFD (as a UTF-8 decoder in "replace" mode would).
void AppendSanitized(std::string_view in, std::string* out) {
  for (size_t i = 0; i < in.size();) {
    int len;
    char32_t cp = unicode::DecodeUtf8(in, i, &len);
    if (cp == 0xFFFD && len == 1 && static_cast<unsigned char>(in[i]) >= 0x80) {
      out->append(kReplacement);
    } else {
      out->append(in.substr(i, len));
    }
    i += len;
  }
}

}  // namespace

std::string IncrementalDetokenizer::Push(int32_t id) {
  pending_ += tok_.TokenBytes(prev_, id);
  prev_ = id;
  // Hold back only a tail that may still become a character; everything
  // before it is final (invalid bytes in it can no longer be completed).
  size_t ready = unicode::CompleteUtf8Prefix(pending_);
  std::string out;
  AppendSanitized(std::string_view(pending_).substr(0, ready), &out);
  pending_.erase(0, ready);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  AppendSanitized(pending_, &out);
  pending_.clear();
  return out;
}

}  // namespace specline
