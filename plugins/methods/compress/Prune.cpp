// Purpose: the pruning steps of an experiment (see Prune.h).
#include "plugins/methods/compress/Prune.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "runner/spec/OptionTable.h"
#include "runner/util/Format.h"

namespace exprun {
namespace {

constexpr double kMostRatio = 0.99;  // the largest fraction of a group's channels a step may remove

// The `keep` channels with the highest scores, in index order (ties: the lower index is kept).
std::vector<std::int64_t> chooseKept(const torch::Tensor& score, std::int64_t keep) {
  const auto s = torch::nan_to_num(score.contiguous().to(torch::kDouble), -1e300);  // NaN scores go first
  const double* v = s.data_ptr<double>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [v](std::int64_t a, std::int64_t b) { return v[a] > v[b]; });
  order.resize(static_cast<std::size_t>(keep));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<std::int64_t> currentWidths(const ChannelMap& map) {
  std::vector<std::int64_t> w;
  for (const auto& g : map.groups) w.push_back(g.channels);
  return w;
}

GroupTensors tensorsOf(const ChannelMap& map, const ChannelGroup& g) {
  GroupTensors t;
  const auto& nodes = map.graph.nodes();
  for (int i : g.producers) {
    const GraphNode& n = nodes[static_cast<std::size_t>(i)];
    t.filters.push_back(n.op == GraphNode::Op::Conv ? n.conv->weight : n.linear->weight);
  }
  for (int i : g.norms) t.normScales.push_back(nodes[static_cast<std::size_t>(i)].bn->weight);
  return t;
}

const OptionTable<PruneSettings>& pruneOptions() {
  using T = PruneSettings;
  static const OptionTable<T> table{{
      field("flops_reduction", &T::flopsReduction, "fraction of the forward FLOPs pruning removes (0: use ratio)",
            {0.0, 0.95}),
      field("ratio", &T::ratio, "fraction of every channel group's channels pruning removes (0: use flops_reduction)",
            {0.0, 0.95}),
      field("at_epoch", &T::atEpoch, "the first pruning step runs before this epoch (1-based)", {1}),
      field("every_epochs", &T::everyEpochs, "epochs between pruning steps", {1}),
      field("times", &T::times, "pruning steps; each removes its share of the target (1: one-shot)", {1, 100}),
      field("round_to", &T::roundTo, "channel widths kept at multiples of this", {1, 1024}),
      field("residual", &T::residual, "also prune the channels joined by residual sums"),
  }};
  return table;
}

}  // namespace

OptionDecls pruneOptionDecls() { return pruneOptions().decls(); }

PruneSettings readPruneSettings(const Options& node, const std::string& where) {
  PruneSettings s;
  pruneOptions().readInto(s, node);
  s.pruner = node.child("pruner");
  s.where = where;
  return s;
}

ChannelPruner::ChannelPruner(const PruneSettings& settings, const std::string& modelType, Model& fullWidth,
                             std::vector<std::int64_t> input)
    : c_(settings), pruner_(build<PrunerKind>(settings.pruner)), input_(std::move(input)) {
  ChannelMap map;
  try {
    map = mapChannels(fullWidth, input_);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(c_.where + ".pruner: model '" + modelType + "': " + e.what());
  }
  if (map.groups.empty())
    throw std::invalid_argument(c_.where + ".pruner: model '" + modelType + "' has no prunable channel groups");
  full_ = widthsOf(map);
  fullFlops_ = graphFlops(map, currentWidths(map));
  if (c_.flopsReduction > 0) {  // a target the model cannot reach is refused before training
    const double most = 1 - graphFlops(map, widthsFor(map, kMostRatio)) / fullFlops_;
    if (most < c_.flopsReduction)
      throw std::invalid_argument(strf("%s.flops_reduction: %.0f %% of the FLOPs cannot be removed from model '%s' "
                                       "(at most %.1f %% with residual %s and round_to %lld)",
                                       c_.where.c_str(), c_.flopsReduction * 100, modelType.c_str(), most * 100,
                                       c_.residual ? "true" : "false", static_cast<long long>(c_.roundTo)));
  }
}

int ChannelPruner::stepBefore(std::int64_t epoch) const {
  if (epoch < c_.atEpoch) return 0;
  const std::int64_t since = epoch - c_.atEpoch;
  if (since % c_.everyEpochs != 0 || since / c_.everyEpochs >= c_.times) return 0;
  return static_cast<int>(since / c_.everyEpochs) + 1;
}

std::vector<std::int64_t> ChannelPruner::widthsFor(const ChannelMap& map, double ratio) const {
  std::vector<std::int64_t> w;
  for (const auto& g : map.groups) {
    const auto it = full_.find(g.name);
    const std::int64_t full = it == full_.end() ? g.channels : it->second;
    if (skipped(g)) {
      w.push_back(g.channels);
      continue;
    }
    const double want = (1.0 - ratio) * static_cast<double>(full);
    std::int64_t keep = full >= c_.roundTo ? static_cast<std::int64_t>(std::llround(want / static_cast<double>(c_.roundTo))) * c_.roundTo
                                           : static_cast<std::int64_t>(std::llround(want));
    keep = std::max<std::int64_t>(keep, std::min(c_.roundTo, full));
    w.push_back(std::clamp<std::int64_t>(keep, std::min(g.minWidth(), g.channels), g.channels));
  }
  return w;
}

PruneOutcome ChannelPruner::prune(Model& model, int step, Dist& dist) const {
  const ChannelMap map = mapChannels(model, input_);
  PruneOutcome out;
  out.step = step;
  out.steps = static_cast<int>(c_.times);
  out.before = widthsOf(map);
  out.flopsBefore = graphFlops(map, currentWidths(map));
  const double share = static_cast<double>(step) / static_cast<double>(c_.times);
  if (c_.ratio > 0) {
    out.ratio = c_.ratio * share;
  } else {  // the smallest ratio reaching the FLOPs target (FLOPs only fall as the ratio grows)
    const double target = fullFlops_ * (1.0 - c_.flopsReduction * share);
    double lo = 0, hi = kMostRatio;  // reachable: checked at construction
    for (int i = 0; i < 40; ++i) {
      const double mid = (lo + hi) / 2;
      (graphFlops(map, widthsFor(map, mid)) <= target ? hi : lo) = mid;
    }
    out.ratio = hi;
  }
  const std::vector<std::int64_t> widths = widthsFor(map, out.ratio);
  for (std::size_t g = 0; g < map.groups.size(); ++g) out.after[map.groups[g].name] = widths[g];
  out.flopsAfter = graphFlops(map, widths);
  // Rank 0 chooses; the others take its choice (a sum to which only rank 0 adds ones).
  std::vector<double> mask;
  for (std::size_t g = 0; g < map.groups.size(); ++g) {
    std::vector<double> m(static_cast<std::size_t>(map.groups[g].channels), 0.0);
    if (dist.rank() == 0)
      for (auto c : chooseKept(pruner_->importance(tensorsOf(map, map.groups[g])), widths[g]))
        m[static_cast<std::size_t>(c)] = 1.0;
    mask.insert(mask.end(), m.begin(), m.end());
  }
  if (dist.active()) mask = dist.sum(mask);
  std::size_t at = 0;
  for (std::size_t g = 0; g < map.groups.size(); ++g) {
    std::vector<std::int64_t> keep;
    for (std::int64_t c = 0; c < map.groups[g].channels; ++c)
      if (mask[at + static_cast<std::size_t>(c)] > 0.5) keep.push_back(c);
    at += static_cast<std::size_t>(map.groups[g].channels);
    out.kept[map.groups[g].name] = keep;
    if (static_cast<std::int64_t>(keep.size()) < map.groups[g].channels) keepChannels(map, map.groups[g], keep);
  }
  return out;
}

std::vector<torch::Tensor> ChannelPruner::penalizedScales(Model& model) const {
  std::vector<torch::Tensor> scales;
  const ChannelMap map = mapChannels(model, input_);
  for (const auto& g : map.groups)
    if (!skipped(g))
      for (int i : g.norms) scales.push_back(map.graph.nodes()[static_cast<std::size_t>(i)].bn->weight);
  return scales;
}

}  // namespace exprun
