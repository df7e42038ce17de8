// Shared plumbing of the three model sources: a config, a path and a table of
// canonical tensors, plus the per-format entry points OpenModel dispatches to.
// Internal to model/formats.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/formats/model_source.h"

namespace specline {

class MappedFile;

class BasicModelSource : public ModelSource {
 public:
  BasicModelSource(ModelFormat format, std::string path)
      : format_(format), path_(std::move(path)) {}

  ModelFormat format() const override { return format_; }
  const ModelConfig& config() const override { return config_; }
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(const std::string& name) const override;
  std::vector<const TensorInfo*> Tensors() const override;

 protected:
  // Adds a tensor under t.name; throws on a duplicate canonical name.
  void AddTensor(TensorInfo t);
  // Shows fused and stacked tensors (Phi-3, MoE) under per-matrix canonical
  // names (arch_tensors.h); call once config_ is read.
  void CanonicalizeTensors();
  // Keeps a memory map alive as long as the source.
  void KeepMap(std::shared_ptr<MappedFile> map) { maps_.push_back(std::move(map)); }

  ModelConfig config_;

 private:
  ModelFormat format_;
  std::string path_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::shared_ptr<MappedFile>> maps_;
};

// Checks the config (ModelConfig::Validate) and that every tensor a Llama
// decoder of that config needs is present with the right shape; throws
// ModelFormatError naming the model path and the tensor otherwise.
void ValidateModelSource(const ModelSource& source);

std::unique_ptr<ModelSource> OpenGgufModel(const std::string& path);
std::unique_ptr<ModelSource> OpenLlama2cModel(const std::string& path);
std::unique_ptr<ModelSource> OpenHfModel(const std::string& dir);

}  // namespace specline
