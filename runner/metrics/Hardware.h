// Purpose: what a device computes natively, and its peak FLOP/s per precision worked out from
// published figures and the instruction set, not from a benchmark — MFU's denominator. CUDA devices
// by name from a table of published dense peaks (no 2:4 sparsity); CPUs as cores × FLOPs per cycle
// per core × clock.
// Rule: every peak names its rule or source; a device not in the table has no rule (the caller
// measures a GEMM instead and says so). Torch-free: the rules are functions of a CPU's flags and a
// device's name, tested on given ones.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "runner/spec/Sections.h"

namespace exprun {

// A device's published figures (dense peaks, FLOP/s; 0: no such arithmetic).
struct DeviceFigures {
  std::string name;   // the --device / --calibrate name
  std::string title;  // "NVIDIA GeForce RTX 3090 24 GB"
  std::int64_t memoryBytes = 0;
  double fp32 = 0;  // CUDA cores
  double tf32 = 0;  // tensor cores; cuDNN's convolutions use TF32 by default from Ampere on
  double fp16 = 0;  // tensor cores, fp16 inputs, fp32 accumulation
  double bf16 = 0;  // tensor cores, bf16 inputs, fp32 accumulation (0: no bf16 tensor cores)
  double fp8 = 0;   // tensor cores, fp8 inputs, fp32 accumulation
  std::vector<std::string> cudaNames;  // words of torch's device name that identify the device
  std::string source;
};
const std::vector<DeviceFigures>& knownDevices();
const DeviceFigures& deviceNamed(const std::string& name);  // throws std::invalid_argument listing the names
// The device whose cudaNames all appear, as whole words, in `deviceName` ("NVIDIA H100 PCIe"); the
// first in table order (the more specific variants come first); nullptr: not in the table.
const DeviceFigures* deviceForCudaName(const std::string& deviceName);

// The peak a training step in `precision` runs at on `device`: fp32 → the larger of fp32 and tf32
// (PyTorch lets cuDNN convolutions use TF32 unless told not to); fp16 → fp16 tensor cores; bf16 →
// bf16 tensor cores, or fp32's peak on a device without them.
double peakFor(const DeviceFigures& device, Precision precision);

// The parts of /proc/cpuinfo (first processor block, and the count of packages and processors)
// the peak rule reads.
struct CpuInfo {
  std::string vendor;  // GenuineIntel, AuthenticAMD, ...
  std::string model;   // model name
  int family = 0, modelNumber = 0;
  std::set<std::string> flags;
  int cores = 0;  // physical cores of the machine (hyper-threads not counted)
  double clockHz = 0;
  std::string clockSource;
  bool has(const std::string& flag) const { return flags.count(flag) > 0; }
};
// From the text of /proc/cpuinfo and of cpufreq's cpuinfo_max_freq (kHz; empty where absent), and
// a measured clock (Hz; 0: none). The clock: cpufreq's maximum (turbo included) where the kernel has
// it; else the highest of the model name's ("@ 2.10GHz"), /proc/cpuinfo's "cpu MHz" and the measured
// one — a virtual machine often states its nominal clock while the cores run faster.
CpuInfo parseCpuInfo(const std::string& procCpuinfo, const std::string& maxFreqKHz = "", double measuredHz = 0);
// The clock a core runs at now: a chain of dependent integer additions (one a cycle on every x86
// core since the Pentium Pro), timed; the best of five rounds of 20 ms. An upper bound of the clock
// under vector load (wide vector units may run slower), so a peak from it is not too low.
double measureClockHz();
const CpuInfo& thisCpu();  // this machine's, read (and its clock measured) once

// A peak worked out by rule.
struct PeakRule {
  double flopsPerS = 0;  // 0: no rule fits (measure instead)
  bool native = true;    // false: no arithmetic for the precision; it runs converted, at fp32's peak
  std::string missing;   // what native arithmetic would need, e.g. "AVX512_BF16 or AMX-BF16"
  std::string how;       // the arithmetic and its source, one line
};
// The CPU's peak for `precision` with `threads` threads (≤ 0: all cores); threads beyond the
// physical cores add nothing. FLOPs per cycle come from the ISA (FMA units × vector lanes × 2 for a
// multiply-add; AMX tiles for bf16/fp16), per precision; a precision the CPU has no arithmetic for
// runs converted to fp32 (oneDNN's fallback) and gets fp32's peak, marked emulated, naming the
// missing feature.
PeakRule cpuPeak(const CpuInfo& cpu, Precision precision, int threads);
// The device's peak by its CUDA device name (flopsPerS 0 when the device is not in the table).
PeakRule cudaPeak(const std::string& deviceName, Precision precision);

// What the CPU computes natively, as feature names (AVX2, FMA, AVX-512F, AVX512_BF16, AMX-BF16, ...).
std::vector<std::string> cpuFeatures(const CpuInfo& cpu);
// What a CUDA device of compute capability major.minor computes natively on tensor cores.
std::vector<std::string> cudaFeatures(int major, int minor);

}  // namespace exprun
