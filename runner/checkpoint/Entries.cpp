// Purpose: the checkpoint's named entries (see Entries.h).
#include "runner/checkpoint/Entries.h"

#include <cstring>

#include "runner/checkpoint/Checkpoint.h"
#include "runner/checkpoint/CheckpointStore.h"

namespace exprun {
namespace {

torch::Tensor bytesOf(const std::string& s) {
  torch::Tensor t = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

torch::Tensor generatorState(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setGeneratorState(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void copyInto(torch::Tensor& dst, const torch::Tensor& src, const std::string& what) {
  if (!src.defined() || src.sizes() != dst.sizes())
    throw CheckpointError("checkpoint: '" + what + "' has another shape than the model's (a different model?)");
  torch::NoGradGuard g;
  dst.detach().copy_(src.to(dst.device()));
}

// Reads `key` into `dst` (a buffer-like tensor written with is_buffer).
void readInto(torch::serialize::InputArchive& a, const std::string& key, torch::Tensor& dst, bool buffer) {
  torch::Tensor t;
  a.read(key, t, buffer);
  copyInto(dst, t, key);
}

// The optimizer from its archive, keeping the spec's options: LibTorch's load also restores each
// group's options, and the spec's (e.g. a --force'd weight decay) must win, as the learning rate
// does at every step. Its state tensors come back on the CPU: moved next to their parameters.
void restoreOptimizer(Optimizer& optimizer, torch::serialize::InputArchive& archive) {
  torch::optim::Optimizer& o = optimizer.torchOptimizer();
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  for (auto& g : o.param_groups()) options.push_back(g.options().clone());
  o.load(archive);
  for (std::size_t i = 0; i < options.size() && i < o.param_groups().size(); ++i)
    o.param_groups()[i].set_options(std::move(options[i]));
  optimizer.stateToParameters();
}

StateEntry modelEntry(Model& model) {
  return {"model", EntryFile::Shared,
          [&model](torch::serialize::OutputArchive& a) {
            for (const auto& p : model.named_parameters()) a.write("model/" + p.key(), p.value().detach().cpu());
            for (const auto& b : model.named_buffers()) a.write("model/" + b.key(), b.value().detach().cpu(), true);
          },
          [&model](torch::serialize::InputArchive& a) {
            for (auto& p : model.named_parameters()) readInto(a, "model/" + p.key(), p.value(), false);
            for (auto& b : model.named_buffers()) readInto(a, "model/" + b.key(), b.value(), true);
          }};
}

StateEntry optimizerEntry(Optimizer& optimizer) {
  return {"optimizer", EntryFile::Shared,
          [&optimizer](torch::serialize::OutputArchive& a) {
            torch::serialize::OutputArchive opt;
            optimizer.torchOptimizer().save(opt);
            a.write("optimizer", opt);
          },
          [&optimizer](torch::serialize::InputArchive& a) {
            torch::serialize::InputArchive opt;
            a.read("optimizer", opt);
            restoreOptimizer(optimizer, opt);
          }};
}

// The scale and growth tracker; the skipped-step count is the position's (meta).
StateEntry scalerEntry(GradScaler& scaler) {
  return {"scaler", EntryFile::Shared,
          [&scaler](torch::serialize::OutputArchive& a) {
            a.write("scaler/scale", scaler.scaleTensor().cpu(), true);
            a.write("scaler/growth", scaler.growthTracker().cpu(), true);
          },
          [&scaler](torch::serialize::InputArchive& a) {
            readInto(a, "scaler/scale", scaler.scaleTensor(), true);
            readInto(a, "scaler/growth", scaler.growthTracker(), true);
          }};
}

StateEntry emaEntry(Ema& ema) {
  return {"ema", EntryFile::Both,
          [&ema](torch::serialize::OutputArchive& a) {
            for (std::size_t i = 0; i < ema.averages().size(); ++i)
              a.write("ema/" + std::to_string(i), ema.averages()[i].cpu(), true);
          },
          [&ema](torch::serialize::InputArchive& a) {
            for (std::size_t i = 0; i < ema.averages().size(); ++i)
              readInto(a, "ema/" + std::to_string(i), ema.averages()[i], true);
          }};
}

// This rank's buffers (batch-norm statistics differ between ranks without synchronized BN).
StateEntry buffersEntry(Model& model) {
  return {"buffers", EntryFile::Rank,
          [&model](torch::serialize::OutputArchive& a) {
            for (const auto& b : model.named_buffers()) a.write("buffers/" + b.key(), b.value().detach().cpu(), true);
          },
          [&model](torch::serialize::InputArchive& a) {
            for (auto& b : model.named_buffers()) readInto(a, "buffers/" + b.key(), b.value(), true);
          }};
}

StateEntry commEntry(GradReducer& reducer, const torch::Device& device) {
  return {"comm", EntryFile::Rank,
          [&reducer](torch::serialize::OutputArchive& a) {
            for (const auto& [name, t] : reducer.hook().state()) a.write("comm/" + name, t.detach().cpu(), true);
          },
          [&reducer, device](torch::serialize::InputArchive& a) {
            std::vector<std::pair<std::string, torch::Tensor>> state;
            for (const auto& key : a.keys())
              if (key.rfind("comm/", 0) == 0) {
                torch::Tensor t;
                a.read(key, t, true);
                state.emplace_back(key.substr(5), t.to(device));
              }
            reducer.hook().loadState(state);
          }};
}

// The device's default generator, and on a GPU the CPU's too (augmentation draws, dropout on the CPU).
StateEntry rngEntry(const torch::Device& device) {
  return {"rng", EntryFile::Rank,
          [device](torch::serialize::OutputArchive& a) {
            a.write("rng", bytesOf(tensorBytes(generatorState(generatorFor(device)))), true);
            if (device.is_cuda())
              a.write("rng_cpu", bytesOf(tensorBytes(generatorState(at::detail::getDefaultCPUGenerator()))), true);
          },
          [device](torch::serialize::InputArchive& a) {
            torch::Tensor rng;
            a.read("rng", rng, true);
            setGeneratorState(generatorFor(device), rng);
            if (device.is_cuda()) {
              torch::Tensor cpu;
              a.read("rng_cpu", cpu, true);
              setGeneratorState(at::detail::getDefaultCPUGenerator(), cpu);
            }
          }};
}

}  // namespace

std::vector<StateEntry> stateEntries(Learner& learner, const torch::Device& device) {
  std::vector<StateEntry> entries{modelEntry(*learner.model), optimizerEntry(*learner.optimizer),
                                  scalerEntry(*learner.scaler)};
  if (learner.ema) entries.push_back(emaEntry(*learner.ema));
  entries.push_back(buffersEntry(*learner.model));
  entries.push_back(commEntry(*learner.reducer, device));
  entries.push_back(rngEntry(device));
  return entries;
}

}  // namespace exprun
