// Purpose: int8 post-training static quantization on LibTorch's quantized CPU kernels (see Quantize.h).
#include "plugins/methods/compress/Quantize.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "runner/metrics/Hardware.h"
#include "runner/nn/Autocast.h"

namespace exprun {
namespace int8ops {  // named: Int8Model::Impl holds its types

using Op = GraphNode::Op;

// An operator of the PyTorch registry, called boxed (packed weights are TorchScript custom-class
// objects, held as IValues).
c10::OperatorHandle findOp(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}
c10::IValue call(const c10::OperatorHandle& op, std::vector<c10::IValue> args) {
  op.callBoxed(&args);
  return std::move(args.front());
}
c10::IValue call(const char* name, const char* overload, std::vector<c10::IValue> args) {
  return call(findOp(name, overload), std::move(args));
}

std::vector<std::int64_t> pair(const torch::ExpandingArray<2>& a) { return {(*a)[0], (*a)[1]}; }

// uint8 affine parameters for values in [lo, hi] (0 always representable).
ActivationGrid affine(double lo, double hi, bool reduceRange) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  const double qmax = reduceRange ? 127 : 255;
  ActivationGrid p;
  p.scale = std::max((hi - lo) / qmax, 1e-8);
  p.zeroPoint = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::llround(-lo / p.scale)), 0,
                                         static_cast<std::int64_t>(qmax));
  return p;
}

// A weight, int8 per output channel and symmetric (PyTorch's per_channel_symmetric observer).
// Its per-channel scales: the channel's largest magnitude over 127.5.
torch::Tensor weightScales(const torch::Tensor& w) {
  return w.detach().abs().flatten(1).amax(1).to(torch::kDouble).clamp_min(1e-12) / 127.5;
}
torch::Tensor quantizeWeight(const torch::Tensor& w) {
  const torch::Tensor scales = weightScales(w);
  const torch::Tensor zeros = torch::zeros({w.size(0)}, torch::kLong);
  return at::quantize_per_channel(w.contiguous(), scales, zeros, 0, torch::kQInt8);
}

enum class Kind { Input, Conv, Linear, FloatLinear, Add, MaxPool, AvgPoolFlatten, Flatten, Relu, Relu6 };

// One int8 operation: reads earlier operations' outputs, writes its own.
struct QOp {
  Kind kind = Kind::Input;
  std::vector<int> inputs;  // indices of earlier QOps
  std::string name;         // the layer's (weights) or the node's position
  bool relu = false;
  bool narrow = false;      // its output grid has 128 levels: it feeds a depthwise convolution (see plan)
  int node = -1;            // the graph node it starts at (its layer's)
  int bn = -1;              // conv: the batch norm folded into it (-1: none)
  int observed = -1;        // the graph node whose float output sets this op's output range
  ActivationGrid out;
  c10::IValue packed;       // conv / linear: prepacked int8 weights
  std::optional<c10::OperatorHandle> op;  // conv / linear / add: the quantized:: kernel, found once
  torch::Tensor qweight, bias;
  std::int64_t kernel = 0, stride = 0, padding = 0;
};

}  // namespace int8ops
using namespace int8ops;

bool cpuHasVnni() {
  const CpuInfo& cpu = thisCpu();
  return cpu.has("avx512_vnni") || cpu.has("avx_vnni") || cpu.has("amx_int8");
}

struct Int8Model::Impl {
  std::vector<QOp> ops;
  std::string engine;
  void calibrate(const ModelGraph& graph, const std::function<std::optional<torch::Tensor>()>& next, bool reduceRange);
  void pack(const ModelGraph& graph);
  void build(Model& model, const std::function<void(const ModelGraph&)>& setGrids);
};

Int8Model::~Int8Model() = default;
Int8Model::Int8Model(Int8Model&&) noexcept = default;
const std::string& Int8Model::engine() const { return impl_->engine; }

namespace {

// Folds a batch norm into the convolution before it: W·γ/σ, (b − μ)·γ/σ + β.
void foldBatchNorm(torch::Tensor& w, torch::Tensor& b, const torch::nn::BatchNorm2d& bn) {
  const torch::Tensor k = bn->weight / torch::sqrt(bn->running_var + bn->options.eps());
  w = w * k.view({-1, 1, 1, 1});
  b = (b.defined() ? b : torch::zeros_like(bn->running_mean)) - bn->running_mean;
  b = b * k + bn->bias;
}

// A convolution's int8 weights, with the batch norm `bnNode` (-1: none) folded into them.
void planConv(QOp& q, const GraphNode& n, const std::vector<GraphNode>& nodes, int bnNode) {
  q.kind = Kind::Conv;
  q.name = n.name;
  if (!std::holds_alternative<torch::ExpandingArray<2>>(n.conv->options.padding()))
    throw std::invalid_argument("int8: convolution '" + n.name + "' has 'same'/'valid' padding, which exprun does not quantize");
  torch::Tensor w = n.conv->weight.detach().to(torch::kFloat), b;
  if (n.conv->bias.defined()) b = n.conv->bias.detach().to(torch::kFloat);
  if (bnNode >= 0) foldBatchNorm(w, b, nodes[static_cast<std::size_t>(bnNode)].bn);
  q.qweight = quantizeWeight(w);
  q.bias = b.defined() ? b.contiguous() : torch::Tensor();
}

bool setsRange(Kind k) { return k == Kind::Input || k == Kind::Conv || k == Kind::Linear || k == Kind::Add || k == Kind::Relu6; }

// The x86 engine's depthwise int8 convolution (fbgemm) sums pairs of uint8 x int8 products in
// 16 bits, which saturate with 8-bit activations whatever the CPU (measured on LibTorch 2.11 with
// an AMX-INT8 Xeon: 0.03 % of outputs off by up to 50 steps, none with 7-bit inputs): the grid of
// every activation a depthwise convolution reads gets 128 levels.
// For each op, the op whose grid its output is on: its own when it sets one, else its input's
// (pooling, flattening and ReLU keep their input's grid).
std::vector<int> gridOwners(const std::vector<QOp>& ops) {
  std::vector<int> owner;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const QOp& q = ops[i];
    owner.push_back(setsRange(q.kind) || q.inputs.empty() ? static_cast<int>(i) : owner[static_cast<std::size_t>(q.inputs[0])]);
  }
  return owner;
}

void narrowDepthwiseInputs(std::vector<QOp>& ops, const std::vector<GraphNode>& nodes) {
  const std::vector<int> owner = gridOwners(ops);
  for (const QOp& q : ops) {
    if (q.kind != Kind::Conv) continue;
    const auto& conv = nodes[static_cast<std::size_t>(q.node)].conv;
    if (conv->options.groups() == 1 || conv->options.groups() != conv->options.in_channels()) continue;
    ops[static_cast<std::size_t>(owner[static_cast<std::size_t>(q.inputs[0])])].narrow = true;
  }
}

// The graph as int8 operations, fusing batch norms and activations into the layers before them.
std::vector<QOp> plan(const ModelGraph& graph) {
  const auto& nodes = graph.nodes();
  const std::vector<int> readers = graph.readers();
  std::vector<int> readerOf(nodes.size(), -1);  // the single reader of a node (when it has one)
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (int in : nodes[i].inputs) readerOf[static_cast<std::size_t>(in)] = static_cast<int>(i);
  auto soleNext = [&](int i, Op op) {
    const auto u = static_cast<std::size_t>(i);
    return readers[u] == 1 && nodes[static_cast<std::size_t>(readerOf[u])].op == op ? readerOf[u] : -1;
  };
  std::vector<QOp> ops;
  std::vector<int> opOf(nodes.size(), -1);  // the QOp whose output is each node's value
  std::vector<char> fused(nodes.size(), 0);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (fused[i]) continue;
    const GraphNode& n = nodes[i];
    const int node = static_cast<int>(i);
    QOp q;
    q.node = node;
    for (int in : n.inputs) q.inputs.push_back(opOf[static_cast<std::size_t>(in)]);
    int last = node;
    std::vector<int> members{node};  // the graph nodes this op computes
    auto fuseActivation = [&](bool allowRelu6) {
      for (Op act : {Op::Relu, Op::Relu6}) {
        if (act == Op::Relu6 && !allowRelu6) continue;
        const int a = soleNext(last, act);
        if (a >= 0) {
          q.relu = true;
          last = a;
          members.push_back(a);
          fused[static_cast<std::size_t>(a)] = 1;
          return;
        }
      }
    };
    switch (n.op) {
      case Op::Input: q.kind = Kind::Input; q.name = "input"; break;
      case Op::Conv: {
        const int bnNode = soleNext(node, Op::BatchNorm);
        planConv(q, n, nodes, bnNode);
        q.bn = bnNode;
        if (bnNode >= 0) {
          fused[static_cast<std::size_t>(bnNode)] = 1;
          members.push_back(bnNode);
          last = bnNode;
        }
        fuseActivation(true);
        break;
      }
      case Op::Linear: {
        // The last layer's output (the logits) stays float: its range is wide (-695 to 203 on the
        // ResNet-18 of experiments/fashion-mnist/prune-quantize*.yaml) and 256 levels of it cost
        // 5 points of Top-1 there; its int8 weights are dequantized for one small float product.
        q.kind = readers[i] == 0 ? Kind::FloatLinear : Kind::Linear;
        q.name = n.name;
        q.qweight = quantizeWeight(n.linear->weight.detach().to(torch::kFloat));
        if (n.linear->bias.defined()) q.bias = n.linear->bias.detach().to(torch::kFloat).contiguous();
        fuseActivation(false);
        break;
      }
      case Op::Add: q.kind = Kind::Add; q.name = "add" + std::to_string(i); fuseActivation(false); break;
      case Op::MaxPool:
        q.kind = Kind::MaxPool;
        q.kernel = n.kernel, q.stride = n.stride, q.padding = n.padding;
        break;
      case Op::AvgPoolFlatten: q.kind = Kind::AvgPoolFlatten; break;
      case Op::Flatten: q.kind = Kind::Flatten; break;
      case Op::Relu: q.kind = Kind::Relu; break;
      case Op::Relu6: q.kind = Kind::Relu6; q.name = "relu6_" + std::to_string(i); break;
      case Op::BatchNorm:
        throw std::invalid_argument("int8: batch norm '" + n.name + "' does not follow a convolution it can be folded into");
    }
    q.observed = last;
    for (int m : members) opOf[static_cast<std::size_t>(m)] = static_cast<int>(ops.size());
    ops.push_back(std::move(q));
  }
  narrowDepthwiseInputs(ops, nodes);
  return ops;
}

// The range [lo, hi] of `hist` (counts of `bins` equal bins over [min, max]) whose uint8 grid of
// `levels` steps gives the least expected squared error: rounding (step²/12) inside, clipping
// outside — PyTorch's HistogramObserver's criterion, searched over the cut-offs leaving out a
// fraction q of the values at each end, q from a fixed grid (0 to 2 %). `lowAtZero`: the values
// are ≥ 0 (ReLU), only the top is cut.
std::pair<double, double> bestRange(const std::vector<double>& hist, double min, double max, int levels, bool lowAtZero) {
  const std::size_t bins = hist.size();
  const double width = (max - min) / static_cast<double>(bins);
  double total = 0;
  for (double c : hist) total += c;
  if (total <= 0 || width <= 0) return {min, max};
  auto cut = [&](double q, bool fromTop) {  // the bin edge leaving out a fraction q at one end
    double seen = 0;
    for (std::size_t k = 0; k < bins; ++k) {
      const std::size_t i = fromTop ? bins - 1 - k : k;
      seen += hist[i];
      if (seen > q * total) return fromTop ? min + static_cast<double>(i + 1) * width : min + static_cast<double>(i) * width;
    }
    return fromTop ? min : max;
  };
  auto error = [&](double lo, double hi) {
    const double l = std::min(lo, 0.0), h = std::max(hi, 0.0), step = (h - l) / levels;
    double e = 0;
    for (std::size_t i = 0; i < bins; ++i) {
      const double v = min + (static_cast<double>(i) + 0.5) * width;
      const double d = v < l ? l - v : (v > h ? v - h : 0.0);
      e += hist[i] * (d * d + step * step / 12);
    }
    return e;
  };
  static const double kCuts[] = {0, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 2e-2};
  std::pair<double, double> best{min, max};
  double bestError = error(min, max);
  for (double qLow : kCuts) {
    if (lowAtZero && qLow > 0) break;
    const double lo = lowAtZero ? min : cut(qLow, false);
    for (double qHigh : kCuts) {
      const double hi = cut(qHigh, true);
      if (hi <= lo) continue;
      const double e = error(lo, hi);
      if (e < bestError) bestError = e, best = {lo, hi};
    }
  }
  return best;
}

}  // namespace

// The output ranges of the ops that set one: the calibration batches run through the float graph
// twice — first each output's minimum and maximum, then its histogram over them (2048 bins) — and
// the range with the least expected squared error is kept (bestRange).
void Int8Model::Impl::calibrate(const ModelGraph& graph, const std::function<std::optional<torch::Tensor>()>& next,
                                bool reduceRange) {
  constexpr int kBins = 2048;
  std::vector<torch::Tensor> batches;
  while (auto x = next()) batches.push_back(x->to(torch::kFloat));
  if (batches.empty()) throw std::invalid_argument("int8: no calibration batch");
  const std::size_t n = graph.nodes().size();
  std::vector<double> lo(n, std::numeric_limits<double>::infinity()), hi(n, -std::numeric_limits<double>::infinity());
  std::vector<std::vector<double>> hist(n);
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& x : batches) {
      std::vector<torch::Tensor> all;
      graph.run(x, &all);
      for (const QOp& q : ops) {
        if (!setsRange(q.kind)) continue;
        const auto o = static_cast<std::size_t>(q.observed);
        const torch::Tensor& t = all[o];
        if (pass == 0) {
          lo[o] = std::min(lo[o], t.min().item<double>());
          hi[o] = std::max(hi[o], t.max().item<double>());
          continue;
        }
        const torch::Tensor h = torch::histc(t.detach().to(torch::kFloat), kBins, lo[o], hi[o]).to(torch::kDouble).contiguous();
        if (hist[o].empty()) hist[o].assign(kBins, 0.0);
        const double* p = h.data_ptr<double>();
        for (int i = 0; i < kBins; ++i) hist[o][static_cast<std::size_t>(i)] += p[i];
      }
    }
  for (QOp& q : ops) {
    if (!setsRange(q.kind)) continue;
    const auto o = static_cast<std::size_t>(q.observed);
    const bool narrow = reduceRange || q.narrow;
    const auto [l, h] = hi[o] > lo[o] ? bestRange(hist[o], lo[o], hi[o], narrow ? 127 : 255, q.relu || lo[o] >= 0)
                                      : std::pair<double, double>{lo[o], hi[o]};
    q.out = affine(q.relu ? 0.0 : l, h, narrow);
  }
}

namespace {

// Selects LibTorch's x86 int8 engine (x86, else fbgemm, else oneDNN); returns its name.
std::string selectEngine() {
  const auto& engines = at::globalContext().supportedQEngines();
  for (at::QEngine e : {at::QEngine::X86, at::QEngine::FBGEMM, at::QEngine::ONEDNN}) {
    if (std::find(engines.begin(), engines.end(), e) == engines.end()) continue;
    at::globalContext().setQEngine(e);
    return c10::toString(e);
  }
  throw std::invalid_argument("int8: this LibTorch has no x86 quantized engine (fbgemm, oneDNN)");
}

ModelGraph graphOf(Model& model) {
  ModelGraph graph = model.graph();
  if (graph.empty()) throw std::invalid_argument("int8: the model has no graph of its layers to quantize");
  return graph;
}

// The output grids of the ops that set one, in order.
std::vector<ActivationGrid> gridsOf(const std::vector<QOp>& ops) {
  std::vector<ActivationGrid> out;
  for (const QOp& q : ops)
    if (setsRange(q.kind)) out.push_back(q.out);
  return out;
}

// Gives the ops that set a range `grids`, in order.
void assignGrids(std::vector<QOp>& ops, const std::vector<ActivationGrid>& grids) {
  const auto wanted = static_cast<std::size_t>(std::count_if(ops.begin(), ops.end(), [](const QOp& q) { return setsRange(q.kind); }));
  if (grids.size() != wanted)
    throw std::invalid_argument("int8: " + std::to_string(grids.size()) + " activation grids given for a model that has " +
                                std::to_string(wanted));
  std::size_t k = 0;
  for (QOp& q : ops)
    if (setsRange(q.kind)) q.out = grids[k++];
}

}  // namespace

// The engine, the graph's plan, its output grids (set by `setGrids`), then the packed weights.
void Int8Model::Impl::build(Model& model, const std::function<void(const ModelGraph&)>& setGrids) {
  engine = selectEngine();
  torch::NoGradGuard noGrad;
  const ModelGraph graph = graphOf(model);
  ops = plan(graph);
  setGrids(graph);
  pack(graph);
}

// The conv and linear layers' int8 weights prepacked for their kernels, and the kernels.
void Int8Model::Impl::pack(const ModelGraph& graph) {
  for (QOp& q : ops) {
    if (q.kind == Kind::Conv) {
      const auto& o = graph.nodes()[static_cast<std::size_t>(q.node)].conv->options;
      q.packed = call("quantized::conv2d_prepack", "",
                      {q.qweight, q.bias.defined() ? c10::IValue(q.bias) : c10::IValue(), pair(o.stride()),
                       pair(std::get<torch::ExpandingArray<2>>(o.padding())), pair(o.dilation()), o.groups()});
      q.op = findOp(q.relu ? "quantized::conv2d_relu" : "quantized::conv2d", "new");
    } else if (q.kind == Kind::FloatLinear) {
      q.packed = q.qweight.dequantize();
    } else if (q.kind == Kind::Linear) {
      q.packed = call("quantized::linear_prepack", "", {q.qweight, q.bias.defined() ? c10::IValue(q.bias) : c10::IValue()});
      q.op = findOp(q.relu ? "quantized::linear_relu" : "quantized::linear", "");
    } else if (q.kind == Kind::Add) {
      q.op = findOp(q.relu ? "quantized::add_relu" : "quantized::add", "");
    }
  }
}

Int8Model::Int8Model(Model& model, const std::function<std::optional<torch::Tensor>()>& next, Int8Options options)
    : impl_(std::make_unique<Impl>()) {
  impl_->build(model, [&](const ModelGraph& graph) { impl_->calibrate(graph, next, options.reduceRange); });
}

Int8Model::Int8Model(Model& model, const std::vector<ActivationGrid>& grids) : impl_(std::make_unique<Impl>()) {
  impl_->build(model, [&](const ModelGraph&) { assignGrids(impl_->ops, grids); });
}

std::vector<ActivationGrid> Int8Model::grids() const { return gridsOf(impl_->ops); }

torch::Tensor Int8Model::forward(const torch::Tensor& x) const {
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> v(impl_->ops.size());
  for (std::size_t i = 0; i < impl_->ops.size(); ++i) {
    const QOp& q = impl_->ops[i];
    auto in = [&](std::size_t k) { return v[static_cast<std::size_t>(q.inputs[k])]; };
    switch (q.kind) {
      case Kind::Input:
        v[i] = at::quantize_per_tensor(x.to(torch::kFloat).contiguous(x.dim() == 4 ? at::MemoryFormat::ChannelsLast
                                                                                   : at::MemoryFormat::Contiguous),
                                       q.out.scale, q.out.zeroPoint, torch::kQUInt8);
        break;
      case Kind::Conv:
      case Kind::Linear: v[i] = call(*q.op, {in(0), q.packed, q.out.scale, q.out.zeroPoint}).toTensor(); break;
      case Kind::FloatLinear:
        v[i] = at::linear(in(0).is_quantized() ? in(0).dequantize() : in(0), q.packed.toTensor(),
                          q.bias.defined() ? q.bias : torch::Tensor());
        break;
      case Kind::Add: v[i] = call(*q.op, {in(0), in(1), q.out.scale, q.out.zeroPoint}).toTensor(); break;
      case Kind::MaxPool: v[i] = at::max_pool2d(in(0), {q.kernel, q.kernel}, {q.stride, q.stride}, {q.padding, q.padding}, {1, 1}); break;
      case Kind::AvgPoolFlatten: v[i] = at::adaptive_avg_pool2d(in(0), {1, 1}).contiguous().flatten(1); break;
      case Kind::Flatten: v[i] = in(0).contiguous().flatten(1); break;
      case Kind::Relu: v[i] = at::relu(in(0)); break;
      case Kind::Relu6:
        v[i] = at::quantize_per_tensor(at::clamp(in(0).dequantize(), 0.0, 6.0), q.out.scale, q.out.zeroPoint, torch::kQUInt8);
        break;
    }
  }
  return v.back().is_quantized() ? v.back().dequantize() : v.back();
}

std::vector<std::pair<std::string, torch::Tensor>> Int8Model::tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const QOp& q : impl_->ops) {
    if (q.kind == Kind::Conv || q.kind == Kind::Linear || q.kind == Kind::FloatLinear) {
      out.emplace_back(q.name + ".weight", q.qweight.int_repr());
      out.emplace_back(q.name + ".weight_scale", q.qweight.q_per_channel_scales().to(torch::kFloat));
      out.emplace_back(q.name + ".weight_zero_point", q.qweight.q_per_channel_zero_points().to(torch::kInt));
      if (q.bias.defined()) out.emplace_back(q.name + ".bias", q.bias);
    }
    if (setsRange(q.kind)) {
      out.emplace_back(q.name + ".output_scale", torch::tensor({static_cast<float>(q.out.scale)}));
      out.emplace_back(q.name + ".output_zero_point", torch::tensor({static_cast<std::int32_t>(q.out.zeroPoint)}));
    }
  }
  return out;
}

std::int64_t Int8Model::bytes() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : tensors()) n += t.numel() * static_cast<std::int64_t>(t.element_size());
  return n;
}

struct FakeQuantForward::Impl {
  ModelGraph graph;
  std::vector<QOp> ops;
  std::vector<int> gridOf;  // the op whose grid each op's output is on (gridOwners)
};

FakeQuantForward::FakeQuantForward(Model& model, const std::vector<ActivationGrid>& grids) : impl_(std::make_unique<Impl>()) {
  impl_->graph = graphOf(model);
  {
    torch::NoGradGuard noGrad;
    impl_->ops = plan(impl_->graph);
  }
  assignGrids(impl_->ops, grids);
  for (QOp& q : impl_->ops) q.qweight = q.bias = torch::Tensor();  // each call rounds the weights of now
  impl_->gridOf = gridOwners(impl_->ops);
}

FakeQuantForward::~FakeQuantForward() = default;
std::vector<ActivationGrid> FakeQuantForward::grids() const { return gridsOf(impl_->ops); }

namespace {

// A weight rounded per output channel to the int8 grid Int8Model gives it (gradient straight through).
torch::Tensor fakeWeight(const torch::Tensor& w) {
  const torch::Tensor scales = weightScales(w).to(torch::kFloat).to(w.device());
  const torch::Tensor zeros = torch::zeros({w.size(0)}, torch::TensorOptions().dtype(torch::kInt).device(w.device()));
  return at::fake_quantize_per_channel_affine(w, scales, zeros, 0, -128, 127);
}

}  // namespace

torch::Tensor FakeQuantForward::operator()(const torch::Tensor& input) const {
  NoAutocast off(input.device().type());
  const auto& nodes = impl_->graph.nodes();
  const auto& ops = impl_->ops;
  std::vector<torch::Tensor> v(ops.size());
  const auto onGrid = [&](const QOp& q, const torch::Tensor& t) {
    // 0…255 also for 7-bit grids: their scale spans 128 levels, but uint8 tensors (and the int8
    // kernels' outputs) hold values above the calibrated range up to 255, as PyTorch's do.
    return at::fake_quantize_per_tensor_affine(t, q.out.scale, q.out.zeroPoint, 0, 255);
  };
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const QOp& q = ops[i];
    auto in = [&](std::size_t k) { return v[static_cast<std::size_t>(q.inputs[k])]; };
    const GraphNode& n = nodes[static_cast<std::size_t>(q.node)];
    switch (q.kind) {
      case Kind::Input: v[i] = onGrid(q, input.to(torch::kFloat)); break;
      case Kind::Conv: {
        torch::Tensor w = n.conv->weight, b = n.conv->bias;
        if (q.bn >= 0) foldBatchNorm(w, b, nodes[static_cast<std::size_t>(q.bn)].bn);
        const auto& o = n.conv->options;
        torch::Tensor y = at::conv2d(in(0), fakeWeight(w), b, pair(o.stride()),
                                     pair(std::get<torch::ExpandingArray<2>>(o.padding())), pair(o.dilation()), o.groups());
        v[i] = onGrid(q, q.relu ? at::relu(y) : y);
        break;
      }
      case Kind::Linear:
      case Kind::FloatLinear: {
        torch::Tensor y = at::linear(in(0), fakeWeight(n.linear->weight), n.linear->bias);
        if (q.relu) y = at::relu(y);
        v[i] = q.kind == Kind::Linear ? onGrid(q, y) : y;  // the logits stay float
        break;
      }
      case Kind::Add: v[i] = onGrid(q, q.relu ? at::relu(in(0) + in(1)) : in(0) + in(1)); break;
      case Kind::MaxPool: v[i] = at::max_pool2d(in(0), {q.kernel, q.kernel}, {q.stride, q.stride}, {q.padding, q.padding}, {1, 1}); break;
      case Kind::AvgPoolFlatten:  // the int8 average rounds to its input's grid
        v[i] = onGrid(ops[static_cast<std::size_t>(impl_->gridOf[i])], at::adaptive_avg_pool2d(in(0), {1, 1}).flatten(1));
        break;
      case Kind::Flatten: v[i] = in(0).flatten(1); break;
      case Kind::Relu: v[i] = at::relu(in(0)); break;
      case Kind::Relu6: v[i] = onGrid(q, at::clamp(in(0), 0.0, 6.0)); break;
    }
  }
  return v.back();
}

}  // namespace exprun
