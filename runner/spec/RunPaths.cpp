// Purpose: the files one run writes (see RunPaths.h).
#include "runner/spec/RunPaths.h"

#include <filesystem>

#include "runner/spec/Spec.h"

namespace exprun {

namespace fs = std::filesystem;

RunPaths::RunPaths(std::string dir, std::string name, std::string checkpointDir)
    : dir_(dir.empty() ? "." : std::move(dir)), name_(std::move(name)), checkpointDir_(std::move(checkpointDir)), writes_(true) {}

RunPaths RunPaths::of(const Spec& spec, const std::string& outDir) {
  return RunPaths(outDir.empty() ? spec.output.dir : outDir, spec.name, spec.output.checkpoint.dir);
}

RunPaths RunPaths::ofResultFile(const Spec& spec, const std::string& resultPath) {
  if (resultPath.empty()) {
    RunPaths none = of(spec);
    none.writes_ = false;
    return none;
  }
  RunPaths paths(fs::path(resultPath).parent_path().string(), spec.name, spec.output.checkpoint.dir);
  paths.result_ = resultPath;
  return paths;
}

std::string RunPaths::result() const { return result_.empty() ? beside(".json") : result_; }
std::string RunPaths::stepsCsv() const { return beside(".steps.csv"); }
std::string RunPaths::weights() const { return beside(".weights.pt"); }

std::string RunPaths::tensorboardEvents() const {
  return (fs::path(dir_) / "tensorboard" / name_ / "events.out.tfevents.exprun").string();
}

std::string RunPaths::beside(const std::string& suffix) const { return (fs::path(dir_) / (name_ + suffix)).string(); }
std::string RunPaths::ofRank(int rank, const std::string& suffix) const {
  return beside(rank == 0 ? suffix : ".rank" + std::to_string(rank) + suffix);
}

std::string RunPaths::checkpointRoot() const {
  return checkpointDir_.empty() ? (fs::path(dir_) / (name_ + ".ckpt")).string() : checkpointDir_;
}

}  // namespace exprun
