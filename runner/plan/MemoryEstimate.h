// Purpose: what one training step's memory is made of, measured, and what it would be on a card
// this machine does not have. measureStepMemory runs the trainer's own step (TrainStep on the
// trainer's own parts: precision, channels_last, accumulation, activation checkpointing, label
// smoothing, EMA, comm buckets and hook state all as the spec says) with random inputs of the data
// plugin's declared shape (no dataset needed) and splits the peak of live tensor bytes into
// parameters, gradients, optimizer state, EMA, comm hook state and activations + temporaries (the
// peak minus everything that lives between steps). On the CPU the bytes come from the tracking
// allocator (metrics/CpuMemory.h), on CUDA from the caching allocator's statistics.
//
// The activations grow linearly with the micro-batch past a fixed part (the tensors' shapes
// scale with it; nothing else does): fitStepMemory measures two or three small micro-batches and
// extrapolates. planForCard turns that into a plan for N cards of a given memory: every candidate
// micro-batch's estimated bytes, and the largest micro-batch + accumulation that keep the global
// batch over the N cards and fit, with an allowance for what the CPU cannot see (CUDA context,
// cuDNN/cuBLAS workspaces, caching-allocator fragmentation). fp16 is measured as bf16 on the CPU
// (same element size; the CPU's autocast casts the same convolution and matrix ops).
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
// allocated by backward) or Dist::alone() for data parallelism (gradients in comm buckets). On the
// CPU it installs the tracking allocator. Throws c10::OutOfMemoryError on CUDA out-of-memory.
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

// What a CUDA card holds beside one step's own tensors (StepMemory) at a micro-batch, in allocator
// bytes: the input on its way to the step and the graph's second pool.
struct CardExtras {
  std::int64_t dataResident = 0;  // kept by the data plugin for the run (synthetic's pool)
  std::int64_t batchesAhead = 0;  // train.copy_ahead batches copied ahead of the step (uint8 where train.input makes them so)
  std::int64_t decode = 0;        // one batch's device work while it runs (data.decode: gpu's decode buffers)
  std::int64_t graphEager = 0;    // train.cuda_graph: an eager step's activations beside the graph's pool
  std::string notCounted;         // what could not be counted, and why ("" when nothing)
  std::int64_t input() const { return dataResident + batchesAhead + decode; }
  std::int64_t total() const { return input() + graphEager; }
  nlohmann::json toJson() const;
};
// CardExtras at micro-batch `micro`, for a step whose activations + temporaries are `activations`:
// batches ahead from the spec and the data plugin's input format (train.input auto: uint8 where it
// makes them), the plugin's own holdings from `data` (loaded; null: not counted, `why` says why),
// and with train.cuda_graph the activations once more: the graph's replays use its private pool,
// and an epoch's smaller last batch runs eagerly beside it in the ordinary pool (an upper bound:
// that batch is smaller).
CardExtras cardExtras(const Spec& spec, const Dataset* data, std::int64_t micro, std::int64_t activations,
                      const std::string& why = "");

// The spec's data plugin, loaded, for the planners to count its card memory (cardExtras); null,
// with `why` set and a warning, where its data does not load here.
std::shared_ptr<Dataset> loadedForPlan(const Spec& spec, std::string* why);

// What the CPU cannot see of a CUDA card's use, added to the estimated allocated bytes.
struct CardAllowance {
  std::int64_t context = 512LL << 20;    // CUDA context, cuDNN/cuBLAS kernels and handles (not allocator memory)
  // cuDNN convolution / cuBLAS workspaces: allocated through the caching allocator during the step,
  // which the CPU's step does not (2026-12-04, H200, ResNet-50 bf16: the card's allocated peak was
  // 0.10-0.15 GiB above the CPU's estimate at every micro-batch from 1 to 128).
  std::int64_t workspace = 256LL << 20;
  double fragmentation = 0.10;           // caching allocator: reserved beyond allocated, as a fraction of it
};

struct CardTarget {
  std::string device = "cuda";
  std::int64_t deviceMemory = 0;  // bytes per card
  int gpus = 1;
  std::int64_t globalBatch = 0;   // 0: the spec's (train.global_batch, else batch_size × gpus × accumulate)
  std::vector<std::int64_t> probeBatches{8, 16, 32};
  CardAllowance allowance;
};

struct CardPlan {
  CardTarget target;
  std::string precision;       // the spec's precision (what the card would run)
  std::string measuredAs;      // the precision measured on this machine
  std::int64_t perCard = 0;    // global batch / gpus
  MemoryCurve curve;
  struct Row {
    std::int64_t micro = 0;
    StepMemory estimate;       // allocated bytes by holder at this micro-batch
    CardExtras extras;         // the input and the graph's pool beside the step
    std::int64_t allocated = 0;  // the caching allocator's peak: estimate.peak + workspace + extras
    std::int64_t card = 0;     // allocated × (1 + fragmentation) + context
    bool fits = false;
  };
  std::vector<Row> rows;       // the candidate micro-batches (powers of two, the per-card batch, the choice)
  Spec spec;                   // the spec planned for
  std::shared_ptr<const Dataset> data;  // the data plugin whose card memory counts (null: not counted, `dataWhy`)
  std::string dataWhy;
  Row rowAt(std::int64_t micro) const;  // the estimate at any micro-batch
  std::int64_t microBatch = 0;  // the largest micro-batch that divides the per-card batch and fits (0: none)
  std::int64_t accumulate = 0;
  Row chosen() const;           // the row of microBatch (rows must hold it)
  nlohmann::json toJson() const;
  std::string table() const;
};

// The card's bytes for the tensors' peak `tensorPeak` (the step's and what the card holds beside
// it, without the workspaces): (tensorPeak + workspace) × (1 + fragmentation) + context.
std::int64_t cardBytes(std::int64_t tensorPeak, const CardAllowance& a);

// Measures on this machine's CPU and plans for `target` (throws std::invalid_argument for a
// global batch the cards cannot divide, or an unknown target device). `data`: the spec's data
// plugin, loaded, for its card memory (null: loaded here where it can be; else not counted, said
// in the plan).
CardPlan planForCard(const Spec& spec, const CardTarget& target, std::shared_ptr<const Dataset> data = nullptr);

}  // namespace exprun
