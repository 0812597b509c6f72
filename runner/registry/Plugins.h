// Purpose: the interfaces that model and data plugins implement (Model, Dataset) and the option
// groups shared by the plugins of a kind (model shape, learning rate). Registration: see
// runner/registry/Registry.h; the kinds: runner/registry/Kinds.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "runner/registry/Kinds.h"
#include "runner/registry/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

// ---- data ---------------------------------------------------------------------------------------
enum class Split { Train, Test };

struct DataInfo {
  std::int64_t channels = 3, height = 224, width = 224, numClasses = 1000;
};

struct Batch {
  torch::Tensor x;  // float [N, C, H, W], normalised
  torch::Tensor y;  // int64 [N]
};

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Shape and classes, known from the options alone (no file is read).
  virtual DataInfo info() const = 0;
  // Reads the data; throws DataError naming the file on any problem.
  virtual void load() = 0;
  virtual std::int64_t size(Split split) const = 0;
  // The batch of samples `indices` of `split`. Training augmentation of sample i draws from
  // sampleSeed(seed, i), so it does not depend on how samples are batched or sharded over ranks.
  // Must be safe to call from several threads at once.
  virtual Batch makeBatch(Split split, const std::vector<std::int64_t>& indices, std::uint64_t seed) const = 0;
  // Samples replaced so far because their file was bad (data plugins that can skip such files).
  virtual std::int64_t skippedSamples() const { return 0; }
};

// splitmix64's finaliser after its increment: a well-mixed 64-bit value of `x` (seeds derived
// from seeds: the epoch's order and augmentation, a resumed rank's random stream).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Seed of sample `index`'s augmentation in the epoch whose seed is `epochSeed` (splitmix64).
inline std::uint64_t sampleSeed(std::uint64_t epochSeed, std::int64_t index) {
  std::uint64_t x = epochSeed ^ (static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// ---- model --------------------------------------------------------------------------------------
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Names of the stages whose activations can be recomputed in backward instead of stored
  // (train.activation_checkpointing), e.g. layer1..layer4.
  virtual std::vector<std::string> stages() const { return {}; }
  void setRecomputed(std::vector<std::string> names) { recomputed_ = std::move(names); }
  const std::vector<std::string>& recomputed() const { return recomputed_; }

 protected:
  // Runs stage `name` (fn on x), recomputed in backward when selected. Models call it from forward().
  torch::Tensor stage(const std::string& name, const std::function<torch::Tensor(torch::Tensor)>& fn, torch::Tensor x);

 private:
  std::vector<std::string> recomputed_;
  std::map<std::string, std::function<torch::Tensor(torch::Tensor)>> stageFns_;  // outlive the backward pass
};

// Options every model has: in_channels, num_classes (0: from the data).
struct ModelShape {
  std::int64_t inChannels = 0;
  std::int64_t numClasses = 0;
  std::int64_t channels(const DataInfo& d) const { return inChannels > 0 ? inChannels : d.channels; }
  std::int64_t classes(const DataInfo& d) const { return numClasses > 0 ? numClasses : d.numClasses; }
};
const OptionTable<ModelShape>& modelShapeOptions();
// The shape options followed by a model's own.
OptionDecls withModelShapeOptions(OptionDecls own);

// ---- optimizer ----------------------------------------------------------------------------------
// Options every optimizer has: lr (for base_batch samples), base_batch, scale_lr.
struct LrSettings {
  double lr = 0.1;  // each optimizer declares its own default (withLrOptions)
  std::int64_t baseBatch = 256;
  std::string scaleLr = "linear";
};
const OptionTable<LrSettings>& lrOptions();
// The learning-rate options (lr defaulting to `defaultLr`) followed by an optimizer's own.
OptionDecls withLrOptions(OptionDecls own, double defaultLr);
// Parameters split for weight decay: {decayed, exempt (biases and normalisation weights)}.
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> splitDecayParameters(Model& model);

// Parameter groups with weight decay `wd` on every parameter, or (decayAll false) only on the
// decayed ones of splitDecayParameters and none on the exempt ones; `base` gives the other options.
template <class OptionsT>
std::vector<torch::optim::OptimizerParamGroup> weightDecayGroups(Model& model, const OptionsT& base, double wd,
                                                                 bool decayAll) {
  auto with = [&](double decay) {
    auto o = std::make_unique<OptionsT>(base);
    o->weight_decay(decay);
    return o;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (decayAll) {
    groups.emplace_back(model.parameters(), with(wd));
  } else {
    auto [decay, exempt] = splitDecayParameters(model);
    groups.emplace_back(decay, with(wd));
    if (!exempt.empty()) groups.emplace_back(exempt, with(0.0));
  }
  return groups;
}

std::int64_t countParameters(Model& model);

}  // namespace exprun
