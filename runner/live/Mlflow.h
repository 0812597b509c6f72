// Purpose: output.mlflow — a run sent to an MLflow tracking server over its REST API, with libcurl;
// rank 0 only. A resumed run continues the same MLflow run (its id in the result file, hence in the
// checkpoint). Credentials come from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD or
// MLFLOW_TRACKING_TOKEN, never from the URI; the URI is logged without them. Torch-free.
// Rule: the sink never holds training up: points go into a bounded queue that a thread of its own
// sends; a server that is down or slow is retried, warned about once, and what could not be sent is
// counted and said at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/live/Sink.h"
#include "runner/spec/Sections.h"

namespace exprun {

// One HTTP exchange with the server: the status (0: no answer) and the body.
struct MlflowReply {
  long status = 0;
  std::string body, error;
  bool ok() const { return status >= 200 && status < 300; }
};

// The REST calls, synchronous, each bounded by `timeoutS`: experiments get-by-name/create,
// runs/create, runs/log-batch, runs/update, get-history; artifacts through the server's proxy
// (mlflow-artifacts).
class MlflowClient {
 public:
  MlflowClient(std::string uri, double timeoutS);
  ~MlflowClient();
  MlflowClient(const MlflowClient&) = delete;
  MlflowClient& operator=(const MlflowClient&) = delete;
  MlflowReply post(const std::string& endpoint, const nlohmann::json& body);
  MlflowReply get(const std::string& endpoint, const std::string& query);
  MlflowReply put(const std::string& path, const std::string& bytes);  // an artifact
  const std::string& uri() const { return uri_; }

 private:
  MlflowReply call(const std::string& method, const std::string& url, const std::string& body, const char* type);
  std::string uri_;
  double timeoutS_;
  void* curl_ = nullptr;
};

// A point of a metric: MLflow's {key, value, timestamp (ms), step}.
struct MlflowMetric {
  std::string key;
  double value = 0;
  std::int64_t timestampMs = 0, step = 0;
};

struct MlflowShared;  // the sink's queue and run, shared with its sender thread (Mlflow.cpp)

// What a run tells MLflow when it starts (params: the resolved spec flattened; tags: provenance).
struct MlflowStart {
  std::string runName;
  std::vector<std::pair<std::string, std::string>> params, tags;
  std::string runId;  // non-empty: a resumed run's MLflow run, continued
  // A resumed run: the per-step CSV (cut back to the checkpoint) and the checkpoint's step. Steps
  // up to it that the server lacks (the killed attempt's queue was lost) are sent from the CSV.
  std::string stepsCsv;
  std::int64_t firstStep = 0;
  // This training's key (the result file's mlflow_run_key, made at its first start and kept by its
  // checkpoints): a resumed run whose checkpoint predates the MLflow run's id finds it by this tag.
  std::string runKey;
  // A resumed run: its earlier epochs (and evaluations), sent where the server lacks them.
  std::vector<EpochRecord> earlierEpochs;
  std::vector<EvalRecord> earlierEvals;
};

// Sends in batches of at most 1000 metrics, 100 params and 100 tags a call (MLflow's limits),
// retrying with back-off. A resumed run skips the steps the server already has, and sends what the
// killed attempt had not sent of its params and tags (MLflow keeps a param's first value: only the
// missing ones go).
class MlflowSink : public Sink {
 public:
  // `runIdOut`: where the MLflow run's id is written once known (the result file's, so that the
  // checkpoints carry it). `artifacts`: files uploaded at the end (the result file).
  MlflowSink(const MlflowConfig& config, MlflowStart start, std::string* runIdOut, std::vector<std::string> artifacts);
  ~MlflowSink() override;
  void step(const StepRecord& r) override;
  void evaluation(const EvalRecord& e) override;
  void epochEnds(const EpochRecord& r, std::int64_t step) override;
  void finish() override;
  // Waits up to `maxS` for the MLflow run to exist (the server slow to answer at the start), then
  // writes its id where the constructor was told: before the result file's last write.
  void settle(double maxS);
  // The end of the run: its status for MLflow ("FINISHED", "KILLED", "FAILED").
  void setEndStatus(std::string s) { endStatus_ = std::move(s); }

 private:
  void push(std::vector<MlflowMetric> points);
  std::unique_ptr<MlflowShared> st_;
  MlflowConfig config_;
  std::string endStatus_ = "FINISHED";
};

// The spec's JSON flattened to MLflow params ("optimizer.lr" -> "0.1"), values cut at MLflow's 6000
// characters.
std::vector<std::pair<std::string, std::string>> flattenParams(const nlohmann::json& spec);
// The URI with any user:password@ removed, for messages.
std::string redactedUri(const std::string& uri);

}  // namespace exprun
