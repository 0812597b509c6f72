// Purpose: structured channel pruning as steps of an experiment (the `prune` method) — when
// it runs (one-shot before epoch `at_epoch`, or `times` steps every `every_epochs` epochs), how
// much each step removes (its share of a FLOPs reduction, or of a channel ratio, both measured
// against the full-width model), which channels go (the pruner plugin's scores, rank 0's choice
// on every rank), and the model rebuilt at the new widths (runner/compress/Channels.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runner/api/Pruner.h"
#include "runner/compress/Channels.h"
#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"

namespace exprun {

// What the pruning steps are (the prune method's options).
struct PruneSettings {
  Options pruner;                // the pruner plugin node (how channels are scored)
  double flopsReduction = 0.0;   // fraction of the forward FLOPs to remove (0: by `ratio`)
  double ratio = 0.0;            // fraction of every group's channels to remove (0: by `flopsReduction`)
  std::int64_t atEpoch = 1;      // the first step runs before this epoch (1-based)
  std::int64_t everyEpochs = 1;  // iterative: a step every N epochs
  std::int64_t times = 1;        // steps, each removing its share of the target
  std::int64_t roundTo = 8;      // widths kept at multiples of this
  bool residual = true;          // prune the channels that residual sums join
  std::string where = "prune";   // the spec's path to these settings, for messages ("methods[0]")
};

// The prune method's options (its node in spec.methods, the pruner nested in it) and the method's
// path for messages.
OptionDecls pruneOptionDecls();
PruneSettings readPruneSettings(const Options& node, const std::string& where);
// The epoch before which the last of `times` pruning steps runs.
inline std::int64_t lastPruningEpoch(const PruneSettings& s) { return s.atEpoch + (s.times - 1) * s.everyEpochs; }

// What one pruning step did.
struct PruneOutcome {
  int step = 0, steps = 0;               // 1-based, of `steps`
  double ratio = 0;                      // the fraction of channels removed from every pruned group (full-width)
  double flopsBefore = 0, flopsAfter = 0;  // forward FLOPs per image (graph count)
  Widths before, after;
  std::map<std::string, std::vector<std::int64_t>> kept;  // each group's channels kept (indices before the step)
};

class ChannelPruner {
 public:
  // `fullWidth`: a freshly built model of type `modelType` (its widths are the reference);
  // `input`: one image's shape [C, H, W]. Throws std::invalid_argument (with the key path) for a
  // model without prunable channel groups or a FLOPs target it cannot reach.
  ChannelPruner(const PruneSettings& settings, const std::string& modelType, Model& fullWidth,
                std::vector<std::int64_t> input);
  // The pruning step that runs before epoch `epoch` (1-based), 0 for none.
  int stepBefore(std::int64_t epoch) const;
  // Collective: prunes `model` for step `step`; every rank keeps rank 0's choice of channels.
  PruneOutcome prune(Model& model, int step, Dist& dist) const;
  // The batch-norm scales of the groups that may be pruned (for the pruner's training penalty).
  std::vector<torch::Tensor> penalizedScales(Model& model) const;
  const Pruner& pruner() const { return *pruner_; }
  const std::vector<std::int64_t>& input() const { return input_; }
  double fullWidthFlops() const { return fullFlops_; }

  // The widths of every group for a removal of `ratio` of the full-width channels (`current`:
  // today's widths, never exceeded; groups skipped by `residual: false` stay).
  std::vector<std::int64_t> widthsFor(const ChannelMap& map, double ratio) const;

 private:
  bool skipped(const ChannelGroup& g) const { return g.residual() && !c_.residual; }
  PruneSettings c_;
  std::unique_ptr<Pruner> pruner_;
  std::vector<std::int64_t> input_;
  Widths full_;
  double fullFlops_ = 0;
};

}  // namespace exprun
