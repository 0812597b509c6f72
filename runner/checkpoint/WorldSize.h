// Purpose: resuming a checkpoint on another number of ranks. The global batch is kept by changing
// the accumulation (the micro-batch stays); where it cannot be, the world sizes that keep it are
// listed, or with --force the global batch changes and the learning rate follows the spec's
// scaling rule. Every rank starts from rank 0's position; the epoch's meters so far are the old
// ranks' totals; the epoch continues at the same sample of its order, re-sharded over the new
// ranks; per-rank random streams are re-derived from (seed, step, rank); a comm hook's per-rank
// state (PowerSGD) starts afresh.
#pragma once

#include "runner/checkpoint/Checkpoint.h"

namespace exprun {

// The spec to resume `files` with on `worldSize` ranks. The same world size as a run that never
// changed it: `spec`. Otherwise (another world size, or a checkpoint of a run resumed on another
// one): train.accumulate set so that the checkpoint's global batch is kept when worldSize x
// micro-batch divides it; otherwise CheckpointError lists the world sizes that keep it, unless
// `force` (then the global batch changes). batch_size: auto: the memory planner chooses, for
// train.global_batch, as always.
Spec specForWorldSize(const CheckpointFiles& files, const Spec& spec, int worldSize, bool force);

// Checkpoints written before resumption on another number of ranks lack rank 0's progress and the
// epoch's totals: CheckpointError.
void requireWorldSizeChangeable(const CheckpointFiles& files);

// Older checkpoints record no sample position: world size x micro-batch x micro-batches consumed.
void deriveSample(TrainPosition& pos, const CheckpointFiles& files);

// This rank's progress on the new world (`rank` of `worldSize`, batching `now`), its random
// streams re-seeded.
Progress progressForNewWorld(const CheckpointFiles& files, int rank, const Spec& spec, const BatchShape& now,
                             int worldSize, const torch::Device& device);

}  // namespace exprun
