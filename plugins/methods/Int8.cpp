// Purpose: method `int8` — the trained model converted to int8 and run on LibTorch's int8 CPU
// kernels (plugins/methods/compress/Quantize.h: post-training static quantization, activation grids
// calibrated on `calibration_batches` training batches in a fixed order), evaluated, timed and
// written beside the result file (<name>.int8.safetensors). With `qat_epochs: N`, the last N epochs
// fine-tune through the int8 plan computed in float (FakeQuantForward) on grids calibrated before
// them, and the int8 model is built on those grids, which checkpoints save once fine-tuning has
// begun. Its row in the model comparison follows the last one compared ("fp32" or "pruned fp32").
#include "runner/api/Method.h"
#include "runner/checkpoint/Export.h"
#include "plugins/methods/compress/Compare.h"
#include "plugins/methods/compress/Prune.h"
#include "plugins/methods/compress/Quantize.h"
#include "runner/data/BatchLoader.h"
#include "runner/nn/Autocast.h"
#include "runner/step/Feed.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

struct Int8Settings {
  std::int64_t calibrationBatches = 16;
  std::int64_t qatEpochs = 0;
  bool benchmark = true;
};
const OptionTable<Int8Settings> kOptions{{
    field("calibration_batches", &Int8Settings::calibrationBatches,
          "training batches that calibrate the int8 activation ranges", {1, 100000}),
    field("qat_epochs", &Int8Settings::qatEpochs,
          "the last N epochs fine-tune with fake quantization (quantization-aware; 0: post-training only)", {0}),
    field("benchmark", &Int8Settings::benchmark, "time the int8 model's inference at batch 1 and 64"),
}};

class Int8 : public Method {
 public:
  explicit Int8(const Options& o) : s_(kOptions.read(o)) {}

  void setUp(RunContext& run) override {
    if (run.device().is_cuda())
      throw std::invalid_argument("int8: int8 runs on LibTorch's CPU kernels (quantized::, x86/oneDNN), and this run is "
                                  "on CUDA: set train.device: cpu, or remove the int8 method");
    const auto& engines = at::globalContext().supportedQEngines();
    if (std::none_of(engines.begin(), engines.end(), [](at::QEngine e) {
          return e == at::QEngine::X86 || e == at::QEngine::FBGEMM || e == at::QEngine::ONEDNN;
        }))
      throw std::invalid_argument("int8: this LibTorch has no x86 int8 engine (x86, fbgemm, oneDNN)");
  }

  void restore(RunContext&, const nlohmann::json& state) override {
    const JsonFields f(state, "methods.int8");
    const nlohmann::json& grids = f.at("qat_grids");
    if (!grids.is_array()) f.fail("qat_grids", "expected a list of [scale, zero point] pairs");
    for (const nlohmann::json& g : grids) {
      if (!g.is_array() || g.size() != 2 || !g[0].is_number() || !g[1].is_number_integer() || !(g[0].get<double>() > 0) ||
          g[1].get<std::int64_t>() < 0 || g[1].get<std::int64_t>() > 255)
        f.fail("qat_grids", "expected [scale > 0, zero point in 0..255], got " + g.dump());
      saved_.push_back(ActivationGrid{g[0].get<double>(), g[1].get<std::int64_t>()});
    }
  }

  // A checkpoint taken during fine-tuning resumes it on its grids (after the tensors are restored).
  void begin(RunContext& run) override {
    if (!saved_.empty()) fakeQuantOn(run, saved_);
  }

  void beforeEpoch(RunContext& run, std::int64_t epoch, bool) override {
    if (s_.qatEpochs == 0 || fakeQuant_ || epoch < run.spec().train.length.epochs - s_.qatEpochs + 1) return;
    const std::vector<ActivationGrid> grids = quantized(run).grids();
    fakeQuantOn(run, grids);
    const double top1 = run.spec().train.evaluation.eval ? run.evaluate().top1 : -1;
    log::info(strf("quantization-aware fine-tuning from epoch %lld: %zu activation grids calibrated on %lld batches; "
                   "batch norms frozen and folded; fake-quantized test Top-1 %s",
                   static_cast<long long>(epoch), grids.size(), static_cast<long long>(s_.calibrationBatches),
                   top1 < 0 ? "-" : strf("%.2f %%", top1).c_str()));
  }

  void afterTraining(RunContext& run) override {
    Model& model = run.model();
    const bool eval = run.spec().train.evaluation.eval;
    if (run.comparedModels().empty()) {  // the float model it converts, as trained
      const Forward floatForward = [&model](const torch::Tensor& x) { return model.forward(x); };
      CompressedModel row = describeModel("fp32", model, run.flops().forward, eval ? run.evaluate(floatForward).top1 : -1);
      if (s_.benchmark && run.dist().rank() == 0) {
        const DataInfo d = run.dataInfo();
        timeFloatModel(row, model, {d.channels, d.height, d.width}, run.device(), run.spec().train.numerics.channelsLast);
      }
      run.compareModel(row);
    }
    const CompressedModel& floatRow = run.comparedModels().back();
    std::string name = floatRow.model;
    if (const auto at = name.rfind("fp32"); at != std::string::npos) name.replace(at, 4, "int8");
    else name += " int8";
    if (fakeQuant_) name += " (QAT)";
    Int8Model q = quantized(run);
    const Forward int8Forward = [&q](const torch::Tensor& x) {
      NoAutocast off(c10::DeviceType::CPU);
      return q.forward(x);
    };
    CompressedModel row = describeModel(name, model, floatRow.flopsPerImage, eval ? run.evaluate(int8Forward).top1 : -1);
    row.bytes = q.bytes();
    const DataInfo d = run.dataInfo();
    if (s_.benchmark && run.dist().rank() == 0) {
      row.imagesPerSB1 = inferenceImagesPerS(int8Forward, {d.channels, d.height, d.width}, 1, run.device(), false);
      row.imagesPerSB64 = inferenceImagesPerS(int8Forward, {d.channels, d.height, d.width}, 64, run.device(), false);
    }
    if (run.dist().rank() == 0 && run.paths().writes()) {
      const std::vector<std::int64_t> shape{d.channels, d.height, d.width};
      Widths widths = widthsOf(mapChannels(model, shape));  // a pruned model's; {} at full width
      if (widths == widthsOf(mapChannels(*run.freshModel(), shape))) widths.clear();
      const std::string out = run.paths().beside(".int8.safetensors");
      writeSafetensors(out, q.tensors(),
                       {{"format", "exprun-int8"},
                        {"exprun_model", run.spec().model.type()},
                        {"exprun_engine", q.engine()},
                        {"exprun_reduce_range", cpuHasVnni() ? "false" : "true"},
                        {"exprun_qat", fakeQuant_ ? "true" : "false"},
                        {"exprun_widths", nlohmann::json(widths).dump()}});
      log::info("int8 weights: " + out);
    }
    run.dist().barrier();
    figures_ = {{"model", row.model},    {"top1", row.top1}, {"float_top1", floatRow.top1}, {"engine", q.engine()},
                {"qat", fakeQuant_ != nullptr}, {"bytes", row.bytes}};
    run.compareModel(row);
  }

  std::optional<torch::Tensor> forward(const torch::Tensor& x) override {
    if (!fakeQuant_) return std::nullopt;
    return (*fakeQuant_)(x);
  }

  nlohmann::json state() const override {
    if (!fakeQuant_) return nullptr;
    nlohmann::json grids = nlohmann::json::array();
    for (const ActivationGrid& g : fakeQuant_->grids()) grids.push_back({g.scale, g.zeroPoint});
    return {{"qat_grids", grids}};
  }

  nlohmann::json figures() const override { return figures_.is_null() ? nlohmann::json(nullptr) : figures_; }

 private:
  // The int8 model: on quantization-aware fine-tuning's grids when it ran, else calibrated on the
  // first batches of the training split in a fixed order (the same on every rank).
  Int8Model quantized(RunContext& run) const {
    if (fakeQuant_) return Int8Model(run.model(), fakeQuant_->grids());
    return Int8Model(run.model(), calibrationImages(run, s_.calibrationBatches), Int8Options{!cpuHasVnni()});
  }

  // From now on training and evaluation run the fake-quantized forward (forward()).
  void fakeQuantOn(RunContext& run, const std::vector<ActivationGrid>& grids) {
    fakeQuant_ = std::make_unique<FakeQuantForward>(run.model(), grids);
  }

  // The first `batches` training batches' images (normalised), in the order of epoch 1 of one
  // process, without workers: the same on every rank.
  static std::function<std::optional<torch::Tensor>()> calibrationImages(RunContext& run, std::int64_t batches) {
    LoaderOptions o;
    o.batchSize = *run.spec().train.batching.batchSize;
    o.seed = static_cast<std::uint64_t>(run.spec().seed);
    o.epoch = 1;
    o.workers = 0;
    auto loader = std::make_shared<BatchLoader>(run.data(), Split::Train, o);
    auto left = std::make_shared<std::int64_t>(batches);
    return [loader, left]() -> std::optional<torch::Tensor> {
      if ((*left)-- <= 0) return std::nullopt;
      auto b = loader->next();
      if (!b) return std::nullopt;
      return placedOn(std::move(*b), torch::kCPU, false).x;  // normalised (a uint8 batch's too)
    };
  }

  Int8Settings s_;
  std::vector<ActivationGrid> saved_;  // a checkpoint's grids
  std::unique_ptr<FakeQuantForward> fakeQuant_;
  nlohmann::json figures_;
};

// int8 runs on the CPU; fine-tuning leaves a float epoch and no pruning step inside it; a prune
// method acts first (int8 converts the pruned model).
void check(const Spec& spec, std::size_t index) {
  const Int8Settings s = kOptions.read(spec.methods[index]);
  if (spec.train.execution.device == DeviceChoice::Cuda)
    throw SpecProblem("", "int8 runs on LibTorch's CPU kernels (quantized::, x86 / oneDNN engines), and train.device "
                          "is cuda: set train.device: cpu, or remove the int8 method");
  const std::int64_t epochs = spec.train.length.epochs;
  if (s.qatEpochs > 0 && s.qatEpochs >= epochs)
    throw SpecProblem("qat_epochs", std::to_string(s.qatEpochs) + " epochs of quantization-aware fine-tuning leave none of "
                                    "train.epochs (" + std::to_string(epochs) + ") to train the float model they start from");
  for (std::size_t k = 0; k < spec.methods.size(); ++k) {
    if (spec.methods[k].type() != "prune") continue;
    const std::string prune = "methods[" + std::to_string(k) + "]";
    if (k > index)
      throw SpecProblem("", "the prune method (" + prune + ") is listed after int8: list it first (int8 converts the "
                            "model as pruned)");
    const std::int64_t last = lastPruningEpoch(readPruneSettings(spec.methods[k], prune));
    if (s.qatEpochs > 0 && last > epochs - s.qatEpochs)
      throw SpecProblem("qat_epochs", "pruning step before epoch " + std::to_string(last) + " (" + prune +
                                          ") falls inside the last " + std::to_string(s.qatEpochs) +
                                          " epochs of quantization-aware fine-tuning: prune before them");
  }
}

PluginInfo info() {
  PluginInfo i;
  i.name = "int8";
  i.help = "the trained model converted to int8 (post-training static, or quantization-aware in the last epochs)";
  i.options = kOptions.decls();
  i.check = check;
  i.columns = {ResultColumn{"int8 Top-1", "int8_top1", "/top1", "%.2f %%"}};
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<Int8>(o);
                                       }};

}  // namespace
}  // namespace exprun
