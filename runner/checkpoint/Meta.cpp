// Purpose: a checkpoint's meta.json (see Meta.h).
#include "runner/checkpoint/Meta.h"

#include "runner/checkpoint/CheckpointStore.h"
#include "runner/spec/StoredSpec.h"
#include "runner/util/JsonFields.h"

namespace exprun {
namespace {

using nlohmann::json;

json totalsJson(const EpochTotals& t) {
  return {{"loss_sum", t.lossSum}, {"correct", t.correct},     {"samples", t.samples},
          {"skipped_images", t.skippedImages}, {"elapsed", t.elapsed}, {"data_wait", t.dataWait},
          {"comm_wait", t.commWait}, {"comm_bytes", t.commBytes}};
}

EpochTotals readTotals(const JsonFields& f) {
  EpochTotals t;
  t.lossSum = f.number("loss_sum");
  t.correct = f.number("correct");
  t.samples = f.number("samples");
  t.skippedImages = f.number("skipped_images");
  t.elapsed = f.number("elapsed");
  t.dataWait = f.number("data_wait");
  t.commWait = f.number("comm_wait");
  t.commBytes = f.number("comm_bytes");
  return t;
}

json dataJson(const DataInfo& d) {
  return {{"channels", d.channels}, {"height", d.height}, {"width", d.width}, {"num_classes", d.numClasses}};
}

DataInfo readData(const JsonFields& f) {
  return DataInfo{f.integer("channels"), f.integer("height"), f.integer("width"), f.integer("num_classes")};
}

template <class T>
std::vector<T> readList(const JsonFields& f, const std::string& key, T (*read)(const JsonFields&)) {
  std::vector<T> out;
  for (const auto& item : f.objects(key, "an object", false)) out.push_back(read(item));
  return out;
}

}  // namespace

CheckpointMeta readCheckpointMeta(const std::string& dir) {
  const std::string file = dir + "/meta.json";
  json j;
  try {
    j = json::parse(CheckpointStore::readFile(file));  // the store's errors name the file
  } catch (const json::exception& e) {
    throw CheckpointError(file + ": not valid JSON: " + e.what());
  }
  try {
    return j.get<CheckpointMeta>();
  } catch (const std::exception& e) {  // another format, or a field of the wrong kind
    throw CheckpointError(file + ": " + e.what());
  }
}

BatchShape CheckpointMeta::shape(const std::string& where) const {
  if (batch) return *batch;
  BatchShape b;  // older checkpoints: the spec as trained
  const auto micro = storedMicroBatch(spec);
  if (!micro) throw CheckpointError(where + ": the checkpoint records no micro-batch size");
  b.microBatch = *micro;
  b.accumulate = storedAccumulate(spec);
  b.globalBatch = b.microBatch * b.accumulate * worldSize;
  return b;
}

void to_json(json& j, const CheckpointMeta& m) {
  const TrainPosition& p = m.standing.position;
  j = json{{"format", CheckpointMeta::kFormat},
           {"name", m.name},
           {"step", p.step},
           {"epoch", p.epoch},
           {"micro", p.micro},
           {"sample", p.sample},
           {"world_size", m.worldSize},
           {"progress", m.standing.toJson()},
           {"spec", m.spec},
           {"spec_yaml", m.specYaml},
           {"spec_hash", m.specHash},
           {"model", m.model},
           {"ema", m.ema},
           {"result_epochs", m.resultEpochs},
           {"result_evals", m.resultEvals},
           {"world_size_changes", m.worldSizeChanges}};
  if (!m.resultPrunes.empty()) j["result_prunes"] = m.resultPrunes;
  if (m.totals) j["epoch_totals"] = totalsJson(*m.totals);
  if (m.data) j["data_info"] = dataJson(*m.data);
  if (m.batch) j["batch"] = *m.batch;
  if (!m.widths.empty()) j["widths"] = m.widths;
  if (!m.qatGrids.empty()) j["qat_grids"] = m.qatGrids;
}

void from_json(const json& j, CheckpointMeta& m) {
  if (!j.is_object() || j.value("format", "") != CheckpointMeta::kFormat || !j.contains("world_size") ||
      !j["world_size"].is_number_integer() || j["world_size"].get<int>() < 1)
    throw CheckpointError("not an exprun checkpoint");
  const JsonFields f(j, "");
  m.name = f.textOr("name", "");
  m.worldSize = static_cast<int>(f.integer("world_size"));
  m.hasStanding = f.has("progress");
  if (m.hasStanding) {
    m.standing = Standing::fromJson(f.object("progress"));
  } else {  // rank 0's position only; its rank file has the rest
    m.standing.position.step = f.integer("step");
    m.standing.position.epoch = f.integer("epoch");
    m.standing.position.micro = f.integer("micro");
    m.standing.position.sample = f.integerOr("sample", -1);
  }
  if (f.has("epoch_totals")) m.totals = readTotals(f.object("epoch_totals"));
  m.spec = f.at("spec");
  m.specYaml = f.textOr("spec_yaml", "");
  m.specHash = f.has("spec_hash") ? f.at("spec_hash").get<std::uint64_t>() : 0;
  m.model = f.textOr("model", "");
  m.ema = f.booleanOr("ema", false);
  if (f.has("data_info")) m.data = readData(f.object("data_info"));
  m.resultEpochs = readList(f, "result_epochs", readEpochRecord);
  m.resultEvals = readList(f, "result_evals", readEvalRecord);
  m.worldSizeChanges = readList(f, "world_size_changes", readWorldSizeChange);
  m.resultPrunes = readList(f, "result_prunes", readPruneRecord);
  if (f.has("batch")) m.batch = readBatchShape(f.object("batch"));
  m.widths = f.integerMap("widths");
  for (const auto& [group, width] : m.widths)
    if (width < 1) f.fail("widths", group + ": expected a width of at least 1, got " + std::to_string(width));
  if (f.has("qat_grids")) {
    const json& grids = f.at("qat_grids");
    if (!grids.is_array()) f.fail("qat_grids", "expected a list of [scale, zero point] pairs");
    for (const json& g : grids) {
      if (!g.is_array() || g.size() != 2 || !g[0].is_number() || !g[1].is_number_integer() || !(g[0].get<double>() > 0) ||
          g[1].get<std::int64_t>() < 0 || g[1].get<std::int64_t>() > 255)
        f.fail("qat_grids", "expected [scale > 0, zero point in 0..255], got " + g.dump());
      m.qatGrids.emplace_back(g[0].get<double>(), g[1].get<std::int64_t>());
    }
  }
}

}  // namespace exprun
