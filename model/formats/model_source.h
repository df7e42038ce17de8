// Opens a model from any supported format and exposes its config and tensors
// under canonical Hugging Face names. Files are memory-mapped: a stage that
// touches only its own layers' tensors only pages those in.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/formats/tensor_info.h"
#include "model/model_config.h"

namespace specline {

class GgufFile;

// Thrown for any unreadable, truncated, corrupt or unsupported model file. The
// message names the file and, where there is one, the tensor.
class ModelFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ModelFormat { kLlama2c, kGguf, kHuggingFace };

class ModelSource {
 public:
  virtual ~ModelSource() = default;

  virtual ModelFormat format() const = 0;
  virtual const ModelConfig& config() const = 0;
  // The path the model was opened from (file or directory).
  virtual const std::string& path() const = 0;

  // nullptr when the model has no such tensor (e.g. "lm_head.weight" of a
  // tied model).
  virtual const TensorInfo* Find(const std::string& name) const = 0;
  // Every tensor, for listings and validation.
  virtual std::vector<const TensorInfo*> Tensors() const = 0;

  // The GGUF file when format() == kGguf (its metadata carries the
  // tokenizer), else nullptr.
  virtual const GgufFile* gguf() const { return nullptr; }

  // Like Find, but throws ModelFormatError naming the model path and tensor
  // when it is missing, or when its shape differs from `shape` (when given).
  const TensorInfo& Require(const std::string& name,
                            const std::vector<int64_t>& shape = {}) const;
};

// Detects the format (a directory with config.json -> Hugging Face; GGUF
// magic -> GGUF; else a llama2.c checkpoint) and opens it. Validates the
// config and that every tensor lies inside its file; reads no tensor data.
std::unique_ptr<ModelSource> OpenModel(const std::string& path);

}  // namespace specline
