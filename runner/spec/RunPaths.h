// Purpose: the files one run writes, named in one place. A run's output folder is `--out` or the
// spec's output.dir; beside the result file <dir>/<name>.json go the per-step CSV
// (<name>.steps.csv), the TensorBoard events (tensorboard/<name>/events.out.tfevents.exprun), the
// final weights (<name>.weights.pt), the files a method writes (<name><suffix>, e.g. the int8
// weights <name>.int8.safetensors), and the checkpoint root (output.checkpoint.dir, else
// <dir>/<name>.ckpt). Torch-free; every room that names one of these files asks this object.
#pragma once

#include <string>

namespace exprun {

struct Spec;

class RunPaths {
 public:
  // A run that writes no files (its checkpoints, when on, still go to the spec's root).
  RunPaths() = default;
  // The run `name` writing into `dir`; `checkpointDir`: output.checkpoint.dir ("": <dir>/<name>.ckpt).
  RunPaths(std::string dir, std::string name, std::string checkpointDir = "");
  // The spec's run in `outDir` (--out), or in its output.dir when `outDir` is empty.
  static RunPaths of(const Spec& spec, const std::string& outDir = "");
  // The spec's run writing its result file to `resultPath` (the other files go beside it, named
  // after the spec's name); an empty path: no files, checkpoints in the spec's output.dir.
  static RunPaths ofResultFile(const Spec& spec, const std::string& resultPath);

  // Whether the run writes its result file and the files beside it.
  bool writes() const { return writes_; }
  const std::string& dir() const { return dir_; }
  const std::string& name() const { return name_; }
  std::string result() const;             // <dir>/<name>.json (or the path given)
  std::string stepsCsv() const;           // <dir>/<name>.steps.csv
  std::string tensorboardEvents() const;  // <dir>/tensorboard/<name>/events.out.tfevents.exprun
  std::string weights() const;            // <dir>/<name>.weights.pt
  // A file of the run named by its suffix: <dir>/<name><suffix> (".int8.safetensors").
  std::string beside(const std::string& suffix) const;
  std::string checkpointRoot() const;     // output.checkpoint.dir, or <dir>/<name>.ckpt
  // Files each rank writes: rank 0's <dir>/<name><suffix>, rank r's <dir>/<name>.rank<r><suffix>.
  std::string ofRank(int rank, const std::string& suffix) const;
  std::string trace(int rank) const { return ofRank(rank, ".trace.json"); }               // train.profile
  std::string oomSnapshot(int rank) const { return ofRank(rank, ".oom-snapshot.json"); }  // CUDA out of memory

 private:
  std::string dir_ = ".", name_, checkpointDir_, result_;
  bool writes_ = false;
};

}  // namespace exprun
