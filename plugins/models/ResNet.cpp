// Purpose: models `resnet18` … `resnet152`, identical to torchvision's ResNet (v1.5: stride on the
// 3x3 convolution of the bottleneck), with torchvision's module names so state-dict keys line up,
// torchvision's initialisation, and `zero_init_residual`. `small_input_stem` swaps the 7x7/2 stem
// and max-pool for one 3x3/1 convolution (CIFAR-style), for 28x28 inputs.
#include <cmath>

#include "plugins/models/Flow.h"
#include "runner/api/Model.h"
#include "runner/nn/SyncBatchNorm.h"

namespace exprun {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
nn::Conv2d conv1x1(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// The residual branch's input: x, or x through the downsample convolution and BN.
template <class F>
typename F::Value downsampled(F& f, const std::string& block, nn::Sequential& down, const typename F::Value& x) {
  return down ? f.sequence(block, "downsample", down, x) : x;
}

struct BasicBlockImpl : nn::Module {
  static constexpr std::int64_t kExpansion = 1;
  BasicBlockImpl(std::int64_t in, std::int64_t planes, std::int64_t stride, nn::Sequential down)
      : conv1(register_module("conv1", conv3x3(in, planes, stride))),
        bn1(register_module("bn1", SyncBatchNorm2d(planes))),
        conv2(register_module("conv2", conv3x3(planes, planes, 1))),
        bn2(register_module("bn2", SyncBatchNorm2d(planes))),
        downsample(down) {
    if (downsample) register_module("downsample", downsample);
  }
  // The block, once for its forward (RunFlow) and its graph (GraphFlow; `name`: its state-dict prefix).
  template <class F>
  typename F::Value flow(F& f, const std::string& name, const typename F::Value& x) {
    const typename F::Value identity = downsampled(f, name, downsample, x);
    const typename F::Value out = f.bnAct(name, "bn1", bn1, f.conv(name, "conv1", conv1, x), F::none(), BnActivation::Relu);
    return f.bnAct(name, "bn2", bn2, f.conv(name, "conv2", conv2, out), identity, BnActivation::Relu);
  }
  torch::Tensor forward(torch::Tensor x) {
    RunFlow f;
    return flow(f, {}, x);
  }
  nn::BatchNorm2d lastBn() { return asBatchNorm2d(bn2); }
  nn::Conv2d conv1;
  SyncBatchNorm2d bn1;
  nn::Conv2d conv2;
  SyncBatchNorm2d bn2;
  nn::Sequential downsample;
};
TORCH_MODULE(BasicBlock);

struct BottleneckImpl : nn::Module {
  static constexpr std::int64_t kExpansion = 4;
  BottleneckImpl(std::int64_t in, std::int64_t planes, std::int64_t stride, nn::Sequential down)
      : conv1(register_module("conv1", conv1x1(in, planes, 1))),
        bn1(register_module("bn1", SyncBatchNorm2d(planes))),
        conv2(register_module("conv2", conv3x3(planes, planes, stride))),
        bn2(register_module("bn2", SyncBatchNorm2d(planes))),
        conv3(register_module("conv3", conv1x1(planes, planes * kExpansion, 1))),
        bn3(register_module("bn3", SyncBatchNorm2d(planes * kExpansion))),
        downsample(down) {
    if (downsample) register_module("downsample", downsample);
  }
  // The block, once for its forward (RunFlow) and its graph (GraphFlow; `name`: its state-dict prefix).
  template <class F>
  typename F::Value flow(F& f, const std::string& name, const typename F::Value& x) {
    const typename F::Value identity = downsampled(f, name, downsample, x);
    typename F::Value out = f.bnAct(name, "bn1", bn1, f.conv(name, "conv1", conv1, x), F::none(), BnActivation::Relu);
    out = f.bnAct(name, "bn2", bn2, f.conv(name, "conv2", conv2, out), F::none(), BnActivation::Relu);
    return f.bnAct(name, "bn3", bn3, f.conv(name, "conv3", conv3, out), identity, BnActivation::Relu);
  }
  torch::Tensor forward(torch::Tensor x) {
    RunFlow f;
    return flow(f, {}, x);
  }
  nn::BatchNorm2d lastBn() { return asBatchNorm2d(bn3); }
  nn::Conv2d conv1;
  SyncBatchNorm2d bn1;
  nn::Conv2d conv2;
  SyncBatchNorm2d bn2;
  nn::Conv2d conv3;
  SyncBatchNorm2d bn3;
  nn::Sequential downsample;
};
TORCH_MODULE(Bottleneck);

template <class Block>
class ResNet : public Model {
 public:
  ResNet(std::array<std::int64_t, 4> layers, std::int64_t inChannels, std::int64_t numClasses, bool zeroInitResidual,
         bool smallStem, bool fused)
      : smallStem_(smallStem) {
    conv1 = smallStem ? register_module("conv1", conv3x3(inChannels, 64, 1))
                      : register_module("conv1", nn::Conv2d(nn::Conv2dOptions(inChannels, 64, 7).stride(2).padding(3).bias(false)));
    bn1 = register_module("bn1", SyncBatchNorm2d(64));
    layer1 = register_module("layer1", makeLayer(64, layers[0], 1, zeroInitResidual));
    layer2 = register_module("layer2", makeLayer(128, layers[1], 2, zeroInitResidual));
    layer3 = register_module("layer3", makeLayer(256, layers[2], 2, zeroInitResidual));
    layer4 = register_module("layer4", makeLayer(512, layers[3], 2, zeroInitResidual));
    fc = register_module("fc", nn::Linear(512 * Block::ContainedType::kExpansion, numClasses));
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->template as<nn::Conv2d>()) {
        nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* b = m->template as<nn::BatchNorm2d>()) {
        nn::init::ones_(b->weight);
        nn::init::zeros_(b->bias);
      }
    }
    if (zeroInitResidual)
      for (auto& block : blocks_) nn::init::zeros_(block->lastBn()->weight);
    for (SyncBatchNorm2dImpl* bn : syncBatchNorms(*this)) bn->fuse(fused);
  }

  std::vector<std::string> stages() const override { return {"stem", "layer1", "layer2", "layer3", "layer4"}; }

  // The layers as a graph: the stem, the blocks and the head as the forward runs them (one flow).
  ModelGraph graph() override {
    ModelGraph g;
    GraphFlow f(g);
    int x = stem(f, g.input());
    const std::pair<const char*, nn::Sequential*> layers[] = {
        {"layer1", &layer1}, {"layer2", &layer2}, {"layer3", &layer3}, {"layer4", &layer4}};
    for (const auto& [name, layer] : layers) {
      std::size_t i = 0;
      for (auto& block : **layer)
        x = block.ptr()->template as<typename Block::ContainedType>()->flow(f, std::string(name) + "." + std::to_string(i++), x);
    }
    head(f, x);
    return g;
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = stage("stem", [this](torch::Tensor t) {
      RunFlow f;
      return stem(f, t);
    }, x);
    x = stage("layer1", blocksOf(layer1), x);
    x = stage("layer2", blocksOf(layer2), x);
    x = stage("layer3", blocksOf(layer3), x);
    x = stage("layer4", blocksOf(layer4), x);
    RunFlow f;
    return head(f, x);
  }

 private:
  template <class F>
  typename F::Value stem(F& f, const typename F::Value& x) {
    const typename F::Value t = f.bnAct("", "bn1", bn1, f.conv("", "conv1", conv1, x), F::none(), BnActivation::Relu);
    return smallStem_ ? t : f.maxPool(t, 3, 2, 1);
  }
  template <class F>
  typename F::Value head(F& f, const typename F::Value& x) {
    return f.linear("", "fc", fc, f.avgPoolFlatten(x));
  }

  // A stage's residual blocks, one function each (recomputed block by block when asked).
  static std::vector<StageBlock> blocksOf(nn::Sequential& layer) {
    std::vector<StageBlock> blocks;
    for (auto& block : *layer) blocks.push_back([&block](torch::Tensor t) { return block.forward(t); });
    return blocks;
  }

  nn::Sequential makeLayer(std::int64_t planes, std::int64_t blocks, std::int64_t stride, bool) {
    nn::Sequential layer;
    const std::int64_t out = planes * Block::ContainedType::kExpansion;
    for (std::int64_t i = 0; i < blocks; ++i) {
      nn::Sequential down{nullptr};
      const std::int64_t s = i == 0 ? stride : 1;
      if (i == 0 && (stride != 1 || inplanes_ != out))
        down = nn::Sequential(conv1x1(inplanes_, out, stride), SyncBatchNorm2d(out));
      Block block(inplanes_, planes, s, down);
      blocks_.push_back(block);
      layer->push_back(block);
      inplanes_ = out;
    }
    return layer;
  }

  bool smallStem_;
  std::int64_t inplanes_ = 64;
  std::vector<Block> blocks_;
  nn::Conv2d conv1{nullptr};
  SyncBatchNorm2d bn1{nullptr};
  nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  nn::Linear fc{nullptr};
};

struct ResNetSettings {
  bool zeroInitResidual = false;
  bool smallInputStem = false;
  bool fused = false;
};
const OptionTable<ResNetSettings> kOptions{{
    field("zero_init_residual", &ResNetSettings::zeroInitResidual, "zero-initialise the last BN of each residual branch"),
    field("small_input_stem", &ResNetSettings::smallInputStem, "3x3 stride-1 stem without max-pool, for small images"),
    field("fused", &ResNetSettings::fused,
          "each batch norm fused with its ReLU and residual add (CUDA kernels for channels_last bf16/fp16/fp32 "
          "activations; elsewhere libtorch's modules, unchanged)"),
}};

template <class Block>
ModelKind::Factory makeResNet(std::array<std::int64_t, 4> layers) {
  return [layers](const Options& o, const DataInfo& d) -> std::shared_ptr<Model> {
    const ResNetSettings s = kOptions.read(o);
    const ModelShape shape = modelShapeOptions().read(o);
    return std::make_shared<ResNet<Block>>(layers, shape.channels(d), shape.classes(d), s.zeroInitResidual,
                                           s.smallInputStem, s.fused);
  };
}

const OptionDecls kDecls = withModelShapeOptions(kOptions.decls());
const Register<ModelKind> kResNet18{"resnet18", "torchvision-identical resnet18", kDecls, makeResNet<BasicBlock>({2, 2, 2, 2})};
const Register<ModelKind> kResNet34{"resnet34", "torchvision-identical resnet34", kDecls, makeResNet<BasicBlock>({3, 4, 6, 3})};
const Register<ModelKind> kResNet50{"resnet50", "torchvision-identical resnet50", kDecls, makeResNet<Bottleneck>({3, 4, 6, 3})};
const Register<ModelKind> kResNet101{"resnet101", "torchvision-identical resnet101", kDecls,
                                     makeResNet<Bottleneck>({3, 4, 23, 3})};
const Register<ModelKind> kResNet152{"resnet152", "torchvision-identical resnet152", kDecls,
                                     makeResNet<Bottleneck>({3, 8, 36, 3})};

}  // namespace
}  // namespace exprun
