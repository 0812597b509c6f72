// Purpose: method `progressive_resize` — progressive resizing as FFCV's ResNet recipes do it: the
// training images' side grows from `start_size` to `end_size` over the epochs, while evaluation
// keeps the data plugin's own size (FixRes). The data plugin resizes (setTrainSize); the FLOPs per
// image and so MFU follow the size. Its figures: each epoch's size.
// Rule: the size is a function of the epoch only, so a resumed run trains at the uninterrupted
// one's; with train.largest_resolution (exprun tune's trials) every epoch trains at `end_size`.
#include <cmath>

#include "runner/api/Method.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

struct ResizeSettings {
  std::int64_t startSize = 160, endSize = 0, startEpoch = 1, endEpoch = 0, step = 32;
};
const OptionTable<ResizeSettings> kOptions{{
    field("start_size", &ResizeSettings::startSize, "training images' side in the first epochs", {1}),
    field("end_size", &ResizeSettings::endSize, "their side in the last epochs (0: the data plugin's size)", {0}),
    field("start_epoch", &ResizeSettings::startEpoch, "the last epoch at start_size (1-based)", {1}),
    field("end_epoch", &ResizeSettings::endEpoch, "the first epoch at end_size (0: the last epoch)", {0}),
    field("step", &ResizeSettings::step, "sizes in between are multiples of this", {1, 1024}),
}};

// The schedule resolved against the spec and its data: end size and end epoch filled in.
// `start` up to `startEpoch`, `end` from `endEpoch` on, in between linearly interpolated and rounded
// to a multiple of `step` (FFCV's get_resolution, with 1-based epochs here).
struct Schedule {
  std::int64_t start = 0, end = 0, startEpoch = 1, endEpoch = 1, step = 1;
  std::int64_t at(std::int64_t epoch) const {
    if (epoch <= startEpoch) return start;
    if (epoch >= endEpoch) return end;
    const double t = static_cast<double>(epoch - startEpoch) / static_cast<double>(endEpoch - startEpoch);
    const double size = static_cast<double>(start) + t * static_cast<double>(end - start);
    const auto rounded = static_cast<std::int64_t>(std::nearbyint(size / static_cast<double>(step))) * step;
    return std::clamp(rounded, std::min(start, end), std::max(start, end));
  }
};

Schedule scheduleOf(const ResizeSettings& s, std::int64_t dataSize, std::int64_t epochs) {
  return Schedule{s.startSize, s.endSize > 0 ? s.endSize : dataSize, s.startEpoch, s.endEpoch > 0 ? s.endEpoch : epochs,
                  s.step};
}

class ProgressiveResize : public Method {
 public:
  explicit ProgressiveResize(const Options& o) : s_(kOptions.read(o)) {}

  void setUp(RunContext& run) override {
    schedule_ = scheduleOf(s_, run.dataInfo().height, run.spec().train.length.epochs);
    largest_ = run.spec().train.execution.largestResolution;
    // A model that cannot take the smallest size (a flatten before a linear layer) is refused now.
    std::shared_ptr<Model> m = run.freshModel();
    m->eval();
    torch::NoGradGuard noGrad;
    const std::int64_t smallest = std::min(schedule_.start, schedule_.end);
    try {
      (void)m->forward(torch::zeros({1, run.dataInfo().channels, smallest, smallest}));
    } catch (const c10::Error& e) {
      throw std::invalid_argument("progressive_resize: model '" + run.spec().model.type() + "' cannot take " +
                                  std::to_string(smallest) + "x" + std::to_string(smallest) +
                                  " images (it is built for " + std::to_string(run.dataInfo().height) + "): " +
                                  e.what_without_backtrace());
    }
  }

  void restore(RunContext&, const nlohmann::json& state) override {
    for (const auto& [epoch, size] : state.at("sizes").items()) sizes_[epoch] = size.get<std::int64_t>();
  }

  void beforeEpoch(RunContext& run, std::int64_t epoch, bool) override {
    const std::int64_t size = largest_ ? schedule_.end : schedule_.at(epoch);
    run.data().setTrainSize(size);  // throws DataError outside the plugin's sizes
    run.dataChanged();
    if (size != current_) log::info(strf("progressive resizing: epoch %lld trains on %lldx%lld images",
                                         static_cast<long long>(epoch), static_cast<long long>(size), static_cast<long long>(size)));
    current_ = size;
    sizes_[std::to_string(epoch)] = size;
  }

  nlohmann::json state() const override { return {{"sizes", sizes_}}; }
  nlohmann::json figures() const override {
    const std::string schedule = strf("%lld→%lld px, epochs %lld→%lld", static_cast<long long>(schedule_.start),
                                      static_cast<long long>(schedule_.end), static_cast<long long>(schedule_.startEpoch),
                                      static_cast<long long>(schedule_.endEpoch));
    return {{"sizes", sizes_}, {"start_size", schedule_.start}, {"end_size", schedule_.end}, {"schedule", schedule}};
  }

 private:
  ResizeSettings s_;
  Schedule schedule_;
  bool largest_ = false;
  std::int64_t current_ = 0;
  std::map<std::string, std::int64_t> sizes_;  // by epoch
};

// The schedule within the run's epochs and the data plugin's sizes; not with pruning (the FLOPs per
// image are counted again at each size, at full width).
void check(const Spec& spec, std::size_t index) {
  const ResizeSettings s = kOptions.read(spec.methods[index]);
  std::unique_ptr<Dataset> data;
  try {
    data = build<DataKind>(spec.data);
  } catch (const std::exception&) {
    return;  // the data plugin's own error comes when the run builds it
  }
  const std::int64_t dataSize = data->info().height, smallest = data->smallestTrainSize();
  const std::int64_t epochs = spec.train.length.epochs;
  const Schedule sch = scheduleOf(s, dataSize, epochs);
  if (smallest == 0)
    throw SpecProblem("", "data plugin '" + spec.data.type() + "' makes training images of one size only");
  for (const auto& [key, size] : {std::pair<const char*, std::int64_t>{"start_size", sch.start}, {"end_size", sch.end}})
    if (size < smallest || size > dataSize)
      throw SpecProblem(key, std::to_string(size) + " is outside the sizes data plugin '" + spec.data.type() + "' takes: " +
                                 std::to_string(smallest) + " to " + std::to_string(dataSize) + " (its size)");
  if (sch.endEpoch > epochs)
    throw SpecProblem("end_epoch", std::to_string(sch.endEpoch) + " is after the last epoch (train.epochs: " +
                                       std::to_string(epochs) + ")");
  if (sch.startEpoch >= sch.endEpoch && sch.start != sch.end)
    throw SpecProblem("start_epoch", "start_epoch " + std::to_string(sch.startEpoch) + " must come before end_epoch " +
                                         std::to_string(sch.endEpoch));
  for (const Options& m : spec.methods)
    if (m.type() == "prune")
      throw SpecProblem("", "progressive resizing with the prune method: the FLOPs per image are counted again at each "
                            "size at full width; use one of them");
}

PluginInfo info() {
  PluginInfo i;
  i.name = "progressive_resize";
  i.help = "training images grow from start_size to end_size over the epochs (FFCV's progressive resizing)";
  i.options = kOptions.decls();
  i.check = check;
  i.columns = {ResultColumn{"Progressive resizing", "resize_schedule", "/schedule", ""}};
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<ProgressiveResize>(o);
                                       }};

}  // namespace
}  // namespace exprun
