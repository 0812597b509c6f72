// Purpose: the peak FLOP/s rules and the device table (see Hardware.h). Every published figure is in
// the table below with its source; the CPU rules cite the vendors' optimization manuals.
#include "runner/metrics/Hardware.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "runner/util/Format.h"

namespace exprun {

namespace {
constexpr double kT = 1e12;
constexpr std::int64_t kGiB = 1LL << 30;
const char* kAmpereBlog =
    "NVIDIA, \"NVIDIA Ampere Architecture In-Depth\" (developer blog, 2020), Table 3 (dense peaks)";
const char* kHopperSheet =
    "NVIDIA H100 Tensor Core GPU datasheet and H200 Tensor Core GPU datasheet (2024): the tensor figures there "
    "are with 2:4 sparsity, the dense peaks half of them";
const char* kAdaPaper =
    "NVIDIA Ada GPU Architecture whitepaper v1.01, Appendix A (dense figures; tensor figures with FP32 accumulate)";
}  // namespace

const std::vector<DeviceFigures>& knownDevices() {
  // Order: a more specific name before a less specific one (deviceForCudaName takes the first match).
  static const std::vector<DeviceFigures> devices{
      {"h200-nvl", "NVIDIA H200 NVL 141 GB", 141'000'000'000LL, 60 * kT, 417.5 * kT, 835.5 * kT, 835.5 * kT,
       1670.5 * kT, {"H200", "NVL"},
       std::string(kHopperSheet) + "; H200 NVL: FP32 60 TFLOPS, TF32 835*, BF16/FP16 1671*, FP8 3341* (* sparse)"},
      {"h200", "NVIDIA H200 SXM 141 GB", 141'000'000'000LL, 67 * kT, 494.5 * kT, 989.5 * kT, 989.5 * kT, 1979 * kT,
       {"H200"},
       std::string(kHopperSheet) + "; H200 SXM: FP32 67 TFLOPS, TF32 989*, BF16/FP16 1979*, FP8 3958* (* sparse)"},
      {"h100-pcie", "NVIDIA H100 PCIe 80 GB", 80 * kGiB, 51 * kT, 378 * kT, 756.5 * kT, 756.5 * kT, 1513 * kT,
       {"H100", "PCIe"},
       std::string(kHopperSheet) + "; H100 PCIe: FP32 51 TFLOPS, TF32 756*, BF16/FP16 1513*, FP8 3026* (* sparse)"},
      {"h100-nvl", "NVIDIA H100 NVL 94 GB", 94'000'000'000LL, 60 * kT, 417.5 * kT, 835.5 * kT, 835.5 * kT,
       1670.5 * kT, {"H100", "NVL"},
       std::string(kHopperSheet) + "; H100 NVL: FP32 60 TFLOPS, TF32 835*, BF16/FP16 1671*, FP8 3341* (* sparse)"},
      {"h100-sxm", "NVIDIA H100 SXM 80 GB", 80 * kGiB, 67 * kT, 494.5 * kT, 989.5 * kT, 989.5 * kT, 1979 * kT,
       {"H100"},
       std::string(kHopperSheet) + "; H100 SXM: FP32 67 TFLOPS, TF32 989*, BF16/FP16 1979*, FP8 3958* (* sparse)"},
      {"a100-sxm4-80gb", "NVIDIA A100 SXM4 80 GB", 80 * kGiB, 19.5 * kT, 156 * kT, 312 * kT, 312 * kT, 0, {"A100"},
       std::string(kAmpereBlog) + ", A100: FP32 19.5 TFLOPS, TF32 tensor 156, FP16/BF16 tensor 312 (every A100 "
                                  "variant, 40 or 80 GB, SXM4 or PCIe, has these peaks)"},
      {"l40s", "NVIDIA L40S 48 GB", 48 * kGiB, 91.6 * kT, 183 * kT, 362 * kT, 362 * kT, 733 * kT, {"L40S"},
       "NVIDIA L40S datasheet (2023): FP32 91.6 TFLOPS, TF32 tensor 183, BF16/FP16 tensor 362, FP8 733 (dense; "
       "twice that with sparsity)"},
      {"l4", "NVIDIA L4 24 GB", 24 * kGiB, 30.3 * kT, 60 * kT, 121 * kT, 121 * kT, 242.5 * kT, {"L4"},
       "NVIDIA L4 datasheet (2023): FP32 30.3 TFLOPS, TF32 120*, BF16/FP16 242*, FP8 485* (* sparse; dense half)"},
      {"rtx4090", "NVIDIA GeForce RTX 4090 24 GB", 24 * kGiB, 82.6 * kT, 82.6 * kT, 165.2 * kT, 165.2 * kT, 330.3 * kT,
       {"RTX", "4090"},
       std::string(kAdaPaper) + ", GeForce RTX 4090: FP32 82.6 TFLOPS, TF32 82.6, FP16/BF16 165.2, FP8 330.3"},
      {"rtx3090", "NVIDIA GeForce RTX 3090 24 GB", 24 * kGiB, 35.6 * kT, 35.6 * kT, 71 * kT, 71 * kT, 0,
       {"RTX", "3090"},
       "NVIDIA Ampere GA102 GPU Architecture whitepaper V1, GeForce RTX 3090: peak FP32 (non-tensor) 35.6 TFLOPS, "
       "TF32 tensor 35.6, FP16 and BF16 tensor with FP32 accumulate 71 (dense), 24 GB GDDR6X"},
      {"v100-pcie", "NVIDIA Tesla V100 PCIe 16 GB", 16 * kGiB, 14 * kT, 0, 112 * kT, 0, 0, {"V100", "PCIE"},
       "NVIDIA Tesla V100 datasheet (2018), V100 PCIe: FP32 14 TFLOPS, tensor (FP16, FP32 accumulate) 112; no "
       "TF32, BF16 or FP8"},
      {"v100-sxm2-16gb", "NVIDIA Tesla V100 SXM2 16 GB", 16 * kGiB, 15.7 * kT, 0, 125 * kT, 0, 0, {"V100"},
       std::string(kAmpereBlog) + ", V100: FP32 15.7 TFLOPS, FP16 tensor 125; no TF32, BF16 or FP8"},
      {"t4", "NVIDIA Tesla T4 16 GB", 16 * kGiB, 8.1 * kT, 0, 65 * kT, 0, 0, {"T4"},
       "NVIDIA T4 datasheet (2019): FP32 8.1 TFLOPS, mixed precision (FP16/FP32) 65; no TF32, BF16 or FP8"},
  };
  return devices;
}

const DeviceFigures& deviceNamed(const std::string& name) {
  std::string names;
  for (const auto& c : knownDevices()) {
    if (c.name == name) return c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  throw std::invalid_argument("unknown device '" + name + "' (known: " + names + ")");
}

const DeviceFigures* deviceForCudaName(const std::string& deviceName) {
  std::set<std::string> words;
  std::string word;
  for (char ch : deviceName + " ") {
    if (ch == ' ' || ch == '-' || ch == '_') {
      if (!word.empty()) words.insert(word);
      word.clear();
    } else {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    }
  }
  for (const auto& c : knownDevices()) {
    bool all = true;
    for (const auto& w : c.cudaNames) {
      std::string upper = w;
      for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      all = all && words.count(upper) > 0;
    }
    if (all) return &c;
  }
  return nullptr;
}

double peakFor(const DeviceFigures& device, Precision precision) {
  switch (precision) {
    case Precision::Fp32: return std::max(device.fp32, device.tf32);
    case Precision::Fp16: return device.fp16;
    case Precision::Bf16: return device.bf16 > 0 ? device.bf16 : std::max(device.fp32, device.tf32);
  }
  return 0;
}

PeakRule cudaPeak(const std::string& deviceName, Precision precision) {
  PeakRule r;
  const DeviceFigures* device = deviceForCudaName(deviceName);
  if (!device) return r;
  r.flopsPerS = peakFor(*device, precision);
  if (precision == Precision::Bf16 && device->bf16 <= 0) {
    r.native = false;
    r.missing = "bf16 tensor cores (compute capability 8.0 or newer)";
  }
  r.how = strf("%s, %s: %.1f TFLOP/s (%s)", device->title.c_str(), precisionName(precision), r.flopsPerS / kT,
               device->source.c_str());
  return r;
}

// --- CPUs ---------------------------------------------------------------------------------------

namespace {
std::string field(const std::string& line) {
  const auto colon = line.find(':');
  if (colon == std::string::npos) return "";
  std::string v = line.substr(colon + 1);
  v.erase(0, v.find_first_not_of(" \t"));
  return v;
}
std::string key(const std::string& line) {
  std::string k = line.substr(0, line.find(':'));
  k.erase(k.find_last_not_of(" \t") + 1);
  return k;
}
double number(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return 0;
  }
}
}  // namespace

CpuInfo parseCpuInfo(const std::string& procCpuinfo, const std::string& maxFreqKHz, double measuredHz) {
  CpuInfo c;
  std::istringstream in(procCpuinfo);
  std::string line;
  int processors = 0, coresPerPackage = 0;
  std::set<std::string> packages;
  double statedMHz = 0;
  while (std::getline(in, line)) {
    const std::string k = key(line), v = field(line);
    if (k == "processor") ++processors;
    if (k == "physical id") packages.insert(v);
    if (processors > 1) continue;  // the rest from the first processor
    if (k == "vendor_id") c.vendor = v;
    if (k == "model name") c.model = v;
    if (k == "cpu family") c.family = static_cast<int>(number(v));
    if (k == "model") c.modelNumber = static_cast<int>(number(v));
    if (k == "cpu cores") coresPerPackage = static_cast<int>(number(v));
    if (k == "cpu MHz") statedMHz = number(v);
    if (k == "flags") {
      std::istringstream words(v);
      for (std::string w; words >> w;) c.flags.insert(w);
    }
  }
  c.cores = coresPerPackage > 0 ? coresPerPackage * static_cast<int>(std::max<std::size_t>(1, packages.size()))
                                : processors;
  if (processors > 0) c.cores = std::min(c.cores, processors);
  // The clock (see Hardware.h): cpufreq's maximum; else the highest of the stated and measured ones.
  const double maxKHz = number(maxFreqKHz);
  std::smatch m;
  const double namedHz =
      std::regex_search(c.model, m, std::regex(R"(@\s*([0-9.]+)\s*GHz)")) ? number(m[1].str()) * 1e9 : 0;
  if (maxKHz > 0) {
    c.clockHz = maxKHz * 1e3, c.clockSource = "cpufreq's cpuinfo_max_freq";
    return c;
  }
  for (const auto& [hz, source] : {std::pair<double, std::string>{namedHz, "the model name"},
                                   {statedMHz * 1e6, "/proc/cpuinfo's cpu MHz"},
                                   {measuredHz, "measured: a timed chain of dependent adds"}})
    if (hz > c.clockHz * 1.02) c.clockHz = hz, c.clockSource = source;
  if (c.clockSource.rfind("measured", 0) == 0)
    c.clockSource += strf(", above the %.2f GHz the machine states (no cpufreq maximum here)",
                          std::max(namedHz, statedMHz * 1e6) / 1e9);
  return c;
}

double measureClockHz() {
#if defined(__x86_64__) || defined(__i386__)
  using Clock = std::chrono::steady_clock;
  double best = 0;
  std::uint64_t x = 1;
  for (int round = 0; round < 6; ++round) {  // the first warms the core up (its turbo), not counted
    std::uint64_t adds = 0;
    const auto start = Clock::now();
    double seconds = 0;
    do {
      for (std::uint64_t i = 0; i < (1u << 16); ++i) {
        // Eight dependent additions; the empty asm keeps each one (no folding into a multiply).
#define EXPRUN_ADD \
  x += i;          \
  __asm__ volatile("" : "+r"(x));
        EXPRUN_ADD EXPRUN_ADD EXPRUN_ADD EXPRUN_ADD EXPRUN_ADD EXPRUN_ADD EXPRUN_ADD EXPRUN_ADD
#undef EXPRUN_ADD
      }
      adds += 8u << 16;
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    } while (seconds < 0.02);
    if (round > 0) best = std::max(best, static_cast<double>(adds) / seconds);
  }
  __asm__ volatile("" : : "r"(x));
  return best;
#else
  return 0;  // the one-add-a-cycle chain is an x86 fact; elsewhere no clock is measured
#endif
}

const CpuInfo& thisCpu() {
  static const CpuInfo cpu = [] {
    auto read = [](const char* path) {
      std::ifstream in(path);
      std::stringstream s;
      s << in.rdbuf();
      return s.str();
    };
    const std::string maxFreq = read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
    return parseCpuInfo(read("/proc/cpuinfo"), maxFreq, maxFreq.empty() ? measureClockHz() : 0.0);
  }();
  return cpu;
}

namespace {
// FLOPs per cycle per core of the fp32 vector path, and what it rests on.
std::pair<int, std::string> fp32PerCycle(const CpuInfo& c) {
  const bool amd = c.vendor == "AuthenticAMD";
  if (c.has("avx512f")) {
    if (amd && c.family < 26) return {32, "AVX-512 on Zen 4's two 256-bit FMA pipes: 2 x 8 lanes x 2"};
    return {64, "AVX-512: 2 FMA units x 16 fp32 lanes x 2 (Xeon parts with one 512-bit FMA unit reach half)"};
  }
  if (c.has("avx2") && c.has("fma")) {
    if (amd && c.family == 23 && c.modelNumber < 0x30) return {16, "AVX2 on Zen 1's two 128-bit FMA pipes: 2 x 4 x 2"};
    return {32, "AVX2/FMA: 2 FMA units x 8 fp32 lanes x 2"};
  }
  if (c.has("avx")) return {16, "AVX without FMA: one 8-lane add and one 8-lane multiply a cycle"};
  if (c.has("sse2")) return {8, "SSE2: one 4-lane add and one 4-lane multiply a cycle"};
  return {0, ""};
}
}  // namespace

PeakRule cpuPeak(const CpuInfo& c, Precision precision, int threads) {
  PeakRule r;
  auto [perCycle, why] = fp32PerCycle(c);
  if (perCycle == 0 || c.clockHz <= 0 || c.cores <= 0) return r;
  const bool amd = c.vendor == "AuthenticAMD";
  if (precision == Precision::Bf16) {
    if (c.has("amx_bf16")) {
      perCycle = 1024, why = "AMX-BF16: 1024 bf16 FLOP/cycle per core (Intel's optimization manual, AMX chapter)";
    } else if (c.has("avx512_bf16")) {
      // Zen 4 runs 512-bit instructions on 256-bit pipes; Zen 5 (family 26) has 512-bit ones, as
      // the fp32 rule says (a 2-core Zen 5 VM trained a bf16 ResNet-18 at 1.1x the 256-bit peak).
      const bool halfWidth = amd && c.family < 26;
      perCycle = halfWidth ? 64 : 128;
      why = halfWidth ? "AVX512_BF16 on Zen 4's 256-bit pipes: 2 x 8 lanes x 2 products x 2"
                      : "AVX512_BF16 (VDPBF16PS): 2 units x 16 lanes x 2 products x 2";
    } else {
      r.native = false, r.missing = "AVX512_BF16 or AMX-BF16";
    }
  } else if (precision == Precision::Fp16) {
    if (c.has("amx_fp16")) {
      perCycle = 1024, why = "AMX-FP16: 1024 fp16 FLOP/cycle per core";
    } else if (c.has("avx512_fp16")) {
      perCycle = 128, why = "AVX512_FP16: 2 FMA units x 32 fp16 lanes x 2";
    } else {
      r.native = false, r.missing = "AVX512_FP16 or AMX-FP16";
    }
  }
  const int used = threads > 0 ? std::min(threads, c.cores) : c.cores;
  r.flopsPerS = static_cast<double>(used) * perCycle * c.clockHz;
  r.how = strf("%s: %d core(s) x %d FLOP/cycle (%s%s) x %.2f GHz (%s)", c.model.empty() ? "CPU" : c.model.c_str(), used,
               perCycle, why.c_str(), r.native ? "" : (std::string("; no native ") + precisionName(precision) +
                                                       ": converted to fp32, fp32's peak").c_str(),
               c.clockHz / 1e9, c.clockSource.c_str());
  return r;
}

std::vector<std::string> cpuFeatures(const CpuInfo& c) {
  static const std::vector<std::pair<const char*, const char*>> known{
      {"sse2", "SSE2"},           {"avx", "AVX"},
      {"avx2", "AVX2"},           {"fma", "FMA"},
      {"avx512f", "AVX-512F"},    {"avx512_vnni", "AVX512_VNNI"},
      {"avx512_bf16", "AVX512_BF16"}, {"avx512_fp16", "AVX512_FP16"},
      {"amx_tile", "AMX"},        {"amx_bf16", "AMX-BF16"},
      {"amx_fp16", "AMX-FP16"},   {"amx_int8", "AMX-INT8"},
  };
  std::vector<std::string> out;
  for (const auto& [flag, name] : known)
    if (c.has(flag)) out.emplace_back(name);
  return out;
}

std::vector<std::string> cudaFeatures(int major, int minor) {
  const int cc = major * 10 + minor;
  std::vector<std::string> out{"fp32"};
  if (cc >= 70) out.emplace_back("fp16 tensor cores");
  if (cc >= 80) out.emplace_back("TF32"), out.emplace_back("bf16");
  if (cc >= 89) out.emplace_back("fp8");
  return out;
}

}  // namespace exprun
