// Purpose: checkpoint content and its collective save and restore (see Checkpoint.h).
#include "runner/checkpoint/Checkpoint.h"

#include <ATen/Context.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>

#include "runner/util/Log.h"
#include "runner/results/ResultFile.h"

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

// The epoch's meters over all ranks (collective): sums of what is summed at the epoch's end,
// maxima of what is maxed there (runner/train/Epoch.cpp's totals).
nlohmann::json epochTotals(const EpochMeters& m, Dist& dist) {
  std::vector<double> sums = dist.sum({m.lossSum, static_cast<double>(m.correct), static_cast<double>(m.samples),
                                       static_cast<double>(m.skippedImages)});
  std::vector<double> maxima =
      dist.max({m.elapsed, m.dataWait, m.commWait, static_cast<double>(m.commBytes)});
  return {{"loss_sum", sums[0]},     {"correct", sums[1]},   {"samples", sums[2]},    {"skipped_images", sums[3]},
          {"elapsed", maxima[0]},    {"data_wait", maxima[1]}, {"comm_wait", maxima[2]}, {"comm_bytes", maxima[3]}};
}

nlohmann::json metaJson(const Spec& spec, const DataInfo& info, const TrainParts& parts, const Progress& mine,
                        int worldSize, const nlohmann::json& result, const nlohmann::json& totals,
                        const BatchShape& shape) {
  nlohmann::json j = {
      {"format", "exprun-checkpoint-1"},
      {"name", spec.name},
      {"step", mine.position.step},
      {"epoch", mine.position.epoch},
      {"micro", mine.position.micro},
      {"sample", mine.position.sample},
      {"world_size", worldSize},
      {"progress", mine.toJson()},  // rank 0's
      {"epoch_totals", totals},
      {"spec", spec.toJson()},
      {"spec_yaml", spec.toYaml()},
      {"spec_hash", spec.hash()},
      {"model", spec.model.type()},
      {"ema", parts.ema != nullptr},
      {"data_info",
       {{"channels", info.channels}, {"height", info.height}, {"width", info.width}, {"num_classes", info.numClasses}}},
      {"result_epochs", result.at("epochs")},
      {"result_evals", result.value("evals", nlohmann::json::array())},
      {"world_size_changes", result.value("world_size_changes", nlohmann::json::array())}};
  if (shape.globalBatch > 0)
    j["batch"] = {{"micro_batch", shape.microBatch},
                  {"accumulate", shape.accumulate},
                  {"global_batch", shape.globalBatch},
                  {"steps_per_epoch", shape.stepsPerEpoch},
                  {"lr", shape.lr}};
  return j;
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
                           const torch::Device& device, const BatchShape& shape) {
  const int rank = dist.rank();
  const std::int64_t step = mine.position.step;
  refuseNonFiniteWeights(*parts.model, dist, step);
  const nlohmann::json totals = epochTotals(mine.meters, dist);
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
                               metaJson(spec, info, parts, mine, dist.worldSize(), result, totals, shape).dump(1));
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

// The checkpoint's files this rank needs, read and checked: meta.json, state.bin, and its own
// rank file when the world size is this run's.
CheckpointFiles readAll(const std::string& dir, int rank, int worldSize) {
  CheckpointFiles f;
  f.path = dir;
  try {
    f.meta = nlohmann::json::parse(CheckpointStore::readFile(dir + "/meta.json"));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(dir + "/meta.json: not valid JSON: " + e.what());
  }
  if (f.meta.value("format", "") != "exprun-checkpoint-1" || !f.meta.contains("world_size") ||
      !f.meta["world_size"].is_number_integer() || f.meta["world_size"].get<int>() < 1)
    throw CheckpointError(dir + "/meta.json: not an exprun checkpoint");
  f.state = CheckpointStore::readFile(dir + "/state.bin");
  if (f.worldSize() == worldSize) f.rank = CheckpointStore::readFile(rankFile(dir, rank));
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
// one together); nullopt when there is none.
std::optional<CheckpointFiles> firstUsable(const std::vector<std::string>& candidates, Dist& dist,
                                           std::string& problems) {
  for (const auto& c : candidates) {
    std::string err;
    CheckpointFiles files;
    try {
      files = readAll(c, dist.rank(), dist.worldSize());
    } catch (const CheckpointError& e) {
      err = e.what();
    }
    if (dist.max({err.empty() ? 0.0 : 1.0})[0] == 0) return files;
    const std::string why = err.empty() ? c + ": damaged on another rank" : err;
    log::warn("checkpoint unusable, trying an older one: " + why);
    problems += "\n  " + why;
  }
  return std::nullopt;
}

// The spec compared with the checkpoint's, the train.* keys exprun itself chose aside (the
// accumulation that keeps the global batch on another world size; the memory plan's choices).
void checkSameRun(const CheckpointFiles& files, const Spec& spec, const std::vector<std::string>& chosen, bool force) {
  nlohmann::json mine = spec.toJson();
  const nlohmann::json& theirs = files.meta.at("spec");
  for (const auto& key : chosen)
    if (theirs.contains("train") && theirs["train"].contains(key)) mine["train"][key] = theirs["train"][key];
  const auto diffs = jsonDifferences(theirs, mine);
  if (diffs.empty()) return;
  std::string list;
  for (const auto& d : diffs) list += "\n  " + d;
  if (!force)
    throw CheckpointError(files.path + ": the spec differs from the checkpoint's (pass --force to resume anyway):" +
                          list);
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

// state.bin: the model (rank 0's parameters and buffers), optimizer and loss scaler; the EMA too
// when `withEma` (resuming on another number of ranks: rank 0's for every rank).
void restoreShared(const std::string& bytes, TrainParts& parts, bool withEma) {
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
  if (withEma && parts.ema)
    for (std::size_t i = 0; i < parts.ema->averages().size(); ++i) {
      torch::Tensor t;
      a.read("ema/" + std::to_string(i), t, true);
      copyInto(parts.ema->averages()[i], t, "ema/" + std::to_string(i));
    }
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

// Checkpoints written before resumption on another number of ranks lack rank 0's progress and
// the epoch's totals.
void requireWorldSizeChangeable(const CheckpointFiles& files) {
  if (!files.meta.contains("progress") || !files.meta.contains("epoch_totals"))
    throw CheckpointError(files.path + ": written by an exprun without resumption on another number of ranks; "
                          "resume it on " + std::to_string(files.worldSize()) + " ranks");
}

// Older checkpoints record no sample position: W x micro-batch x micro-batches consumed.
void deriveSample(TrainPosition& pos, const CheckpointFiles& files) {
  if (pos.sample < 0) pos.sample = std::int64_t{files.worldSize()} * files.shape().microBatch * pos.micro;
}

// Resuming on another number of ranks: every rank starts from rank 0's position; the epoch's
// meters so far are the old ranks' totals (the sums on rank 0, the maxima everywhere); the
// micro-batch counter is re-expressed on this run's shards; RNG streams re-derived from
// (seed, step, rank). (A changed global batch re-expresses the step count: the Checkpointer.)
Progress progressForNewWorld(const CheckpointFiles& files, int rank, const Spec& spec, const BatchShape& now,
                             int worldSize, const torch::Device& device) {
  Progress p = Progress::fromJson(files.meta.at("progress"));
  TrainPosition& pos = p.position;
  deriveSample(pos, files);
  const nlohmann::json& t = files.meta.at("epoch_totals");
  EpochMeters& m = p.meters;
  const bool first = rank == 0;
  m.lossSum = first ? jsonNumber(t, "loss_sum") : 0.0;
  m.correct = first ? static_cast<std::int64_t>(t.at("correct").get<double>()) : 0;
  m.samples = first ? static_cast<std::int64_t>(t.at("samples").get<double>()) : 0;
  m.skippedImages = first ? static_cast<std::int64_t>(t.at("skipped_images").get<double>()) : 0;
  m.elapsed = jsonNumber(t, "elapsed");
  m.dataWait = jsonNumber(t, "data_wait");
  m.commWait = jsonNumber(t, "comm_wait");
  m.commBytes = static_cast<std::int64_t>(t.at("comm_bytes").get<double>());
  const std::int64_t perBatch = std::int64_t{worldSize} * now.microBatch;
  pos.micro = (pos.sample + perBatch - 1) / perBatch;  // exact when the global batch is kept
  const std::uint64_t seed = splitmix64(
      splitmix64(static_cast<std::uint64_t>(spec.seed) ^ splitmix64(static_cast<std::uint64_t>(pos.step))) +
      static_cast<std::uint64_t>(rank));
  auto reseed = [&](at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  };
  reseed(generatorFor(device));
  if (device.is_cuda()) reseed(at::detail::getDefaultCPUGenerator());
  return p;
}

}  // namespace

BatchShape CheckpointFiles::shape() const {
  BatchShape b;
  if (meta.contains("batch")) {
    const auto& j = meta["batch"];
    b.microBatch = j.at("micro_batch");
    b.accumulate = j.at("accumulate");
    b.globalBatch = j.at("global_batch");
    b.stepsPerEpoch = j.value("steps_per_epoch", std::int64_t{0});
    b.lr = j.value("lr", 0.0);
    return b;
  }
  const auto& train = meta.at("spec").at("train");  // older checkpoints: the spec as trained
  if (!train.contains("batch_size") || !train["batch_size"].is_number_integer())
    throw CheckpointError(path + ": the checkpoint records no micro-batch size");
  b.microBatch = train["batch_size"];
  b.accumulate = train.value("accumulate", std::int64_t{1});
  b.globalBatch = b.microBatch * b.accumulate * worldSize();
  return b;
}

nlohmann::json WorldSizeChange::toJson() const {
  auto shape = [](int world, const BatchShape& b) {
    return nlohmann::json{{"world_size", world},      {"micro_batch", b.microBatch}, {"accumulate", b.accumulate},
                          {"global_batch", b.globalBatch}, {"lr", b.lr},             {"steps_per_epoch", b.stepsPerEpoch}};
  };
  return {{"step", step},
          {"epoch", epoch},
          {"sample", sample},
          {"from", shape(fromWorld, from)},
          {"to", shape(toWorld, to)},
          {"global_batch_changed", forced},
          {"comm_state_reset", commStateReset},
          {"checkpoint", checkpoint}};
}

std::optional<CheckpointFiles> findCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist) {
  const std::vector<std::string> candidates = candidatesOf(what, store);
  if (candidates.empty()) return std::nullopt;  // auto: nothing saved yet, start from scratch
  std::string problems;
  auto files = firstUsable(candidates, dist, problems);
  if (!files) throw CheckpointError("no usable checkpoint in " + (what == "auto" ? store.dir() : what) + ":" + problems);
  return files;
}

bool CheckpointFiles::accumulationChosen(int worldSize) const {
  return worldSize != this->worldSize() || !meta.value("world_size_changes", nlohmann::json::array()).empty();
}

Spec specForWorldSize(const CheckpointFiles& files, const Spec& spec, int worldSize, bool force) {
  const int then = files.worldSize();
  // The same world size as a run that never changed it: the spec as it is. batch_size: auto plans
  // for train.global_batch.
  if (!files.accumulationChosen(worldSize) || !spec.train.batchSize) return spec;
  if (then != worldSize) requireWorldSizeChangeable(files);
  const BatchShape was = files.shape();
  const std::int64_t micro = *spec.train.batchSize;
  const std::int64_t perStep = std::int64_t{worldSize} * micro;
  Spec out = spec;
  if (was.globalBatch % perStep == 0) {
    out.train.accumulate = was.globalBatch / perStep;
    if (then == worldSize) return out;  // a resumed run resumed again on its own number of ranks
    log::info(strf("resuming a %d-rank checkpoint on %d ranks: global batch %lld kept as %d x %lld x accumulate %lld "
                   "(was %d x %lld x %lld)",
                   then, worldSize, static_cast<long long>(was.globalBatch), worldSize, static_cast<long long>(micro),
                   static_cast<long long>(out.train.accumulate), then, static_cast<long long>(was.microBatch),
                   static_cast<long long>(was.accumulate)));
    return out;
  }
  std::string working;  // the world sizes that keep the global batch with this micro-batch
  if (was.globalBatch % micro == 0) {
    const std::int64_t slots = was.globalBatch / micro;
    for (std::int64_t w = 1; w <= slots; ++w)
      if (slots % w == 0)
        working += strf("%s%lld (accumulate %lld)", working.empty() ? "" : ", ", static_cast<long long>(w),
                        static_cast<long long>(slots / w));
  }
  const std::int64_t changed = perStep * spec.train.accumulate;
  const std::string what =
      strf("%s: saved by %d ranks with global batch %lld (%d x %lld x accumulate %lld); %d ranks x micro-batch %lld "
           "cannot keep it",
           files.path.c_str(), then, static_cast<long long>(was.globalBatch), then, static_cast<long long>(was.microBatch),
           static_cast<long long>(was.accumulate), worldSize, static_cast<long long>(micro));
  if (!force)
    throw CheckpointError(what + (working.empty() ? std::string(" (no number of ranks can with this micro-batch)")
                                                  : "; world sizes that keep it: " + working) +
                          ". Pass --force to go on with global batch " + std::to_string(changed) + " (" +
                          std::to_string(worldSize) + " x " + std::to_string(micro) + " x accumulate " +
                          std::to_string(spec.train.accumulate) + "), the learning rate rescaled by the spec's rule");
  log::warn(what + "; going on with global batch " + std::to_string(changed) +
            " (--force): the learning rate follows the spec's scaling rule, the change is recorded in the result file");
  return out;
}

Restored restoreCheckpoint(const CheckpointFiles& files, Dist& dist, const Spec& spec, TrainParts& parts, bool force,
                           const torch::Device& device, const BatchShape& now, bool planned) {
  const std::string& chosen = files.path;
  const bool sameWorld = files.worldSize() == dist.worldSize();
  std::vector<std::string> exprunChose;
  if (files.accumulationChosen(dist.worldSize())) exprunChose.push_back("accumulate");
  if (planned && !sameWorld)
    exprunChose.insert(exprunChose.end(), {"batch_size", "accumulate", "precision", "activation_checkpointing"});
  checkSameRun(files, spec, exprunChose, force);
  if (parts.ema && !files.meta.value("ema", false))
    throw CheckpointError(chosen + ": saved without EMA; this run has train.ema_decay set");
  Restored out;
  std::string err;  // a failure on one rank is agreed by all, so none goes on to train alone
  try {
    out.path = chosen;
    out.resultEpochs = files.meta.at("result_epochs");
    out.resultEvals = files.meta.value("result_evals", nlohmann::json::array());
    out.worldSizeChanges = files.meta.value("world_size_changes", nlohmann::json::array());
    if (sameWorld) {
      restoreShared(files.state, parts, /*withEma=*/false);
      out.progress = restoreRank(files.rank, parts, device);
      deriveSample(out.progress.position, files);
    } else {
      const BatchShape then = files.shape();
      requireWorldSizeChangeable(files);
      if (now.globalBatch != then.globalBatch && !force)
        throw CheckpointError(strf("%s: global batch %lld, this run's %lld (pass --force to accept the change)",
                                   chosen.c_str(), static_cast<long long>(then.globalBatch),
                                   static_cast<long long>(now.globalBatch)));
      restoreShared(files.state, parts, /*withEma=*/true);
      WorldSizeChange c;
      c.commStateReset = !parts.comm->hook().state().empty();
      out.progress = progressForNewWorld(files, dist.rank(), spec, now, dist.worldSize(), device);
      parts.scaler->setSkippedSteps(out.progress.position.scalerSkipped);
      const TrainPosition& p = out.progress.position;
      c.step = p.step;
      c.epoch = p.epoch;
      c.sample = p.sample;
      c.fromWorld = files.worldSize();
      c.toWorld = dist.worldSize();
      c.from = then;
      c.to = now;
      c.forced = now.globalBatch != then.globalBatch;
      c.checkpoint = chosen;
      out.change = c;
    }
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
