// Purpose: what the tests of training methods share: a method built from a spec's methods list, and
// a RunContext holding only the spec and the data's shape (a method's batch-level hooks need no
// run; anything else it asks for fails the test).
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "runner/api/Method.h"

namespace exprun::test {

class SpecOnlyContext : public RunContext {
 public:
  SpecOnlyContext(Spec spec, DataInfo info) : spec_(std::move(spec)), info_(info) {}
  const Spec& spec() const override { return spec_; }
  DataInfo dataInfo() const override { return info_; }
  Dist& dist() override { return dist_; }
  torch::Device device() const override { return torch::kCPU; }
  Model& model() override { fail("model"); }
  const RunPaths& paths() const override { return paths_; }
  const std::vector<EpochRecord>& epochs() const override { return epochs_; }
  std::shared_ptr<Model> freshModel() override { fail("freshModel"); }
  Dataset& data() override { fail("data"); }
  StepFlops flops() const override { return {}; }
  EvalResult evaluate(const Forward&) override { fail("evaluate"); }
  void modelChanged(const StepFlops&) override { fail("modelChanged"); }
  void dataChanged() override { fail("dataChanged"); }
  const std::vector<CompressedModel>& comparedModels() const override { return models_; }
  void compareModel(CompressedModel) override { fail("compareModel"); }

 private:
  [[noreturn]] static void fail(const char* what) { throw std::logic_error(std::string("SpecOnlyContext: no ") + what); }
  Spec spec_;
  DataInfo info_;
  Dist dist_;
  RunPaths paths_;
  std::vector<EpochRecord> epochs_;
  std::vector<CompressedModel> models_;
};

// The spec's i-th method, built, and set up on `context`.
inline std::unique_ptr<Method> methodOf(RunContext& context, std::size_t i = 0) {
  std::unique_ptr<Method> m = build<MethodKind>(context.spec().methods.at(i));
  m->setUp(context);
  return m;
}

}  // namespace exprun::test
