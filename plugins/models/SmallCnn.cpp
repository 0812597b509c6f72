// Purpose: model `small_cnn` — a small, fast CNN for quick CPU experiments on 28x28 images:
// two conv-BN-ReLU-maxpool stages (width, 2·width channels), a hidden fully connected layer with
// dropout, and the classifier. Reaches ~90 % Fashion-MNIST test Top-1 in a few CPU minutes.
#include "runner/registry/Plugins.h"

namespace exprun {
namespace {

namespace nn = torch::nn;

class SmallCnn : public Model {
 public:
  SmallCnn(std::int64_t in, std::int64_t classes, std::int64_t width, std::int64_t hidden, double dropout,
           std::int64_t height, std::int64_t widthPx, bool batchNorm) {
    // Without batch norm (for exact data-parallel equivalence tests) the convolutions get biases
    // and an Identity keeps the module indices, so state-dict keys stay the same.
    auto norm = [batchNorm](std::int64_t c) -> nn::AnyModule {
      return batchNorm ? nn::AnyModule(nn::BatchNorm2d(c)) : nn::AnyModule(nn::Identity());
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
  torch::Tensor forward(torch::Tensor x) override {
    x = stage("features", [this](torch::Tensor t) { return features->forward(t); }, x);
    return stage("classifier", [this](torch::Tensor t) { return classifier->forward(t.flatten(1)); }, x);
  }

 private:
  nn::Sequential features{nullptr}, classifier{nullptr};
};

const bool kRegistered = (modelRegistry().add(
                              "small_cnn", "two conv stages + MLP head; fast on CPU for 28x28 images",
                              withModelShapeOptions({intOpt("width", 32, "channels of the first conv stage", 1),
                                                     intOpt("hidden", 128, "units of the hidden layer", 1),
                                                     floatOpt("dropout", 0.25, "dropout before the classifier", 0.0, 1.0),
                                                     boolOpt("batch_norm", true, "batch norm after each convolution")}),
                              [](const Options& o, const DataInfo& d) -> std::shared_ptr<Model> {
                                return std::make_shared<SmallCnn>(resolvedInChannels(o, d), resolvedNumClasses(o, d),
                                                                  o.getInt("width"), o.getInt("hidden"),
                                                                  o.getFloat("dropout"), d.height, d.width,
                                                                  o.getBool("batch_norm"));
                              }),
                          true);

}  // namespace
}  // namespace exprun
