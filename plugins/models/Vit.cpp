// Purpose: model `vit` — torchvision's VisionTransformer: a patch convolution, a class token and
// learned position embeddings, pre-LayerNorm encoder blocks (multi-head attention through
// scaled_dot_product_attention, a GELU MLP), the class token's head. Rule: torchvision's
// state-dict names, initialisation and logits; `weights` loads its safetensors.
#include <cmath>

#include "runner/api/Model.h"
#include "runner/checkpoint/Export.h"

namespace exprun {
namespace {

namespace nn = torch::nn;

struct VitConfig {
  std::int64_t imageSize = 224, patch = 16, layers = 12, heads = 12, hidden = 768, mlp = 3072;
  std::int64_t channels = 3, classes = 1000;
  double dropout = 0.0, attentionDropout = 0.0;
};

nn::LayerNorm layerNorm(std::int64_t width) { return nn::LayerNorm(nn::LayerNormOptions({width}).eps(1e-6)); }

// nn.MultiheadAttention's parameters (in_proj_weight/in_proj_bias, out_proj) on SDPA.
struct SelfAttentionImpl : nn::Module {
  explicit SelfAttentionImpl(const VitConfig& c)
      : in_proj_weight(register_parameter("in_proj_weight", torch::empty({3 * c.hidden, c.hidden}))),
        in_proj_bias(register_parameter("in_proj_bias", torch::zeros({3 * c.hidden}))),
        out_proj(register_module("out_proj", nn::Linear(c.hidden, c.hidden))),
        heads(c.heads),
        dropout(c.attentionDropout) {
    torch::NoGradGuard noGrad;  // MultiheadAttention._reset_parameters
    nn::init::xavier_uniform_(in_proj_weight);
    out_proj->bias.zero_();
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t b = x.size(0), t = x.size(1), width = x.size(2);
    const auto qkv = torch::linear(x, in_proj_weight, in_proj_bias).split(width, 2);
    auto headsOf = [&](const torch::Tensor& m) { return m.view({b, t, heads, width / heads}).transpose(1, 2); };
    const torch::Tensor y = at::scaled_dot_product_attention(headsOf(qkv[0]), headsOf(qkv[1]), headsOf(qkv[2]), {},
                                                             is_training() ? dropout : 0.0);
    return out_proj(y.transpose(1, 2).reshape({b, t, width}));
  }
  torch::Tensor in_proj_weight, in_proj_bias;
  nn::Linear out_proj;
  std::int64_t heads;
  double dropout;
};
TORCH_MODULE(SelfAttention);

struct EncoderBlockImpl : nn::Module {
  explicit EncoderBlockImpl(const VitConfig& c)
      : ln_1(register_module("ln_1", layerNorm(c.hidden))),
        self_attention(register_module("self_attention", SelfAttention(c))),
        dropout(register_module("dropout", nn::Dropout(c.dropout))),
        ln_2(register_module("ln_2", layerNorm(c.hidden))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(c.hidden, c.mlp), nn::GELU(), nn::Dropout(c.dropout),
                                                  nn::Linear(c.mlp, c.hidden), nn::Dropout(c.dropout)))) {
    torch::NoGradGuard noGrad;  // torchvision's MLPBlock
    for (std::size_t i : {0, 3}) {
      auto linear = mlp[i]->as<nn::Linear>();
      nn::init::xavier_uniform_(linear->weight);
      nn::init::normal_(linear->bias, 0.0, 1e-6);
    }
  }
  torch::Tensor forward(const torch::Tensor& input) {
    const torch::Tensor x = dropout(self_attention(ln_1(input))) + input;
    return x + mlp->forward(ln_2(x));
  }
  nn::LayerNorm ln_1;
  SelfAttention self_attention;
  nn::Dropout dropout;
  nn::LayerNorm ln_2;
  nn::Sequential mlp;
};
TORCH_MODULE(EncoderBlock);

// torch.nn.init.trunc_normal_ (inverse CDF of a uniform draw, clamped to [a, b]).
void truncNormal(torch::Tensor w, double std, double a = -2.0, double b = 2.0) {
  auto cdf = [](double v) { return (1.0 + std::erf(v / std::sqrt(2.0))) / 2.0; };
  const double l = cdf(a / std), u = cdf(b / std);
  w.uniform_(2 * l - 1, 2 * u - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(a, b);
}

class Vit : public Model {
 public:
  explicit Vit(const VitConfig& c) : c_(c) {
    const std::int64_t patches = (c.imageSize / c.patch) * (c.imageSize / c.patch);
    conv_proj = register_module(
        "conv_proj", nn::Conv2d(nn::Conv2dOptions(c.channels, c.hidden, c.patch).stride(c.patch)));
    class_token = register_parameter("class_token", torch::zeros({1, 1, c.hidden}));
    encoder_ = register_module("encoder", std::make_shared<nn::Module>());
    pos_embedding = encoder_->register_parameter("pos_embedding", torch::empty({1, patches + 1, c.hidden}));
    drop = encoder_->register_module("dropout", nn::Dropout(c.dropout));
    auto layers = encoder_->register_module("layers", std::make_shared<nn::Module>());
    for (std::int64_t i = 0; i < c.layers; ++i)
      blocks_.push_back(layers->register_module("encoder_layer_" + std::to_string(i), EncoderBlock(c)));
    ln = encoder_->register_module("ln", layerNorm(c.hidden));
    heads_ = register_module("heads", std::make_shared<nn::Module>());
    head = heads_->register_module("head", nn::Linear(c.hidden, c.classes));
    torch::NoGradGuard noGrad;  // VisionTransformer.__init__'s initialisation
    truncNormal(conv_proj->weight, std::sqrt(1.0 / static_cast<double>(c.channels * c.patch * c.patch)));
    conv_proj->bias.zero_();
    pos_embedding.normal_(0.0, 0.02);
    head->weight.zero_();
    head->bias.zero_();
  }

  // x: [N, C, image_size, image_size]; the logits [N, classes] from the class token.
  torch::Tensor forward(torch::Tensor x) override {
    TORCH_CHECK(x.size(2) == c_.imageSize && x.size(3) == c_.imageSize, "vit: an image of ", x.size(2), "x",
                x.size(3), " where the model takes ", c_.imageSize, "x", c_.imageSize);
    const std::int64_t n = x.size(0);
    x = conv_proj(x).flatten(2).transpose(1, 2);  // [N, patches, hidden]
    x = torch::cat({class_token.expand({n, -1, -1}), x}, 1);
    x = drop(x + pos_embedding);
    std::vector<StageBlock> blocks;
    for (auto& b : blocks_) blocks.push_back([b](torch::Tensor y) mutable { return b(y); });
    x = ln(stage("encoder", blocks, x));
    return head(x.select(1, 0));
  }
  std::vector<std::string> stages() const override { return {"encoder"}; }

  void load(const std::string& path) {
    loadSafetensorsInto(*this, path, "vit", [](const std::string& name, torch::Tensor&) { return name; });
  }

 private:
  VitConfig c_;
  nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token, pos_embedding;
  std::shared_ptr<nn::Module> encoder_, heads_;
  nn::Dropout drop{nullptr};
  std::vector<EncoderBlock> blocks_;
  nn::LayerNorm ln{nullptr};
  nn::Linear head{nullptr};
};

struct VitSettings {
  std::string size;
  std::int64_t imageSize = 0, patch = 0, layers = 0, heads = 0, hidden = 0, mlp = 0;
  double dropout = 0.0, attentionDropout = 0.0;
  std::string weights;
};
const OptionTable<VitSettings> kOptions{{
    oneOf("size", &VitSettings::size, {"", "vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"},
          "a torchvision size (patch, layers, heads, hidden, mlp: b_16 16/12/12/768/3072, b_32 32/..., "
          "l_16 16/24/16/1024/4096, l_32 32/..., h_14 14/32/16/1280/5120)"),
    field("image_size", &VitSettings::imageSize, "the square input's side (0: the data's height)", {0, 65536}),
    field("patch_size", &VitSettings::patch, "patch side (0: the size's, else 16)", {0, 65536}),
    field("num_layers", &VitSettings::layers, "encoder blocks (0: the size's, else 12)", {0, 1024}),
    field("num_heads", &VitSettings::heads, "attention heads (0: the size's, else 12)", {0, 1024}),
    field("hidden_dim", &VitSettings::hidden, "token width (0: the size's, else 768)", {0, 65536}),
    field("mlp_dim", &VitSettings::mlp, "the MLP's inner width (0: the size's, else 3072)", {0, 1 << 20}),
    field("dropout", &VitSettings::dropout, "dropout after the embeddings, attention and MLP", {0.0, 1.0}),
    field("attention_dropout", &VitSettings::attentionDropout, "dropout of the attention weights", {0.0, 1.0}),
    field("weights", &VitSettings::weights,
          "a safetensors file of torchvision's VisionTransformer state dict to start from (empty: initialised)"),
}};

std::shared_ptr<Model> makeVit(const Options& o, const DataInfo& d) {
  const VitSettings s = kOptions.read(o);
  const ModelShape shape = modelShapeOptions().read(o);
  struct Size {
    const char* name;
    std::int64_t patch, layers, heads, hidden, mlp;
  };
  const Size sizes[] = {{"", 16, 12, 12, 768, 3072},       {"vit_b_16", 16, 12, 12, 768, 3072},
                        {"vit_b_32", 32, 12, 12, 768, 3072}, {"vit_l_16", 16, 24, 16, 1024, 4096},
                        {"vit_l_32", 32, 24, 16, 1024, 4096}, {"vit_h_14", 14, 32, 16, 1280, 5120}};
  VitConfig c;
  for (const Size& z : sizes)
    if (s.size == z.name) c.patch = z.patch, c.layers = z.layers, c.heads = z.heads, c.hidden = z.hidden, c.mlp = z.mlp;
  if (s.patch) c.patch = s.patch;
  if (s.layers) c.layers = s.layers;
  if (s.heads) c.heads = s.heads;
  if (s.hidden) c.hidden = s.hidden;
  if (s.mlp) c.mlp = s.mlp;
  c.imageSize = s.imageSize > 0 ? s.imageSize : d.height;
  if (c.hidden % c.heads != 0)
    throw std::invalid_argument("model.hidden_dim: " + std::to_string(c.hidden) + " is not a multiple of num_heads " +
                                std::to_string(c.heads));
  if (c.imageSize % c.patch != 0)
    throw std::invalid_argument("model.image_size: " + std::to_string(c.imageSize) +
                                " is not a multiple of patch_size " + std::to_string(c.patch));
  c.channels = shape.channels(d);
  c.classes = shape.classes(d);
  c.dropout = s.dropout;
  c.attentionDropout = s.attentionDropout;
  auto model = std::make_shared<Vit>(c);
  if (!s.weights.empty()) model->load(s.weights);
  return model;
}

const Register<ModelKind> kRegistered{"vit", "torchvision's VisionTransformer; loads its state dict's safetensors",
                                      withModelShapeOptions(kOptions.decls()), makeVit};

}  // namespace
}  // namespace exprun
