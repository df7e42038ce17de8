// A ModelSource showing tensors that live in another file (still mapped
// there) under the canonical names the runtime's loaders look up, with a
// config of its own: how head files present their layers as layers of a
// model (DraftHead::source(), PIPO's MTP layer).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/formats/model_source.h"

namespace specline {

class RenamedSource : public ModelSource {
 public:
  RenamedSource(ModelConfig config, std::string path)
      : config_(std::move(config)), path_(std::move(path)) {}

  // Shows `t` (its data stays where it is) as `name`.
  void Add(const std::string& name, TensorInfo t) {
    t.name = name;
    tensors_.insert_or_assign(name, std::move(t));
  }

  ModelFormat format() const override { return ModelFormat::kHuggingFace; }
  const ModelConfig& config() const override { return config_; }
  const std::string& path() const override { return path_; }
  const TensorInfo* Find(const std::string& name) const override {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  std::vector<const TensorInfo*> Tensors() const override {
    std::vector<const TensorInfo*> v;
    for (const auto& [_, t] : tensors_) v.push_back(&t);
    return v;
  }

 private:
  ModelConfig config_;
  std::string path_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace specline
