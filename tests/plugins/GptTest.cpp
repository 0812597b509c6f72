// Purpose: the `gpt` model plugin: its logits equal Hugging Face's GPT2LMHeadModel's on the same
// (random) weights, loaded from safetensors with the Conv1D weights transposed; nanoGPT's sizes,
// tied head, padded vocabulary and initialisation; block recompute with dropout gives the gradients
// of the plain backward; bad options and weight files are named.
#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/checkpoint/Checkpoint.h"
#include "runner/checkpoint/Export.h"
#include "runner/spec/Spec.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {
std::shared_ptr<Model> gpt(const std::string& options, const DataInfo& d = DataInfo{0, 0, 0, 0, 97, 32}) {
  const Spec s = loadSpecFromString("name: g\nmodel: {type: gpt, " + options + "}\ndata: {type: synthetic}\n", "g.yaml");
  return registry<ModelKind>().get("gpt")(s.model, d);
}
}  // namespace

TEST_SUITE("gpt") {
  TEST_CASE("logits equal transformers' GPT2LMHeadModel on its random weights, in fp32 within 1e-5") {
    test::TempDir dir;
    const std::string out = test::runPython(R"(
import os, sys
os.environ["HF_HUB_OFFLINE"] = "1"  # the model is built from its config: nothing to download
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(3)
cfg = GPT2Config(vocab_size=97, n_positions=32, n_embd=48, n_layer=3, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0, activation_function="gelu_new")
m = GPT2LMHeadModel(cfg).eval()
with torch.no_grad():  # biases and LayerNorms away from their initial zeros and ones
    for name, p in m.named_parameters():
        if p.dim() == 1:
            p.add_(torch.randn_like(p) * 0.1)
save_file({k: v.contiguous() for k, v in m.state_dict().items() if k != "lm_head.weight"}, sys.argv[1] + "/w.safetensors")
idx = torch.randint(0, 97, (2, 20))
with torch.no_grad():
    logits = m(idx).logits
save_file({"idx": idx, "logits": logits.contiguous()}, sys.argv[1] + "/io.safetensors")
print("ok")
)",
                                            {dir.path.string()});
    REQUIRE(out.find("ok") != std::string::npos);
    auto m = gpt("n_layer: 3, n_head: 4, n_embd: 48, block_size: 32, weights: " + dir.file("w.safetensors"));
    m->eval();
    std::map<std::string, torch::Tensor> io;
    for (auto& [k, v] : readSafetensors(dir.file("io.safetensors"))) io[k] = v;
    torch::NoGradGuard noGrad;
    const torch::Tensor logits = m->forward(io.at("idx"));
    REQUIRE(logits.sizes() == io.at("logits").sizes());
    const double worst = (logits - io.at("logits")).abs().max().item<double>();
    CAPTURE(worst);
    CHECK(worst < 1e-5);
  }

  TEST_CASE("nanoGPT's sizes, tied head, padded vocabulary and initialisation") {
    auto small = gpt("n_layer: 2, n_head: 2, n_embd: 16, block_size: 8, pad_vocab_multiple: 64");
    std::map<std::string, torch::Tensor> p;
    for (const auto& x : small->named_parameters()) p[x.key()] = x.value();
    CHECK(p.at("transformer.wte.weight").size(0) == 128);  // 97 rounded up to a multiple of 64
    CHECK(p.count("lm_head.weight") == 0);                   // the head is the token embedding
    CHECK(p.count("transformer.h.1.mlp.c_fc.bias") == 1);
    const torch::Tensor x = torch::randint(97, {2, 8});
    CHECK(small->forward(x).sizes() == torch::IntArrayRef{2, 8, 128});
    CHECK_THROWS_CONTAINING(c10::Error, small->forward(torch::randint(97, {1, 9})), "block_size 8");
    // GPT-2 small: 124,439,808 parameters with GPT-2's vocabulary (position embeddings included).
    auto gpt2 = gpt("size: gpt2", DataInfo{0, 0, 0, 0, 50257, 1024});
    CHECK(countParameters(*gpt2) == 124439808);
    std::map<std::string, torch::Tensor> q;
    for (const auto& x : gpt2->named_parameters()) q[x.key()] = x.value();
    CHECK(q.at("transformer.h.0.attn.c_attn.weight").std().item<double>() == doctest::Approx(0.02).epsilon(0.01));
    CHECK(q.at("transformer.h.0.mlp.c_proj.weight").std().item<double>() ==
          doctest::Approx(0.02 / std::sqrt(24.0)).epsilon(0.01));
    CHECK(q.at("transformer.h.0.attn.c_attn.bias").abs().max().item<double>() == 0.0);
    CHECK(q.at("transformer.ln_f.weight").min().item<double>() == 1.0);
    auto nobias = gpt("n_layer: 1, n_head: 2, n_embd: 8, block_size: 4, bias: false");
    for (const auto& x : nobias->named_parameters()) CHECK(x.key().find("bias") == std::string::npos);
  }

  // The gradients of a dropout GPT on `device`, its blocks recomputed in backward or not.
  auto dropoutGrads = [](bool recompute, torch::Device device) {
    torch::manual_seed(11);
    auto m = gpt("n_layer: 3, n_head: 2, n_embd: 16, block_size: 8, dropout: 0.2");
    m->to(device);
    m->train();
    if (recompute) m->setRecomputed({"h"}, 1);
    torch::manual_seed(5);
    const torch::Tensor idx = torch::randint(97, {4, 8}).to(device);
    m->forward(idx).logsumexp(2).mean().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : m->parameters()) g.push_back(p.grad().flatten().cpu());
    return torch::cat(g);
  };

  TEST_CASE("block recompute with dropout gives the gradients of the plain backward") {
    const torch::Tensor plain = dropoutGrads(false, torch::kCPU), recomputed = dropoutGrads(true, torch::kCPU);
    CHECK(torch::equal(plain, recomputed));
    CHECK(plain.abs().sum().item<double>() > 0);
  }

  TEST_CASE("block recompute with dropout on CUDA: the device's generator restored for the recomputation (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    const torch::Tensor plain = dropoutGrads(false, torch::kCUDA), recomputed = dropoutGrads(true, torch::kCUDA);
    CHECK(torch::equal(plain, recomputed));
    CHECK(plain.abs().sum().item<double>() > 0);
  }

  TEST_CASE("bad options and weight files are named") {
    CHECK_THROWS_CONTAINING(std::invalid_argument, gpt("n_head: 5, n_embd: 16"), "n_embd", "n_head 5");
    CHECK_THROWS_CONTAINING(std::invalid_argument, gpt("n_layer: 1", DataInfo{3, 28, 28, 10}), "vocab_size");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString("name: g\nmodel: {type: gpt, size: gpt5}\ndata: {type: synthetic}\n", "g.yaml"),
                            "size");
    test::TempDir dir;
    CHECK_THROWS_CONTAINING(CheckpointError, gpt("weights: " + dir.file("none.safetensors")), "none.safetensors");
    test::writeText(dir.file("junk.safetensors"), "not a safetensors file at all");
    CHECK_THROWS_CONTAINING(CheckpointError, gpt("weights: " + dir.file("junk.safetensors")), "junk.safetensors");
    writeSafetensors(dir.file("other.safetensors"), {{"transformer.wte.weight", torch::zeros({5, 4})}}, {});
    CHECK_THROWS_CONTAINING(CheckpointError, gpt("n_layer: 1, n_head: 2, n_embd: 8, weights: " + dir.file("other.safetensors")),
                            "transformer.wte.weight", "shape");
  }
}
