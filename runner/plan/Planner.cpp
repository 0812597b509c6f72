// Purpose: memory planning by measurement (see Planner.h).
#include "runner/plan/Planner.h"

#include <algorithm>

#include <cmath>

#include "runner/metrics/Meters.h"
#include "runner/plan/MemoryEstimate.h"
#include "runner/step/Learner.h"
#include "runner/util/Log.h"

namespace exprun {

namespace {

constexpr double kMargin = 0.10;

// Three real training steps at micro-batch `b` (measureStepMemory: the trainer's own step on the
// trainer's own parts, random inputs of the data plugin's shape): the device's peak memory (CPU:
// resident set; CUDA: allocated, with what the device holds beside the step: deviceExtras), or -1 on
// out-of-memory. The parts run on a group of this process alone (`local`), so an out-of-memory on
// one rank leaves no collective of the others waiting; the ranks agree afterwards.
std::int64_t realProbe(const Spec& spec, std::int64_t b, Precision precision,
                       const std::vector<std::string>& recomputed, std::int64_t every, Dist& local,
                       const torch::Device& device, const Dataset* data) {
  try {
    Spec probe = spec;
    probe.train.numerics.precision = precision;
    probe.train.numerics.activationCheckpointing = recomputed;
    probe.train.numerics.activationCheckpointingEvery = every;
    const StepMemory m = measureStepMemory(probe, b, local, device);
    if (!device.is_cuda()) return m.processPeak;
    const DeviceExtras extras = deviceExtras(probe, data, b, m.activations(), "not given to the planner");
    return m.processPeak + extras.total();
  } catch (const c10::OutOfMemoryError&) {
    return -1;
  }
}

// The micro-batches the global batch allows (world x micro x accumulation = global batch): only
// those are probed (global 1024 on one device: 1, 2, 4, ..., 1024, not 853). A global batch that the
// processes cannot share evenly: every micro-batch up to its share.
std::vector<std::int64_t> microBatchCandidates(std::int64_t globalBatch, int world) {
  const std::int64_t maxMicro = globalBatch / world;
  std::vector<std::int64_t> candidates;
  for (std::int64_t m = 1; m <= maxMicro; ++m)
    if (globalBatch % (world * m) == 0) candidates.push_back(m);
  if (candidates.empty())
    for (std::int64_t m = 1; m <= maxMicro; ++m) candidates.push_back(m);
  return candidates;
}

// The largest of the (ascending) candidates that fits, 0 when the smallest does not: doubling from
// the smallest until one does not fit, then bisection between the last that fits and the first
// that does not.
std::int64_t largestFitting(const std::vector<std::int64_t>& candidates, const std::function<bool(std::int64_t)>& fits) {
  if (!fits(candidates.front())) return 0;
  std::size_t lo = 0, hi = 0;
  while (lo + 1 < candidates.size()) {
    const auto twice = std::lower_bound(candidates.begin(), candidates.end(), candidates[lo] * 2);
    const std::size_t next = std::min<std::size_t>(twice - candidates.begin(), candidates.size() - 1);
    if (fits(candidates[next]))
      lo = next;
    else {
      hi = next;
      break;
    }
  }
  while (hi > 0 && hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    (fits(candidates[mid]) ? lo : hi) = mid;
  }
  return candidates[lo];
}

}  // namespace

MemoryPlan planMemory(const Spec& spec, std::int64_t budgetBytes, std::int64_t globalBatch, Dist& dist,
                      const torch::Device& device, const ProbeFn& probeFn, const Dataset* data) {
  std::unique_ptr<Dist> local;  // the probes' own group of this process (made on the first probe)
  // Recomputation as the spec asks; when the planner adds it, block by block (the finer choice:
  // ResNet-50 at 96², batch 64: 0.54x the tensors of no recomputation, whole stages 0.75x).
  std::int64_t every = spec.train.numerics.activationCheckpointingEvery;
  const ProbeFn probe =
      probeFn ? probeFn : ProbeFn([&](std::int64_t b, Precision precision, const std::vector<std::string>& stages) {
        if (!local) local = Dist::alone(device);
        return realProbe(spec, b, precision, stages, every, *local, device, data);
      });
  if (budgetBytes <= 0) throw std::invalid_argument("memory budget must be positive");
  const int world = dist.worldSize();
  if (globalBatch < world)
    throw std::invalid_argument("global batch " + std::to_string(globalBatch) + " is smaller than the " +
                                std::to_string(world) + " processes");
  const std::vector<std::int64_t> candidates = microBatchCandidates(globalBatch, world);
  const double limit = static_cast<double>(budgetBytes) * (1.0 - kMargin);

  MemoryPlan plan;
  plan.budgetBytes = budgetBytes;
  Precision precision = spec.train.numerics.precision;
  std::vector<std::string> recomputed = spec.train.numerics.activationCheckpointing;
  std::vector<std::pair<std::string, int>> techniques{{"none", 0}};
  if (precision == Precision::Fp32) techniques.push_back({"bf16", 1});
  techniques.push_back({"activation_checkpointing", 2});

  std::int64_t best = 0;
  for (const auto& [name, kind] : techniques) {
    if (kind == 1) precision = Precision::Bf16;
    if (kind == 2) {
      recomputed = buildModel(spec)->stages();
      if (recomputed.empty()) continue;
      every = 1;
    }
    if (kind != 0) plan.techniques.push_back(name);
    auto fits = [&](std::int64_t b) {
      std::int64_t peak = probe(b, precision, recomputed);
      bool ok = peak >= 0 && static_cast<double>(peak) <= limit;
      ok = dist.max({ok ? 0.0 : 1.0})[0] == 0.0;  // fits on every rank
      plan.probes.push_back(Probe{b, peak, ok});
      log::info(strf("plan: micro-batch %lld with %s: peak %s -> %s", static_cast<long long>(b),
                     plan.techniques.empty() ? "no technique" : name.c_str(),
                     peak < 0 ? "out of memory" : strf("%.1f MiB", peak / 1048576.0).c_str(), ok ? "fits" : "too big"));
      return ok;
    };
    best = largestFitting(candidates, fits);
    if (best > 0) break;
  }
  if (best == 0)
    throw std::invalid_argument(
        strf("no micro-batch fits in %.2f GiB (minus the 10 %% margin), even with bf16 and "
             "activation checkpointing",
             budgetBytes / 1073741824.0));
  // The smallest accumulation that reaches the global batch exactly with a micro-batch that fits.
  std::int64_t acc = (globalBatch + world * best - 1) / (world * best);
  while (globalBatch % (world * acc) != 0 && acc < globalBatch) ++acc;
  plan.largestFitting = best;
  plan.microBatch = globalBatch % (world * acc) == 0 ? globalBatch / (world * acc) : best;
  plan.accumulate = acc;
  plan.globalBatch = plan.microBatch * world * acc;
  plan.precision = precision;
  plan.recomputed = recomputed;
  plan.recomputeEvery = every;
  return plan;
}

Spec applyPlan(Spec spec, const MemoryPlan& plan) {
  spec.train.batching.batchSize = plan.microBatch;
  spec.train.batching.accumulate = plan.accumulate;
  spec.train.numerics.precision = plan.precision;
  spec.train.numerics.activationCheckpointing = plan.recomputed;
  spec.train.numerics.activationCheckpointingEvery = plan.recomputeEvery;
  return spec;
}

nlohmann::json MemoryPlan::toJson() const {
  nlohmann::json probesJson = nlohmann::json::array();
  for (const auto& p : probes)
    probesJson.push_back({{"batch", p.batch}, {"peak_memory_bytes", p.peakBytes}, {"fits", p.fits}});
  return nlohmann::json{{"budget_bytes", budgetBytes},       {"largest_fitting", largestFitting},
                        {"micro_batch", microBatch},         {"accumulate", accumulate},
                        {"global_batch", globalBatch},       {"precision", precisionName(precision)},
                        {"checkpointed_stages", recomputed}, {"checkpointed_every", recomputeEvery},
                        {"techniques", techniques},
                        {"safety_margin", kMargin},          {"probes", probesJson}};
}

std::string MemoryPlan::table() const {
  std::string t = strf("memory plan (budget %.2f GiB, 10 %% margin):\n", budgetBytes / 1073741824.0);
  t += strf("  micro_batch   %lld\n  accumulate    %lld\n  global_batch  %lld\n  precision     %s\n",
            static_cast<long long>(microBatch), static_cast<long long>(accumulate), static_cast<long long>(globalBatch),
            precisionName(precision));
  std::string ck, tech;
  for (const auto& c : recomputed) ck += (ck.empty() ? "" : ", ") + c;
  for (const auto& c : techniques) tech += (tech.empty() ? "" : ", ") + c;
  t += "  recomputed    " + (ck.empty() ? std::string("none") : ck) + "\n";
  t += "  needed        " + (tech.empty() ? std::string("nothing beyond the spec") : tech) + "\n";
  t += "  probes        ";
  for (const auto& p : probes)
    t += strf("%lld:%s ", static_cast<long long>(p.batch),
              p.peakBytes < 0 ? "OOM" : strf("%.0fMiB%s", p.peakBytes / 1048576.0, p.fits ? "" : "(over)").c_str());
  return t + "\n";
}

}  // namespace exprun
