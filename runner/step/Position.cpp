// Purpose: the JSON of a training position and its epoch's meters (see Progress.h).
#include "runner/step/Position.h"

#include "runner/results/ResultFile.h"

namespace exprun {

nlohmann::json Progress::toJson() const {
  const TrainPosition& p = position;
  const EpochMeters& m = meters;
  return {{"step", p.step},
          {"epoch", p.epoch},
          {"micro", p.micro},
          {"sample", p.sample},
          {"epoch_steps", m.steps},
          {"loss_sum", m.lossSum},
          {"norm_sum", m.normSum},
          {"comm_wait", m.commWait},
          {"data_wait", m.dataWait},
          {"elapsed", m.elapsed},
          {"correct", m.correct},
          {"samples", m.samples},
          {"skipped_images", m.skippedImages},
          {"comm_bytes", m.commBytes},
          {"nonfinite_skipped", p.nonFiniteSkipped},
          {"scaler_skipped", p.scalerSkipped},
          {"run_seconds", p.runSeconds},
          {"steps_csv_bytes", p.csvBytes},
          {"events_bytes", p.eventBytes}};
}

Progress Progress::fromJson(const nlohmann::json& j) {
  auto num = [&](const char* k) { return jsonNumber(j, k); };  // a NaN loss sum is written as null
  Progress out;
  TrainPosition& p = out.position;
  EpochMeters& m = out.meters;
  p.step = j.at("step");
  p.epoch = j.at("epoch");
  p.micro = j.at("micro");
  p.sample = j.value("sample", std::int64_t{-1});  // older checkpoints: derived from micro on restore
  p.nonFiniteSkipped = j.at("nonfinite_skipped");
  p.scalerSkipped = j.at("scaler_skipped");
  p.runSeconds = j.value("run_seconds", 0.0);  // older checkpoints lack the last three
  p.csvBytes = j.value("steps_csv_bytes", std::int64_t{-1});
  p.eventBytes = j.value("events_bytes", std::int64_t{-1});
  m.steps = j.at("epoch_steps");
  m.lossSum = num("loss_sum");
  m.normSum = num("norm_sum");
  m.commWait = num("comm_wait");
  m.dataWait = num("data_wait");
  m.elapsed = num("elapsed");
  m.correct = j.at("correct");
  m.samples = j.at("samples");
  m.skippedImages = j.at("skipped_images");
  m.commBytes = j.value("comm_bytes", std::int64_t{0});
  return out;
}

}  // namespace exprun
