// Purpose: checkpoint content and its collective save and restore (see Checkpoint.h).
#include "runner/checkpoint/Checkpoint.h"

#include <ATen/Context.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>

#include "runner/checkpoint/Entries.h"
#include "runner/checkpoint/WorldSize.h"
#include "runner/spec/StoredSpec.h"
#include "runner/step/Step.h"
#include "runner/util/Log.h"

namespace exprun {

namespace fs = std::filesystem;

std::string tensorBytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

torch::Tensor bytesTensor(const std::string& s) {
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string archiveBytes(torch::serialize::OutputArchive& a) {
  std::ostringstream os;
  a.save_to(os);
  return os.str();
}

torch::serialize::InputArchive archiveFrom(const std::string& bytes) {
  std::istringstream is(bytes);
  torch::serialize::InputArchive a;
  a.load_from(is, torch::Device(torch::kCPU));
  return a;
}

at::Generator generatorFor(const torch::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}

namespace {

std::string rankFile(const std::string& dir, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "/rank-%05d.bin", rank);
  return dir + buf;
}

// What the run's entries (Entries.h) write to one of the checkpoint's files.
void saveEntries(const std::vector<StateEntry>& entries, bool toRankFile, torch::serialize::OutputArchive& a) {
  for (const StateEntry& e : entries)
    if (e.file == EntryFile::Both || (e.file == EntryFile::Rank) == toRankFile) e.save(a);
}

// state.bin (rank 0's): the entries every rank shares (the model, optimizer, loss scaler, EMA).
std::string stateBytes(Learner& learner, const torch::Device& device) {
  torch::serialize::OutputArchive a;
  saveEntries(stateEntries(learner, device), /*rankFile=*/false, a);
  return archiveBytes(a);
}

// rank-NNNNN.bin: what differs between ranks (buffers, EMA averages, the comm hook's state, the
// RNG states: the rank entries) and this rank's position and partial-epoch meters.
std::string rankBytes(Learner& learner, const Progress& mine, int rank, const torch::Device& device) {
  torch::serialize::OutputArchive a;
  saveEntries(stateEntries(learner, device), /*rankFile=*/true, a);
  a.write("meta", bytesTensor(nlohmann::json{{"rank", rank}, {"progress", mine.toJson()}}.dump()), true);
  return archiveBytes(a);
}

CheckpointMeta metaOf(const CheckpointContent& run, const Progress& mine, int worldSize, const ResultFile& result,
                      const EpochTotals& totals) {
  CheckpointMeta m;
  m.name = run.spec->name;
  m.worldSize = worldSize;
  m.progress = mine;
  m.hasProgress = true;
  m.totals = totals;
  m.spec = run.spec->toJson();
  m.specYaml = run.spec->toYaml();
  m.specHash = run.spec->hash();
  m.model = run.spec->model.type();
  m.ema = run.learner->ema != nullptr;
  m.data = run.data;
  m.history = result;  // the result file's records (its RunHistory part)
  if (run.batch.globalBatch > 0) m.batch = run.batch;
  if (run.methods) m.methods = run.methods->states();
  return m;
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

std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const CheckpointContent& run,
                           const Progress& mine, const ResultFile& result) {
  const int rank = dist.rank();
  const std::int64_t step = mine.position.step;
  Learner& learner = *run.learner;
  refuseNonFiniteWeights(*learner.model, dist, step);
  const EpochTotals totals = totalsOverRanks(mine.meters, dist);
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
    CheckpointStore::writeFile(rankFile(dir, rank), rankBytes(learner, mine, rank, run.device));
    if (rank != 0) return;
    CheckpointStore::writeFile(dir + "/state.bin", stateBytes(learner, run.device));
    CheckpointStore::writeFile(dir + "/meta.json",
                               nlohmann::json(metaOf(run, mine, dist.worldSize(), result, totals)).dump(1));
  });
  std::string final;
  phase("commit", [&] {
    if (rank == 0) final = store.commit(step, keep);
  });
  return final.empty() ? store.dir() + "/" + stepDirName(step) : final;
}

namespace {

// The checkpoint's files this rank needs, read and checked: meta.json, state.bin, and its own
// rank file when the world size is this run's.
CheckpointFiles readAll(const std::string& dir, int rank, int worldSize) {
  CheckpointFiles f;
  f.path = dir;
  f.meta = readCheckpointMeta(dir);
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

// The spec compared with the checkpoint's as this exprun reads it (options added since at their
// defaults), the train options exprun itself chose aside: the
// accumulation that keeps the global batch on another world size (`accumulationChosen`), the memory
// plan's choices when a planned run changes world size (`planChosen`).
void checkSameRun(const CheckpointFiles& files, const Spec& spec, bool accumulationChosen, bool planChosen,
                  bool force) {
  nlohmann::json mine = spec.toJson();
  nlohmann::json theirs = storedSpecAsReadToday(files.meta.spec);  // options added since at their defaults
  if (const auto adopted = adoptChangedDefaults(theirs, mine); !adopted.empty()) {
    std::string list;
    for (const auto& a : adopted) list += "\n  " + a;
    log::warn(files.path + ": the checkpoint holds defaults that have changed since; this run takes today's "
              "(on the CPU they compute the same; on CUDA the paths not yet run on a GPU became opt-in):" + list);
  }
  if (accumulationChosen || planChosen) copyChosenOptions(mine, theirs, planChosen);
  if (storedBeforeInputFormat(files.meta.spec) && spec.train.execution.input == InputFormat::Auto)
    log::warn(files.path + ": the checkpoint predates train.input and trained on float batches; this run's "
              "train.input: auto makes uint8 batches on CUDA where the data plugin can (imagefolder's resampled "
              "pixels then rounded to 8 bits): set train.input: float to keep the checkpoint's batches");
  const auto diffs = jsonDifferences(theirs, mine);
  if (diffs.empty()) return;
  std::string list;
  for (const auto& d : diffs) list += "\n  " + d;
  if (!force)
    throw CheckpointError(files.path + ": the spec differs from the checkpoint's (pass --force to resume anyway):" +
                          list);
  log::warn("resuming despite spec differences (--force):" + list);
}

// state.bin: the shared entries (the model: rank 0's parameters and buffers, optimizer, loss
// scaler); the EMA too when `withEma` (resuming on another number of ranks: rank 0's for every rank).
void restoreShared(const std::string& bytes, Learner& learner, const torch::Device& device, bool withEma) {
  torch::serialize::InputArchive a = archiveFrom(bytes);
  for (const StateEntry& e : stateEntries(learner, device))
    if (e.file == EntryFile::Shared || (e.file == EntryFile::Both && withEma)) e.load(a);
}

// rank-NNNNN.bin: this rank's entries (buffers, EMA, comm hook state, RNG); returns its progress.
Progress restoreRank(const std::string& bytes, Learner& learner, const torch::Device& device) {
  torch::serialize::InputArchive r = archiveFrom(bytes);
  for (const StateEntry& e : stateEntries(learner, device))
    if (e.file != EntryFile::Shared) e.load(r);
  torch::Tensor meta;
  r.read("meta", meta, true);
  const auto j = nlohmann::json::parse(tensorBytes(meta));
  Progress p = Progress::fromJson(JsonFields(j, "").object("progress"));
  learner.scaler->setSkippedSteps(p.position.scalerSkipped);
  return p;
}

// Another world size: the model, optimizer, loss scaler, EMA and buffers are rank 0's; this
// rank's progress from WorldSize.h; the change as the result file records it.
WorldSizeChange restoreOnNewWorld(const CheckpointFiles& files, Dist& dist, const CheckpointContent& run, bool force,
                                  Progress& progress) {
  const BatchShape then = files.shape(), now = run.batch;
  requireWorldSizeChangeable(files);
  if (now.globalBatch != then.globalBatch && !force)
    throw CheckpointError(strf("%s: global batch %lld, this run's %lld (pass --force to accept the change)",
                               files.path.c_str(), static_cast<long long>(then.globalBatch),
                               static_cast<long long>(now.globalBatch)));
  restoreShared(files.state, *run.learner, run.device, /*withEma=*/true);
  if (run.learner->reducer->shardedState()) {  // the optimizer's rows from every rank that saved them
    std::vector<torch::serialize::InputArchive> archives;
    for (int r = 0; r < files.worldSize(); ++r)
      archives.push_back(archiveFrom(CheckpointStore::readFile(rankFile(files.path, r))));
    std::vector<torch::serialize::InputArchive*> pieces;
    for (auto& a : archives) pieces.push_back(&a);
    restoreShardedOptimizer(*run.learner, pieces);
  }
  WorldSizeChange c;
  c.commStateReset = !run.learner->reducer->hook().state().empty();
  progress = progressForNewWorld(files, dist.rank(), *run.spec, now, dist.worldSize(), run.device);
  run.learner->scaler->setSkippedSteps(progress.position.scalerSkipped);
  const TrainPosition& p = progress.position;
  c.step = p.step;
  c.epoch = p.epoch;
  c.sample = p.sample;
  c.fromWorld = files.worldSize();
  c.toWorld = dist.worldSize();
  c.from = then;
  c.to = now;
  c.forced = now.globalBatch != then.globalBatch;
  c.checkpoint = files.path;
  return c;
}

// Every method's entry, handed back to its method before the tensors are read; an entry for a
// method the spec does not list is refused (its state would be lost).
void restoreMethods(const CheckpointFiles& files, const CheckpointContent& run) {
  for (const auto& [type, state] : files.meta.methods.items()) {
    bool found = false;
    for (std::size_t i = 0; run.methods && i < run.methods->size(); ++i)
      if (run.methods->type(i) == type) {
        found = true;
        try {
          run.methods->at(i).restore(*run.context, state);
        } catch (const JsonFieldError& e) {
          throw CheckpointError(files.path + "/meta.json: " + e.what());
        }
      }
    if (!found)
      throw CheckpointError(files.path + ": holds the state of method '" + type +
                            "' (meta.json: methods), which this run's spec does not list");
  }
}

}  // namespace

std::optional<CheckpointFiles> findCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist) {
  const std::vector<std::string> candidates = candidatesOf(what, store);
  if (candidates.empty()) return std::nullopt;  // auto: nothing saved yet, start from scratch
  std::string problems;
  auto files = firstUsable(candidates, dist, problems);
  if (!files) throw CheckpointError("no usable checkpoint in " + (what == "auto" ? store.dir() : what) + ":" + problems);
  return files;
}

bool CheckpointFiles::accumulationChosen(int worldSize) const {
  return worldSize != this->worldSize() || !meta.history.worldSizeChanges.empty();
}

Restored restoreCheckpoint(const CheckpointFiles& files, Dist& dist, const CheckpointContent& run, bool force) {
  Learner& learner = *run.learner;
  const bool sameWorld = files.worldSize() == dist.worldSize();
  checkSameRun(files, *run.spec, files.accumulationChosen(dist.worldSize()), run.planned && !sameWorld, force);
  if (learner.ema && !files.meta.ema)
    throw CheckpointError(files.path + ": saved without EMA; this run has train.ema_decay set");
  Restored out;
  std::string err;  // a failure on one rank is agreed by all, so none goes on to train alone
  try {
    out.path = files.path;
    out.history = files.meta.history;
    restoreMethods(files, run);
    if (sameWorld) {
      restoreShared(files.state, learner, run.device, /*withEma=*/false);
      out.progress = restoreRank(files.rank, learner, run.device);
      deriveSample(out.progress.position, files);
    } else {
      out.change = restoreOnNewWorld(files, dist, run, force, out.progress);
    }
  } catch (const CheckpointError& e) {
    err = e.what();
  } catch (const c10::Error& e) {
    err = files.path + ": cannot restore: " + e.what_without_backtrace();
  } catch (const std::exception& e) {
    err = files.path + ": cannot restore: " + e.what();
  }
  if (dist.max({err.empty() ? 0.0 : 1.0})[0] > 0)
    throw CheckpointError(err.empty() ? files.path + ": cannot restore on another rank" : err);
  return out;
}

}  // namespace exprun
