// Purpose: the eight plugin kinds in one place — what a plugin of each kind builds, and from what.
// A kind is a tag type for Registry/Register/build (runner/api/Registry.h); the interfaces
// the products implement are in runner/api/Model.h (Model, Dataset), runner/api/Schedule.h
// (LrSchedule), runner/api/CommHook.h (CommHook), runner/api/Optimizer.h (Optimizer),
// runner/api/Pruner.h (Pruner), runner/api/Method.h (Method) and
// runner/api/Task.h (Task).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runner/api/Registry.h"
#include "runner/spec/Options.h"

namespace at {
class Tensor;
}
namespace torch {
template <typename Key, typename Value>
class OrderedDict;
}

namespace exprun {

class Model;
class Dataset;
struct DataInfo;
class LrSchedule;
struct ScheduleContext;
class CommHook;
class Pruner;
class Optimizer;
class Method;
class Task;

// What an optimizer steps: the model's trainable parameters by name, or under sharding
// (distributed.shard) this rank's rows of each (runner/step/GradReducer.h), named as their parameter.
using NamedParameters = torch::OrderedDict<std::string, at::Tensor>;

// A network for the data's shape (in_channels / num_classes of 0 come from the data).
struct ModelKind {
  static constexpr const char* kName = "model";
  using Factory = std::function<std::shared_ptr<Model>(const Options&, const DataInfo&)>;
};

// A dataset with a training and a test split.
struct DataKind {
  static constexpr const char* kName = "data";
  using Factory = std::function<std::unique_ptr<Dataset>(const Options&)>;
};

// An optimizer over named parameters (the model's trainable ones, or this rank's shards of them),
// with the learning rate already scaled to the global batch.
struct OptimizerKind {
  static constexpr const char* kName = "optimizer";
  using Factory = std::function<std::unique_ptr<Optimizer>(const Options&, const NamedParameters&, double lr)>;
};

// A learning-rate schedule over the run's optimizer steps.
struct SchedulerKind {
  static constexpr const char* kName = "scheduler";
  using Factory = std::function<std::unique_ptr<LrSchedule>(const Options&, const ScheduleContext&)>;
};

// A communication hook: how one bucket of gradients is averaged over the ranks.
struct CommKind {
  static constexpr const char* kName = "comm";
  using Factory = std::function<std::unique_ptr<CommHook>(const Options&)>;
};

// How channels are ranked for structured pruning (compress.prune).
struct PrunerKind {
  static constexpr const char* kName = "pruner";
  using Factory = std::function<std::unique_ptr<Pruner>(const Options&)>;
};

// A training method acting on the run (runner/api/Method.h): spec.methods.
struct MethodKind {
  static constexpr const char* kName = "method";
  using Factory = std::function<std::unique_ptr<Method>(const Options&)>;
};

// What is learned: the loss, the metrics' counts, the throughput's unit (runner/api/Task.h).
struct TaskKind {
  static constexpr const char* kName = "task";
  using Factory = std::function<std::unique_ptr<Task>(const Options&)>;
};

// The eight registries, defined together in Registries.cpp.
template <>
Registry<ModelKind>& registry<ModelKind>();
template <>
Registry<DataKind>& registry<DataKind>();
template <>
Registry<OptimizerKind>& registry<OptimizerKind>();
template <>
Registry<SchedulerKind>& registry<SchedulerKind>();
template <>
Registry<CommKind>& registry<CommKind>();
template <>
Registry<PrunerKind>& registry<PrunerKind>();
template <>
Registry<MethodKind>& registry<MethodKind>();
template <>
Registry<TaskKind>& registry<TaskKind>();

}  // namespace exprun
