// Purpose: the eight plugin registries, defined together (their kinds: runner/api/Kinds.h).
#include "runner/api/CommHook.h"
#include "runner/api/Data.h"
#include "runner/api/Method.h"
#include "runner/api/Model.h"
#include "runner/api/Optimizer.h"
#include "runner/api/Pruner.h"
#include "runner/api/Schedule.h"
#include "runner/api/Task.h"

namespace exprun {

template <>
Registry<ModelKind>& registry<ModelKind>() {
  static Registry<ModelKind> r;
  return r;
}
template <>
Registry<DataKind>& registry<DataKind>() {
  static Registry<DataKind> r;
  return r;
}
template <>
Registry<OptimizerKind>& registry<OptimizerKind>() {
  static Registry<OptimizerKind> r;
  return r;
}
template <>
Registry<SchedulerKind>& registry<SchedulerKind>() {
  static Registry<SchedulerKind> r;
  return r;
}
template <>
Registry<CommKind>& registry<CommKind>() {
  static Registry<CommKind> r;
  return r;
}
template <>
Registry<PrunerKind>& registry<PrunerKind>() {
  static Registry<PrunerKind> r;
  return r;
}
template <>
Registry<MethodKind>& registry<MethodKind>() {
  static Registry<MethodKind> r;
  return r;
}
template <>
Registry<TaskKind>& registry<TaskKind>() {
  static Registry<TaskKind> r;
  return r;
}

}  // namespace exprun
