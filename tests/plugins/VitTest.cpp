// Purpose: the `vit` model plugin against torchvision's VisionTransformer: the same state-dict
// names and shapes, logits equal on torchvision's own random weights (fp32, 1e-5), vit_b_16's
// parameter count; block recompute with dropout gives the plain backward's gradients; bad
// options, images and weight files are named.
#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/checkpoint/Checkpoint.h"
#include "runner/checkpoint/Export.h"
#include "runner/spec/Spec.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {
std::shared_ptr<Model> vit(const std::string& options, const DataInfo& d = DataInfo{3, 32, 32, 10}) {
  const Spec s = loadSpecFromString("name: v\nmodel: {type: vit, " + options + "}\ndata: {type: synthetic}\n", "v.yaml");
  return registry<ModelKind>().get("vit")(s.model, d);
}
const char* kSmall = "patch_size: 8, num_layers: 2, num_heads: 4, hidden_dim: 48, mlp_dim: 96";
}  // namespace

TEST_SUITE("vit") {
  TEST_CASE("state-dict names, shapes and logits equal torchvision's VisionTransformer (fp32, 1e-5)") {
    test::TempDir dir;
    const std::string out = test::runPython(R"(
import sys, torch, torchvision
from safetensors.torch import save_file
torch.manual_seed(3)
m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=48,
                                         mlp_dim=96, num_classes=10).eval()
with torch.no_grad():  # the head starts at zero, biases near it: move them so that they count
    for name, p in m.named_parameters():
        if p.dim() == 1 or name.startswith("heads") or name == "class_token":
            p.add_(torch.randn_like(p) * 0.1)
save_file({k: v.contiguous() for k, v in m.state_dict().items()}, sys.argv[1] + "/w.safetensors")
x = torch.randn(3, 3, 32, 32)
with torch.no_grad():
    y = m(x)
save_file({"x": x, "y": y}, sys.argv[1] + "/io.safetensors")
for k, v in m.state_dict().items():
    print(k, list(v.shape))
print("vit_b_16", sum(p.numel() for p in torchvision.models.vit_b_16().parameters()))
)",
                                            {dir.path.string()});
    REQUIRE(out.find("vit_b_16") != std::string::npos);
    auto m = vit(std::string(kSmall) + ", weights: " + dir.file("w.safetensors"));
    std::string mine;
    auto compact = [](std::string t) {
      t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
      return t;
    };
    for (const auto& p : m->named_parameters()) mine += p.key() + " " + compact(c10::str(p.value().sizes())) + "\n";
    std::istringstream lines(out);
    std::string line;
    std::size_t keys = 0;
    while (std::getline(lines, line)) {
      if (line.rfind("vit_b_16", 0) == 0) {
        CHECK(countParameters(*vit("size: vit_b_16", DataInfo{3, 224, 224, 1000})) == std::stoll(line.substr(9)));
        continue;
      }
      const std::string shape = compact(line.substr(line.find(' ') + 1));
      CAPTURE(line);
      CHECK(mine.find(line.substr(0, line.find(' ')) + " " + shape + "\n") != std::string::npos);
      ++keys;
    }
    CHECK(keys == m->named_parameters().size());
    m->eval();
    std::map<std::string, torch::Tensor> io;
    for (auto& [k, v] : readSafetensors(dir.file("io.safetensors"))) io[k] = v;
    torch::NoGradGuard noGrad;
    const torch::Tensor y = m->forward(io.at("x"));
    REQUIRE(y.sizes() == io.at("y").sizes());
    const double worst = (y - io.at("y")).abs().max().item<double>();
    CAPTURE(worst);
    CHECK(worst < 1e-5);
    CHECK(io.at("y").abs().max().item<double>() > 0.1);
  }

  TEST_CASE("torchvision's initialisation; the data's image size and channels") {
    auto m = vit("patch_size: 7, num_layers: 1, num_heads: 4, hidden_dim: 192, mlp_dim: 768", DataInfo{1, 28, 28, 10});
    std::map<std::string, torch::Tensor> p;
    for (const auto& x : m->named_parameters()) p[x.key()] = x.value();
    CHECK(p.at("conv_proj.weight").sizes() == torch::IntArrayRef{192, 1, 7, 7});
    CHECK(p.at("encoder.pos_embedding").sizes() == torch::IntArrayRef{1, 17, 192});  // 16 patches and the class token
    CHECK(p.at("conv_proj.weight").std().item<double>() == doctest::Approx(1.0 / 7).epsilon(0.05));
    CHECK(p.at("encoder.pos_embedding").std().item<double>() == doctest::Approx(0.02).epsilon(0.05));
    CHECK(p.at("heads.head.weight").abs().max().item<double>() == 0.0);
    CHECK(p.at("class_token").abs().max().item<double>() == 0.0);
    const std::string block = "encoder.layers.encoder_layer_0.";
    CHECK(p.at(block + "self_attention.in_proj_bias").abs().max().item<double>() == 0.0);
    // xavier_uniform_: bound sqrt(6 / (fan_in + fan_out)); MLP biases N(0, 1e-6).
    CHECK(p.at(block + "mlp.0.weight").abs().max().item<double>() <= std::sqrt(6.0 / (192 + 768)));
    CHECK(p.at(block + "mlp.0.bias").abs().max().item<double>() < 1e-5);
    CHECK(m->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10});
  }

  TEST_CASE("block recompute with dropout gives the gradients of the plain backward") {
    auto run = [](bool recompute) {
      torch::manual_seed(11);
      auto m = vit(std::string(kSmall) + ", dropout: 0.2, attention_dropout: 0.1");
      m->train();
      if (recompute) m->setRecomputed({"encoder"}, 1);
      torch::manual_seed(5);
      m->forward(torch::randn({4, 3, 32, 32})).logsumexp(1).mean().backward();
      std::vector<torch::Tensor> g;
      for (const auto& p : m->parameters()) g.push_back(p.grad().flatten());
      return torch::cat(g);
    };
    const torch::Tensor plain = run(false), recomputed = run(true);
    CHECK(torch::equal(plain, recomputed));
    CHECK(plain.abs().sum().item<double>() > 0);
  }

  TEST_CASE("bad options, images and weight files are named") {
    CHECK_THROWS_CONTAINING(std::invalid_argument, vit("num_heads: 5, hidden_dim: 48"), "hidden_dim", "num_heads 5");
    CHECK_THROWS_CONTAINING(std::invalid_argument, vit("patch_size: 8", DataInfo{1, 28, 28, 10}), "image_size",
                            "patch_size 8");
    auto m = vit(kSmall);
    CHECK_THROWS_CONTAINING(c10::Error, m->forward(torch::randn({1, 3, 64, 64})), "64x64", "32x32");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString("name: v\nmodel: {type: vit, size: vit_s_16}\ndata: {type: synthetic}\n", "v.yaml"),
                            "size");
    test::TempDir dir;
    CHECK_THROWS_CONTAINING(CheckpointError, vit("weights: " + dir.file("none.safetensors")), "none.safetensors");
    writeSafetensors(dir.file("part.safetensors"), {{"class_token", torch::zeros({1, 1, 48})}}, {});
    CHECK_THROWS_CONTAINING(CheckpointError, vit(std::string(kSmall) + ", weights: " + dir.file("part.safetensors")),
                            "1 of this vit's");
  }
}
