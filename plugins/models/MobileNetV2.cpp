// Purpose: model `mobilenet_v2` — identical to torchvision's MobileNetV2 (Sandler et al. 2018):
// a 3x3/2 stem, 17 inverted residual blocks (1x1 expansion, 3x3 depthwise, linear 1x1
// projection, residual when the shape allows), a 1x1 head to 1280 channels, dropout and the
// classifier; ReLU6 after every normalised convolution but the projections. torchvision's module
// names (state-dict keys: features.N..., classifier.1...), its initialisation, width_mult with
// channels rounded to multiples of round_nearest; 3,504,872 parameters at 1000 classes. The
// features are split into five stages by output stride (stride2 ... stride32) that activation
// recomputation and the memory planner can name.
#include <cmath>

#include "plugins/models/Flow.h"
#include "runner/api/Model.h"
#include "runner/nn/SyncBatchNorm.h"

namespace exprun {
namespace {

namespace nn = torch::nn;

// torchvision's _make_divisible: the nearest multiple of `divisor`, never 10 % below v.
std::int64_t makeDivisible(double v, std::int64_t divisor) {
  std::int64_t rounded = std::max(divisor, static_cast<std::int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (rounded < 0.9 * v) rounded += divisor;
  return rounded;
}

// A Sequential that can sit inside another (its forward is not a template). A conv, BN, ReLU6
// stack whose BN was asked to fuse runs BN and ReLU6 as one (SyncBatchNorm2dImpl::forwardAct).
struct StackImpl : nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) {
    if (size() == 3)
      if (auto* bn = ptr(1)->as<SyncBatchNorm2dImpl>(); bn && bn->fused())
        return bn->forwardAct(ptr(0)->as<nn::Conv2dImpl>()->forward(x), {}, BnActivation::Relu6);
    return SequentialImpl::forward(x);
  }
};
TORCH_MODULE(Stack);

// torchvision's Conv2dNormActivation: convolution (no bias), batch norm, ReLU6.
Stack convBnRelu6(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride = 1, std::int64_t groups = 1) {
  return Stack(
      nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding((kernel - 1) / 2).groups(groups).bias(false)),
      SyncBatchNorm2d(out), nn::ReLU6(nn::ReLU6Options().inplace(true)));
}

struct InvertedResidualImpl : nn::Module {
  InvertedResidualImpl(std::int64_t in, std::int64_t out, std::int64_t stride, std::int64_t expandRatio)
      : residual(stride == 1 && in == out) {
    const std::int64_t hidden = static_cast<std::int64_t>(std::llround(static_cast<double>(in * expandRatio)));
    nn::Sequential layers;
    if (expandRatio != 1) layers->push_back(convBnRelu6(in, hidden, 1));                          // pointwise
    layers->push_back(convBnRelu6(hidden, hidden, 3, stride, hidden));                              // depthwise
    layers->push_back(nn::Conv2d(nn::Conv2dOptions(hidden, out, 1).bias(false)));                   // linear projection
    layers->push_back(SyncBatchNorm2d(out));
    conv = register_module("conv", layers);
  }
  // The block, once for its forward (RunFlow) and its graph (GraphFlow; `name`: its state-dict
  // prefix): [expansion,] depthwise, projection conv, BN. The residual add is the last BN's
  // (forwardAct): fused with it, or after its residual-branch hook (stochastic depth); the same
  // values as x + conv(x).
  template <class F>
  typename F::Value flow(F& f, const std::string& name, const typename F::Value& x) {
    const std::size_t n = conv->size();
    typename F::Value y = x;
    for (std::size_t i = 0; i + 2 < n; ++i) {
      Stack stack(moduleAt<StackImpl>(*conv, i));
      y = f.sequence(name, ("conv." + std::to_string(i)).c_str(), stack, y);
    }
    nn::Conv2d projection(moduleAt<nn::Conv2dImpl>(*conv, n - 2));
    SyncBatchNorm2d bn(moduleAt<SyncBatchNorm2dImpl>(*conv, n - 1));
    y = f.conv(name, ("conv." + std::to_string(n - 2)).c_str(), projection, y);
    return f.bnAct(name, ("conv." + std::to_string(n - 1)).c_str(), bn, y, residual ? x : F::none(), BnActivation::None);
  }
  torch::Tensor forward(torch::Tensor x) {
    RunFlow f;
    return flow(f, {}, x);
  }
  bool residual;
  nn::Sequential conv{nullptr};
};
TORCH_MODULE(InvertedResidual);

class MobileNetV2 : public Model {
 public:
  MobileNetV2(std::int64_t inChannels, std::int64_t numClasses, double widthMult, std::int64_t roundNearest, double dropout,
              bool fused) {
    // t (expansion), c (channels), n (blocks), s (stride of the first block)
    const std::int64_t setting[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                        {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    std::int64_t in = makeDivisible(32 * widthMult, roundNearest);
    const std::int64_t last = makeDivisible(1280 * std::max(1.0, widthMult), roundNearest);
    nn::Sequential f;
    f->push_back(convBnRelu6(inChannels, in, 3, 2));
    for (const auto& row : setting) {
      const std::int64_t out = makeDivisible(static_cast<double>(row[1]) * widthMult, roundNearest);
      for (std::int64_t i = 0; i < row[2]; ++i) {
        f->push_back(InvertedResidual(in, out, i == 0 ? row[3] : 1, row[0]));
        in = out;
      }
    }
    f->push_back(convBnRelu6(in, last, 1));
    features = register_module("features", f);
    classifier = register_module("classifier", nn::Sequential(nn::Dropout(dropout), nn::Linear(last, numClasses)));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut);
        if (c->options.bias()) nn::init::zeros_(c->bias);
      } else if (auto* b = m->as<nn::BatchNorm2d>()) {
        nn::init::ones_(b->weight);
        nn::init::zeros_(b->bias);
      } else if (auto* l = m->as<nn::Linear>()) {
        nn::init::normal_(l->weight, 0.0, 0.01);
        nn::init::zeros_(l->bias);
      }
    }
    for (SyncBatchNorm2dImpl* bn : syncBatchNorms(*this)) bn->fuse(fused);
  }

  std::vector<std::string> stages() const override { return {"stride2", "stride4", "stride8", "stride16", "stride32"}; }

  // The layers as a graph: the features as the forward runs them (one flow), then the classifier
  // (its dropout is the identity in evaluation).
  ModelGraph graph() override {
    ModelGraph g;
    GraphFlow f(g);
    int x = g.input();
    for (std::size_t i = 0; i < features->size(); ++i) x = feature(f, i, x);
    nn::Linear fc(moduleAt<nn::LinearImpl>(*classifier, 1));
    f.linear("", "classifier.1", fc, f.avgPoolFlatten(x));
    return g;
  }

  torch::Tensor forward(torch::Tensor x) override {
    // features[first, end) of each stage: the blocks up to the next stride-2 block, the head last.
    static const std::int64_t kBounds[6] = {0, 2, 4, 7, 14, 19};
    const auto names = stages();
    for (std::size_t s = 0; s < names.size(); ++s) {
      const std::int64_t first = kBounds[s], end = kBounds[s + 1];
      std::vector<StageBlock> blocks;
      for (std::int64_t i = first; i < end; ++i)
        blocks.push_back([this, i](torch::Tensor t) {
          RunFlow f;
          return feature(f, static_cast<std::size_t>(i), t);
        });
      x = stage(names[s], blocks, x);
    }
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return classifier->forward(x);
  }

 private:
  // features[i]: an inverted residual block, or a conv + BN + ReLU6 stack (the stem and the head).
  template <class F>
  typename F::Value feature(F& f, std::size_t i, const typename F::Value& x) {
    const std::string name = "features." + std::to_string(i);
    if (auto block = features->ptr(i)->as<InvertedResidualImpl>()) return block->flow(f, name, x);
    Stack stack(moduleAt<StackImpl>(*features, i));
    return f.sequence("", name.c_str(), stack, x);
  }

  nn::Sequential features{nullptr}, classifier{nullptr};
};

struct MobileNetV2Settings {
  double widthMult = 1.0;
  std::int64_t roundNearest = 8;
  double dropout = 0.2;
  bool fused = false;
};
const OptionTable<MobileNetV2Settings> kOptions{{
    field("width_mult", &MobileNetV2Settings::widthMult, "channel multiplier of every layer", {0.01, 10.0}),
    field("round_nearest", &MobileNetV2Settings::roundNearest, "channels rounded to a multiple of this", {1}),
    field("dropout", &MobileNetV2Settings::dropout, "dropout before the classifier", {0.0, 1.0}),
    field("fused", &MobileNetV2Settings::fused,
          "each batch norm fused with its ReLU6 or residual add (CUDA kernels for channels_last bf16/fp16/fp32 "
          "activations; elsewhere libtorch's modules, unchanged)"),
}};

std::shared_ptr<Model> makeMobileNetV2(const Options& o, const DataInfo& d) {
  const MobileNetV2Settings s = kOptions.read(o);
  const ModelShape shape = modelShapeOptions().read(o);
  return std::make_shared<MobileNetV2>(shape.channels(d), shape.classes(d), s.widthMult, s.roundNearest, s.dropout,
                                       s.fused);
}

const Register<ModelKind> kRegistered{"mobilenet_v2", "torchvision-identical mobilenet_v2",
                                      withModelShapeOptions(kOptions.decls()), makeMobileNetV2};

}  // namespace
}  // namespace exprun
