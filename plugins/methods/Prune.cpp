// Purpose: method `prune` — structured channel pruning as steps of the run (plugins/methods/compress/Prune.h):
// before epoch `at_epoch` (and every `every_epochs` after it, `times` steps in all) whole channels
// go, chosen by the nested pruner plugin's scores on rank 0; the model is rebuilt smaller (its
// optimizer, reducer and EMA with it) and its FLOPs recounted; the pruner's training penalty (if
// any) is added before every optimizer step. At the end it compares the full-width model with the
// pruned one (parameters, FLOPs, bytes, Top-1, inference images/s). Saved in checkpoints: the
// widths (restored before the tensors) and the steps' records; its figures: the steps and the
// fraction of the FLOPs removed.
#include "runner/api/Method.h"
#include "plugins/methods/compress/Compare.h"
#include "plugins/methods/compress/Prune.h"
#include "runner/nn/KeepRandomState.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

// A pruning step, as recorded.
struct PruneRecord {
  int step = 0, steps = 0;      // 1-based, of `steps`
  std::int64_t epoch = 0;       // it ran before this epoch
  double ratio = 0;             // fraction of every pruned group's full-width channels removed
  std::int64_t paramsBefore = 0, paramsAfter = 0;
  double flopsBefore = 0, flopsAfter = 0;  // forward FLOPs per image, as exprun counts them
  double top1Before = -1, top1After = -1;  // test Top-1 (%) before (the last epoch's) and right after; -1: none
  std::map<std::string, std::int64_t> widths;  // every channel group's width after it
};

const JsonTable<PruneRecord>& recordTable() {
  using P = PruneRecord;
  static const JsonTable<P> table{{
      jsonf::required("step", &P::step),
      jsonf::required("steps", &P::steps),
      jsonf::required("epoch", &P::epoch),
      jsonf::required("ratio", &P::ratio),
      jsonf::required("params_before", &P::paramsBefore),
      jsonf::required("params_after", &P::paramsAfter),
      jsonf::required("flops_before", &P::flopsBefore),
      jsonf::required("flops_after", &P::flopsAfter),
      jsonf::optional("top1_before", &P::top1Before, -1.0),
      jsonf::optional("top1_after", &P::top1After, -1.0),
      jsonf::optional("widths", &P::widths, {}),
  }};
  return table;
}

struct Extra {
  bool benchmark = true;
};
const OptionTable<Extra> kExtra{{
    field("benchmark", &Extra::benchmark, "time inference at batch 1 and 64: the full-width and the pruned model"),
}};

// The spec's path to the method's node ("methods[0]").
std::string whereIn(const Spec& spec) {
  for (std::size_t i = 0; i < spec.methods.size(); ++i)
    if (spec.methods[i].type() == "prune") return "methods[" + std::to_string(i) + "]";
  return "prune";
}

class Prune : public Method {
 public:
  explicit Prune(const Options& o) : node_(o), benchmark_(kExtra.read(o).benchmark) {}

  void setUp(RunContext& run) override {
    run_ = &run;
    const DataInfo info = run.dataInfo();
    input_ = {info.channels, info.height, info.width};
    pruner_ = std::make_unique<ChannelPruner>(readPruneSettings(node_, whereIn(run.spec())), run.spec().model.type(),
                                              run.model(), input_);
    scales_ = pruner_->penalizedScales(run.model());  // pruning narrows these tensors in place (set_data)
  }

  void restore(RunContext& run, const nlohmann::json& state) override {
    const JsonFields f(state, "methods.prune");
    for (const JsonFields& r : f.objects("steps", "a pruning step object", false)) records_.push_back(recordTable().read(r));
    const Widths widths = f.integerMap("widths");
    for (const auto& [group, width] : widths)
      if (width < 1) f.fail("widths", group + ": expected a width of at least 1, got " + std::to_string(width));
    reshape(run, widths);
  }

  void beforeEpoch(RunContext& run, std::int64_t epoch, bool fresh) override {
    if (!fresh) return;  // a step is at an epoch's start
    const int k = pruner_->stepBefore(epoch);
    // (a checkpoint taken at the epoch's start after its step, on a stop request, has it already)
    if (k == 0 || std::any_of(records_.begin(), records_.end(), [&](const PruneRecord& r) { return r.step == k; }))
      return;
    const bool evaluated = run.spec().train.evaluation.eval && !run.epochs().empty();
    records_.push_back(pruneStep(run, k, epoch, evaluated ? run.epochs().back().valTop1 : -1.0));
  }

  void beforeOptimizerStep(std::int64_t) override { pruner_->pruner().penalize(scales_); }

  void afterTraining(RunContext& run) override {
    Model& model = run.model();
    std::shared_ptr<Model> full = run.freshModel();
    full->to(run.device());
    const bool channelsLast = run.spec().train.numerics.channelsLast;
    if (channelsLast) weightsToChannelsLast(*full);
    const bool eval = run.spec().train.evaluation.eval;
    CompressedModel fullRow = describeModel("fp32", *full, flopsAt(run, {}).forward,
                                            records_.empty() ? -1 : records_.front().top1Before);
    const Forward floatForward = [&model](const torch::Tensor& x) { return model.forward(x); };  // not a method's
    CompressedModel pruned =
        describeModel("pruned fp32", model, run.flops().forward, eval ? run.evaluate(floatForward).top1 : -1);
    if (benchmark_ && run.dist().rank() == 0) {
      timeFloatModel(fullRow, *full, input_, run.device(), channelsLast);
      timeFloatModel(pruned, model, input_, run.device(), channelsLast);
    }
    run.dist().barrier();
    run.compareModel(fullRow);
    run.compareModel(pruned);
  }

  nlohmann::json state() const override {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& r : records_) steps.push_back(recordTable().write(r));
    return {{"widths", widthsOf(mapChannels(run_->model(), input_))}, {"steps", steps}};
  }

  nlohmann::json figures() const override {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& r : records_) steps.push_back(recordTable().write(r));
    nlohmann::json j{{"steps", steps}};
    if (!records_.empty()) j["flops_removed_pct"] = 100 * (1 - records_.back().flopsAfter / pruner_->fullWidthFlops());
    return j;
  }

 private:
  // FLOPs per image of one training step at `widths` (full width when empty), counted on a model
  // of its own; the run's random sequence is left as it was.
  StepFlops flopsAt(RunContext& run, const Widths& widths) const {
    KeepRandomState keep;
    std::shared_ptr<Model> m = run.freshModel();
    applyWidths(*m, input_, widths);
    return countStepFlops(*m, input_[0], input_[1], input_[2], [&](torch::Tensor x) { return m->forward(x); });
  }

  void reshape(RunContext& run, const Widths& widths) {
    applyWidths(run.model(), input_, widths);
    run.modelChanged(flopsAt(run, widths));
  }

  // Collective: pruning step `k` before epoch `epoch`; `top1Before`: the last evaluation's (-1: none).
  PruneRecord pruneStep(RunContext& run, int k, std::int64_t epoch, double top1Before) {
    PruneRecord r;
    r.step = k;
    r.epoch = epoch;
    r.top1Before = top1Before;
    r.paramsBefore = countParameters(run.model());
    const PruneOutcome o = pruner_->prune(run.model(), k, run.dist());
    run.modelChanged(flopsAt(run, o.after));
    r.steps = o.steps;
    r.ratio = o.ratio;
    r.paramsAfter = countParameters(run.model());
    r.flopsBefore = o.flopsBefore;
    r.flopsAfter = o.flopsAfter;
    r.widths = o.after;
    if (run.spec().train.evaluation.eval) r.top1After = run.evaluate().top1;
    log::info(strf("pruning step %d/%d before epoch %lld: %.1f %% of the channels of each group removed; "
                   "params %lld -> %lld, forward FLOPs/image %.3g -> %.3g (%.1f %% removed); test Top-1 %s -> %s",
                   r.step, r.steps, static_cast<long long>(epoch), 100 * r.ratio, static_cast<long long>(r.paramsBefore),
                   static_cast<long long>(r.paramsAfter), r.flopsBefore, r.flopsAfter,
                   100 * (1 - r.flopsAfter / pruner_->fullWidthFlops()),
                   r.top1Before < 0 ? "-" : strf("%.2f %%", r.top1Before).c_str(),
                   r.top1After < 0 ? "-" : strf("%.2f %%", r.top1After).c_str()));
    return r;
  }

  Options node_;
  bool benchmark_;
  RunContext* run_ = nullptr;
  std::vector<std::int64_t> input_;
  std::unique_ptr<ChannelPruner> pruner_;
  std::vector<torch::Tensor> scales_;
  std::vector<PruneRecord> records_;
};

// One target, a schedule that fits the run.
void check(const Spec& spec, std::size_t index) {
  const PruneSettings s = readPruneSettings(spec.methods[index], "");
  if ((s.flopsReduction > 0) == (s.ratio > 0))
    throw SpecProblem(s.ratio > 0 ? "ratio" : "flops_reduction",
                      std::string("give one target: flops_reduction (a fraction of the FLOPs) or ratio (of every group's "
                                  "channels), not ") +
                          (s.ratio > 0 ? "both" : "neither"));
  const std::int64_t last = lastPruningEpoch(s), epochs = spec.train.length.epochs;
  if (last > epochs)
    throw SpecProblem("at_epoch", "pruning step " + std::to_string(s.times) + " would run before epoch " +
                                      std::to_string(last) + " but train.epochs is " + std::to_string(epochs));
}

PluginInfo info() {
  PluginInfo i;
  i.name = "prune";
  i.help = "structured channel pruning in steps before epochs: the model rebuilt smaller (plugins/methods/compress/)";
  i.options = pruneOptionDecls();
  const OptionDecls extra = kExtra.decls();
  i.options.insert(i.options.end(), extra.begin(), extra.end());
  i.nested = {NestedNode{"pruner", "pruner", "l1_filter"}};
  i.check = check;
  i.notWithShardedGradients = "its sparsity penalty is added to the whole gradients before the step, which that stage frees";
  i.columns = {ResultColumn{"FLOPs pruned", "flops_pruned_pct", "/flops_removed_pct", "%.1f %%"}};
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<Prune>(o);
                                       }};

}  // namespace
}  // namespace exprun
