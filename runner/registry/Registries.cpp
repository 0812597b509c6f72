// Purpose: the five plugin registries, defined together (their kinds: runner/registry/Kinds.h).
#include "runner/dist/CommHook.h"
#include "runner/registry/Plugins.h"
#include "runner/train/Schedule.h"

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

}  // namespace exprun
