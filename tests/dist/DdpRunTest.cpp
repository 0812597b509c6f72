// Purpose: real multi-process runs of the exprun binary on Gloo: 2 ranks x batch b end with the
// same parameters as 1 process x batch 2b (model without batch norm; relative difference
// <= 1e-5), for each comm plugin, and the result file carries the distributed fields.
#include <cstdlib>

#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

using exprun::test::readText;
using exprun::test::runQuiet;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {

const char* kDdpSpec = R"(name: equiv
seed: 11
model: {type: small_cnn, width: 4, hidden: 16, dropout: 0.0, batch_norm: false}
data: {type: fashion_mnist, train_limit: 2048, test_limit: 500, random_crop_padding: 2, hflip: true}
optimizer: {type: sgd, lr: 0.1, base_batch: 64, momentum: 0.9, weight_decay: 1.0e-4}
scheduler: {type: cosine, warmup_steps: 3}
train: {epochs: 1, max_steps: 12, threads: 1, workers: 1, log_every: 0}
output: {save_weights: true}
distributed: {timeout_s: 60}
)";

std::map<std::string, torch::Tensor> loadWeights(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& key : archive.keys()) {
    torch::Tensor t;
    archive.read(key, t);
    out[key] = t;
  }
  return out;
}

}  // namespace

TEST_SUITE("ddp") {
  TEST_CASE("2 ranks x batch 32 == 1 process x batch 64, for every comm plugin") {
    TempDir dir;
    writeText(dir.file("equiv.yaml"), kDdpSpec);
    const std::string exe = EXPRUN_BINARY;
    REQUIRE(runQuiet(exe + " run " + dir.file("equiv.yaml") + " --out " + dir.file("single") + " --set train.batch_size=64") == 0);
    auto single = loadWeights(dir.file("single/equiv.weights.pt"));
    REQUIRE(single.size() == 8);
    // The last case: 2 ranks x 16 x accumulate 2 (no_sync on the first micro-batch), checkpointed.
    for (const std::string comm : {"allreduce", "allreduce_after_backward", "bf16_compress", "allreduce+accumulate"}) {
      CAPTURE(comm);
      const bool acc = comm == "allreduce+accumulate";
      const std::string out = dir.file("ddp-" + std::to_string(comm.size()) + comm.substr(0, 9));
      REQUIRE(runQuiet(exe + " launch --nproc-per-node 2 " + dir.file("equiv.yaml") + " --out " + out +
                  (acc ? " --set train.batch_size=16 --set train.accumulate=2 --set train.activation_checkpointing=[all]"
                       : " --set train.batch_size=32 --set distributed.comm.type=" + comm) +
                  (comm == "allreduce" ? " --set distributed.comm.bucket_mb=0.01" : "")) == 0);
      auto ddp = loadWeights(out + "/equiv.weights.pt");
      REQUIRE(ddp.size() == single.size());
      double worst = 0;
      for (const auto& [key, t] : single) {
        double rel = (ddp[key] - t).abs().max().item<double>() / std::max(1e-6, t.abs().max().item<double>());
        worst = std::max(worst, rel);
      }
      MESSAGE(comm << ": max relative parameter difference " << worst);
      CHECK(worst <= (comm == "bf16_compress" ? 2e-2 : 1e-5));
      auto j = nlohmann::json::parse(readText(out + "/equiv.json"));
      CHECK(j["provenance"]["world_size"] == 2);
      CHECK(j["provenance"]["backend"] == "gloo");
      CHECK(j["provenance"]["comm"] == (acc ? std::string("allreduce") : comm));
      CHECK(j["provenance"]["global_batch"] == 64);
      CHECK(j["provenance"]["launcher"] == "exprun-launch");
      const auto& e = j["epochs"][0];
      CHECK(e["samples"] == 12 * 64);
      CHECK(e["peak_memory_bytes_per_rank"].size() == 2);
      CHECK(e["comm_wait_s"].get<double>() >= 0.0);
      CHECK(e["val_top1"].get<double>() > 10.0);
    }
  }
}
