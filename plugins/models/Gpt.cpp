// Purpose: model `gpt` — GPT-2 as nanoGPT's model.py and Hugging Face's GPT2LMHeadModel define it:
// token + learned position embeddings, pre-LayerNorm blocks (causal self-attention through
// scaled_dot_product_attention, a 4x MLP), a final LayerNorm and an LM head tied to the token
// embedding; nanoGPT's module names, so state dicts line up, and `weights` loads a
// GPT2LMHeadModel's safetensors (its Conv1D weights transposed). Rule: the logits are the
// reference's — GELU's tanh form by default (GPT-2's), nanoGPT's initialisation.
#include <cmath>

#include "runner/api/Model.h"
#include "runner/checkpoint/Export.h"

namespace exprun {
namespace {

namespace nn = torch::nn;

struct GptConfig {
  std::int64_t layers = 12, heads = 12, width = 768, blockSize = 1024, vocab = 50257;
  double dropout = 0.0;
  bool bias = true;
  bool tanhGelu = true;
};

// LayerNorm with an optional bias (nanoGPT's `bias: false` drops it, which torch::nn::LayerNorm cannot).
struct LayerNormImpl : nn::Module {
  LayerNormImpl(std::int64_t width, bool bias)
      : weight(register_parameter("weight", torch::ones({width}))),
        bias(bias ? register_parameter("bias", torch::zeros({width})) : torch::Tensor()) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(LayerNorm);

struct CausalSelfAttentionImpl : nn::Module {
  explicit CausalSelfAttentionImpl(const GptConfig& c)
      : c_attn(register_module("c_attn", nn::Linear(nn::LinearOptions(c.width, 3 * c.width).bias(c.bias)))),
        c_proj(register_module("c_proj", nn::Linear(nn::LinearOptions(c.width, c.width).bias(c.bias)))),
        resid_dropout(register_module("resid_dropout", nn::Dropout(c.dropout))),
        heads(c.heads),
        dropout(c.dropout) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t b = x.size(0), t = x.size(1), width = x.size(2);
    const auto qkv = c_attn(x).split(width, 2);
    auto headsOf = [&](const torch::Tensor& m) { return m.view({b, t, heads, width / heads}).transpose(1, 2); };
    const torch::Tensor y = at::scaled_dot_product_attention(headsOf(qkv[0]), headsOf(qkv[1]), headsOf(qkv[2]), {},
                                                             is_training() ? dropout : 0.0, /*is_causal=*/true);
    return resid_dropout(c_proj(y.transpose(1, 2).contiguous().view({b, t, width})));
  }
  nn::Linear c_attn, c_proj;
  nn::Dropout resid_dropout;
  std::int64_t heads;
  double dropout;
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : nn::Module {
  explicit MlpImpl(const GptConfig& c)
      : c_fc(register_module("c_fc", nn::Linear(nn::LinearOptions(c.width, 4 * c.width).bias(c.bias)))),
        c_proj(register_module("c_proj", nn::Linear(nn::LinearOptions(4 * c.width, c.width).bias(c.bias)))),
        dropout(register_module("dropout", nn::Dropout(c.dropout))),
        tanh(c.tanhGelu) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return dropout(c_proj(torch::gelu(c_fc(x), tanh ? "tanh" : "none")));
  }
  nn::Linear c_fc, c_proj;
  nn::Dropout dropout;
  bool tanh;
};
TORCH_MODULE(Mlp);

struct BlockImpl : nn::Module {
  explicit BlockImpl(const GptConfig& c)
      : ln_1(register_module("ln_1", LayerNorm(c.width, c.bias))),
        attn(register_module("attn", CausalSelfAttention(c))),
        ln_2(register_module("ln_2", LayerNorm(c.width, c.bias))),
        mlp(register_module("mlp", Mlp(c))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  LayerNorm ln_1;
  CausalSelfAttention attn;
  LayerNorm ln_2;
  Mlp mlp;
};
TORCH_MODULE(Block);

bool endsWith(const std::string& name, const std::string& suffix) {
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The Conv1D weights of a GPT2LMHeadModel checkpoint ([in, out]), transposed on loading.
bool conv1dWeight(const std::string& name) {
  for (const char* suffix : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (endsWith(name, suffix)) return true;
  return false;
}

class Gpt : public Model {
 public:
  explicit Gpt(const GptConfig& c) : c_(c) {
    transformer_ = register_module("transformer", std::make_shared<nn::Module>());
    wte = transformer_->register_module("wte", nn::Embedding(c.vocab, c.width));
    wpe = transformer_->register_module("wpe", nn::Embedding(c.blockSize, c.width));
    drop = transformer_->register_module("drop", nn::Dropout(c.dropout));
    h = transformer_->register_module("h", nn::ModuleList());
    for (std::int64_t i = 0; i < c.layers; ++i) {
      blocks_.push_back(Block(c));
      h->push_back(blocks_.back());
    }
    ln_f = transformer_->register_module("ln_f", LayerNorm(c.width, c.bias));
    initialise();
  }

  // idx: int64 token ids [B, T], T <= block_size; the logits [B, T, vocab] (the LM head is the
  // token embedding's matrix).
  torch::Tensor forward(torch::Tensor idx) override {
    const std::int64_t t = idx.size(1);
    TORCH_CHECK(t <= c_.blockSize, "gpt: a sequence of ", t, " tokens is longer than block_size ", c_.blockSize);
    const torch::Tensor pos = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    torch::Tensor x = drop(wte(idx) + wpe(pos));
    std::vector<StageBlock> blocks;
    for (auto& b : blocks_) blocks.push_back([b](torch::Tensor y) mutable { return b(y); });
    x = stage("h", blocks, x);
    return torch::linear(ln_f(x), wte->weight);
  }
  std::vector<std::string> stages() const override { return {"h"}; }

  // A GPT2LMHeadModel's (or nanoGPT's) safetensors: names with or without "transformer.", the
  // attention's mask buffers and the tied lm_head.weight ignored, Conv1D weights transposed.
  void load(const std::string& path) {
    loadSafetensorsInto(*this, path, "gpt", [](const std::string& file, torch::Tensor& t) -> std::string {
      const std::string name =
          file.rfind("transformer.", 0) == 0 || file == "lm_head.weight" ? file : "transformer." + file;
      if (name == "lm_head.weight" || name.find(".attn.bias") != std::string::npos ||
          name.find(".attn.masked_bias") != std::string::npos)
        return "";
      if (conv1dWeight(name) && t.dim() == 2) t = t.t();
      return name;
    });
  }

 private:
  // nanoGPT's _init_weights: N(0, 0.02) for linear and embedding weights, zero biases, and the
  // residual projections N(0, 0.02 / sqrt(2 n_layer)).
  void initialise() {
    torch::NoGradGuard noGrad;
    for (const auto& p : named_parameters()) {
      const std::string& name = p.key();
      torch::Tensor w = p.value();
      if (name.find("ln_") != std::string::npos) continue;  // LayerNorm: ones and zeros already
      if (w.dim() == 1) {
        w.zero_();
      } else if (endsWith(name, "c_proj.weight")) {
        w.normal_(0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c_.layers)));
      } else {
        w.normal_(0.0, 0.02);
      }
    }
  }

  GptConfig c_;
  std::shared_ptr<nn::Module> transformer_;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout drop{nullptr};
  nn::ModuleList h{nullptr};
  std::vector<Block> blocks_;
  LayerNorm ln_f{nullptr};
};

struct GptSettings {
  std::string size;
  std::int64_t layers = 0, heads = 0, width = 0, blockSize = 1024, vocab = 0, padVocab = 1;
  double dropout = 0.0;
  bool bias = true;
  std::string gelu = "tanh";
  std::string weights;
};
const OptionTable<GptSettings> kOptions{{
    oneOf("size", &GptSettings::size, {"", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"},
          "a named GPT-2 size (n_layer, n_head, n_embd: 12/12/768, 24/16/1024, 36/20/1280, 48/25/1600)"),
    field("n_layer", &GptSettings::layers, "transformer blocks (0: the size's, else 12)", {0, 1024}),
    field("n_head", &GptSettings::heads, "attention heads (0: the size's, else 12)", {0, 1024}),
    field("n_embd", &GptSettings::width, "embedding width (0: the size's, else 768)", {0, 65536}),
    field("block_size", &GptSettings::blockSize, "the longest sequence (position embeddings)", {1, 1 << 20}),
    field("vocab_size", &GptSettings::vocab, "vocabulary (0: the data's)", {0}),
    field("pad_vocab_multiple", &GptSettings::padVocab,
          "the embedding's rows rounded up to a multiple of this (64: nanoGPT's 50304 for GPT-2's 50257)", {1, 4096}),
    field("dropout", &GptSettings::dropout, "dropout of the embeddings, attention and residual branches", {0.0, 1.0}),
    field("bias", &GptSettings::bias, "biases in the linear layers and LayerNorms (GPT-2: true)"),
    oneOf("gelu", &GptSettings::gelu, {"tanh", "exact"},
          "the MLP's GELU: tanh (GPT-2's and Hugging Face's gelu_new) or exact (nanoGPT's nn.GELU())"),
    field("weights", &GptSettings::weights,
          "a safetensors file of GPT2LMHeadModel's (or this plugin's) weights to start from (empty: initialised)"),
}};

std::shared_ptr<Model> makeGpt(const Options& o, const DataInfo& d) {
  const GptSettings s = kOptions.read(o);
  struct Size {
    const char* name;
    std::int64_t layers, heads, width;
  };
  const Size sizes[] = {{"", 12, 12, 768}, {"gpt2", 12, 12, 768}, {"gpt2-medium", 24, 16, 1024},
                        {"gpt2-large", 36, 20, 1280}, {"gpt2-xl", 48, 25, 1600}};
  GptConfig c;
  for (const Size& z : sizes)
    if (s.size == z.name) c.layers = z.layers, c.heads = z.heads, c.width = z.width;
  if (s.layers) c.layers = s.layers;
  if (s.heads) c.heads = s.heads;
  if (s.width) c.width = s.width;
  if (c.width % c.heads != 0)
    throw std::invalid_argument("model.n_embd: " + std::to_string(c.width) + " is not a multiple of n_head " +
                                std::to_string(c.heads));
  c.blockSize = s.blockSize;
  const std::int64_t vocab = s.vocab > 0 ? s.vocab : d.vocabSize;
  if (vocab <= 0)
    throw std::invalid_argument("model.vocab_size: the data plugin gives no vocabulary; set model.vocab_size");
  c.vocab = (vocab + s.padVocab - 1) / s.padVocab * s.padVocab;
  c.dropout = s.dropout;
  c.bias = s.bias;
  c.tanhGelu = s.gelu == "tanh";
  auto model = std::make_shared<Gpt>(c);
  if (!s.weights.empty()) model->load(s.weights);
  return model;
}

const Register<ModelKind> kRegistered{"gpt", "GPT-2 (nanoGPT's and Hugging Face's), tied LM head; loads GPT2LMHeadModel weights",
                                      kOptions.decls(), makeGpt};

}  // namespace
}  // namespace exprun
