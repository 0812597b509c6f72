// Purpose: result-file JSON, written atomically (see ResultFile.h).
#include "runner/results/ResultFile.h"

#include <algorithm>
#include <limits>

#include "runner/util/AtomicFile.h"

namespace exprun {

nlohmann::json toJson(const EpochRecord& e) {
  nlohmann::json j{{"epoch", e.epoch},
                        {"time_s", e.timeS},
                        {"images_per_s", e.imagesPerS},
                        {"data_wait_s", e.dataWaitS},
                        {"train_loss", e.trainLoss},
                        {"train_top1", e.trainTop1},
                        {"val_loss", e.valLoss},
                        {"val_top1", e.valTop1},
                        {"val_top5", e.valTop5},
                        {"lr", e.lr},
                        {"peak_memory_bytes", e.peakMemoryBytes},
                        {"peak_memory_bytes_per_rank", e.peakMemoryPerRank},
                        {"comm_wait_s", e.commWaitS},
                        {"steps", e.steps},
                        {"samples", e.samples},
                        {"grad_norm", e.gradNorm},
                        {"loss_scale", e.lossScale},
                        {"skipped_steps", e.skippedSteps},
                        {"skipped_images", e.skippedImages},
                        {"comm_bytes", e.commBytes},
                        {"comm_bytes_per_step", e.commBytesPerStep},
                        {"flops_per_s", e.flopsPerS},
                        {"mfu", e.mfu}};
  if (e.valTop1Ema) j["val_top1_ema"] = *e.valTop1Ema;
  if (e.partial) j["partial"] = true;
  if (e.peakAllocatedBytes >= 0) j["peak_allocated_bytes"] = e.peakAllocatedBytes;
  return j;
}

nlohmann::json toJson(const EvalRecord& e) {
  return {{"step", e.step},       {"epoch", e.epoch},       {"time_s", e.timeS},
          {"val_loss", e.valLoss}, {"val_top1", e.valTop1}, {"val_top5", e.valTop5}};
}

EvalRecord evalFromJson(const nlohmann::json& j) {
  EvalRecord e;
  e.step = j.at("step").get<std::int64_t>();
  e.epoch = j.at("epoch").get<std::int64_t>();
  e.timeS = jsonNumber(j, "time_s");
  e.valLoss = jsonNumber(j, "val_loss");
  e.valTop1 = jsonNumber(j, "val_top1");
  e.valTop5 = jsonNumber(j, "val_top5");
  return e;
}

nlohmann::json Target::toJson() const {
  nlohmann::json j = nlohmann::json::object();
  if (top1 > 0) j["val_top1"] = top1;
  if (top5 > 0) j["val_top5"] = top5;
  if (valLoss > 0) j["val_loss"] = valLoss;
  return j;
}

double jsonNumber(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

EpochRecord epochFromJson(const nlohmann::json& j) {
  auto num = [&](const char* k) { return jsonNumber(j, k); };
  auto numOr = [&](const char* k, double d) { return j.contains(k) ? num(k) : d; };
  EpochRecord e;
  e.epoch = j.at("epoch").get<std::int64_t>();
  e.timeS = num("time_s");
  e.imagesPerS = num("images_per_s");
  e.dataWaitS = num("data_wait_s");
  e.trainLoss = num("train_loss");
  e.trainTop1 = num("train_top1");
  e.valLoss = num("val_loss");
  e.valTop1 = num("val_top1");
  e.valTop5 = num("val_top5");
  e.lr = num("lr");
  e.peakMemoryBytes = j.at("peak_memory_bytes").get<std::int64_t>();
  e.peakMemoryPerRank = j.value("peak_memory_bytes_per_rank", std::vector<std::int64_t>{});
  e.commWaitS = numOr("comm_wait_s", 0.0);
  e.steps = j.value("steps", 0);
  e.gradNorm = numOr("grad_norm", 0.0);
  e.lossScale = numOr("loss_scale", 1.0);
  e.skippedSteps = j.value("skipped_steps", 0);
  e.skippedImages = j.value("skipped_images", 0);
  if (j.contains("val_top1_ema")) e.valTop1Ema = num("val_top1_ema");
  e.samples = j.value("samples", 0);
  e.commBytes = j.value("comm_bytes", std::int64_t{0});
  e.commBytesPerStep = j.contains("comm_bytes_per_step") ? num("comm_bytes_per_step") : 0.0;
  e.flopsPerS = numOr("flops_per_s", 0.0);
  e.mfu = numOr("mfu", 0.0);
  e.partial = j.value("partial", false);
  e.peakAllocatedBytes = j.value("peak_allocated_bytes", std::int64_t{-1});
  return e;
}

ResultFile::ResultFile(std::string name, nlohmann::json spec, nlohmann::json provenance)
    : name_(std::move(name)), spec_(std::move(spec)), provenance_(std::move(provenance)) {}

void ResultFile::addEpoch(const EpochRecord& e) { epochs_.push_back(e); }
void ResultFile::addEval(const EvalRecord& e) { evals_.push_back(e); }

const EvalRecord* ResultFile::targetReached() const {
  for (const auto& e : evals_)
    if (target_.met(e)) return &e;
  return nullptr;
}

nlohmann::json ResultFile::toJson() const {
  nlohmann::json epochs = nlohmann::json::array(), evals = nlohmann::json::array();
  double best = 0, total = 0, fullTotal = 0;
  std::size_t full = 0;  // epochs run to their end (a target may stop the run inside one)
  for (const auto& e : epochs_) {
    epochs.push_back(exprun::toJson(e));
    best = std::max(best, e.valTop1);
    total += e.timeS;
    if (!e.partial) fullTotal += e.timeS, ++full;
  }
  for (const auto& e : evals_) {
    evals.push_back(exprun::toJson(e));
    best = std::max(best, e.valTop1);
  }
  nlohmann::json summary{{"epochs_completed", full},
                         {"best_val_top1", best},
                         {"final_val_top1", epochs_.empty() ? 0.0 : epochs_.back().valTop1},
                         {"total_time_s", total},
                         {"mean_epoch_time_s", full == 0 ? 0.0 : fullTotal / full}};
  if (target_.any()) {
    const EvalRecord* hit = targetReached();
    summary["target"] = target_.toJson();
    summary["time_to_target_s"] = hit ? nlohmann::json(hit->timeS) : nlohmann::json(nullptr);
    summary["target_epoch"] = hit ? nlohmann::json(hit->epoch) : nlohmann::json(nullptr);
    summary["target_step"] = hit ? nlohmann::json(hit->step) : nlohmann::json(nullptr);
  }
  nlohmann::json j{{"schema", kResultSchema}, {"name", name_},         {"status", status_},
                   {"spec", spec_},           {"provenance", provenance_}, {"epochs", epochs},
                   {"evals", evals},          {"summary", summary}};
  if (!worldSizeChanges_.empty()) j["world_size_changes"] = worldSizeChanges_;
  return j;
}

void ResultFile::write(const std::string& path) const {
  writeFileAtomically(path, toJson().dump(2) + "\n", FileFaults{"result-write"});
}

}  // namespace exprun
