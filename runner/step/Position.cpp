// Purpose: the JSON of a training position and its epoch's meters (see Position.h).
#include "runner/step/Position.h"

namespace exprun {

nlohmann::json Progress::toJson() const {
  const TrainPosition& p = position;
  const EpochMeters& m = meters;
  nlohmann::json phases = nlohmann::json::object();
  for (std::size_t i = 0; i < kPhases; ++i) phases[phaseKey(phaseAt(i))] = m.phases[i];
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
          {"events_bytes", p.eventBytes},
          {"phases", phases},
          {"comm_in_flight", m.commInFlight}};
}

Progress Progress::fromJson(const JsonFields& j) {
  Progress out;
  TrainPosition& p = out.position;
  EpochMeters& m = out.meters;
  p.step = j.integer("step");
  p.epoch = j.integer("epoch");
  p.micro = j.integer("micro");
  p.sample = j.integerOr("sample", -1);  // older checkpoints: derived from micro on restore
  p.nonFiniteSkipped = j.integer("nonfinite_skipped");
  p.scalerSkipped = j.integer("scaler_skipped");
  p.runSeconds = j.numberOr("run_seconds", 0.0);
  p.csvBytes = j.integerOr("steps_csv_bytes", -1);
  p.eventBytes = j.integerOr("events_bytes", -1);
  m.steps = j.integer("epoch_steps");
  m.lossSum = j.number("loss_sum");  // a NaN loss sum is written as null
  m.normSum = j.number("norm_sum");
  m.commWait = j.number("comm_wait");
  m.dataWait = j.number("data_wait");
  m.elapsed = j.number("elapsed");
  m.correct = j.integer("correct");
  m.samples = j.integer("samples");
  m.skippedImages = j.integer("skipped_images");
  m.commBytes = j.integerOr("comm_bytes", 0);
  if (j.has("phases")) {
    const JsonFields phases = j.object("phases");
    for (std::size_t i = 0; i < kPhases; ++i) m.phases[i] = phases.numberOr(phaseKey(phaseAt(i)), 0.0);
  }
  m.commInFlight = j.numberOr("comm_in_flight", 0.0);
  return out;
}

}  // namespace exprun
