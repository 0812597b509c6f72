// Purpose: what a checkpoint holds, as named entries that save and restore themselves (as
// torchtitan's Stateful objects): the model, the optimizer, the loss scaler, the EMA, this rank's
// buffers (batch-norm statistics), the comm hook's state and the random generators. The checkpoint
// (Checkpoint.cpp) writes and reads whatever entries the run has, in this order; a new part of the
// training state is one more entry here. The run's position, history and methods' states live in
// meta.json and the rank file's "meta" (Meta.h).
// Rule: an entry's archive keys ("model/<name>", "optimizer", "scaler/scale", "ema/<i>",
// "buffers/<name>", "comm/<name>", "rng") never change, so existing checkpoints load unchanged.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runner/step/Learner.h"
#include "runner/util/TorchPch.h"

namespace exprun {

// Which of a checkpoint's files hold an entry: state.bin (rank 0's, the same for every rank), the
// rank's own rank-NNNNN.bin, or both (the EMA: each rank's own, rank 0's for a run on another
// number of ranks).
enum class EntryFile { Shared, Rank, Both };

struct StateEntry {
  std::string name;
  EntryFile file = EntryFile::Shared;
  std::function<void(torch::serialize::OutputArchive&)> save;
  std::function<void(torch::serialize::InputArchive&)> load;  // throws CheckpointError on a mismatch
};

// The entries of a run with this learner on `device`, in the order they are written.
std::vector<StateEntry> stateEntries(Learner& learner, const torch::Device& device);

// A sharded optimizer's state (distributed.shard) for this rank's rows, from the rank files of the
// ranks that saved it (`pieces`: this rank's own on the same world size, every one on another).
// Throws CheckpointError when they do not cover a parameter's rows.
void restoreShardedOptimizer(Learner& learner, std::vector<torch::serialize::InputArchive*>& pieces);

}  // namespace exprun
