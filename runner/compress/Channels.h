// Purpose: structured channel pruning's bookkeeping — which channels of a model must go together
// (channel groups, worked out from its graph, runner/api/ModelGraph.h), removing channels by
// rebuilding the tensors smaller (not masking), a model's widths (what a checkpoint saves to
// rebuild a pruned model), and FLOPs counted from the graph for any widths.
// Rule: channels are removed a whole group at a time, from every tensor the group touches.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runner/api/Model.h"

namespace exprun {

// One set of channels shared by several tensors: the filters of the convolutions (or rows of the
// linear layers) that produce it, the batch norms and depthwise convolutions that act on it channel
// by channel, and the input channels (columns) of the layers that read it. Residual sums join the
// channels of everything they add (a ResNet stage's blocks, a MobileNetV2 stage's projections), as
// Torch-Pruning's dependency graph does; a depthwise convolution passes its input's channels
// through; a linear layer after a flatten reads `span` features per channel. The network's input
// channels and its outputs (the classes) are in no group.
struct ChannelGroup {
  std::string name;                      // the first producer's state-dict name
  std::int64_t channels = 0;             // its width now
  std::vector<int> producers;            // Conv / Linear nodes whose outputs are these channels
  std::vector<int> norms;                // BatchNorm nodes on them
  std::vector<int> depthwise;            // depthwise Conv nodes on them
  std::vector<int> readers;              // Conv / Linear nodes reading them as input channels
  std::map<int, std::int64_t> spans;     // reader Linear node → features per channel (after a flatten)
  bool residual() const { return producers.size() > 1; }
  std::int64_t minWidth() const { return depthwise.empty() ? 1 : 2; }  // a depthwise conv of 1 channel is no longer one
};

// A model's graph with its channel groups. Throws std::invalid_argument when the model has no graph.
struct ChannelMap {
  ModelGraph graph;
  std::vector<ChannelGroup> groups;
  std::vector<std::vector<std::int64_t>> shapes;  // every node's output shape for one image (a probe)
};
// `input`: one image's shape [C, H, W], for the probe that finds spatial sizes.
ChannelMap mapChannels(Model& model, const std::vector<std::int64_t>& input);

// Keeps channels `keep` (sorted, distinct, within the width) of `group`: every tensor it touches is
// rebuilt smaller, in its memory format; gradients are dropped. The model's optimizer, reducer and
// EMA must be rebuilt afterwards (runner/step/Learner.h: reshapeLearner).
void keepChannels(const ChannelMap& map, const ChannelGroup& group, const std::vector<std::int64_t>& keep);

// Group name → width.
using Widths = std::map<std::string, std::int64_t>;
Widths widthsOf(const ChannelMap& map);
// Rebuilds a freshly built model at `widths` (keeping each group's first channels; the weights are
// then loaded from a checkpoint). Throws std::invalid_argument naming a group the model lacks or a
// width larger than the model's.
void applyWidths(Model& model, const std::vector<std::int64_t>& input, const Widths& widths);

// FLOPs per image of one forward pass (2 per multiply-add, convolutions and linear layers, as
// exprun's counter counts them) with each group at `widths[i]` (index = group) channels.
double graphFlops(const ChannelMap& map, const std::vector<std::int64_t>& widths);

}  // namespace exprun
