// Purpose: model `small_cnn` — a small, fast CNN for quick CPU experiments on 28x28 images:
// two conv-BN-ReLU-maxpool stages (width, 2·width channels), a hidden fully connected layer with
// dropout, and the classifier.
// With `fused: true` (the default) each stage's batch norm, ReLU and max-pool run as one CPU kernel
// (plugins/models/BnReluPool.h) when the input allows it; the modules and state-dict keys stay the same.
#include "runner/api/Model.h"
#include "plugins/models/BnReluPool.h"
#include "runner/nn/SyncBatchNorm.h"

namespace exprun {
namespace {

namespace nn = torch::nn;

class SmallCnn : public Model {
 public:
  SmallCnn(std::int64_t in, std::int64_t classes, std::int64_t width, std::int64_t hidden, double dropout,
           std::int64_t height, std::int64_t widthPx, bool batchNorm, bool fused)
      : fused_(fused && batchNorm) {
    // Without batch norm (for exact data-parallel equivalence tests) the convolutions get biases
    // and an Identity keeps the module indices, so state-dict keys stay the same.
    auto norm = [batchNorm](std::int64_t c) -> nn::AnyModule {
      return batchNorm ? nn::AnyModule(SyncBatchNorm2d(c)) : nn::AnyModule(nn::Identity());
    };
    features = register_module(
        "features",
        nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, width, 3).padding(1).bias(!batchNorm)), norm(width),
                       nn::ReLU(true), nn::MaxPool2d(2),
                       nn::Conv2d(nn::Conv2dOptions(width, 2 * width, 3).padding(1).bias(!batchNorm)), norm(2 * width),
                       nn::ReLU(true), nn::MaxPool2d(2)));
    const std::int64_t flat = 2 * width * (height / 4) * (widthPx / 4);
    classifier = register_module("classifier", nn::Sequential(nn::Linear(flat, hidden), nn::ReLU(true),
                                                               nn::Dropout(dropout), nn::Linear(hidden, classes)));
  }
  std::vector<std::string> stages() const override { return {"features", "classifier"}; }
  ModelGraph graph() override {
    ModelGraph g;
    int x = g.input();
    for (std::size_t first : {std::size_t{0}, std::size_t{4}}) {
      x = g.conv("features." + std::to_string(first), nn::Conv2d(moduleAt<nn::Conv2dImpl>(*features, first)), x);
      if (features->ptr(first + 1)->as<nn::BatchNorm2d>() != nullptr)  // an Identity without batch norm
        x = g.batchNorm("features." + std::to_string(first + 1), nn::BatchNorm2d(moduleAt<nn::BatchNorm2dImpl>(*features, first + 1)), x);
      x = g.maxPool(g.relu(x), 2, 2);
    }
    x = g.relu(g.linear("classifier.0", nn::Linear(moduleAt<nn::LinearImpl>(*classifier, 0)), g.flatten(x)));
    g.linear("classifier.3", nn::Linear(moduleAt<nn::LinearImpl>(*classifier, 3)), x);
    return g;
  }
  torch::Tensor forward(torch::Tensor x) override {
    // The fused kernel computes each stage's own statistics: not with synchronized batch norm.
    const bool fused = fused_ && !features[1]->as<SyncBatchNorm2d>()->synchronized();
    x = stage("features", [this, fused](torch::Tensor t) { return fused ? fusedFeatures(t) : features->forward(t); }, x);
    return stage("classifier", [this](torch::Tensor t) { return classifier->forward(t.flatten(1)); }, x);
  }

 private:
  // features' modules 0-3 and 4-7 are conv, BN, ReLU, max-pool.
  torch::Tensor fusedFeatures(torch::Tensor t) {
    for (std::size_t first : {std::size_t{0}, std::size_t{4}}) {
      t = features[first]->as<nn::Conv2d>()->forward(t);
      t = bnReluPool(t, *features[first + 1]->as<nn::BatchNorm2d>());
    }
    return t;
  }

  bool fused_;
  nn::Sequential features{nullptr}, classifier{nullptr};
};

struct SmallCnnSettings {
  std::int64_t width = 32;
  std::int64_t hidden = 128;
  double dropout = 0.25;
  bool batchNorm = true;
  bool fused = true;
};
const OptionTable<SmallCnnSettings> kOptions{{
    field("width", &SmallCnnSettings::width, "channels of the first conv stage", {1}),
    field("hidden", &SmallCnnSettings::hidden, "units of the hidden layer", {1}),
    field("dropout", &SmallCnnSettings::dropout, "dropout before the classifier", {0.0, 1.0}),
    field("batch_norm", &SmallCnnSettings::batchNorm, "batch norm after each convolution"),
    field("fused", &SmallCnnSettings::fused,
          "batch norm, ReLU and max-pool as one CPU kernel (float32, NCHW or channels_last; elsewhere the three modules)"),
}};

std::shared_ptr<Model> makeSmallCnn(const Options& o, const DataInfo& d) {
  const SmallCnnSettings s = kOptions.read(o);
  const ModelShape shape = modelShapeOptions().read(o);
  return std::make_shared<SmallCnn>(shape.channels(d), shape.classes(d), s.width, s.hidden, s.dropout, d.height, d.width,
                                    s.batchNorm, s.fused);
}

const Register<ModelKind> kRegistered{"small_cnn", "two conv stages + MLP head; fast on CPU for 28x28 images",
                                      withModelShapeOptions(kOptions.decls()), makeSmallCnn};

}  // namespace
}  // namespace exprun
