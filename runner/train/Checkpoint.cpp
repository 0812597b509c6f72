// Purpose: checkpoint content and its collective save and restore (see Checkpoint.h).
#include "runner/train/Checkpoint.h"

#include <ATen/Context.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>

#include "runner/Log.h"

namespace exprun {

namespace fs = std::filesystem;

std::string checkpointRoot(const Spec& spec, const std::string& outDir) {
  const std::string& d = spec.output.checkpoint.dir;
  if (!d.empty()) return d;
  return (fs::path(outDir) / (spec.name + ".ckpt")).string();
}

std::string tensorBytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

namespace {

std::string rankFile(const std::string& dir, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/rank-%05d.bin", rank);
  return dir + buf;
}

at::Generator generatorFor(const torch::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}

torch::Tensor bytesTensor(const std::string& s) {
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string archiveToString(torch::serialize::OutputArchive& a) {
  std::ostringstream os;
  a.save_to(os);
  return os.str();
}

torch::Tensor rngState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setRngState(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// state.bin (rank 0's): the model, optimizer, loss scaler and EMA.
std::string stateBytes(TrainParts& parts) {
  torch::serialize::OutputArchive a, opt;
  for (const auto& p : parts.model->named_parameters()) a.write("model/" + p.key(), p.value().detach().cpu());
  for (const auto& b : parts.model->named_buffers()) a.write("model/" + b.key(), b.value().detach().cpu(), true);
  parts.optimizer->save(opt);
  a.write("optimizer", opt);
  a.write("scaler/scale", parts.scaler->scaleTensor().cpu(), true);
  a.write("scaler/growth", parts.scaler->growthTracker().cpu(), true);
  if (parts.ema)
    for (std::size_t i = 0; i < parts.ema->averages().size(); ++i)
      a.write("ema/" + std::to_string(i), parts.ema->averages()[i].cpu(), true);
  return archiveToString(a);
}

// rank-NNNNN.bin: what differs between ranks — RNG states, buffers (BN statistics), EMA averages,
// the comm hook's state — and this rank's position and partial-epoch meters.
std::string rankBytes(TrainParts& parts, const Progress& mine, int rank, const torch::Device& device) {
  torch::serialize::OutputArchive a;
  for (const auto& b : parts.model->named_buffers()) a.write("buffers/" + b.key(), b.value().detach().cpu(), true);
  if (parts.ema)
    for (std::size_t i = 0; i < parts.ema->averages().size(); ++i)
      a.write("ema/" + std::to_string(i), parts.ema->averages()[i].cpu(), true);
  for (const auto& [name, t] : parts.comm->hook().state()) a.write("comm/" + name, t.detach().cpu(), true);
  a.write("meta", bytesTensor(nlohmann::json{{"rank", rank}, {"progress", mine.toJson()}}.dump()), true);
  a.write("rng", bytesTensor(tensorBytes(rngState(generatorFor(device)))), true);
  if (device.is_cuda())
    a.write("rng_cpu", bytesTensor(tensorBytes(rngState(at::detail::getDefaultCPUGenerator()))), true);
  return archiveToString(a);
}

nlohmann::json metaJson(const Spec& spec, const DataInfo& info, const TrainParts& parts, const Progress& mine,
                        int worldSize, const nlohmann::json& result) {
  return {
      {"format", "exprun-checkpoint-1"},
      {"name", spec.name},
      {"step", mine.position.step},
      {"epoch", mine.position.epoch},
      {"micro", mine.position.micro},
      {"world_size", worldSize},
      {"spec", spec.toJson()},
      {"spec_yaml", spec.toYaml()},
      {"spec_hash", spec.hash()},
      {"model", spec.model.type()},
      {"ema", parts.ema != nullptr},
      {"data_info",
       {{"channels", info.channels}, {"height", info.height}, {"width", info.width}, {"num_classes", info.numClasses}}},
      {"result_epochs", result.at("epochs")},
      {"result_evals", result.value("evals", nlohmann::json::array())}};
}

// Never store non-finite weights: every rank agrees before anything is written.
void refuseNonFiniteWeights(Model& model, Dist& dist, std::int64_t step) {
  std::string bad;
  for (const auto& p : model.named_parameters())
    if (!torch::isfinite(p.value().detach()).all().item<bool>()) {
      bad = p.key();
      break;
    }
  if (dist.max({bad.empty() ? 0.0 : 1.0})[0] > 0)
    throw CheckpointError("refusing to save a checkpoint at step " + std::to_string(step) + ": non-finite weights" +
                          (bad.empty() ? std::string(" on another rank") : " in '" + bad + "'"));
}

}  // namespace

std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const Spec& spec, const DataInfo& info,
                           TrainParts& parts, const Progress& mine, const nlohmann::json& result,
                           const torch::Device& device) {
  const int rank = dist.rank();
  const std::int64_t step = mine.position.step;
  refuseNonFiniteWeights(*parts.model, dist, step);
  faultPoint("save-begin", -1, rank);
  // A failure on one rank (disk full, permissions) is agreed by all ranks at each phase, so none
  // waits in a barrier for a rank that gave up.
  std::string err;
  auto phase = [&](const char* name, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      err = e.what();
    }
    if (dist.max({err.empty() ? 0.0 : 1.0})[0] > 0)
      throw CheckpointError(err.empty() ? std::string("checkpoint ") + name + " failed on another rank" : err);
  };
  phase("staging", [&] {
    if (rank == 0) store.prepareStaging(step);
  });
  const std::string dir = store.stagingDir(step);
  phase("writing", [&] {
    CheckpointStore::writeFile(rankFile(dir, rank), rankBytes(parts, mine, rank, device));
    if (rank != 0) return;
    CheckpointStore::writeFile(dir + "/state.bin", stateBytes(parts));
    CheckpointStore::writeFile(dir + "/meta.json",
                               metaJson(spec, info, parts, mine, dist.worldSize(), result).dump(1));
  });
  std::string final;
  phase("commit", [&] {
    if (rank == 0) final = store.commit(step, keep);
  });
  return final.empty() ? store.dir() + "/" + stepDirName(step) : final;
}

namespace {

void copyInto(torch::Tensor& dst, const torch::Tensor& src, const std::string& what) {
  if (!src.defined() || src.sizes() != dst.sizes())
    throw CheckpointError("checkpoint: '" + what + "' has another shape than the model's (a different model?)");
  torch::NoGradGuard g;
  dst.detach().copy_(src.to(dst.device()));
}

struct Files {
  nlohmann::json meta;
  std::string state, rank;
};

Files readAll(const std::string& dir, int rank) {
  Files f;
  try {
    f.meta = nlohmann::json::parse(CheckpointStore::readFile(dir + "/meta.json"));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(dir + "/meta.json: not valid JSON: " + e.what());
  }
  if (f.meta.value("format", "") != "exprun-checkpoint-1")
    throw CheckpointError(dir + "/meta.json: not an exprun checkpoint");
  f.state = CheckpointStore::readFile(dir + "/state.bin");
  f.rank = CheckpointStore::readFile(rankFile(dir, rank));
  return f;
}

// The checkpoints `what` designates, most preferred first.
std::vector<std::string> candidatesOf(const std::string& what, const CheckpointStore& store) {
  if (what == "auto") return store.candidates();
  if (fs::exists(what + "/meta.json")) return {what};
  if (!fs::is_directory(what)) throw CheckpointError("--resume " + what + ": no such checkpoint folder");
  auto found = CheckpointStore(what).candidates();
  if (found.empty()) throw CheckpointError("--resume " + what + ": no checkpoint in this folder");
  return found;
}

// The first candidate whose files every rank reads and verifies (all ranks move on to an older
// one together); "" when there is none.
std::string firstUsable(const std::vector<std::string>& candidates, Dist& dist, Files& files, std::string& problems) {
  for (const auto& c : candidates) {
    std::string err;
    try {
      files = readAll(c, dist.rank());
    } catch (const CheckpointError& e) {
      err = e.what();
    }
    if (dist.max({err.empty() ? 0.0 : 1.0})[0] == 0) return c;
    const std::string why = err.empty() ? c + ": damaged on another rank" : err;
    log::warn("checkpoint unusable, trying an older one: " + why);
    problems += "\n  " + why;
  }
  return "";
}

void checkSameRun(const nlohmann::json& meta, const std::string& chosen, Dist& dist, const Spec& spec, bool force) {
  if (meta.at("world_size").get<int>() != dist.worldSize())
    throw CheckpointError(chosen + ": saved by " + std::to_string(meta.at("world_size").get<int>()) +
                          " processes; this run has " + std::to_string(dist.worldSize()) +
                          " (exact resumption needs the same number)");
  const auto diffs = jsonDifferences(meta.at("spec"), spec.toJson());
  if (diffs.empty()) return;
  std::string list;
  for (const auto& d : diffs) list += "\n  " + d;
  if (!force)
    throw CheckpointError(chosen + ": the spec differs from the checkpoint's (pass --force to resume anyway):" + list);
  log::warn("resuming despite spec differences (--force):" + list);
}

// The optimizer from its archive, keeping the spec's options: LibTorch's load also restores each
// group's options, and the spec's (e.g. a --force'd weight decay) must win, as the learning rate
// does at every step. Its state tensors come back on the CPU: moved next to their parameters.
void restoreOptimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  for (auto& g : optimizer.param_groups()) options.push_back(g.options().clone());
  optimizer.load(archive);
  for (std::size_t i = 0; i < options.size() && i < optimizer.param_groups().size(); ++i)
    optimizer.param_groups()[i].set_options(std::move(options[i]));
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) {
      auto it = optimizer.state().find(p.unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
        if (sgd->momentum_buffer().defined()) sgd->momentum_buffer(sgd->momentum_buffer().to(p.device()));
      } else if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
        adam->exp_avg(adam->exp_avg().to(p.device()));
        adam->exp_avg_sq(adam->exp_avg_sq().to(p.device()));
        if (adam->max_exp_avg_sq().defined()) adam->max_exp_avg_sq(adam->max_exp_avg_sq().to(p.device()));
      }
    }
}

torch::serialize::InputArchive loadArchive(const std::string& bytes) {
  std::istringstream is(bytes);
  torch::serialize::InputArchive a;
  a.load_from(is, torch::Device(torch::kCPU));
  return a;
}

// state.bin: the model (then this rank's own buffers), optimizer and loss scaler.
void restoreShared(const std::string& bytes, TrainParts& parts) {
  torch::serialize::InputArchive a = loadArchive(bytes);
  for (auto& p : parts.model->named_parameters()) {
    torch::Tensor t;
    a.read("model/" + p.key(), t);
    copyInto(p.value(), t, p.key());
  }
  for (auto& b : parts.model->named_buffers()) {
    torch::Tensor t;
    a.read("model/" + b.key(), t, true);
    copyInto(b.value(), t, b.key());
  }
  torch::serialize::InputArchive opt;
  a.read("optimizer", opt);
  restoreOptimizer(*parts.optimizer, opt);
  torch::Tensor scale, growth;
  a.read("scaler/scale", scale, true);
  a.read("scaler/growth", growth, true);
  copyInto(parts.scaler->scaleTensor(), scale, "scaler/scale");
  copyInto(parts.scaler->growthTracker(), growth, "scaler/growth");
}

// rank-NNNNN.bin: this rank's buffers, EMA, comm hook state and RNG; returns its progress.
Progress restoreRank(const std::string& bytes, TrainParts& parts, const torch::Device& device) {
  torch::serialize::InputArchive r = loadArchive(bytes);
  for (auto& b : parts.model->named_buffers()) {
    torch::Tensor t;
    r.read("buffers/" + b.key(), t, true);
    copyInto(b.value(), t, b.key());
  }
  if (parts.ema)
    for (std::size_t i = 0; i < parts.ema->averages().size(); ++i) {
      torch::Tensor t;
      r.read("ema/" + std::to_string(i), t, true);
      copyInto(parts.ema->averages()[i], t, "ema/" + std::to_string(i));
    }
  std::vector<std::pair<std::string, torch::Tensor>> hookState;
  for (const auto& key : r.keys())
    if (key.rfind("comm/", 0) == 0) {
      torch::Tensor t;
      r.read(key, t, true);
      hookState.emplace_back(key.substr(5), t.to(device));
    }
  parts.comm->hook().loadState(hookState);
  torch::Tensor meta, rng;
  r.read("meta", meta, true);
  r.read("rng", rng, true);
  setRngState(generatorFor(device), rng);
  if (device.is_cuda()) {
    torch::Tensor cpuRng;
    r.read("rng_cpu", cpuRng, true);
    setRngState(at::detail::getDefaultCPUGenerator(), cpuRng);
  }
  const auto j = nlohmann::json::parse(
      std::string(static_cast<const char*>(meta.data_ptr()), static_cast<std::size_t>(meta.numel())));
  Progress p = Progress::fromJson(j.at("progress"));
  parts.scaler->setSkippedSteps(p.position.scalerSkipped);
  return p;
}

}  // namespace

std::optional<Restored> restoreCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist,
                                          const Spec& spec, TrainParts& parts, bool force,
                                          const torch::Device& device) {
  const std::vector<std::string> candidates = candidatesOf(what, store);
  if (candidates.empty()) return std::nullopt;  // auto: nothing saved yet, start from scratch
  Files files;
  std::string problems;
  const std::string chosen = firstUsable(candidates, dist, files, problems);
  if (chosen.empty())
    throw CheckpointError("no usable checkpoint in " + (what == "auto" ? store.dir() : what) + ":" + problems);
  checkSameRun(files.meta, chosen, dist, spec, force);
  if (parts.ema && !files.meta.value("ema", false))
    throw CheckpointError(chosen + ": saved without EMA; this run has train.ema_decay set");
  Restored out;
  std::string err;  // a failure on one rank is agreed by all, so none goes on to train alone
  try {
    restoreShared(files.state, parts);
    out.path = chosen;
    out.progress = restoreRank(files.rank, parts, device);
    out.resultEpochs = files.meta.at("result_epochs");
    out.resultEvals = files.meta.value("result_evals", nlohmann::json::array());
  } catch (const CheckpointError& e) {
    err = e.what();
  } catch (const c10::Error& e) {
    err = chosen + ": cannot restore: " + e.what_without_backtrace();
  } catch (const nlohmann::json::exception& e) {
    err = chosen + ": cannot restore: " + e.what();
  }
  if (dist.max({err.empty() ? 0.0 : 1.0})[0] > 0)
    throw CheckpointError(err.empty() ? chosen + ": cannot restore on another rank" : err);
  return out;
}

}  // namespace exprun
