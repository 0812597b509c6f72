// Purpose: channel groups from a model's graph, removing channels, widths, FLOPs (see Channels.h).
#include "runner/compress/Channels.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace exprun {
namespace {

using Op = GraphNode::Op;

bool isDepthwise(const GraphNode& n) {
  if (n.op != Op::Conv) return false;
  const auto& o = n.conv->options;
  return o.groups() > 1 && o.groups() == o.in_channels() && o.out_channels() == o.in_channels();
}

// Union-find over channel spaces.
struct Spaces {
  std::vector<int> parent;
  int make() {
    parent.push_back(static_cast<int>(parent.size()));
    return parent.back();
  }
  int root(int s) {
    while (parent[static_cast<std::size_t>(s)] != s) s = parent[static_cast<std::size_t>(s)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(s)])];
    return s;
  }
  void join(int a, int b) { parent[static_cast<std::size_t>(root(a))] = root(b); }
};

torch::Tensor indexTensor(const std::vector<std::int64_t>& idx, const torch::Device& device) {
  return torch::tensor(idx, torch::TensorOptions().dtype(torch::kLong)).to(device);
}

// Rebuilds `t` (a parameter or buffer) with only the entries `idx` along `dim`, in its memory format.
void slice(torch::Tensor& t, std::int64_t dim, const std::vector<std::int64_t>& idx) {
  if (!t.defined()) return;
  torch::NoGradGuard g;
  const auto format = t.dim() == 4 ? t.suggest_memory_format() : at::MemoryFormat::Contiguous;
  // to(), not contiguous(): a weight whose layout is ambiguous (one input channel, 1x1 kernels)
  // would keep NCHW strides, and oneDNN would then give its convolution NCHW outputs (Parts.cpp).
  t.set_data(t.index_select(dim, indexTensor(idx, t.device())).to(t.options(), false, false, format));
  if (t.grad().defined()) t.mutable_grad() = torch::Tensor();
}

std::vector<std::int64_t> shapeOf(const torch::Tensor& t) {
  return std::vector<std::int64_t>(t.sizes().begin() + 1, t.sizes().end());
}

// Every node's output shape for one image of `input`'s shape.
std::vector<std::vector<std::int64_t>> probeShapes(Model& model, const ModelGraph& graph, const std::vector<std::int64_t>& input) {
  torch::NoGradGuard g;
  const auto p = model.parameters();
  std::vector<std::int64_t> shape{1};
  shape.insert(shape.end(), input.begin(), input.end());
  auto options = torch::TensorOptions().device(p.empty() ? torch::kCPU : p.front().device());
  std::vector<torch::Tensor> all;
  graph.run(torch::zeros(shape, options), &all);
  std::vector<std::vector<std::int64_t>> shapes;
  for (const auto& t : all) shapes.push_back(shapeOf(t));
  return shapes;
}

// Which channel space each node's output lives in: a layer that makes channels opens one, an add
// joins its inputs', the rest pass their input's on (a flatten with its span: values per channel).
struct TracedSpaces {
  Spaces spaces;
  std::vector<int> space, producer;  // producer[space]: the node making it (-1: none)
  std::vector<std::int64_t> span;
};
TracedSpaces traceSpaces(const std::vector<GraphNode>& nodes, const std::vector<std::vector<std::int64_t>>& shapes) {
  TracedSpaces t;
  Spaces& spaces = t.spaces;
  std::vector<int>& space = t.space;
  std::vector<int>& producer = t.producer;
  std::vector<std::int64_t>& span = t.span;
  space.assign(nodes.size(), -1);
  span.assign(nodes.size(), 1);
  auto fresh = [&](int node) {
    producer.push_back(node);
    return spaces.make();
  };
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    const int in = n.inputs.empty() ? -1 : space[static_cast<std::size_t>(n.inputs[0])];
    const std::int64_t inSpan = n.inputs.empty() ? 1 : span[static_cast<std::size_t>(n.inputs[0])];
    switch (n.op) {
      case Op::Input: space[i] = fresh(-1); break;
      case Op::Conv: space[i] = isDepthwise(n) ? in : fresh(static_cast<int>(i)); break;
      case Op::Linear: space[i] = fresh(static_cast<int>(i)); break;
      case Op::Add:
        spaces.join(in, space[static_cast<std::size_t>(n.inputs[1])]);
        space[i] = in;
        break;
      case Op::Flatten: {
        const auto& s = shapes[static_cast<std::size_t>(n.inputs[0])];
        span[i] = std::accumulate(s.begin() + 1, s.end(), std::int64_t{1}, std::multiplies<>());
        space[i] = in;
        break;
      }
      case Op::AvgPoolFlatten: space[i] = in; break;
      default:
        space[i] = in;
        span[i] = inSpan;
    }
  }
  return t;
}

}  // namespace

ChannelMap mapChannels(Model& model, const std::vector<std::int64_t>& input) {
  ChannelMap m;
  m.graph = model.graph();
  if (m.graph.empty()) throw std::invalid_argument("the model has no graph of its layers, so no prunable channel groups");
  const auto& nodes = m.graph.nodes();
  for (const auto& n : nodes)
    if (n.op == Op::Conv && n.conv->options.groups() > 1 && !isDepthwise(n))
      throw std::invalid_argument("convolution '" + n.name + "' is grouped but not depthwise, which pruning does not handle");
  m.shapes = probeShapes(model, m.graph, input);
  TracedSpaces traced = traceSpaces(nodes, m.shapes);
  Spaces& spaces = traced.spaces;
  const std::vector<int>& space = traced.space;
  const std::vector<int>& producer = traced.producer;
  const std::vector<std::int64_t>& span = traced.span;
  // Spaces no one may change: the input's, the output's, and any with a part not made by a layer.
  std::vector<char> frozen(producer.size(), 0);
  frozen[static_cast<std::size_t>(spaces.root(space[0]))] = 1;
  frozen[static_cast<std::size_t>(spaces.root(space.back()))] = 1;
  for (std::size_t s = 0; s < producer.size(); ++s)
    if (producer[s] < 0) frozen[static_cast<std::size_t>(spaces.root(static_cast<int>(s)))] = 1;
  std::map<int, std::size_t> groupOf;  // root space → group index, in the order of first producers
  auto group = [&](int s) -> ChannelGroup* {
    const int r = spaces.root(s);
    if (frozen[static_cast<std::size_t>(r)]) return nullptr;
    auto it = groupOf.find(r);
    if (it == groupOf.end()) {
      it = groupOf.emplace(r, m.groups.size()).first;
      m.groups.emplace_back();
    }
    return &m.groups[it->second];
  };
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    const int node = static_cast<int>(i);
    if (n.op == Op::Conv && !isDepthwise(n)) {
      if (auto* g = group(space[i])) g->producers.push_back(node);
      if (auto* g = group(space[static_cast<std::size_t>(n.inputs[0])])) g->readers.push_back(node);
    } else if (n.op == Op::Conv) {
      if (auto* g = group(space[i])) g->depthwise.push_back(node);
    } else if (n.op == Op::Linear) {
      if (auto* g = group(space[i])) g->producers.push_back(node);
      const auto x = static_cast<std::size_t>(n.inputs[0]);
      if (auto* g = group(space[x])) {
        g->readers.push_back(node);
        g->spans[node] = span[x];
      }
    } else if (n.op == Op::BatchNorm) {
      if (auto* g = group(space[i])) g->norms.push_back(node);
    }
  }
  for (auto& g : m.groups) {
    const GraphNode& first = nodes[static_cast<std::size_t>(g.producers.front())];
    g.name = first.name;
    g.channels = first.op == Op::Conv ? first.conv->options.out_channels() : first.linear->options.out_features();
  }
  return m;
}

void keepChannels(const ChannelMap& map, const ChannelGroup& group, const std::vector<std::int64_t>& keep) {
  if (keep.empty()) throw std::invalid_argument("channel group '" + group.name + "': cannot keep no channels");
  for (std::size_t i = 0; i < keep.size(); ++i)
    if (keep[i] < 0 || keep[i] >= group.channels || (i > 0 && keep[i] <= keep[i - 1]))
      throw std::invalid_argument("channel group '" + group.name + "': channels to keep must be sorted, distinct and below " +
                                  std::to_string(group.channels));
  const auto& nodes = map.graph.nodes();
  const auto k = static_cast<std::int64_t>(keep.size());
  auto node = [&](int i) -> const GraphNode& { return nodes[static_cast<std::size_t>(i)]; };
  for (int i : group.producers) {
    const GraphNode& n = node(i);
    if (n.op == Op::Conv) {
      slice(n.conv.ptr()->weight, 0, keep);
      slice(n.conv.ptr()->bias, 0, keep);
      n.conv.ptr()->options.out_channels(k);
    } else {
      slice(n.linear.ptr()->weight, 0, keep);
      slice(n.linear.ptr()->bias, 0, keep);
      n.linear.ptr()->options.out_features(k);
    }
  }
  for (int i : group.norms) {
    const auto bn = node(i).bn.ptr();
    for (torch::Tensor* t : {&bn->weight, &bn->bias, &bn->running_mean, &bn->running_var}) slice(*t, 0, keep);
    bn->options.num_features(k);
  }
  for (int i : group.depthwise) {
    const auto c = node(i).conv.ptr();
    slice(c->weight, 0, keep);
    slice(c->bias, 0, keep);
    c->options.in_channels(k).out_channels(k).groups(k);
  }
  for (int i : group.readers) {
    const GraphNode& n = node(i);
    if (n.op == Op::Conv) {
      slice(n.conv.ptr()->weight, 1, keep);
      n.conv.ptr()->options.in_channels(k);
      continue;
    }
    const std::int64_t span = group.spans.at(i);
    std::vector<std::int64_t> features;
    for (std::int64_t c : keep)
      for (std::int64_t s = 0; s < span; ++s) features.push_back(c * span + s);
    slice(n.linear.ptr()->weight, 1, features);
    n.linear.ptr()->options.in_features(k * span);
  }
}

Widths widthsOf(const ChannelMap& map) {
  Widths w;
  for (const auto& g : map.groups) w[g.name] = g.channels;
  return w;
}

void applyWidths(Model& model, const std::vector<std::int64_t>& input, const Widths& widths) {
  if (widths.empty()) return;
  const ChannelMap map = mapChannels(model, input);
  for (const auto& [name, width] : widths) {
    auto it = std::find_if(map.groups.begin(), map.groups.end(), [&](const ChannelGroup& g) { return g.name == name; });
    if (it == map.groups.end()) throw std::invalid_argument("saved widths name channel group '" + name + "', which the model lacks");
    if (width < 1 || width > it->channels)
      throw std::invalid_argument("saved width " + std::to_string(width) + " of channel group '" + name + "' is outside 1.." +
                                  std::to_string(it->channels));
    if (width == it->channels) continue;
    std::vector<std::int64_t> keep(static_cast<std::size_t>(width));
    std::iota(keep.begin(), keep.end(), std::int64_t{0});
    keepChannels(map, *it, keep);
  }
}

double graphFlops(const ChannelMap& map, const std::vector<std::int64_t>& widths) {
  const auto& nodes = map.graph.nodes();
  std::vector<std::int64_t> out(nodes.size(), -1), in(nodes.size(), -1);  // -1: as the layer is now
  for (std::size_t g = 0; g < map.groups.size(); ++g) {
    const auto& group = map.groups[g];
    for (int i : group.producers) out[static_cast<std::size_t>(i)] = widths[g];
    for (int i : group.depthwise) out[static_cast<std::size_t>(i)] = in[static_cast<std::size_t>(i)] = widths[g];
    for (int i : group.readers) in[static_cast<std::size_t>(i)] = widths[g] * (group.spans.count(i) ? group.spans.at(i) : 1);
  }
  double flops = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    if (n.op == Op::Conv) {
      const auto& o = n.conv->options;
      const std::int64_t cin = in[i] >= 0 ? in[i] : o.in_channels(), cout = out[i] >= 0 ? out[i] : o.out_channels();
      const std::int64_t groups = o.groups() == 1 ? 1 : cin;  // depthwise: one group per channel
      const auto& s = map.shapes[i];
      flops += 2.0 * static_cast<double>(s[1] * s[2] * cout * (cin / groups) * (*o.kernel_size())[0] * (*o.kernel_size())[1]);
    } else if (n.op == Op::Linear) {
      const auto& o = n.linear->options;
      flops += 2.0 * static_cast<double>((in[i] >= 0 ? in[i] : o.in_features()) * (out[i] >= 0 ? out[i] : o.out_features()));
    }
  }
  return flops;
}

}  // namespace exprun
