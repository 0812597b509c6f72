// Purpose: what a run's methods see of it (runner/api/Method.h's RunContext), on the trainer's
// set-up, process group, files and result file.
#pragma once

#include "runner/api/Method.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/RunPaths.h"
#include "runner/train/Setup.h"

namespace exprun {

class TrainContext : public RunContext {
 public:
  TrainContext(TrainSetup& s, Dist& dist, const RunPaths& paths, ResultFile& result)
      : s_(s), dist_(dist), paths_(paths), result_(result) {}
  const Spec& spec() const override { return s_.spec(); }
  Dist& dist() override { return dist_; }
  torch::Device device() const override { return s_.settings.device; }
  Model& model() override { return *s_.learner.model; }
  DataInfo dataInfo() const override { return s_.data->info(); }
  const RunPaths& paths() const override { return paths_; }
  const std::vector<EpochRecord>& epochs() const override { return result_.epochs; }
  std::shared_ptr<Model> freshModel() override;
  Dataset& data() override { return *s_.data; }
  StepFlops flops() const override { return s_.measures.flops; }
  EvalResult evaluate(const Forward& forward) override;
  void modelChanged(const StepFlops& flops) override;
  void dataChanged() override;
  const std::vector<CompressedModel>& comparedModels() const override { return result_.compression; }
  void compareModel(CompressedModel row) override;

 private:
  TrainSetup& s_;
  Dist& dist_;
  const RunPaths& paths_;
  ResultFile& result_;
};

}  // namespace exprun
