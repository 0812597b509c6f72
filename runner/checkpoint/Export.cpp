// Purpose: a checkpoint's weights for other tools — safetensors files with the model's state-dict
// names (torchvision's for the ResNets and MobileNetV2), raw or EMA (`exprun export`).
#include "runner/checkpoint/Export.h"

#include "runner/compress/Channels.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "runner/checkpoint/Checkpoint.h"
#include "runner/spec/Spec.h"
#include "runner/step/Learner.h"
#include "runner/util/AtomicFile.h"

namespace exprun {

namespace fs = std::filesystem;

namespace {
// safetensors' dtype names and torch's types, one table for the reader and the writer.
const std::vector<std::pair<std::string, at::ScalarType>>& safetensorsTypes() {
  static const std::vector<std::pair<std::string, at::ScalarType>> types{
      {"F32", at::kFloat}, {"F64", at::kDouble}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
      {"I32", at::kInt},   {"I16", at::kShort},  {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool}};
  return types;
}
std::string dtypeName(at::ScalarType t) {
  for (const auto& [name, type] : safetensorsTypes())
    if (type == t) return name;
  throw CheckpointError(std::string("safetensors: unsupported dtype ") + c10::toString(t));
}
}  // namespace

void loadSafetensorsInto(torch::nn::Module& module, const std::string& path, const std::string& model,
                         const std::function<std::string(const std::string&, torch::Tensor&)>& map) {
  torch::NoGradGuard noGrad;
  std::map<std::string, torch::Tensor> mine;
  for (const auto& p : module.named_parameters()) mine[p.key()] = p.value();
  std::size_t loaded = 0;
  for (auto [name, t] : readSafetensors(path)) {
    const std::string to = map(name, t);
    if (to.empty()) continue;
    const auto it = mine.find(to);
    if (it == mine.end()) throw CheckpointError(path + ": tensor '" + name + "' is not a parameter of this " + model);
    if (t.sizes() != it->second.sizes())
      throw CheckpointError(path + ": tensor '" + name + "' has shape " + c10::str(t.sizes()) + ", this " + model +
                            "'s " + c10::str(it->second.sizes()));
    it->second.copy_(t);
    ++loaded;
  }
  if (loaded != mine.size())
    throw CheckpointError(path + ": " + std::to_string(loaded) + " of this " + model + "'s " +
                          std::to_string(mine.size()) + " parameters found");
}

std::vector<std::pair<std::string, torch::Tensor>> readSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot read (no such file, or not readable)");
  in.seekg(0, std::ios::end);
  const std::uint64_t size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  std::uint64_t headerBytes = 0;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&headerBytes), 8) || headerBytes > size - 8)
    throw CheckpointError(path + ": not a safetensors file (its 8-byte header length is missing or too large)");
  std::string headerText(headerBytes, '\0');
  in.read(headerText.data(), static_cast<std::streamsize>(headerBytes));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(headerText);
  } catch (const std::exception& e) {
    throw CheckpointError(path + ": safetensors header is not JSON: " + e.what());
  }
  const std::uint64_t dataStart = 8 + headerBytes;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const nlohmann::json& d = it.value();
    at::ScalarType type = at::kFloat;
    bool known = false;
    for (const auto& [name, t] : safetensorsTypes())
      if (d.value("dtype", "") == name) type = t, known = true;
    if (!known) throw CheckpointError(path + ": tensor '" + it.key() + "': unsupported dtype " + d.value("dtype", "?"));
    const std::vector<std::int64_t> shape = d.at("shape").get<std::vector<std::int64_t>>();
    const auto offsets = d.at("data_offsets").get<std::vector<std::uint64_t>>();
    std::int64_t numel = 1;
    for (auto k : shape) numel *= k;
    if (offsets.size() != 2 || offsets[1] < offsets[0] || dataStart + offsets[1] > size ||
        offsets[1] - offsets[0] != static_cast<std::uint64_t>(numel) * c10::elementSize(type))
      throw CheckpointError(path + ": tensor '" + it.key() + "': its data offsets disagree with its shape or the file size");
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
    in.seekg(static_cast<std::streamoff>(dataStart + offsets[0]));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(offsets[1] - offsets[0]));
    if (!in) throw CheckpointError(path + ": tensor '" + it.key() + "': the file ends in its data");
    out.emplace_back(it.key(), t);
  }
  return out;
}

void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensorsIn,
                      const nlohmann::json& metadata) {
  auto tensors = tensorsIn;
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  nlohmann::ordered_json header;
  header["__metadata__"] = nlohmann::ordered_json::object();
  for (auto it = metadata.begin(); it != metadata.end(); ++it)
    header["__metadata__"][it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
  std::string data;
  std::vector<std::string> blobs;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::string bytes = tensorBytes(t);
    header[name] = {{"dtype", dtypeName(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes.size()}}};
    offset += bytes.size();
    blobs.push_back(std::move(bytes));
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::string out(8, '\0');
  const std::uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);  // little-endian on every platform exprun builds for
  out += h;
  for (const auto& b : blobs) out += b;
  writeFileAtomically(path, out);
}

void saveWeights(Model& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  for (const auto& p : model.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
  for (const auto& b : model.named_buffers()) archive.write(b.key(), b.value().detach().cpu(), /*is_buffer=*/true);
  std::ostringstream bytes;
  archive.save_to(bytes);
  writeFileAtomically(path, bytes.str());
}

CheckpointModel loadCheckpointModel(const std::string& what, bool ema,
                                    const std::function<void(Model&, const DataInfo&)>& beforeLoading) {
  std::vector<std::string> candidates =
      fs::exists(what + "/meta.json") ? std::vector<std::string>{what} : CheckpointStore(what).candidates();
  if (candidates.empty())
    throw CheckpointError(what + ": no checkpoint here (expected a step-* folder or a checkpoint root)");
  CheckpointModel c;
  c.dir = candidates.front();
  c.meta = readCheckpointMeta(c.dir);
  if (ema && !c.meta.ema) throw CheckpointError(c.dir + ": saved without EMA weights (train.ema_decay was 0)");
  c.spec = loadSpecFromString(c.meta.specYaml, c.dir + "/meta.json");
  // The model's shape from the checkpoint (no dataset needed), else from the data plugin.
  c.info = c.meta.data ? *c.meta.data : build<DataKind>(c.spec.data)->info();
  c.model = build<ModelKind>(c.spec.model, c.info);
  if (beforeLoading) beforeLoading(*c.model, c.info);
  const std::string state = CheckpointStore::readFile(c.dir + "/state.bin");
  std::istringstream is(state);
  torch::serialize::InputArchive a;
  try {
    a.load_from(is, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw CheckpointError(c.dir + "/state.bin: cannot read: " + e.what_without_backtrace());
  }
  // The tensors keep the shapes they were saved with (a pruned model's are narrower); the model
  // built from the spec gives their names and takes the saved weights (the EMA's with `ema`).
  std::size_t i = 0;
  const auto params = c.model->named_parameters();
  const auto buffers = c.model->named_buffers();
  try {
    for (const auto* list : {&params, &buffers})
      for (const auto& p : *list) {
        torch::Tensor saved, t;
        a.read("model/" + p.key(), saved, true);
        if (ema) a.read("ema/" + std::to_string(i), t, true);
        ++i;
        p.value().set_data(ema ? t : saved);
        c.tensors.emplace_back(p.key(), (ema ? t : saved).contiguous());
      }
  } catch (const c10::Error& e) {
    throw CheckpointError(c.dir + "/state.bin: does not match the model of its spec: " + e.what_without_backtrace());
  }
  return c;
}

void exportSafetensors(const std::string& what, const std::string& outPath, bool ema) {
  // The channel groups of a model that describes its graph, mapped at full width; its nodes hold
  // the modules, which then take the saved tensors and show the widths they were saved with.
  std::optional<ChannelMap> map;
  const CheckpointModel c = loadCheckpointModel(what, ema, [&map](Model& m, const DataInfo& info) {
    if (!m.graph().nodes().empty()) map = mapChannels(m, {info.channels, info.height, info.width});
  });
  Widths widths;  // each group's width as saved (its first producer's filters), {} at full width
  for (const ChannelGroup& g : map ? map->groups : std::vector<ChannelGroup>{}) {
    const GraphNode& n = map->graph.nodes()[static_cast<std::size_t>(g.producers.front())];
    widths[g.name] = (n.op == GraphNode::Op::Conv ? n.conv->weight : n.linear->weight).size(0);
  }
  if (map && widths == widthsOf(*map)) widths.clear();
  writeSafetensors(outPath, c.tensors,
                   {{"format", "pt"},
                    {"exprun_model", c.spec.model.type()},
                    {"exprun_step", std::to_string(c.meta.progress.position.step)},
                    {"exprun_weights", ema ? "ema" : "raw"},
                    {"exprun_widths", nlohmann::json(widths).dump()}});
}

}  // namespace exprun
