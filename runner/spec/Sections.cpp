// Purpose: the option tables of the fixed sections and the one table of a spec's sections.
#include "runner/spec/Sections.h"

#include "runner/spec/Catalog.h"
#include "runner/spec/Spec.h"

namespace exprun {

const char* precisionName(Precision p) {
  switch (p) {
    case Precision::Fp32:
      return "fp32";
    case Precision::Bf16:
      return "bf16";
    case Precision::Fp16:
      return "fp16";
  }
  return "?";
}

namespace {

const OptionTable<TrainLength>& lengthOptions() {
  using T = TrainLength;
  static const OptionTable<T> table{{
      field("epochs", &T::epochs, "passes over the training set", {1}),
      field("max_steps", &T::maxSteps, "stop after this many optimizer steps in total (0: no limit)", {0}),
  }};
  return table;
}

const OptionTable<Batching>& batchingOptions() {
  using T = Batching;
  static const OptionTable<T> table{{
      intOrAuto(specKey::kBatchSize, &T::batchSize,
                "samples per micro-batch and process (auto or 0: planned from memory_budget and global_batch)", {0}),
      field("global_batch", &T::globalBatch, "target global batch for batch_size: auto", {0}),
      field("memory_budget", &T::memoryBudget, "per-process memory budget for batch_size: auto (e.g. 20GiB)"),
      field(specKey::kAccumulate, &T::accumulate,
            "micro-batches per optimizer step (global batch = batch x processes x accumulate)", {1}),
      field("repeated_augmentation", &T::repeatedAugmentation,
            "repeated augmentation (DeiT's RASampler): every sample this many times an epoch, each copy augmented "
            "apart, on different ranks; the epoch keeps floor(n/256)*256 samples (1: off)",
            {1, 16}),
  }};
  return table;
}

const OptionTable<Numerics>& numericsOptions() {
  using T = Numerics;
  static const OptionTable<T> table{{
      choice(specKey::kPrecision, &T::precision,
             {{"fp32", Precision::Fp32}, {"bf16", Precision::Bf16}, {"fp16", Precision::Fp16}},
             "autocast precision (fp16 adds dynamic loss scaling)"),
      field("channels_last", &T::channelsLast, "NHWC memory format for 4-d weights and inputs"),
      field(specKey::kActivationCheckpointing, &T::activationCheckpointing,
            "model stages recomputed in backward instead of stored ([all], or names such as [layer3, layer4])"),
      field("activation_checkpointing_every", &T::activationCheckpointingEvery,
            "recompute each selected stage in segments of this many blocks (1: block by block, as timm's "
            "checkpoint_seq); 0: the whole stage at once",
            {0}),
  }};
  return table;
}

const OptionTable<StepRules>& stepRulesOptions() {
  using T = StepRules;
  static const OptionTable<T> table{{
      field("label_smoothing", &T::labelSmoothing, "label smoothing of the cross-entropy loss", {0.0, 0.999}),
      field("clip_grad_norm", &T::clipGradNorm, "clip the global gradient L2 norm to this (0: off)", {0.0}),
      field("clip_grad_value", &T::clipGradValue, "clip every gradient element to +-this (0: off)", {0.0}),
      field("ema_decay", &T::emaDecay, "exponential moving average of the weights with this decay (0: off)",
            {0.0, 0.999999}),
      field("ema_every", &T::emaEvery, "update the EMA every N optimizer steps", {1}),
      choice("on_nonfinite", &T::onNonFinite, {{"abort", NonFinitePolicy::Abort}, {"skip", NonFinitePolicy::Skip}},
             "fp32: a non-finite loss or gradient stops the run (naming the step and tensor) or skips the step"),
  }};
  return table;
}

const OptionTable<Evaluation>& evaluationOptions() {
  using T = Evaluation;
  static const OptionTable<T> table{{
      field("eval", &T::eval, "evaluate on the test split after every epoch"),
      field("eval_batch_size", &T::evalBatchSize, "samples per evaluation batch", {1}),
      field("eval_every_steps", &T::evalEverySteps, "also evaluate every N optimizer steps (0: at epoch ends only)", {0}),
      field("target_top1", &T::targetTop1, "stop at the first evaluation with val Top-1 >= this, percent (0: off)",
            {0.0, 100.0}),
      field("target_top5", &T::targetTop5, "stop at the first evaluation with val Top-5 >= this, percent (0: off)",
            {0.0, 100.0}),
      field("target_val_loss", &T::targetValLoss, "stop at the first evaluation with val loss <= this (0: off)", {0.0}),
      field("stop_at_target", &T::stopAtTarget, "stop when the target is reached (false: record the time and train on)"),
  }};
  return table;
}

const OptionTable<Execution>& executionOptions() {
  using T = Execution;
  static const OptionTable<T> table{{
      choice("device", &T::device,
             {{"auto", DeviceChoice::Auto}, {"cpu", DeviceChoice::Cpu}, {"cuda", DeviceChoice::Cuda}},
             "where to train (auto: cuda when available)"),
      field("threads", &T::threads, "intra-op CPU threads (0: all cores)", {0, 1024}),
      field("workers", &T::workers, "background threads preparing batches (0: in the training thread)", {0, 64}),
      field("prefetch", &T::prefetch, "batches prepared ahead of the trainer", {1, 1024}),
      choice("input", &T::input, {{"auto", InputFormat::Auto}, {"float", InputFormat::Float}, {"uint8", InputFormat::Uint8}},
             "how batches cross to the device: float normalised by the data plugin, uint8 pixels normalised there (a "
             "quarter of the bytes), auto: uint8 on CUDA where the data plugin can make them (uint8 and auto: not yet "
             "run on a GPU)"),
      field("copy_ahead", &T::copyAhead,
            "CUDA: batches copied to the device ahead of the step, on a stream of their own (0: copied when due; more: "
            "not yet run on a GPU)",
            {0, 64}),
      field("cuda_graph", &T::cudaGraph,
            "CUDA: capture the whole step (forward, backward, optimizer) in a CUDA graph once its shapes are fixed and "
            "replay it, one launch a step (one process, no methods, fused optimizer step)"),
      field("log_every", &T::logEvery, "progress line every N steps (0: none)", {0}),
      field("largest_resolution", &T::largestResolution,
            "methods that change the training resolution (progressive_resize) hold its largest: what exprun tune's "
            "trials and the memory planner measure"),
  }};
  return table;
}

}  // namespace

const OptionTable<TrainConfig>& trainOptions() {
  using T = TrainConfig;
  static const OptionTable<T> table{concat<T>({
      nested(&T::length, lengthOptions()),
      nested(&T::batching, batchingOptions()),
      nested(&T::numerics, numericsOptions()),
      nested(&T::rules, stepRulesOptions()),
      nested(&T::evaluation, evaluationOptions()),
      nested(&T::execution, executionOptions()),
  })};
  return table;
}

const OptionTable<DistributedConfig>& distributedOptions() {
  using T = DistributedConfig;
  static const OptionTable<T> table{{
      oneOf("backend", &T::backend, {"auto", "gloo", "nccl"},
            "process-group backend (auto: nccl on CUDA, gloo on CPU)"),
      field("timeout_s", &T::timeoutS, "seconds before a collective or the rendezvous gives up", {1.0}),
      field("interface", &T::interface,
            "network interface Gloo binds to (default: the one the route to MASTER_ADDR leaves by; "
            "GLOO_SOCKET_IFNAME also chooses)"),
      oneOf("shard", &T::shard, {"none", "optimizer", "gradients"},
            "what each rank holds only its share of (ZeRO stages; FSDP2's layout: each parameter's rows split "
            "over the ranks): none (DDP: every rank holds everything), optimizer (stage 1: the optimizer's state; "
            "gradients reduce-scattered, parameters all-gathered after the step), gradients (stage 2: the "
            "gradients too, freed after backward); parameters (stage 3) is not built yet"),
  }};
  return table;
}

const OptionTable<CheckpointConfig>& checkpointOptions() {
  using T = CheckpointConfig;
  static const OptionTable<T> table{{
      field("every_steps", &T::everySteps, "save a checkpoint every N optimizer steps (0: off)", {0}),
      field("every_epochs", &T::everyEpochs, "save a checkpoint after every N epochs (0: off)", {0}),
      field("keep", &T::keep, "keep the K newest checkpoints (0: all)", {0}),
      field("dir", &T::dir, "checkpoint folder (default: <output dir>/<name>.ckpt)"),
  }};
  return table;
}

const OptionTable<MlflowConfig>& mlflowOptions() {
  using T = MlflowConfig;
  static const OptionTable<T> table{{
      field("tracking_uri", &T::trackingUri,
            "MLflow tracking server, http(s)://host:port (empty: no MLflow); credentials are never logged"),
      field("experiment", &T::experiment, "MLflow experiment (created when missing)"),
      field("run_name", &T::runName, "MLflow run name (empty: the spec's name)"),
      field("log_every", &T::logEvery, "send the per-step metrics every N optimizer steps", {1}),
  }};
  return table;
}

const OptionTable<ProfileConfig>& profileOptions() {
  using T = ProfileConfig;
  static const OptionTable<T> table{{
      field("start_step", &T::startStep, "the first profiled optimizer step (0-based, from the run's start)", {0}),
      field("steps", &T::steps, "optimizer steps profiled (0: no profile)", {0, 1000}),
      field("gzip", &T::gzip, "write the trace gzipped (<name>.trace.json.gz)"),
  }};
  return table;
}

const OptionTable<OutputConfig>& outputOptions() {
  using T = OutputConfig;
  static const OptionTable<T> table{{
      field("dir", &T::dir, "directory of the result file <name>.json"),
      field("save_weights", &T::saveWeights, "also write the final weights to <dir>/<name>.weights.pt (rank 0)"),
      field("tensorboard", &T::tensorboard, "TensorBoard event files in <dir>/tensorboard/<name>/ (rank 0)"),
      field("steps_csv", &T::stepsCsv, "per-step metrics in <dir>/<name>.steps.csv (rank 0)"),
      field("step_breakdown", &T::stepBreakdown,
            "the per-step CSV also has each phase's seconds (<phase>_s columns; on a GPU: waits for the device once a step)"),
  }};
  return table;
}

namespace {

// A plugin node: `node(spec)` reaches its Options (a generic lambda, for a const Spec too).
template <class Node>
SectionInfo pluginSection(std::string path, std::string kind, std::string defaultType, Node node) {
  SectionInfo s;
  s.path = std::move(path);
  s.pluginKind = std::move(kind);
  s.defaultType = std::move(defaultType);
  s.get = [node](const Spec& spec) { return node(spec); };
  s.set = [node](Spec& spec, const Options& o) { node(spec) = o; };
  return s;
}

// The task section: without a type, the one the data plugin implies (its PluginInfo::impliedTask).
SectionInfo impliedBy(SectionInfo task) {
  task.defaultTypeFor = [fallback = task.defaultType](const Spec& spec) {
    const PluginInfo* data = Catalog::instance().find("data", spec.data.type());
    return data && !data->impliedTask.empty() ? data->impliedTask : fallback;
  };
  return task;
}

// A fixed section: the typed struct `member(spec)` reaches and its option table.
template <class T, class Member>
SectionInfo fixedSection(std::string path, const OptionTable<T>& table, Member member) {
  SectionInfo s;
  s.path = std::move(path);
  s.decls = table.decls();
  s.get = [&table, member](const Spec& spec) { return table.write(member(spec)); };
  // Nested sections live inside their parent's struct: setting the parent leaves them as they are.
  s.set = [&table, member](Spec& spec, const Options& o) { table.readInto(member(spec), o); };
  return s;
}

}  // namespace

const std::vector<SectionInfo>& specSections() {
  // clang-format off
  static const std::vector<SectionInfo> sections{
      pluginSection("model", "model", "", [](auto& s) -> auto& { return s.model; }),
      pluginSection("data", "data", "", [](auto& s) -> auto& { return s.data; }),
      impliedBy(pluginSection("task", "task", "classification", [](auto& s) -> auto& { return s.task; })),
      pluginSection("optimizer", "optimizer", "sgd", [](auto& s) -> auto& { return s.optimizer; }),
      pluginSection("scheduler", "scheduler", "constant", [](auto& s) -> auto& { return s.scheduler; }),
      fixedSection(specKey::kTrain, trainOptions(), [](auto& s) -> auto& { return s.train; }),
      fixedSection("train.profile", profileOptions(), [](auto& s) -> auto& { return s.train.profile; }),
      fixedSection("output", outputOptions(), [](auto& s) -> auto& { return s.output; }),
      fixedSection("output.checkpoint", checkpointOptions(), [](auto& s) -> auto& { return s.output.checkpoint; }),
      fixedSection("output.mlflow", mlflowOptions(), [](auto& s) -> auto& { return s.output.mlflow; }),
      fixedSection("distributed", distributedOptions(), [](auto& s) -> auto& { return s.distributed; }),
      pluginSection("distributed.comm", "comm", "allreduce", [](auto& s) -> auto& { return s.distributed.comm; }),
  };
  // clang-format on
  return sections;
}

}  // namespace exprun
