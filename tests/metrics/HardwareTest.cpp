// Purpose: the peak FLOP/s rules (runner/metrics/Hardware.h) on given CPUs and device names: the ISA
// rule per precision (native and emulated), the clock's source, threads against cores, the device
// table by CUDA device name.
#include "runner/metrics/Hardware.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {
// /proc/cpuinfo of `processors` processors of one package with `cores` cores.
std::string cpuinfo(const std::string& vendor, const std::string& model, int family, int modelNumber,
                    const std::string& flags, double mhz, int processors, int cores) {
  std::string text;
  for (int p = 0; p < processors; ++p)
    text += "processor\t: " + std::to_string(p) + "\nvendor_id\t: " + vendor + "\ncpu family\t: " +
            std::to_string(family) + "\nmodel\t\t: " + std::to_string(modelNumber) + "\nmodel name\t: " + model +
            "\ncpu MHz\t\t: " + std::to_string(mhz) + "\nphysical id\t: 0\ncpu cores\t: " + std::to_string(cores) +
            "\nflags\t\t: " + flags + "\n\n";
  return text;
}
const char* kBase = "fpu sse sse2 avx avx2 fma";
}  // namespace

TEST_SUITE("hardware") {
  TEST_CASE("an AMX Xeon: fp32 on AVX-512, bf16 on AMX, fp16 emulated; the cpufreq maximum wins") {
    const CpuInfo c = parseCpuInfo(cpuinfo("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+", 6, 143,
                                           std::string(kBase) + " avx512f avx512_bf16 amx_tile amx_bf16 amx_int8",
                                           2000.0, 4, 4),
                                   "3800000\n");
    CHECK(c.cores == 4);
    CHECK(c.clockHz == doctest::Approx(3.8e9));
    CHECK(c.clockSource.find("cpufreq") != std::string::npos);
    const PeakRule fp32 = cpuPeak(c, Precision::Fp32, 4), bf16 = cpuPeak(c, Precision::Bf16, 4),
                   fp16 = cpuPeak(c, Precision::Fp16, 4);
    CHECK(fp32.flopsPerS == doctest::Approx(4 * 64 * 3.8e9));
    CHECK(bf16.flopsPerS == doctest::Approx(4 * 1024 * 3.8e9));
    CHECK(bf16.native);
    CHECK(bf16.how.find("AMX-BF16") != std::string::npos);
    CHECK_FALSE(fp16.native);
    CHECK(fp16.flopsPerS == doctest::Approx(fp32.flopsPerS));
    CHECK(fp16.missing == "AVX512_FP16 or AMX-FP16");
    const auto features = cpuFeatures(c);
    CHECK(std::find(features.begin(), features.end(), "AMX-BF16") != features.end());
    CHECK(std::find(features.begin(), features.end(), "AVX512_FP16") == features.end());
  }

  TEST_CASE("an AVX2 EPYC without bf16: bf16 is emulated at fp32's peak, the missing feature named") {
    const CpuInfo c = parseCpuInfo(cpuinfo("AuthenticAMD", "AMD EPYC 7B13", 25, 1, kBase, 2450.0, 2, 2));
    CHECK(c.clockHz == doctest::Approx(2.45e9));
    CHECK(c.clockSource.find("cpu MHz") != std::string::npos);
    const PeakRule fp32 = cpuPeak(c, Precision::Fp32, 2), bf16 = cpuPeak(c, Precision::Bf16, 2);
    CHECK(fp32.flopsPerS == doctest::Approx(2 * 32 * 2.45e9));
    CHECK(fp32.native);
    CHECK_FALSE(bf16.native);
    CHECK(bf16.missing == "AVX512_BF16 or AMX-BF16");
    CHECK(bf16.flopsPerS == doctest::Approx(fp32.flopsPerS));
    CHECK(bf16.how.find("no native bf16") != std::string::npos);
  }

  TEST_CASE("Zen 4's AVX-512 and AVX512_BF16 on 256-bit pipes, Zen 5's on 512-bit ones; Zen 1's AVX2 on 128-bit ones") {
    const CpuInfo zen4 = parseCpuInfo(
        cpuinfo("AuthenticAMD", "AMD EPYC 9654 96-Core Processor", 25, 17, std::string(kBase) + " avx512f avx512_bf16",
                2400.0, 1, 1));
    CHECK(cpuPeak(zen4, Precision::Fp32, 1).flopsPerS == doctest::Approx(32 * 2.4e9));
    CHECK(cpuPeak(zen4, Precision::Bf16, 1).flopsPerS == doctest::Approx(64 * 2.4e9));
    // Zen 5 (family 26): 512-bit pipes, for fp32 and bf16 alike.
    const CpuInfo zen5 =
        parseCpuInfo(cpuinfo("AuthenticAMD", "AMD EPYC", 26, 2, std::string(kBase) + " avx512f avx512_bf16", 2600.0, 1, 1));
    CHECK(cpuPeak(zen5, Precision::Fp32, 1).flopsPerS == doctest::Approx(64 * 2.6e9));
    CHECK(cpuPeak(zen5, Precision::Bf16, 1).flopsPerS == doctest::Approx(128 * 2.6e9));
    CHECK(cpuPeak(zen5, Precision::Bf16, 1).how.find("256-bit") == std::string::npos);
    const CpuInfo zen1 = parseCpuInfo(cpuinfo("AuthenticAMD", "AMD EPYC 7601", 23, 1, kBase, 2200.0, 1, 1));
    CHECK(cpuPeak(zen1, Precision::Fp32, 1).flopsPerS == doctest::Approx(16 * 2.2e9));
  }

  TEST_CASE("threads beyond the physical cores add nothing; the model name's clock; no rule without x86 flags") {
    const CpuInfo c = parseCpuInfo(
        cpuinfo("GenuineIntel", "Intel(R) Xeon(R) CPU E5-2690 v4 @ 2.60GHz", 6, 79, kBase, 1200.0, 4, 2));
    CHECK(c.cores == 2);  // 4 hyper-threads on 2 cores
    CHECK(c.clockHz == doctest::Approx(2.6e9));
    CHECK(c.clockSource == "the model name");
    CHECK(cpuPeak(c, Precision::Fp32, 1).flopsPerS == doctest::Approx(32 * 2.6e9));
    CHECK(cpuPeak(c, Precision::Fp32, 8).flopsPerS == doctest::Approx(2 * 32 * 2.6e9));
    CHECK(cpuPeak(c, Precision::Fp32, 0).flopsPerS == doctest::Approx(2 * 32 * 2.6e9));
    const CpuInfo arm = parseCpuInfo("processor\t: 0\nFeatures\t: fp asimd\n\n");
    CHECK(cpuPeak(arm, Precision::Fp32, 1).flopsPerS == 0);
    CHECK(thisCpu().cores >= 1);
  }

  TEST_CASE("without a cpufreq maximum, a measured clock above the stated one wins, and says so") {
    const std::string text = cpuinfo("GenuineIntel", "Intel(R) Xeon(R) Processor", 6, 143, kBase, 2600.0, 2, 2);
    const CpuInfo faster = parseCpuInfo(text, "", 4.1e9);
    CHECK(faster.clockHz == doctest::Approx(4.1e9));
    CHECK(faster.clockSource.rfind("measured", 0) == 0);
    CHECK(faster.clockSource.find("above the 2.60 GHz the machine states") != std::string::npos);
    const CpuInfo slower = parseCpuInfo(text, "", 2.0e9);  // a busy core: the stated clock stays
    CHECK(slower.clockHz == doctest::Approx(2.6e9));
    CHECK(slower.clockSource == "/proc/cpuinfo's cpu MHz");
    CHECK(parseCpuInfo(text, "3000000", 4.1e9).clockHz == doctest::Approx(3.0e9));  // cpufreq's maximum first
#if defined(__x86_64__)
    const double hz = measureClockHz();  // this machine's: a real clock, not a unit error
    CHECK(hz > 0.5e9);
    CHECK(hz < 7e9);
#endif
  }

  TEST_CASE("devices by CUDA device name, per precision; unknown devices have no rule") {
    CHECK(deviceForCudaName("NVIDIA H200")->name == "h200");
    CHECK(deviceForCudaName("NVIDIA H200 NVL")->name == "h200-nvl");
    CHECK(deviceForCudaName("NVIDIA H100 PCIe")->name == "h100-pcie");
    CHECK(deviceForCudaName("NVIDIA H100 80GB HBM3")->name == "h100-sxm");
    CHECK(deviceForCudaName("NVIDIA A100-SXM4-40GB")->name == "a100-sxm4-80gb");
    CHECK(deviceForCudaName("NVIDIA L4")->name == "l4");
    CHECK(deviceForCudaName("NVIDIA L40S")->name == "l40s");
    CHECK(deviceForCudaName("NVIDIA GeForce RTX 4090")->name == "rtx4090");
    CHECK(deviceForCudaName("Tesla V100-PCIE-16GB")->name == "v100-pcie");
    CHECK(deviceForCudaName("Tesla V100-SXM2-32GB")->name == "v100-sxm2-16gb");
    CHECK(deviceForCudaName("Tesla T4")->name == "t4");
    CHECK(deviceForCudaName("NVIDIA B200") == nullptr);
    CHECK(cudaPeak("NVIDIA B200", Precision::Bf16).flopsPerS == 0);
    CHECK(cudaPeak("NVIDIA H200", Precision::Bf16).flopsPerS == doctest::Approx(989.5e12));
    CHECK(cudaPeak("NVIDIA H200", Precision::Fp32).flopsPerS == doctest::Approx(494.5e12));  // TF32
    CHECK(cudaPeak("NVIDIA H200", Precision::Fp16).how.find("H200 SXM") != std::string::npos);
    const PeakRule v100 = cudaPeak("Tesla V100-SXM2-16GB", Precision::Bf16);
    CHECK_FALSE(v100.native);
    CHECK(v100.flopsPerS == doctest::Approx(15.7e12));  // no bf16 tensor cores: fp32's peak
    CHECK(cudaPeak("Tesla T4", Precision::Fp16).flopsPerS == doctest::Approx(65e12));
    const auto ampere = cudaFeatures(8, 0), hopper = cudaFeatures(9, 0), volta = cudaFeatures(7, 0);
    CHECK(std::find(ampere.begin(), ampere.end(), "bf16") != ampere.end());
    CHECK(std::find(ampere.begin(), ampere.end(), "fp8") == ampere.end());
    CHECK(std::find(hopper.begin(), hopper.end(), "fp8") != hopper.end());
    CHECK(std::find(volta.begin(), volta.end(), "TF32") == volta.end());
  }
}
