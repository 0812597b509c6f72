// Purpose: what one training step's memory is made of, measured, and what it would be on a device
// this machine does not have. measureStepMemory splits the peak of live tensor bytes by holder
// (StepMemory); fitStepMemory extrapolates the activations, which grow linearly with the
// micro-batch; planForDevice turns that into the largest micro-batch + accumulation that fit.
// Rule: what is measured is the trainer's own step on its own parts, as the spec sets them up; what
// the CPU cannot see of a CUDA device is added as an explicit allowance (DeviceAllowance).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runner/api/Data.h"
#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"

namespace exprun {

// One step's memory by holder, in bytes. Everything but `peak` lives between steps.
struct StepMemory {
  std::int64_t batch = 0;
  std::int64_t parameters = 0;  // parameters and buffers
  std::int64_t gradients = 0;   // the .grad storages (with several processes: the comm buckets they view)
  std::int64_t optimizer = 0;   // optimizer state, with the loss scaler's and the step's few scalars
  std::int64_t ema = 0;         // the EMA copy
  std::int64_t commState = 0;   // the comm hook's own state (PowerSGD's factors and error feedback)
  std::int64_t peak = 0;        // peak bytes of live tensors during the steps
  std::int64_t processPeak = -1;  // the device's peak as the planner reads it (CPU: resident set; CUDA: allocated)
  std::int64_t persistent() const { return parameters + gradients + optimizer + ema + commState; }
  std::int64_t activations() const { return peak - persistent(); }  // activations and temporaries
  nlohmann::json toJson() const;
};

// Three steps of the spec's training at micro-batch `batch` on `device` (the first creates the
// optimizer state; the peak is over all three; one micro-batch per step, as accumulating more adds
// to gradients that exist already), on `group`: Dist() for one process (gradients
// allocated by backward) or Dist::alone() for data parallelism (gradients in comm buckets). It runs
// TrainStep on the trainer's own parts (precision, channels_last, accumulation, activation
// checkpointing, label smoothing, EMA, comm buckets and hook state all as the spec says) with random
// inputs of the data plugin's declared shape, so no dataset is needed. The bytes come from the
// tracking allocator on the CPU (runner/metrics/CpuMemory.h, installed here) and from the caching
// allocator's statistics on CUDA. Throws c10::OutOfMemoryError on CUDA out-of-memory.
StepMemory measureStepMemory(const Spec& spec, std::int64_t batch, Dist& group, const torch::Device& device);

// Activations + temporaries ≈ max(floor, fixed + perSample × micro-batch): linear in the micro-batch
// (least squares over the measurements from `linearFrom` on), above a floor that does not grow with
// it (at small batches the largest gradient's temporaries can outweigh the activations: the least
// of the measurements below `linearFrom`, 0 when there are none). The
// persistent parts are the largest measurement's.
struct MemoryCurve {
  std::vector<StepMemory> measured;
  double fixed = 0, perSample = 0, floor = 0;
  std::int64_t linearFrom = 0;  // the first micro-batch of the linear fit
  bool linear = false;          // the last three measurements lie on one line (slopes within 5 %)
  StepMemory at(std::int64_t batch) const;
};
// Measures `batches`, then doubles the largest until the last three lie on one line or the batch
// would pass max(maxBatch, the largest given), and fits.
MemoryCurve fitStepMemory(const Spec& spec, const std::vector<std::int64_t>& batches, Dist& group,
                          const torch::Device& device, std::int64_t maxBatch = 64);

// What a CUDA device holds beside one step's own tensors (StepMemory) at a micro-batch, in allocator
// bytes: the input on its way to the step and the graph's second pool.
struct DeviceExtras {
  std::int64_t dataResident = 0;  // kept by the data plugin for the run (synthetic's pool)
  std::int64_t batchesAhead = 0;  // train.copy_ahead batches copied ahead of the step (uint8 where train.input makes them so)
  std::int64_t decode = 0;        // one batch's device work while it runs (data.decode: gpu's decode buffers)
  std::int64_t graphEager = 0;    // train.cuda_graph: an eager step's activations beside the graph's pool
  std::string notCounted;         // what could not be counted, and why ("" when nothing)
  std::int64_t input() const { return dataResident + batchesAhead + decode; }
  std::int64_t total() const { return input() + graphEager; }
  nlohmann::json toJson() const;
};
// DeviceExtras at micro-batch `micro`, for a step whose activations + temporaries are `activations`:
// batches ahead from the spec and the data plugin's input format (train.input auto: uint8 where it
// makes them), the plugin's own holdings from `data` (loaded; null: not counted, `why` says why),
// and with train.cuda_graph the activations once more: the graph's replays use its private pool,
// and an epoch's smaller last batch runs eagerly beside it in the ordinary pool (an upper bound:
// that batch is smaller).
DeviceExtras deviceExtras(const Spec& spec, const Dataset* data, std::int64_t micro, std::int64_t activations,
                      const std::string& why = "");

// The spec's data plugin, loaded, for the planners to count its device memory (deviceExtras); null,
// with `why` set and a warning, where its data does not load here.
std::shared_ptr<Dataset> loadedForPlan(const Spec& spec, std::string* why);

// What the CPU cannot see of a CUDA device's use, added to the estimated allocated bytes.
struct DeviceAllowance {
  std::int64_t context = 512LL << 20;    // CUDA context, cuDNN/cuBLAS kernels and handles (not allocator memory)
  // cuDNN convolution / cuBLAS workspaces: allocated through the caching allocator during the step,
  // which the CPU's step does not (the measurement behind this default: docs/memory.md).
  std::int64_t workspace = 256LL << 20;
  double fragmentation = 0.10;           // caching allocator: reserved beyond allocated, as a fraction of it
};

struct DeviceTarget {
  std::string device = "cuda";
  std::int64_t deviceMemory = 0;  // bytes per device
  int gpus = 1;
  std::int64_t globalBatch = 0;   // 0: the spec's (train.global_batch, else batch_size × gpus × accumulate)
  std::vector<std::int64_t> probeBatches{8, 16, 32};
  DeviceAllowance allowance;
};

struct DevicePlan {
  DeviceTarget target;
  std::string precision;       // the spec's precision (what the device would run)
  std::string measuredAs;      // the precision measured on this machine
  std::int64_t perDevice = 0;    // global batch / gpus
  MemoryCurve curve;
  struct Row {
    std::int64_t micro = 0;
    StepMemory estimate;       // allocated bytes by holder at this micro-batch
    DeviceExtras extras;         // the input and the graph's pool beside the step
    std::int64_t allocated = 0;  // the caching allocator's peak: estimate.peak + workspace + extras
    std::int64_t device = 0;     // allocated × (1 + fragmentation) + context
    bool fits = false;
  };
  std::vector<Row> rows;       // the candidate micro-batches (powers of two, the per-device batch, the choice)
  Spec spec;                   // the spec planned for
  double bucketBytes = 0;      // the comm hook's gradient buckets (distributed.shard's working set: shardedOver)
  std::shared_ptr<const Dataset> data;  // the data plugin whose device memory counts (null: not counted, `dataWhy`)
  std::string dataWhy;
  Row rowAt(std::int64_t micro) const;  // the estimate at any micro-batch
  std::int64_t microBatch = 0;  // the largest micro-batch that divides the per-device batch and fits (0: none)
  std::int64_t accumulate = 0;
  Row chosen() const;           // the row of microBatch (rows must hold it)
  nlohmann::json toJson() const;
  std::string table() const;
};

// A step under distributed.shard on `gpus` devices, from DDP's measured one (`ddp`): the optimizer's
// state (optimizer, gradients) and the gradients (gradients) divided over the devices (ZeRO's
// 8ψ/N and 4ψ/N), and the collectives' working set added to the peak (a bucket's rank-major copy and
// the gather's buffers: two buckets of `bucketBytes`, at most the gradients' bytes).
StepMemory shardedOver(StepMemory ddp, const std::string& shard, int gpus, double bucketBytes);

// The device's bytes for the tensors' peak `tensorPeak` (the step's and what the device holds beside
// it, without the workspaces): (tensorPeak + workspace) × (1 + fragmentation) + context.
std::int64_t deviceBytes(std::int64_t tensorPeak, const DeviceAllowance& a);

// Measures on this machine's CPU and plans for `target` over N devices of a given memory: every
// candidate micro-batch's estimated bytes, and the largest micro-batch + accumulation that keep the
// global batch and fit. fp16 is measured as bf16 on the CPU (the same element size; the CPU's
// autocast casts the same convolution and matrix ops). Throws std::invalid_argument for a
// global batch the devices cannot divide, or an unknown target device. `data`: the spec's data
// plugin, loaded, for its device memory (null: loaded here where it can be; else not counted, said
// in the plan).
DevicePlan planForDevice(const Spec& spec, const DeviceTarget& target, std::shared_ptr<const Dataset> data = nullptr);

}  // namespace exprun
