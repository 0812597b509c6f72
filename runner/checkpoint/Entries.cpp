// Purpose: the checkpoint's named entries (see Entries.h).
#include "runner/checkpoint/Entries.h"

#include <algorithm>
#include <optional>

#include "runner/checkpoint/Checkpoint.h"
#include "runner/checkpoint/CheckpointStore.h"

namespace exprun {
namespace {

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

// Sharded (distributed.shard): each rank writes the state of its rows of each parameter into its
// own file, as "optimizer_shard/<name>" (the state's own archive) and ".../rows" (first row,
// count, the parameter's rows). Restoring assembles this rank's rows from the pieces of every rank
// that saved (another world size: every rank file), state field by state field: a field shaped as
// the piece's rows is joined row-wise and cut to this rank's rows, any other (a step count) is
// the first piece's.
StateEntry shardedOptimizerEntry(Learner& learner) {
  return {"optimizer_shard", EntryFile::Rank,
          [&learner](torch::serialize::OutputArchive& a) {
            torch::optim::Optimizer& o = learner.optimizer->torchOptimizer();
            torch::serialize::OutputArchive settled;  // its save settles counts kept on the device (FusedAdamW)
            o.save(settled);
            const NamedParameters shards = learner.reducer->shards();
            for (std::size_t k = 0; k < shards.size(); ++k) {
              const auto& [name, shard] = std::pair(shards.keys()[k], shards.values()[k]);
              const auto [first, count] = learner.reducer->shardRows(k);
              a.write("optimizer_shard/" + name + "/rows",
                      torch::tensor({first, count, learner.reducer->parameterRows(k)}, torch::kInt64), true);
              auto it = o.state().find(shard.unsafeGetTensorImpl());
              if (it == o.state().end()) continue;  // no state yet (never stepped)
              torch::serialize::OutputArchive st;  // kept as bytes: a sub-archive's name cannot hold the dots of a parameter's
              it->second->serialize(st);
              a.write("optimizer_shard/" + name, bytesTensor(archiveBytes(st)), true);
            }
          },
          [&learner](torch::serialize::InputArchive& a) {
            std::vector<torch::serialize::InputArchive*> one{&a};
            restoreShardedOptimizer(learner, one);
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
            a.write("rng", bytesTensor(tensorBytes(generatorState(generatorFor(device)))), true);
            if (device.is_cuda())
              a.write("rng_cpu", bytesTensor(tensorBytes(generatorState(at::detail::getDefaultCPUGenerator()))), true);
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

// One rank's saved rows of a parameter's optimizer state: first row, count, the state's archive
// (none: that rank never stepped it).
struct Piece {
  std::int64_t first = 0, count = 0;
  std::optional<torch::serialize::InputArchive> state;
};

// The pieces of parameter `name` (`rows` rows) in the rank files `pieces`, in row order.
std::vector<Piece> piecesOf(std::vector<torch::serialize::InputArchive*>& pieces, const std::string& name,
                            std::int64_t rows) {
  const std::string key = "optimizer_shard/" + name;
  std::vector<Piece> found;
  for (auto* a : pieces) {
    torch::Tensor r;
    if (!a->try_read(key + "/rows", r, true))
      throw CheckpointError("checkpoint: no optimizer rows of '" + name + "' (saved without distributed.shard?)");
    if (r.numel() != 3 || r[2].item<std::int64_t>() != rows)
      throw CheckpointError("checkpoint: the optimizer rows of '" + name + "' do not fit the model's " +
                            std::to_string(rows) + " (a different model?)");
    Piece p;
    p.first = r[0].item<std::int64_t>();
    p.count = r[1].item<std::int64_t>();
    torch::Tensor bytes;
    if (a->try_read(key, bytes, true)) p.state = archiveFrom(tensorBytes(bytes));
    found.push_back(std::move(p));
  }
  std::sort(found.begin(), found.end(), [](const Piece& x, const Piece& y) { return x.first < y.first; });
  return found;
}

}  // namespace

void restoreShardedOptimizer(Learner& learner, std::vector<torch::serialize::InputArchive*>& pieces) {
  torch::optim::Optimizer& o = learner.optimizer->torchOptimizer();
  const NamedParameters shards = learner.reducer->shards();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shards.keys()[k];  // keys() and values() return copies
    const torch::Tensor shard = shards.values()[k];
    const std::int64_t rows = learner.reducer->parameterRows(k);
    std::vector<Piece> found = piecesOf(pieces, name, rows);
    const bool any = std::any_of(found.begin(), found.end(), [](const Piece& p) { return p.state.has_value(); });
    if (!any) continue;  // never stepped
    const auto [first, count] = learner.reducer->shardRows(k);
    Piece* head = nullptr;
    std::int64_t next = 0;
    for (Piece& p : found) {
      if (p.count == 0) continue;
      if (!p.state || p.first != next)
        throw CheckpointError("checkpoint: the optimizer state of '" + name + "' lacks rows from " + std::to_string(next));
      if (!head) head = &p;
      next = p.first + p.count;
    }
    if (!head || next != rows)
      throw CheckpointError("checkpoint: the optimizer state of '" + name + "' does not cover its rows");
    torch::serialize::OutputArchive mine;
    for (const std::string& field : head->state->keys()) {
      c10::IValue v;
      head->state->read(field, v);
      const bool rowShaped = v.isTensor() && v.toTensor().dim() == std::max<std::int64_t>(shard.dim(), 1) &&
                             v.toTensor().size(0) == head->count;
      if (!rowShaped) {
        mine.write(field, v);
        continue;
      }
      std::vector<torch::Tensor> parts;
      for (Piece& p : found) {
        if (p.count == 0) continue;
        c10::IValue pv;
        p.state->read(field, pv);
        parts.push_back(pv.toTensor());
      }
      mine.write(field, torch::cat(parts).narrow(0, first, count).clone());
    }
    torch::serialize::InputArchive in = archiveFrom(archiveBytes(mine));  // a state reads only an input archive
    std::unique_ptr<torch::optim::OptimizerParamState> st = learner.optimizer->emptyState();
    st->serialize(in);
    o.state()[shard.unsafeGetTensorImpl()] = std::move(st);
  }
  learner.optimizer->stateToParameters();
}

std::vector<StateEntry> stateEntries(Learner& learner, const torch::Device& device) {
  std::vector<StateEntry> entries{modelEntry(*learner.model)};
  if (learner.reducer->shardedState())
    entries.push_back(shardedOptimizerEntry(learner));
  else
    entries.push_back(optimizerEntry(*learner.optimizer));
  entries.push_back(scalerEntry(*learner.scaler));
  if (learner.ema) entries.push_back(emaEntry(*learner.ema));
  entries.push_back(buffersEntry(*learner.model));
  entries.push_back(commEntry(*learner.reducer, device));
  entries.push_back(rngEntry(device));
  return entries;
}

}  // namespace exprun
