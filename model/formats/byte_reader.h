// A bounds-checked little-endian cursor over a byte range, for parsing binary
// headers. Every read checks the remaining length first, so a truncated or
// corrupt file raises ModelFormatError (naming the file, the offset and what
// was being read) instead of reading past the end.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "model/formats/model_source.h"

namespace specline {

static_assert(std::endian::native == std::endian::little,
              "the model readers assume a little-endian host");

class ByteReader {
 public:
  ByteReader(const std::string& path, const uint8_t* data, uint64_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  [[noreturn]] void Fail(const std::string& what) const {
    throw ModelFormatError(path_ + ": " + what + " (at byte offset " +
                           std::to_string(pos_) + ")");
  }

  // Throws unless `n` more bytes are available.
  void Need(uint64_t n, const char* what) const {
    if (n > remaining()) {
      Fail(std::string("truncated while reading ") + what + ": need " +
           std::to_string(n) + " bytes, " + std::to_string(remaining()) +
           " left");
    }
  }

  template <typename T>
  T Read(const char* what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string ReadBytes(uint64_t n, const char* what) {
    Need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

  void Skip(uint64_t n, const char* what) {
    Need(n, what);
    pos_ += n;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// a * b, or false on int64 overflow or negative inputs.
inline bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace specline
