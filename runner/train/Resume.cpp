// Purpose: checkpoint content, collective save/restore, safetensors export (see Resume.h).
#include "runner/train/Resume.h"

#include <ATen/Context.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <sstream>

#include "runner/Log.h"
#include "runner/results/ResultFile.h"
#include "runner/train/Precision.h"
#include "runner/train/Trainer.h"

namespace exprun {

namespace fs = std::filesystem;

nlohmann::json TrainProgress::toJson() const {
  return {{"step", step},         {"epoch", epoch},       {"micro", micro},     {"epoch_steps", epochSteps},
          {"loss_sum", lossSum},  {"norm_sum", normSum},  {"comm_wait", commWait}, {"data_wait", dataWait},
          {"elapsed", elapsed},   {"correct", correct},   {"samples", samples}, {"skipped_images", skippedImages},
          {"nonfinite_skipped", nonFiniteSkipped}, {"scaler_skipped", scalerSkipped}};
}

TrainProgress TrainProgress::fromJson(const nlohmann::json& j) {
  auto num = [&](const char* k) { return jsonNumber(j, k); };  // a NaN loss sum is written as null
  TrainProgress p;
  p.step = j.at("step");
  p.epoch = j.at("epoch");
  p.micro = j.at("micro");
  p.epochSteps = j.at("epoch_steps");
  p.lossSum = num("loss_sum");
  p.normSum = num("norm_sum");
  p.commWait = num("comm_wait");
  p.dataWait = num("data_wait");
  p.elapsed = num("elapsed");
  p.correct = j.at("correct");
  p.samples = j.at("samples");
  p.skippedImages = j.at("skipped_images");
  p.nonFiniteSkipped = j.at("nonfinite_skipped");
  p.scalerSkipped = j.at("scaler_skipped");
  return p;
}

std::string checkpointRoot(const Spec& spec, const std::string& outDir) {
  const std::string& d = spec.output.checkpoint.dir;
  if (!d.empty()) return d;
  return (fs::path(outDir) / (spec.name + ".ckpt")).string();
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

std::string tensorBytes(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().cpu();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
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

// The tensors of the model, optimizer, loss scaler and EMA.
std::string stateBytes(TrainParts& parts) {
  torch::serialize::OutputArchive a, opt;
  for (const auto& p : parts.model.named_parameters()) a.write("model/" + p.key(), p.value().detach().cpu());
  for (const auto& b : parts.model.named_buffers()) a.write("model/" + b.key(), b.value().detach().cpu(), true);
  parts.optimizer.save(opt);
  a.write("optimizer", opt);
  a.write("scaler/scale", parts.scaler.scaleTensor().cpu(), true);
  a.write("scaler/growth", parts.scaler.growthTracker().cpu(), true);
  if (parts.ema)
    for (std::size_t i = 0; i < parts.ema->averages().size(); ++i)
      a.write("ema/" + std::to_string(i), parts.ema->averages()[i].cpu(), true);
  return archiveToString(a);
}

void copyInto(torch::Tensor& dst, const torch::Tensor& src, const std::string& what) {
  if (!src.defined() || src.sizes() != dst.sizes())
    throw CheckpointError("checkpoint: '" + what + "' has another shape than the model's (a different model?)");
  torch::NoGradGuard g;
  dst.detach().copy_(src);
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
  if (f.meta.value("format", "") != "exprun-checkpoint-1") throw CheckpointError(dir + "/meta.json: not an exprun checkpoint");
  f.state = CheckpointStore::readFile(dir + "/state.bin");
  f.rank = CheckpointStore::readFile(rankFile(dir, rank));
  return f;
}

}  // namespace

std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const Spec& spec, const DataInfo& info,
                           TrainParts parts, const TrainProgress& mine, const nlohmann::json& resultEpochs,
                           const torch::Device& device) {
  const int rank = dist.rank();
  // Never store non-finite weights (every rank agrees before anything is written).
  std::string bad;
  for (const auto& p : parts.model.named_parameters())
    if (!torch::isfinite(p.value().detach()).all().item<bool>()) {
      bad = p.key();
      break;
    }
  if (dist.max({bad.empty() ? 0.0 : 1.0})[0] > 0)
    throw CheckpointError("refusing to save a checkpoint at step " + std::to_string(mine.step) + ": non-finite weights" +
                          (bad.empty() ? std::string(" on another rank") : " in '" + bad + "'"));
  faultPoint("save-begin", -1, rank);
  // A failure on one rank (disk full, permissions) is agreed by all ranks at each phase, so none
  // waits in a barrier for a rank that gave up.
  std::string err;
  auto agree = [&](const char* phase) {
    if (dist.max({err.empty() ? 0.0 : 1.0})[0] > 0)
      throw CheckpointError(err.empty() ? std::string("checkpoint ") + phase + " failed on another rank" : err);
  };
  auto attempt = [&](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      err = e.what();
    }
  };
  attempt([&] {
    if (rank == 0) store.prepareStaging(mine.step);
  });
  agree("staging");
  const std::string dir = store.stagingDir(mine.step);
  attempt([&] {
    {  // this rank: RNG state and partial-epoch meters
      nlohmann::json r{{"rank", rank}, {"progress", mine.toJson()}};
      at::Generator gen = generatorFor(device);
      std::string rng;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        rng = tensorBytes(gen.get_state());
      }
      std::string cpuRng;
      if (device.is_cuda()) {
        at::Generator cpu = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(cpu.mutex());
        cpuRng = tensorBytes(cpu.get_state());
      }
      torch::serialize::OutputArchive a;
      // Buffers (BN statistics) and EMA averages differ between ranks: each rank keeps its own.
      for (const auto& b : parts.model.named_buffers()) a.write("buffers/" + b.key(), b.value().detach().cpu(), true);
      if (parts.ema)
        for (std::size_t i = 0; i < parts.ema->averages().size(); ++i)
          a.write("ema/" + std::to_string(i), parts.ema->averages()[i].cpu(), true);
      a.write("meta", bytesTensor(r.dump()), true);
      a.write("rng", bytesTensor(rng), true);
      if (!cpuRng.empty()) a.write("rng_cpu", bytesTensor(cpuRng), true);
      CheckpointStore::writeFile(rankFile(dir, rank), archiveToString(a));
    }
    if (rank == 0) {
      CheckpointStore::writeFile(dir + "/state.bin", stateBytes(parts));
      nlohmann::json meta{{"format", "exprun-checkpoint-1"},
                          {"name", spec.name},
                          {"step", mine.step},
                          {"epoch", mine.epoch},
                          {"micro", mine.micro},
                          {"world_size", dist.worldSize()},
                          {"spec", spec.toJson()},
                          {"spec_yaml", spec.toYaml()},
                          {"spec_hash", spec.hash()},
                          {"model", spec.model.type()},
                          {"ema", parts.ema != nullptr},
                          {"data_info", {{"channels", info.channels}, {"height", info.height}, {"width", info.width},
                                         {"num_classes", info.numClasses}}},
                          {"result_epochs", resultEpochs}};
      CheckpointStore::writeFile(dir + "/meta.json", meta.dump(1));
    }
  });
  agree("writing");
  std::string final;
  attempt([&] {
    if (rank == 0) final = store.commit(mine.step, keep);
  });
  agree("commit");
  return final.empty() ? store.dir() + "/" + stepDirName(mine.step) : final;
}

std::optional<Restored> restoreCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist,
                                          const Spec& spec, TrainParts parts, bool force, const torch::Device& device) {
  std::vector<std::string> candidates;
  const bool automatic = what == "auto";
  if (automatic) {
    candidates = store.candidates();
  } else if (fs::exists(what + "/meta.json")) {
    candidates = {what};
  } else if (fs::is_directory(what)) {
    candidates = CheckpointStore(what).candidates();
    if (candidates.empty()) throw CheckpointError("--resume " + what + ": no checkpoint in this folder");
  } else {
    throw CheckpointError("--resume " + what + ": no such checkpoint folder");
  }
  // Every rank reads and verifies its files; all ranks move on to an older checkpoint together.
  Files files;
  std::string chosen, problems;
  for (const auto& c : candidates) {
    std::string err;
    try {
      files = readAll(c, dist.rank());
    } catch (const CheckpointError& e) {
      err = e.what();
    }
    const bool anyBad = dist.max({err.empty() ? 0.0 : 1.0})[0] > 0;
    if (!anyBad) {
      chosen = c;
      break;
    }
    const std::string why = err.empty() ? c + ": damaged on another rank" : err;
    log::warn("checkpoint unusable, trying an older one: " + why);
    problems += "\n  " + why;
  }
  if (chosen.empty()) {
    if (candidates.empty()) return std::nullopt;  // auto: nothing saved yet, start from scratch
    throw CheckpointError("no usable checkpoint in " + (automatic ? store.dir() : what) + ":" + problems);
  }
  const nlohmann::json& meta = files.meta;
  if (meta.at("world_size").get<int>() != dist.worldSize())
    throw CheckpointError(chosen + ": saved by " + std::to_string(meta.at("world_size").get<int>()) +
                          " processes; this run has " + std::to_string(dist.worldSize()) +
                          " (exact resumption needs the same number)");
  const auto diffs = jsonDifferences(meta.at("spec"), spec.toJson());
  if (!diffs.empty()) {
    std::string list;
    for (const auto& d : diffs) list += "\n  " + d;
    if (!force)
      throw CheckpointError(chosen + ": the spec differs from the checkpoint's (pass --force to resume anyway):" + list);
    log::warn("resuming despite spec differences (--force):" + list);
  }
  // Restore.
  try {
    std::istringstream is(files.state);
    torch::serialize::InputArchive a;
    a.load_from(is, torch::Device(torch::kCPU));
    for (auto& p : parts.model.named_parameters()) {
      torch::Tensor t;
      a.read("model/" + p.key(), t);
      copyInto(p.value(), t.to(p.value().device()), p.key());
    }
    for (auto& b : parts.model.named_buffers()) {
      torch::Tensor t;
      a.read("model/" + b.key(), t, true);
      copyInto(b.value(), t.to(b.value().device()), b.key());
    }
    torch::serialize::InputArchive opt;
    a.read("optimizer", opt);
    // LibTorch's load also restores each group's options; the spec's (e.g. a --force'd weight
    // decay) must win, as the learning rate does at every step.
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
    for (auto& g : parts.optimizer.param_groups()) options.push_back(g.options().clone());
    parts.optimizer.load(opt);
    for (std::size_t i = 0; i < options.size() && i < parts.optimizer.param_groups().size(); ++i)
      parts.optimizer.param_groups()[i].set_options(std::move(options[i]));
    std::istringstream rs(files.rank);
    torch::serialize::InputArchive r;
    r.load_from(rs, torch::Device(torch::kCPU));
    for (auto& b : parts.model.named_buffers()) {  // this rank's own buffers
      torch::Tensor t;
      r.read("buffers/" + b.key(), t, true);
      copyInto(b.value(), t.to(b.value().device()), b.key());
    }
    // The optimizer's state tensors come back on the CPU; move them next to the parameters.
    for (auto& group : parts.optimizer.param_groups())
      for (auto& p : group.params()) {
        auto it = parts.optimizer.state().find(p.unsafeGetTensorImpl());
        if (it == parts.optimizer.state().end()) continue;
        if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
          if (sgd->momentum_buffer().defined()) sgd->momentum_buffer(sgd->momentum_buffer().to(p.device()));
        } else if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
          adam->exp_avg(adam->exp_avg().to(p.device()));
          adam->exp_avg_sq(adam->exp_avg_sq().to(p.device()));
          if (adam->max_exp_avg_sq().defined()) adam->max_exp_avg_sq(adam->max_exp_avg_sq().to(p.device()));
        }
      }
    torch::Tensor scale, growth;
    a.read("scaler/scale", scale, true);
    a.read("scaler/growth", growth, true);
    copyInto(parts.scaler.scaleTensor(), scale, "scaler/scale");
    copyInto(parts.scaler.growthTracker(), growth, "scaler/growth");
    if (parts.ema) {
      if (!meta.value("ema", false)) throw CheckpointError(chosen + ": saved without EMA; this run has train.ema_decay set");
      for (std::size_t i = 0; i < parts.ema->averages().size(); ++i) {
        torch::Tensor t;
        r.read("ema/" + std::to_string(i), t, true);
        copyInto(parts.ema->averages()[i], t.to(parts.ema->averages()[i].device()), "ema/" + std::to_string(i));
      }
    }
    torch::Tensor rmeta, rng;
    r.read("meta", rmeta, true);
    r.read("rng", rng, true);
    const auto rankMeta =
        nlohmann::json::parse(std::string(static_cast<const char*>(rmeta.data_ptr()), static_cast<std::size_t>(rmeta.numel())));
    Restored out;
    out.path = chosen;
    out.progress = TrainProgress::fromJson(rankMeta.at("progress"));
    out.resultEpochs = meta.at("result_epochs");
    at::Generator gen = generatorFor(device);
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    if (device.is_cuda()) {
      torch::Tensor cpuRng;
      r.read("rng_cpu", cpuRng, true);
      at::Generator cpu = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_state(cpuRng);
    }
    return out;
  } catch (const c10::Error& e) {
    throw CheckpointError(chosen + ": cannot restore: " + e.what_without_backtrace());
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(chosen + ": cannot restore: " + e.what());
  }
}

void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensorsIn,
                      const nlohmann::json& metadata) {
  auto tensors = tensorsIn;
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto dtypeName = [](at::ScalarType t) -> std::string {
    switch (t) {
      case at::kFloat: return "F32";
      case at::kDouble: return "F64";
      case at::kHalf: return "F16";
      case at::kBFloat16: return "BF16";
      case at::kLong: return "I64";
      case at::kInt: return "I32";
      case at::kShort: return "I16";
      case at::kChar: return "I8";
      case at::kByte: return "U8";
      case at::kBool: return "BOOL";
      default: throw CheckpointError(std::string("safetensors: unsupported dtype ") + c10::toString(t));
    }
  };
  nlohmann::ordered_json header;
  header["__metadata__"] = nlohmann::ordered_json::object();
  for (auto it = metadata.begin(); it != metadata.end(); ++it)
    header["__metadata__"][it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  std::string data;
  std::vector<std::string> blobs;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::string bytes = tensorBytes(t);
    header[name] = {{"dtype", dtypeName(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes.size()}}};
    offset += bytes.size();
    blobs.push_back(std::move(bytes));
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::string out(8, '\0');
  const std::uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);  // little-endian on every platform exprun builds for
  out += h;
  for (const auto& b : blobs) out += b;
  writeFileAtomically(path, out);
}

void exportSafetensors(const std::string& what, const std::string& outPath, bool ema) {
  std::vector<std::string> candidates =
      fs::exists(what + "/meta.json") ? std::vector<std::string>{what} : CheckpointStore(what).candidates();
  if (candidates.empty()) throw CheckpointError(what + ": no checkpoint here (expected a step-* folder or a checkpoint root)");
  const std::string dir = candidates.front();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(CheckpointStore::readFile(dir + "/meta.json"));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(dir + "/meta.json: not valid JSON: " + e.what());
  }
  if (ema && !meta.value("ema", false)) throw CheckpointError(dir + ": saved without EMA weights (train.ema_decay was 0)");
  Spec spec = loadSpecFromString(meta.at("spec_yaml").get<std::string>(), dir + "/meta.json");
  // The model's shape from the checkpoint (no dataset needed), else from the data plugin.
  std::shared_ptr<Model> model;
  if (meta.contains("data_info")) {
    const auto& d = meta["data_info"];
    model = build<ModelKind>(
        spec.model, DataInfo{d.at("channels").get<std::int64_t>(), d.at("height").get<std::int64_t>(),
                             d.at("width").get<std::int64_t>(), d.at("num_classes").get<std::int64_t>()});
  } else {
    model = buildModel(spec);
  }
  const std::string state = CheckpointStore::readFile(dir + "/state.bin");
  std::istringstream is(state);
  torch::serialize::InputArchive a;
  try {
    a.load_from(is, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw CheckpointError(dir + "/state.bin: cannot read: " + e.what_without_backtrace());
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::size_t i = 0;
  const auto params = model->named_parameters();
  const auto buffers = model->named_buffers();
  try {
    for (const auto* list : {&params, &buffers})
      for (const auto& p : *list) {
        torch::Tensor t;
        a.read(ema ? "ema/" + std::to_string(i) : "model/" + p.key(), t, true);
        ++i;
        out.emplace_back(p.key(), t.contiguous());
      }
  } catch (const c10::Error& e) {
    throw CheckpointError(dir + "/state.bin: does not match the model of its spec: " + e.what_without_backtrace());
  }
  writeSafetensors(outPath, out,
                   {{"format", "pt"},
                    {"exprun_model", spec.model.type()},
                    {"exprun_step", std::to_string(meta.at("step").get<std::int64_t>())},
                    {"exprun_weights", ema ? "ema" : "raw"}});
}

}  // namespace exprun
