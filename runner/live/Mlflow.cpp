// Purpose: the MLflow client and sink (see Mlflow.h).
#include "runner/live/Mlflow.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "runner/live/MetricNames.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::size_t appendBody(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

std::string escaped(const std::string& s) {
  char* e = curl_easy_escape(nullptr, s.c_str(), static_cast<int>(s.size()));
  std::string out = e ? e : "";
  curl_free(e);
  return out;
}

std::string trimSlash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// The first line of a reply's MLflow error ({"error_code": ..., "message": ...}), else the body.
std::string why(const MlflowReply& r) {
  if (r.status == 0) return r.error.empty() ? "no answer" : r.error;
  try {
    const auto j = nlohmann::json::parse(r.body);
    if (j.contains("message")) return strf("HTTP %ld: ", r.status) + j["message"].get<std::string>().substr(0, 300);
  } catch (const std::exception&) {
  }
  return strf("HTTP %ld: ", r.status) + r.body.substr(0, 200);
}

}  // namespace

std::string redactedUri(const std::string& uri) {
  const auto scheme = uri.find("://");
  if (scheme == std::string::npos) return uri;
  const auto start = scheme + 3;
  const auto slash = uri.find('/', start);
  const auto at = uri.rfind('@', slash == std::string::npos ? uri.size() : slash);
  if (at == std::string::npos || at < start) return uri;
  return uri.substr(0, start) + "***@" + uri.substr(at + 1);
}

MlflowClient::MlflowClient(std::string uri, double timeoutS) : uri_(trimSlash(std::move(uri))), timeoutS_(timeoutS) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
}

MlflowClient::~MlflowClient() {
  if (curl_) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

MlflowReply MlflowClient::call(const std::string& method, const std::string& url, const std::string& body,
                               const char* type) {
  MlflowReply r;
  CURL* c = static_cast<CURL*>(curl_);
  if (!c) {
    r.error = "libcurl could not start";
    return r;
  }
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeoutS_ * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(timeoutS_, 5.0) * 1000));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, appendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, (std::string("Content-Type: ") + type).c_str());
  if (const char* token = std::getenv("MLFLOW_TRACKING_TOKEN"))
    headers = curl_slist_append(headers, (std::string("Authorization: Bearer ") + token).c_str());
  const char* user = std::getenv("MLFLOW_TRACKING_USERNAME");
  const char* pass = std::getenv("MLFLOW_TRACKING_PASSWORD");
  if (user && pass) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, user);
    curl_easy_setopt(c, CURLOPT_PASSWORD, pass);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  if (method == "POST" || method == "PUT") {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  else
    r.error = curl_easy_strerror(rc);
  curl_slist_free_all(headers);
  return r;
}

MlflowReply MlflowClient::post(const std::string& endpoint, const nlohmann::json& body) {
  return call("POST", uri_ + "/api/2.0/mlflow/" + endpoint, body.dump(), "application/json");
}

MlflowReply MlflowClient::get(const std::string& endpoint, const std::string& query) {
  return call("GET", uri_ + "/api/2.0/mlflow/" + endpoint + "?" + query, "", "application/json");
}

MlflowReply MlflowClient::put(const std::string& path, const std::string& bytes) {
  return call("PUT", uri_ + "/api/2.0/mlflow-artifacts/artifacts/" + path, bytes, "application/octet-stream");
}

std::vector<std::pair<std::string, std::string>> flattenParams(const nlohmann::json& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  std::function<void(const nlohmann::json&, const std::string&)> walk = [&](const nlohmann::json& j,
                                                                         const std::string& prefix) {
    if (j.is_object() && !j.empty()) {
      for (auto it = j.begin(); it != j.end(); ++it) walk(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key());
      return;
    }
    std::string v = j.is_string() ? j.get<std::string>() : j.dump();
    if (v.size() > 6000) v = v.substr(0, 6000);
    out.emplace_back(prefix.substr(0, 250), v);
  };
  walk(spec, "");
  return out;
}

namespace {

std::vector<MlflowMetric> points(const MetricRows& rows, std::int64_t t, std::int64_t step) {
  std::vector<MlflowMetric> v;
  for (const MetricValue& m : rows) v.push_back({m.name, m.value, t, step});
  return v;
}

}  // namespace

// What the sink and its sender thread share, under `mu`.
struct MlflowShared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<MlflowMetric> queue;
  std::size_t capacity = 200000;
  std::size_t queued = 0, sent = 0, dropped = 0;
  // Params and tags still to send: all params of a new run; on a resumed run, those the server lacks
  // (the killed attempt may have died between two params batches) and the tags it lacks or differ.
  std::deque<std::pair<std::string, std::string>> params, tags;
  std::size_t paramsDropped = 0;
  bool stop = false, warned = false, ready = false;
  std::string runId, experimentId, artifactPath, uri;
  std::map<MetricTime, std::set<std::int64_t>> serverHas;  // a resumed run: per kind of point, the steps the server has
  std::vector<MlflowMetric> backfill;  // a resumed run: the CSV's steps up to the checkpoint
  std::thread worker;
  MlflowStart start;
  std::vector<std::string> artifacts;
  std::string endStatus;
  std::string* runIdOut = nullptr;
};

namespace {

// The points of the per-step CSV (runner/live/MetricNames.h: its columns by name) up to
// `lastStep`, every `logEvery`-th step.
std::vector<MlflowMetric> csvPoints(const std::string& csv, std::int64_t lastStep, std::int64_t logEvery) {
  std::ifstream in(csv, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<MlflowMetric> out;
  const std::int64_t t = nowMs();
  for (const CsvStepMetrics& s : stepMetricsFromCsv(text, lastStep, logEvery))
    for (auto& p : points(s.rows, t, s.step)) out.push_back(std::move(p));
  return out;
}

// A run's {"key": ..., "value": ...} list (runs/get's run.data.params or .tags) as a map.
std::map<std::string, std::string> keyValues(const nlohmann::json& list) {
  std::map<std::string, std::string> out;
  if (list.is_array())
    for (const auto& kv : list) out[kv.value("key", "")] = kv.value("value", "");
  return out;
}

// The sender thread: finds or creates the experiment and the run (until the server answers or the
// training ends), sends params, tags and points in batches, then the run's end and its artifacts.
class Sender {
 public:
  Sender(MlflowShared& st, const MlflowConfig& cfg) : st_(st), cfg_(cfg), client_(cfg.trackingUri, 10) {}

  void run() {
    if (!open()) return;
    send();
    close();
  }

 private:
  // A failed call: warned about once, then a pause with back-off (cut short by the training's end).
  void failed(const std::string& what, const MlflowReply& r) {
    std::unique_lock<std::mutex> lock(st_.mu);
    if (!st_.warned) {
      log::warn("mlflow: " + st_.uri + ": " + what + " (" + why(r) +
                "); training goes on, the points wait in a bounded queue and are sent when the server answers");
      st_.warned = true;
    }
    st_.cv.wait_for(lock, std::chrono::milliseconds(static_cast<long>(backoff_ * 1000)), [&] { return st_.stop; });
    backoff_ = std::min(backoff_ * 2, 10.0);
  }

  void answered() {  // under st_.mu
    if (st_.warned) log::info("mlflow: " + st_.uri + " answers again");
    st_.warned = false;
    backoff_ = 1;
  }

  std::string experimentId() {
    MlflowReply r = client_.get("experiments/get-by-name", "experiment_name=" + escaped(cfg_.experiment));
    if (r.ok()) return nlohmann::json::parse(r.body)["experiment"]["experiment_id"].get<std::string>();
    if (r.status == 404) {
      r = client_.post("experiments/create", {{"name", cfg_.experiment}});
      if (r.ok()) return nlohmann::json::parse(r.body)["experiment_id"].get<std::string>();
    }
    failed("the experiment could not be found or created", r);
    return "";
  }

  // Resumed from a checkpoint saved before the server answered: the run, if the attempt before made it.
  std::string runByKey(const std::string& expId) {
    const MlflowReply f = client_.post("runs/search", {{"experiment_ids", {expId}},
                                                       {"filter", "tags.`exprun.run_key` = '" + st_.start.runKey + "'"},
                                                       {"max_results", 1}});
    if (!f.ok()) return "";
    const auto j = nlohmann::json::parse(f.body);
    return j.contains("runs") && !j["runs"].empty() ? j["runs"][0]["info"]["run_id"].get<std::string>() : "";
  }

  // A resumed run: the same MLflow run, RUNNING again. What the server lacks of it is sent: params
  // and tags (the killed attempt may have died before all its batches went), and the points up to
  // the checkpoint (from the per-step CSV and the result file's epochs); later points the killed
  // attempt sent already are skipped as they come. False: the run could not be read.
  bool resume(const std::string& runId, std::string& artifactUri) {
    const MlflowReply r = client_.get("runs/get", "run_id=" + runId);
    if (!r.ok()) {
      failed("the run " + runId + " to continue could not be read", r);
      return false;
    }
    const auto run = nlohmann::json::parse(r.body)["run"];
    artifactUri = run["info"].value("artifact_uri", "");
    const auto data = run.value("data", nlohmann::json::object());
    const auto serverParams = keyValues(data.value("params", nlohmann::json::array()));
    const auto serverTags = keyValues(data.value("tags", nlohmann::json::array()));
    std::deque<std::pair<std::string, std::string>> params, tags;
    std::vector<std::string> changed;
    for (const auto& p : st_.start.params) {
      const auto it = serverParams.find(p.first);
      if (it == serverParams.end())
        params.push_back(p);
      else if (it->second != p.second)
        changed.push_back(p.first);
    }
    for (const auto& t : st_.start.tags) {
      const auto it = serverTags.find(t.first);
      if (it == serverTags.end() || it->second != t.second) tags.push_back(t);
    }
    if (!changed.empty())
      log::warn(strf("mlflow: %zu params differ from the MLflow run's (first: ", changed.size()) + changed.front() +
                "); MLflow keeps a param's first value, the result file has this attempt's");
    // The steps already sent, by when points are sent (one metric of each kind that every point has).
    std::map<MetricTime, std::set<std::int64_t>> has;
    for (MetricTime when : {MetricTime::Step, MetricTime::Evaluation, MetricTime::EpochEnd}) {
      const std::string key = alwaysSentMetric(when);
      const MlflowReply h = client_.get("metrics/get-history",
                                        "run_id=" + runId + "&metric_key=" + escaped(key) + "&max_results=1000000");
      auto& steps = has[when];
      if (h.ok()) {
        const auto j = nlohmann::json::parse(h.body);
        if (j.contains("metrics"))
          for (const auto& m : j["metrics"]) steps.insert(m.value("step", std::int64_t{0}));
      }
    }
    client_.post("runs/update", {{"run_id", runId}, {"status", "RUNNING"}});
    std::lock_guard<std::mutex> lock(st_.mu);
    // Points the training queued while the history was read: those the killed attempt sent are dropped.
    auto sentBefore = [&](const MlflowMetric& m) { return has[metricTime(m.key)].count(m.step) > 0; };
    const auto kept = std::remove_if(st_.queue.begin(), st_.queue.end(), sentBefore);
    st_.queued -= static_cast<std::size_t>(std::distance(kept, st_.queue.end()));
    st_.queue.erase(kept, st_.queue.end());
    std::size_t filled = 0;
    for (auto& m : st_.backfill)
      if (!sentBefore(m)) {
        st_.queue.push_front(m);
        ++st_.queued;
        ++filled;
      }
    std::sort(st_.queue.begin(), st_.queue.end(), [](const MlflowMetric& a, const MlflowMetric& b) { return a.step < b.step; });
    if (filled) log::info(strf("mlflow: %zu points of steps before the checkpoint sent from the per-step CSV", filled));
    if (!params.empty() || !tags.empty())
      log::info(strf("mlflow: the run %s lacked %zu params and %zu tags: sent again", runId.c_str(), params.size(),
                     tags.size()));
    st_.backfill.clear();
    st_.serverHas = std::move(has);
    st_.params = std::move(params);
    st_.tags = std::move(tags);
    return true;
  }

  // A new run, its tags with it; its params follow in batches (send()).
  bool create(const std::string& expId, std::string& runId, std::string& artifactUri) {
    nlohmann::json tags = nlohmann::json::array();
    for (const auto& [k, v] : st_.start.tags) tags.push_back({{"key", k}, {"value", v}});
    if (!st_.start.runKey.empty()) tags.push_back({{"key", "exprun.run_key"}, {"value", st_.start.runKey}});
    const MlflowReply r = client_.post(
        "runs/create", {{"experiment_id", expId}, {"run_name", st_.start.runName}, {"start_time", nowMs()}, {"tags", tags}});
    if (!r.ok()) {
      failed("the run could not be created", r);
      return false;
    }
    const auto info = nlohmann::json::parse(r.body)["run"]["info"];
    runId = info["run_id"].get<std::string>();
    artifactUri = info.value("artifact_uri", "");
    std::lock_guard<std::mutex> lock(st_.mu);
    st_.params.assign(st_.start.params.begin(), st_.start.params.end());
    if (!st_.backfill.empty()) {  // a new MLflow run for a resumed training: everything before
      for (auto it = st_.backfill.rbegin(); it != st_.backfill.rend(); ++it) st_.queue.push_front(*it);
      st_.queued += st_.backfill.size();
      st_.backfill.clear();
    }
    return true;
  }

  // The experiment and the run, until the server answers; false: the training ended first.
  bool open() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(st_.mu);
        if (st_.stop) return false;
      }
      const std::string expId = experimentId();
      if (expId.empty()) continue;
      std::string runId = st_.start.runId, artifactUri;
      if (runId.empty() && st_.start.firstStep > 0 && !st_.start.runKey.empty()) runId = runByKey(expId);
      if (!(runId.empty() ? create(expId, runId, artifactUri) : resume(runId, artifactUri))) continue;
      std::lock_guard<std::mutex> lock(st_.mu);
      st_.experimentId = expId;
      st_.runId = runId;
      const std::string prefix = "mlflow-artifacts:/";
      if (artifactUri.rfind(prefix, 0) == 0) st_.artifactPath = artifactUri.substr(prefix.size());
      st_.ready = true;
      st_.cv.notify_all();
      answered();
      return true;
    }
  }

  // Params and tags first (at most 100 of each a call, alone: a refused one takes no points with
  // it), then the points (1000 a call), until the training ends and nothing is left, or the server
  // has not answered for 15 s after the end.
  void send() {
    std::chrono::steady_clock::time_point endBy{};
    while (true) {
      nlohmann::json body{{"run_id", ""}};
      std::size_t nParams = 0, nTags = 0;
      std::vector<MlflowMetric> batch;
      {
        std::unique_lock<std::mutex> lock(st_.mu);
        st_.cv.wait(lock, [&] { return st_.stop || !st_.queue.empty() || !st_.params.empty() || !st_.tags.empty(); });
        if (st_.stop && endBy == std::chrono::steady_clock::time_point{})
          endBy = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        if (st_.queue.empty() && st_.params.empty() && st_.tags.empty()) break;
        if (st_.stop && std::chrono::steady_clock::now() > endBy) break;
        body["run_id"] = st_.runId;
        if (!st_.params.empty() || !st_.tags.empty()) {
          auto kv = [](const std::deque<std::pair<std::string, std::string>>& from, std::size_t n) {
            nlohmann::json list = nlohmann::json::array();
            for (std::size_t i = 0; i < n; ++i) list.push_back({{"key", from[i].first}, {"value", from[i].second}});
            return list;
          };
          nParams = std::min<std::size_t>(st_.params.size(), 100);
          nTags = std::min<std::size_t>(st_.tags.size(), 100);
          body["params"] = kv(st_.params, nParams);
          body["tags"] = kv(st_.tags, nTags);
        } else {
          while (!st_.queue.empty() && batch.size() < 1000) {
            batch.push_back(st_.queue.front());
            st_.queue.pop_front();
          }
          nlohmann::json metrics = nlohmann::json::array();
          for (const auto& m : batch)
            metrics.push_back({{"key", m.key}, {"value", m.value}, {"timestamp", m.timestampMs}, {"step", m.step}});
          body["metrics"] = std::move(metrics);
        }
      }
      const MlflowReply r = client_.post("runs/log-batch", body);
      std::unique_lock<std::mutex> lock(st_.mu);
      const bool refused = r.status >= 400 && r.status < 500 && r.status != 429;  // sending it again changes nothing
      if (r.ok() || refused) {
        st_.params.erase(st_.params.begin(), st_.params.begin() + static_cast<std::ptrdiff_t>(nParams));
        st_.tags.erase(st_.tags.begin(), st_.tags.begin() + static_cast<std::ptrdiff_t>(nTags));
      }
      if (r.ok()) {
        st_.sent += batch.size();
        answered();
        continue;
      }
      if (refused) {
        st_.dropped += batch.size();
        st_.paramsDropped += nParams;
        log::warn("mlflow: " + st_.uri + ": " +
                  (batch.empty() ? strf("%zu params and %zu tags", nParams, nTags) : strf("%zu points", batch.size())) +
                  " refused (" + why(r) + ")");
        continue;
      }
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) st_.queue.push_front(*it);  // kept, in order
      lock.unlock();
      failed(batch.empty() ? "the params could not be sent" : "the points could not be sent", r);
    }
  }

  // The end: the run's status and the artifacts.
  void close() {
    std::string runId, status, path;
    std::vector<std::string> artifacts;
    {
      std::lock_guard<std::mutex> lock(st_.mu);
      runId = st_.runId;
      status = st_.endStatus;
      path = st_.artifactPath;
      artifacts = st_.artifacts;
    }
    const MlflowReply u = client_.post("runs/update", {{"run_id", runId}, {"status", status}, {"end_time", nowMs()}});
    if (!u.ok()) log::warn("mlflow: " + st_.uri + ": the run's end was not recorded (" + why(u) + ")");
    for (const auto& file : artifacts) {
      std::ifstream in(file, std::ios::binary);
      if (!in) continue;
      std::ostringstream bytes;
      bytes << in.rdbuf();
      const std::string name = file.substr(file.find_last_of('/') + 1);
      if (path.empty()) {
        log::warn("mlflow: " + st_.uri + ": the server does not proxy artifacts (mlflow server --serve-artifacts): " +
                  name + " not uploaded");
        break;
      }
      const MlflowReply a = client_.put(path + "/" + name, bytes.str());
      if (!a.ok()) log::warn("mlflow: " + st_.uri + ": " + name + " not uploaded (" + why(a) + ")");
    }
  }

  MlflowShared& st_;
  const MlflowConfig cfg_;
  MlflowClient client_;
  double backoff_ = 1;
};

}  // namespace

MlflowSink::MlflowSink(const MlflowConfig& config, MlflowStart start, std::string* runIdOut,
                       std::vector<std::string> artifacts)
    : st_(std::make_unique<MlflowShared>()), config_(config) {
  st_->start = std::move(start);
  st_->runId = st_->start.runId;
  st_->artifacts = std::move(artifacts);
  st_->runIdOut = runIdOut;
  st_->uri = redactedUri(config.trackingUri);
  if (st_->start.firstStep > 0 && !st_->start.stepsCsv.empty())
    st_->backfill = csvPoints(st_->start.stepsCsv, st_->start.firstStep, config.logEvery);
  std::int64_t step = 0;
  const std::int64_t t = nowMs();
  for (const auto& r : st_->start.earlierEpochs) {
    step += r.steps;
    for (auto& m : points(epochMetrics(r), t, step)) st_->backfill.push_back(std::move(m));
  }
  for (const auto& e : st_->start.earlierEvals)
    for (auto& m : points(evalMetrics(e), t, e.step)) st_->backfill.push_back(std::move(m));
  st_->worker = std::thread([st = st_.get(), cfg = config_] { Sender(*st, cfg).run(); });
}

MlflowSink::~MlflowSink() {
  if (st_->worker.joinable()) finish();
}

void MlflowSink::push(std::vector<MlflowMetric> points) {
  std::lock_guard<std::mutex> lock(st_->mu);
  for (auto& p : points) {
    const auto has = st_->serverHas.find(metricTime(p.key));
    if (has != st_->serverHas.end() && has->second.count(p.step)) continue;  // sent by the attempt before
    if (st_->queue.size() >= st_->capacity) {
      st_->queue.pop_front();
      ++st_->dropped;
    }
    st_->queue.push_back(std::move(p));
    ++st_->queued;
  }
  if (st_->runIdOut && !st_->runId.empty()) *st_->runIdOut = st_->runId;
  st_->cv.notify_all();
}

void MlflowSink::step(const StepRecord& r) {
  if (r.step % config_.logEvery != 0) return;
  const std::int64_t t = static_cast<std::int64_t>(r.wallTime * 1000);
  push(points(stepMetrics(r), t, r.step));
}

void MlflowSink::evaluation(const EvalRecord& e) { push(points(evalMetrics(e), nowMs(), e.step)); }

void MlflowSink::epochEnds(const EpochRecord& r, std::int64_t step) { push(points(epochMetrics(r), nowMs(), step)); }

void MlflowSink::settle(double maxS) {
  std::unique_lock<std::mutex> lock(st_->mu);
  st_->cv.wait_for(lock, std::chrono::milliseconds(static_cast<long>(maxS * 1000)), [&] { return st_->ready; });
  if (st_->runIdOut && !st_->runId.empty()) *st_->runIdOut = st_->runId;
}

void MlflowSink::finish() {
  if (!st_->worker.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    st_->endStatus = endStatus_;
    st_->stop = true;
    if (st_->runIdOut && !st_->runId.empty()) *st_->runIdOut = st_->runId;
  }
  st_->cv.notify_all();
  st_->worker.join();
  std::lock_guard<std::mutex> lock(st_->mu);
  const std::size_t unsent = st_->queue.size() + st_->dropped;
  const std::size_t paramsUnsent = st_->params.size() + st_->paramsDropped;
  if (!st_->ready)
    log::warn("mlflow: " + st_->uri + " never answered: the run was not recorded there (" + std::to_string(st_->queued) +
              " points not sent)");
  else if (unsent > 0 || paramsUnsent > 0 || !st_->tags.empty())
    log::warn(strf("mlflow: %zu of %zu points, %zu params and %zu tags could not be sent to ", unsent, st_->queued,
                   paramsUnsent, st_->tags.size()) +
              st_->uri + " (run " + st_->runId + ")");
  else
    log::info(strf("mlflow: %zu points sent to ", st_->sent) + st_->uri + ", run " + st_->runId);
}

}  // namespace exprun
