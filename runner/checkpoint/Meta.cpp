// Purpose: a checkpoint's meta.json (see Meta.h).
#include "runner/checkpoint/Meta.h"

#include "runner/checkpoint/CheckpointStore.h"
#include "runner/spec/StoredSpec.h"
#include "runner/util/JsonFields.h"
#include "runner/util/JsonTable.h"

namespace exprun {
namespace {

using nlohmann::json;

const JsonTable<EpochTotals>& totalsTable() {
  using T = EpochTotals;
  static const JsonTable<T> table{{
      jsonf::required("loss_sum", &T::lossSum),
      jsonf::required("correct", &T::correct),
      jsonf::required("samples", &T::samples),
      jsonf::required("skipped_images", &T::skippedImages),
      jsonf::required("elapsed", &T::elapsed),
      jsonf::required("data_wait", &T::dataWait),
      jsonf::required("comm_wait", &T::commWait),
      jsonf::required("comm_bytes", &T::commBytes),
  }};
  return table;
}

const JsonTable<DataInfo>& dataTable() {
  using D = DataInfo;
  static const JsonTable<D> table{{
      jsonf::required("channels", &D::channels),
      jsonf::required("height", &D::height),
      jsonf::required("width", &D::width),
      jsonf::required("num_classes", &D::numClasses),
      jsonf::unlessEqual("vocab_size", &D::vocabSize, std::int64_t{0}),
      jsonf::unlessEqual("sequence_length", &D::sequenceLength, std::int64_t{0}),
  }};
  return table;
}

// An optional record written by `table` under `key`.
template <class T, class R>
JsonField<T> optionalRecord(const char* key, std::optional<R> T::*member, const JsonTable<R>& table) {
  return jsonf::custom<T>(
      key,
      [=, &table](json& j, const T& t) {
        if (t.*member) j[key] = table.write(*(t.*member));
      },
      [=, &table](T& t, const JsonFields& f) {
        if (f.has(key)) t.*member = table.read(f.object(key));
      });
}

// The history as older checkpoints wrote it, before it had a table of its own: the result file's
// records at meta.json's top level. Read only; it never gains a field.
const JsonTable<RunHistory>& legacyHistoryTable() {
  using H = RunHistory;
  using jsonf::Presence;
  static const JsonTable<H> table{{
      jsonf::list("result_epochs", &H::epochs, epochRecordTable(), "an object", Presence::Optional),
      jsonf::list("result_evals", &H::evals, evalRecordTable(), "an object", Presence::Optional),
      jsonf::list("world_size_changes", &H::worldSizeChanges, worldSizeChangeTable(), "an object", Presence::Optional),
      jsonf::list("attempts", &H::attempts, attemptTable(), "an object", Presence::Optional),
      jsonf::optional("mlflow_run_id", &H::mlflowRunId, std::string()),
      jsonf::optional("mlflow_run_key", &H::mlflowRunKey, std::string()),
  }};
  return table;
}

// The fields of meta.json. Rank 0's position is also written flat (step, epoch, micro, sample), as
// the first checkpoints had only those: a file without "progress" is read from them.
const JsonTable<CheckpointMeta>& metaTable() {
  using M = CheckpointMeta;
  using jsonf::Presence;
  static const JsonTable<M> table{{
      jsonf::custom<M>(
          "format", [](json& j, const M&) { j["format"] = M::kFormat; }, [](M&, const JsonFields&) {}),
      jsonf::optional("name", &M::name, std::string()),
      jsonf::required("world_size", &M::worldSize),
      jsonf::custom<M>(
          "progress",
          [](json& j, const M& m) {
            const TrainPosition& p = m.progress.position;
            j["step"] = p.step;
            j["epoch"] = p.epoch;
            j["micro"] = p.micro;
            j["sample"] = p.sample;
            j["progress"] = m.progress.toJson();
          },
          [](M& m, const JsonFields& f) {
            m.hasProgress = f.has("progress");
            if (m.hasProgress) {
              m.progress = Progress::fromJson(f.object("progress"));
              return;
            }
            m.progress.position.step = f.integer("step");  // rank 0's position only; its rank file has the rest
            m.progress.position.epoch = f.integer("epoch");
            m.progress.position.micro = f.integer("micro");
            m.progress.position.sample = f.integerOr("sample", -1);
          }),
      optionalRecord("epoch_totals", &M::totals, totalsTable()),
      jsonf::custom<M>(
          "spec", [](json& j, const M& m) { j["spec"] = m.spec; }, [](M& m, const JsonFields& f) { m.spec = f.at("spec"); }),
      jsonf::optional("spec_yaml", &M::specYaml, std::string()),
      jsonf::custom<M>(
          "spec_hash", [](json& j, const M& m) { j["spec_hash"] = m.specHash; },
          [](M& m, const JsonFields& f) { m.specHash = f.has("spec_hash") ? f.at("spec_hash").get<std::uint64_t>() : 0; }),
      jsonf::optional("model", &M::model, std::string()),
      jsonf::optional("ema", &M::ema, false),
      optionalRecord("data_info", &M::data, dataTable()),
      jsonf::custom<M>(
          "history", [](json& j, const M& m) { j["history"] = runHistoryTable().write(m.history); },
          [](M& m, const JsonFields& f) {
            m.history = f.has("history") ? runHistoryTable().read(f.object("history")) : legacyHistoryTable().read(f);
          }),
      optionalRecord("batch", &M::batch, batchShapeTable()),
      jsonf::custom<M>(
          "methods",
          [](json& j, const M& m) {
            if (!m.methods.empty()) j["methods"] = m.methods;
          },
          [](M& m, const JsonFields& f) { m.methods = f.has("methods") ? f.object("methods").json() : json::object(); }),
  }};
  return table;
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

void to_json(json& j, const CheckpointMeta& m) { j = metaTable().write(m); }

void from_json(const json& j, CheckpointMeta& m) {
  if (!j.is_object() || j.value("format", "") != CheckpointMeta::kFormat || !j.contains("world_size") ||
      !j["world_size"].is_number_integer() || j["world_size"].get<int>() < 1)
    throw CheckpointError("not an exprun checkpoint");
  m = metaTable().read(JsonFields(j, ""));
}

}  // namespace exprun
