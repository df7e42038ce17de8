// A whole file mapped read-only into memory. Model weights are used in place
// from the map, so opening a large model reads nothing until a tensor is
// touched, and the page cache is shared between processes on one host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace specline {

class MappedFile {
 public:
  // Throws ModelFormatError naming the path (and the OS reason) when the file
  // cannot be opened, is not a regular file, or cannot be mapped. An empty
  // file maps to size() == 0 and data() == nullptr.
  static std::shared_ptr<MappedFile> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // True when [offset, offset + length) lies inside the file (overflow-safe).
  bool Contains(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace specline
