// Purpose: a profiled window and the per-module table (see Profile.h).
#include "runner/train/Profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "runner/api/ModelGraph.h"
#include "runner/metrics/Flops.h"
#include "runner/metrics/Meters.h"
#include "runner/metrics/Phases.h"
#include "runner/nn/Autocast.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/Compat.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"

#ifdef EXPRUN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace exprun {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

constexpr std::size_t kMaxTimelinePoints = 200000;

void synchronize(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

// `from` gzipped into `to` (zlib's gz writer); throws FileError.
void gzipFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  gzFile out = gzopen(to.c_str(), "wb6");
  if (!in || !out) throw FileError("profile: cannot write '" + to + "'");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0 && gzwrite(out, buf.data(), static_cast<unsigned>(in.gcount())) <= 0) {
      gzclose(out);
      throw FileError("profile: cannot write '" + to + "'");
    }
  }
  if (gzclose(out) != Z_OK) throw FileError("profile: cannot write '" + to + "'");
}

}  // namespace

// Live tensor bytes after every operator (any thread) while it lives, with the phase it ran in.
struct ProfileWindow::Timeline {
  static Timeline*& current() {
    static Timeline* t = nullptr;
    return t;
  }
  explicit Timeline(const torch::Device& d) : device(d), t0(std::chrono::steady_clock::now()) {
    current() = this;
    handle = at::addGlobalCallback(
        at::RecordFunctionCallback(&Timeline::onStart, &Timeline::onEnd).scopes({at::RecordScope::FUNCTION}));
  }
  ~Timeline() {
    at::removeCallback(handle);
    current() = nullptr;
  }
  static std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction&) { return nullptr; }
  static void onEnd(const at::RecordFunction&, at::ObserverContext*) {
    Timeline* t = current();
    if (t) t->sample();
  }
  void sample() {
    const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::int64_t bytes = allocatedBytes(device);
    PhaseClock* clock = activePhaseClock();
    const Phase phase = clock ? clock->current() : Phase::Rest;
    std::lock_guard<std::mutex> lock(mu);
    if (seconds.size() >= kMaxTimelinePoints) return;
    seconds.push_back(at);
    live.push_back(bytes);
    phases.push_back(phase);
  }
  // At most kShown points (each the largest of its run of samples: the peak stays), in ms and MiB.
  nlohmann::json json() {
    std::lock_guard<std::mutex> lock(mu);
    constexpr std::size_t kShown = 2000;
    const std::size_t n = seconds.size(), per = std::max<std::size_t>(1, (n + kShown - 1) / kShown);
    nlohmann::json ms = nlohmann::json::array(), mib = nlohmann::json::array(), phase = nlohmann::json::array();
    std::int64_t peak = 0;
    for (std::size_t i = 0; i < n; i += per) {
      std::size_t best = i;
      for (std::size_t k = i; k < std::min(n, i + per); ++k)
        if (live[k] > live[best]) best = k;
      ms.push_back(1e3 * seconds[best]);
      mib.push_back(static_cast<double>(live[best]) / 1048576.0);
      phase.push_back(phaseKey(phases[best]));
      peak = std::max(peak, live[best]);
    }
    return {{"device", device.str()}, {"measured", !live.empty() && live.front() >= 0}, {"operators", n},
            {"ms", ms}, {"live_mib", mib}, {"phase", phase}, {"peak_mib", static_cast<double>(peak) / 1048576.0}};
  }
  torch::Device device;
  std::chrono::steady_clock::time_point t0;
  at::CallbackHandle handle;
  std::mutex mu;
  std::vector<double> seconds;
  std::vector<std::int64_t> live;
  std::vector<Phase> phases;
};

ProfileWindow::ProfileWindow(const ProfileConfig& config, std::string tracePath, const torch::Device& device)
    : config_(config), tracePath_(std::move(tracePath)), device_(device) {
  // Kineto counts the GPUs when it first starts and logs an ERROR where there is none: on a machine
  // without a CUDA device its messages are about a device the run does not have, so they are left
  // out (unless KINETO_LOG_LEVEL is set; kineto reads it when it first logs).
  if (on() && !compat::cudaAvailable()) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
}

ProfileWindow::~ProfileWindow() {
  if (active_) {
    try {
      prof::disableProfiler();
    } catch (...) {
    }
  }
}

void ProfileWindow::beforeStep(std::int64_t step) {
  if (!on() || active_ || done_ || step < config_.startStep) return;
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(ActivityType::CUDA);
  const ProfilerConfig cfg(ProfilerState::KINETO, /*report_input_shapes=*/true, /*profile_memory=*/true);
  synchronize(device_);  // nothing queued before the window gets into it
  prof::prepareProfiler(cfg, activities);
  prof::enableProfiler(cfg, activities);
  active_ = true;
  firstStep_ = step;
  timeline_ = std::make_unique<Timeline>(device_);
  timeline_->sample();  // the bytes live as the step begins
}

void ProfileWindow::afterStep(std::int64_t step) {
  if (!active_) return;
  if (timeline_) {  // one step: the first of the window
    timelineJson_ = timeline_->json();
    timeline_.reset();
  }
  lastStep_ = step;
  if (step + 1 >= firstStep_ + config_.steps) stop();
}

void ProfileWindow::stop() {
  synchronize(device_);
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  active_ = false;
  done_ = true;
  if (!tracePath_.empty() && result) {
    const std::string plain = config_.gzip ? tracePath_ + ".tmp" : tracePath_;
    result->save(plain);
    if (config_.gzip) {
      gzipFile(plain, tracePath_ + ".gz");
      std::filesystem::remove(plain);
      written_ = tracePath_ + ".gz";
    } else {
      written_ = tracePath_;
    }
    log::info(strf("profile: steps %lld-%lld traced into %s (open it in https://ui.perfetto.dev or chrome://tracing)",
                   static_cast<long long>(firstStep_ + 1), static_cast<long long>(lastStep_ + 1), written_.c_str()));
  }
}

bool writeCudaMemorySnapshot(const std::string& path) {
#ifdef EXPRUN_WITH_CUDA
  const auto snap = c10::cuda::CUDACachingAllocator::snapshot();
  nlohmann::json segments = nlohmann::json::array();
  std::int64_t reserved = 0, allocated = 0;
  for (const auto& s : snap.segments) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const auto& b : s.blocks)
      blocks.push_back({{"size", b.size}, {"requested_size", b.requested_size}, {"allocated", b.allocated}, {"active", b.active}});
    segments.push_back({{"device", static_cast<int>(s.device)},
                        {"address", s.address},
                        {"total_size", s.total_size},
                        {"requested_size", s.requested_size},
                        {"allocated_size", s.allocated_size},
                        {"active_size", s.active_size},
                        {"is_large", s.is_large},
                        {"blocks", std::move(blocks)}});
    reserved += static_cast<std::int64_t>(s.total_size);
    allocated += static_cast<std::int64_t>(s.allocated_size);
  }
  const nlohmann::json j{{"what", "CUDA caching allocator snapshot at an out-of-memory error"},
                         {"reserved_bytes", reserved},
                         {"allocated_bytes", allocated},
                         {"segments", std::move(segments)}};
  writeFileAtomically(path, j.dump(1) + "\n");
  return true;
#else
  (void)path;
  return false;
#endif
}

nlohmann::json ProfileWindow::figures() const {
  if (!done_) return nullptr;
  nlohmann::json j{{"window", {{"start_step", firstStep_}, {"steps", lastStep_ - firstStep_ + 1}}}};
  if (!written_.empty()) j["trace"] = std::filesystem::path(written_).filename().string();
  if (!timelineJson_.is_null()) j["memory_timeline"] = timelineJson_;
  return j;
}

namespace {

// The name of a graph node: its module's, or for an operation without weights its block's
// ("layer1.0.bn2" -> "layer1.0.add"), made unique with a count.
std::vector<std::string> nodeNames(const ModelGraph& g) {
  static const std::map<GraphNode::Op, const char*> ops{
      {GraphNode::Op::Relu, "relu"},         {GraphNode::Op::Relu6, "relu6"},     {GraphNode::Op::MaxPool, "max_pool"},
      {GraphNode::Op::AvgPoolFlatten, "avg_pool"}, {GraphNode::Op::Flatten, "flatten"}, {GraphNode::Op::Add, "add"}};
  std::vector<std::string> names(g.nodes().size());
  std::map<std::string, int> used;
  for (std::size_t i = 0; i < g.nodes().size(); ++i) {
    const GraphNode& n = g.nodes()[i];
    if (!n.name.empty()) {
      names[i] = n.name;
      continue;
    }
    if (n.op == GraphNode::Op::Input) continue;
    std::string block;  // the block of the input it reads last: "layer1.0."
    if (!n.inputs.empty()) {
      const std::string& in = names[static_cast<std::size_t>(n.inputs.back())];
      const auto dot = in.rfind('.');
      if (dot != std::string::npos) block = in.substr(0, dot + 1);
    }
    std::string base = block + ops.at(n.op);
    const int k = used[base]++;
    names[i] = k == 0 ? base : base + "_" + std::to_string(k);
  }
  return names;
}

const char* opName(GraphNode::Op op) {
  switch (op) {
    case GraphNode::Op::Conv: return "conv";
    case GraphNode::Op::BatchNorm: return "batch_norm";
    case GraphNode::Op::Relu: return "relu";
    case GraphNode::Op::Relu6: return "relu6";
    case GraphNode::Op::MaxPool: return "max_pool";
    case GraphNode::Op::AvgPoolFlatten: return "avg_pool";
    case GraphNode::Op::Flatten: return "flatten";
    case GraphNode::Op::Linear: return "linear";
    case GraphNode::Op::Add: return "add";
    case GraphNode::Op::Input: return "input";
  }
  return "?";
}

// The node's operation in train mode, as the model's forward runs it.
torch::Tensor runNode(GraphNode n, const std::vector<torch::Tensor>& in) {  // a copy: its modules' holders
  switch (n.op) {
    case GraphNode::Op::Conv: return n.conv->forward(in[0]);
    case GraphNode::Op::BatchNorm: return n.bn->forward(in[0]);
    case GraphNode::Op::Relu: return torch::relu(in[0]);
    case GraphNode::Op::Relu6: return torch::hardtanh(in[0], 0.0, 6.0);
    case GraphNode::Op::MaxPool: return torch::max_pool2d(in[0], n.kernel, n.stride, n.padding);
    case GraphNode::Op::AvgPoolFlatten: return torch::adaptive_avg_pool2d(in[0], {1, 1}).flatten(1);
    case GraphNode::Op::Flatten: return in[0].flatten(1);
    case GraphNode::Op::Linear: return n.linear->forward(in[0]);
    case GraphNode::Op::Add: return in[0] + in[1];
    case GraphNode::Op::Input: return in[0];
  }
  return {};
}

std::int64_t paramsOf(const GraphNode& n) {
  std::int64_t p = 0;
  auto add = [&](const torch::nn::Module& m) {
    for (const auto& t : m.parameters()) p += t.numel();
  };
  if (n.conv) add(*n.conv);
  if (n.bn) add(*n.bn);
  if (n.linear) add(*n.linear);
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

namespace {

// Node `i` of `g` timed alone, forward and backward, on copies of its inputs `all` (every node's
// output at the batch): the median of `repeats` runs after a warm-up that counts its FLOPs and
// activation bytes.
ModuleRow timedNode(const ModelGraph& g, std::size_t i, const std::vector<torch::Tensor>& all, const std::string& name,
                    const torch::Device& device, std::int64_t batch, std::optional<at::ScalarType> amp, int repeats,
                    double peakFlopsPerS) {
  const GraphNode& n = g.nodes()[i];
  ModuleRow row;
  row.name = name;
  row.op = opName(n.op);
  row.params = paramsOf(n);
  std::vector<double> fwd, bwd;
  for (int r = 0; r < repeats + 1; ++r) {  // the first is a warm-up (and counts the FLOPs)
    std::vector<torch::Tensor> in;
    for (int k : n.inputs) {
      torch::Tensor x = all[static_cast<std::size_t>(k)].detach().clone();
      if (g.nodes()[static_cast<std::size_t>(k)].op != GraphNode::Op::Input) x.requires_grad_(true);
      in.push_back(x);
    }
    std::optional<FlopCounter> counter;
    if (r == 0) counter.emplace();
    synchronize(device);
    const std::int64_t before = allocatedBytes(device);
    Stopwatch clock;
    torch::Tensor out;
    {
      AutocastGuard autocast(device.type(), amp);
      out = runNode(n, in);
    }
    synchronize(device);
    const double f = clock.seconds();
    if (r == 0 && before >= 0) row.activationBytes = std::max<std::int64_t>(0, allocatedBytes(device) - before);
    if (r == 0 && before < 0) row.activationBytes = static_cast<std::int64_t>(out.numel() * out.element_size());
    double b = 0;
    if (out.requires_grad()) {
      torch::Tensor grad = torch::ones_like(out);
      synchronize(device);
      clock.reset();
      out.backward(grad);
      synchronize(device);
      b = clock.seconds();
    }
    if (r == 0) {
      row.flopsPerImage = counter->flops() / static_cast<double>(batch);
    } else {
      fwd.push_back(f);
      bwd.push_back(b);
    }
  }
  row.forwardS = median(fwd);
  row.backwardS = median(bwd);
  const double s = row.forwardS + row.backwardS;
  row.flopsPerS = s > 0 ? row.flopsPerImage * static_cast<double>(batch) / s : 0;
  row.peakFraction = peakFlopsPerS > 0 ? row.flopsPerS / peakFlopsPerS : 0;
  return row;
}

// Stages: the modules whose names share their first component, summed, in the modules' order.
std::vector<ModuleRow> stageRows(const std::vector<ModuleRow>& modules, std::int64_t batch, double peakFlopsPerS) {
  std::vector<std::string> order;
  std::map<std::string, ModuleRow> stages;
  for (const ModuleRow& m : modules) {
    const std::string key = m.name.substr(0, m.name.find('.'));
    auto [it, fresh] = stages.try_emplace(key);
    if (fresh) order.push_back(key), it->second.name = key, it->second.op = "stage";
    ModuleRow& s = it->second;
    s.params += m.params;
    s.flopsPerImage += m.flopsPerImage;
    s.forwardS += m.forwardS;
    s.backwardS += m.backwardS;
    s.activationBytes += m.activationBytes;
  }
  std::vector<ModuleRow> rows;
  for (const std::string& k : order) {
    ModuleRow s = stages[k];
    const double sec = s.forwardS + s.backwardS;
    s.flopsPerS = sec > 0 ? s.flopsPerImage * static_cast<double>(batch) / sec : 0;
    s.peakFraction = peakFlopsPerS > 0 ? s.flopsPerS / peakFlopsPerS : 0;
    rows.push_back(s);
  }
  return rows;
}

}  // namespace

ModuleTable moduleTable(Model& model, const torch::Device& device, std::int64_t batch, std::int64_t channels,
                        std::int64_t height, std::int64_t width, double peakFlopsPerS,
                        std::optional<at::ScalarType> amp, int repeats) {
  ModuleTable t;
  t.batch = batch;
  const ModelGraph g = model.graph();
  if (g.empty()) {
    t.note = "the model does not describe its layers (Model::graph): no per-module table";
    return t;
  }
  model.to(device);
  const auto opts = torch::TensorOptions().device(device);
  std::vector<torch::Tensor> all;
  {
    torch::NoGradGuard off;
    model.eval();
    g.run(torch::randn({batch, channels, height, width}, opts), &all);  // every node's input
  }
  model.train();
  const std::vector<std::string> names = nodeNames(g);
  for (std::size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i].op != GraphNode::Op::Input)
      t.modules.push_back(timedNode(g, i, all, names[i], device, batch, amp, repeats, peakFlopsPerS));
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  t.stages = stageRows(t.modules, batch, peakFlopsPerS);
  return t;
}

nlohmann::json moduleTableJson(const ModuleTable& t) {
  auto rows = [](const std::vector<ModuleRow>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const ModuleRow& m : v)
      a.push_back({{"name", m.name},
                   {"op", m.op},
                   {"params", m.params},
                   {"flops_per_image", m.flopsPerImage},
                   {"forward_s", m.forwardS},
                   {"backward_s", m.backwardS},
                   {"flops_per_s", m.flopsPerS},
                   {"peak_fraction", m.peakFraction},
                   {"activation_bytes", m.activationBytes}});
    return a;
  };
  nlohmann::json j{{"batch", t.batch}, {"stages", rows(t.stages)}, {"modules", rows(t.modules)}};
  if (!t.note.empty()) j["note"] = t.note;
  return j;
}

std::string formatModuleTable(const ModuleTable& t, std::size_t top) {
  if (!t.note.empty()) return t.note;
  std::string out = strf("per-module table (batch %lld, each module timed alone, train mode; median of repeats)\n",
                         static_cast<long long>(t.batch));
  out += strf("%-26s %-10s %10s %12s %10s %10s %9s %7s %10s\n", "module", "op", "params", "FLOPs/img", "fwd ms",
              "bwd ms", "GFLOP/s", "% peak", "act MiB");
  auto line = [&](const ModuleRow& m) {
    out += strf("%-26s %-10s %10lld %12.4g %10.3f %10.3f %9.1f %7s %10.2f\n", m.name.c_str(), m.op.c_str(),
                static_cast<long long>(m.params), m.flopsPerImage, 1e3 * m.forwardS, 1e3 * m.backwardS, m.flopsPerS / 1e9,
                m.peakFraction > 0 ? strf("%.1f", 100 * m.peakFraction).c_str() : "-", m.activationBytes / 1048576.0);
  };
  for (const ModuleRow& s : t.stages) line(s);
  std::vector<ModuleRow> byTime = t.modules;
  std::stable_sort(byTime.begin(), byTime.end(), [](const ModuleRow& a, const ModuleRow& b) {
    return a.forwardS + a.backwardS > b.forwardS + b.backwardS;
  });
  out += strf("top %zu modules by forward + backward time:\n", std::min(top, byTime.size()));
  for (std::size_t i = 0; i < top && i < byTime.size(); ++i) line(byTime[i]);
  return out;
}

}  // namespace exprun
