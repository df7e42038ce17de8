// The safetensors format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//  "__metadata__": {string: string}}, then the data area, which offsets are
// relative to. Reader (memory-mapped, bounds-checked) and writer.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/formats/tensor_info.h"

namespace specline {

class MappedFile;

class SafetensorsFile {
 public:
  // Throws ModelFormatError naming the file (and tensor) on a malformed
  // header, offsets outside the file, sizes that disagree with shape and
  // dtype, or dtypes other than F32/F16/BF16.
  static std::unique_ptr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // Keyed by the name in the file; TensorInfo::name == file_name.
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::shared_ptr<MappedFile>& map() const { return map_; }

 private:
  std::string path_;
  std::shared_ptr<MappedFile> map_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (name, dtype F32/F16/BF16, shape, data, nbytes are used)
// in the given order, header padded so the data area is 8-byte aligned.
// Throws std::runtime_error on I/O errors or bad arguments.
void WriteSafetensors(const std::string& path,
                      const std::vector<TensorInfo>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace specline
