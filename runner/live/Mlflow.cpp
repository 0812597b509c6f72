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
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "runner/metrics/Breakdown.h"
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

std::vector<MlflowMetric> evalMetrics(const EvalRecord& e, std::int64_t t) {
  return std::vector<MlflowMetric>({{"val/top1", e.valTop1, t, e.step}, {"val/top5", e.valTop5, t, e.step}, {"val/loss", e.valLoss, t, e.step},
        {"val/time_s", e.timeS, t, e.step}});
}

std::vector<MlflowMetric> epochMetrics(const EpochRecord& r, std::int64_t step, std::int64_t t) {
  std::vector<MlflowMetric> v{{"epoch/train_loss", r.trainLoss, t, step},
                              {"epoch/train_top1", r.trainTop1, t, step},
                              {"epoch/val_loss", r.valLoss, t, step},
                              {"epoch/val_top1", r.valTop1, t, step},
                              {"epoch/val_top5", r.valTop5, t, step},
                              {"epoch/time_s", r.timeS, t, step},
                              {"epoch/images_per_s", r.imagesPerS, t, step},
                              {"epoch/peak_memory_bytes", static_cast<double>(r.peakMemoryBytes), t, step},
                              {"epoch/peak_allocated_bytes", static_cast<double>(r.peakAllocatedBytes), t, step},
                              {"epoch/flops_per_s", r.flopsPerS, t, step},
                              {"epoch/epoch", static_cast<double>(r.epoch), t, step}};
  if (r.mfu <= 1) v.push_back({"epoch/mfu", r.mfu, t, step});  // above 1 the peak was wrong: no figure
  if (r.valTop1Ema) v.push_back({"epoch/val_top1_ema", *r.valTop1Ema, t, step});
  if (r.evalPeakAllocatedBytes >= 0)
    v.push_back({"epoch/eval_peak_allocated_bytes", static_cast<double>(r.evalPeakAllocatedBytes), t, step});
  if (!r.breakdown.empty()) {  // TensorBoard's time/* tags: seconds per phase, mean over ranks
    for (std::size_t i = 0; i < kPhases; ++i)
      v.push_back({std::string("time/") + phaseKey(phaseAt(i)) + "_s", r.breakdown.mean[i], t, step});
    if (r.breakdown.commOverlap) v.push_back({"time/comm_overlap", *r.breakdown.commOverlap, t, step});
  }
  return v;
}

}  // namespace

struct MlflowSink::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<MlflowMetric> queue;
  std::size_t capacity = 200000;
  std::size_t queued = 0, sent = 0, dropped = 0;
  bool stop = false, warned = false, ready = false;
  std::string runId, experimentId, artifactPath, uri;
  std::map<std::string, std::set<std::int64_t>> serverHas;  // a resumed run: per key prefix, the steps the server has
  std::vector<MlflowMetric> backfill;  // a resumed run: the CSV's steps up to the checkpoint
  std::thread worker;
  MlflowStart start;
  std::vector<std::string> artifacts;
  std::string endStatus;
  std::string* runIdOut = nullptr;
};

namespace {

// Sleeps `s` seconds unless the sink is told to stop.
bool pause(MlflowSink*, std::unique_lock<std::mutex>& lock, std::condition_variable& cv, const bool& stop, double s) {
  cv.wait_for(lock, std::chrono::milliseconds(static_cast<long>(s * 1000)), [&] { return stop; });
  return !stop;
}

}  // namespace

MlflowSink::MlflowSink(const MlflowConfig& config, MlflowStart start, std::string* runIdOut,
                       std::vector<std::string> artifacts)
    : st_(std::make_unique<State>()), config_(config) {
  st_->start = std::move(start);
  st_->runId = st_->start.runId;
  st_->artifacts = std::move(artifacts);
  st_->runIdOut = runIdOut;
  st_->uri = redactedUri(config.trackingUri);
  if (st_->start.firstStep > 0 && !st_->start.stepsCsv.empty()) {
    // step,epoch,loss,lr,images_per_s,grad_norm,loss_scale,... (runner/live/Sinks.h)
    std::ifstream in(st_->start.stepsCsv);
    std::string line;
    std::getline(in, line);
    const std::int64_t t = nowMs();
    while (std::getline(in, line)) {
      std::vector<double> f;
      std::stringstream cells(line);
      std::string cell;
      while (std::getline(cells, cell, ',')) f.push_back(std::strtod(cell.c_str(), nullptr));
      if (f.size() < 7) continue;
      const auto step = static_cast<std::int64_t>(f[0]);
      if (step > st_->start.firstStep || step % config.logEvery != 0) continue;
      for (const auto& [key, i] : std::vector<std::pair<const char*, int>>{
               {"train/loss", 2}, {"train/lr", 3}, {"train/images_per_s", 4}, {"train/grad_norm", 5}, {"train/loss_scale", 6}})
        st_->backfill.push_back({key, f[i], t, step});
    }
  }
  {
    std::int64_t step = 0;
    const std::int64_t t = nowMs();
    for (const auto& r : st_->start.earlierEpochs) {
      step += r.steps;
      for (auto& m : epochMetrics(r, step, t)) st_->backfill.push_back(std::move(m));
    }
    for (const auto& e : st_->start.earlierEvals)
      for (auto& m : evalMetrics(e, t)) st_->backfill.push_back(std::move(m));
  }
  State* st = st_.get();
  const MlflowConfig cfg = config_;
  st_->worker = std::thread([st, cfg] {
    MlflowClient client(cfg.trackingUri, 10);
    double backoff = 1;
    auto failed = [&](const std::string& what, const MlflowReply& r) {
      std::unique_lock<std::mutex> lock(st->mu);
      if (!st->warned) {
        log::warn("mlflow: " + st->uri + ": " + what + " (" + why(r) +
                  "); training goes on, the points wait in a bounded queue and are sent when the server answers");
        st->warned = true;
      }
      pause(nullptr, lock, st->cv, st->stop, backoff);
      backoff = std::min(backoff * 2, 10.0);
    };
    // The experiment and the run, until the server answers (or the run ends).
    while (true) {
      {
        std::lock_guard<std::mutex> lock(st->mu);
        if (st->stop && st->experimentId.empty()) break;
      }
      std::string expId;
      MlflowReply r = client.get("experiments/get-by-name", "experiment_name=" + escaped(cfg.experiment));
      if (r.ok()) {
        expId = nlohmann::json::parse(r.body)["experiment"]["experiment_id"].get<std::string>();
      } else if (r.status == 404) {
        r = client.post("experiments/create", {{"name", cfg.experiment}});
        if (r.ok()) expId = nlohmann::json::parse(r.body)["experiment_id"].get<std::string>();
      }
      if (expId.empty()) {
        failed("the experiment could not be found or created", r);
        continue;
      }
      std::string runId = st->start.runId, artifactUri;
      if (runId.empty() && st->start.firstStep > 0 && !st->start.runKey.empty()) {
        // Resumed from a checkpoint saved before the server answered: the run, if it was made.
        const MlflowReply f = client.post(
            "runs/search", {{"experiment_ids", {expId}},
                            {"filter", "tags.`exprun.run_key` = '" + st->start.runKey + "'"},
                            {"max_results", 1}});
        if (f.ok()) {
          const auto j = nlohmann::json::parse(f.body);
          if (j.contains("runs") && !j["runs"].empty()) runId = j["runs"][0]["info"]["run_id"].get<std::string>();
        }
      }
      if (!runId.empty()) {  // a resumed run: the same MLflow run, RUNNING again
        r = client.get("runs/get", "run_id=" + runId);
        if (!r.ok()) {
          failed("the run " + runId + " to continue could not be read", r);
          continue;
        }
        artifactUri = nlohmann::json::parse(r.body)["run"]["info"].value("artifact_uri", "");
        std::map<std::string, std::set<std::int64_t>> has;
        for (const char* key : {"train/loss", "val/top1", "epoch/time_s"}) {
          const MlflowReply h = client.get("metrics/get-history", "run_id=" + runId + "&metric_key=" + escaped(key) +
                                                                  "&max_results=1000000");
          auto& steps = has[std::string(key).substr(0, std::string(key).find('/'))];
          if (h.ok()) {
            const auto j = nlohmann::json::parse(h.body);
            if (j.contains("metrics"))
              for (const auto& m : j["metrics"]) steps.insert(m.value("step", std::int64_t{0}));
          }
        }
        client.post("runs/update", {{"run_id", runId}, {"status", "RUNNING"}});
        std::lock_guard<std::mutex> lock(st->mu);
        // The steps up to the checkpoint the server lacks go first, from the CSV; later steps the
        // killed attempt sent already are skipped as they come.
        std::size_t filled = 0;
        for (auto& m : st->backfill)
          if (!has[m.key.substr(0, m.key.find('/'))].count(m.step)) {
            st->queue.push_front(m);
            ++st->queued;
            ++filled;
          }
        std::sort(st->queue.begin(), st->queue.end(), [](const MlflowMetric& a, const MlflowMetric& b) { return a.step < b.step; });
        if (filled) log::info(strf("mlflow: %zu points of steps before the checkpoint sent from the per-step CSV", filled));
        st->backfill.clear();
        st->serverHas = has;
      } else {
        nlohmann::json tags = nlohmann::json::array();
        for (const auto& [k, v] : st->start.tags) tags.push_back({{"key", k}, {"value", v}});
        if (!st->start.runKey.empty()) tags.push_back({{"key", "exprun.run_key"}, {"value", st->start.runKey}});
        r = client.post("runs/create", {{"experiment_id", expId},
                                        {"run_name", st->start.runName},
                                        {"start_time", nowMs()},
                                        {"tags", tags}});
        if (!r.ok()) {
          failed("the run could not be created", r);
          continue;
        }
        const auto info = nlohmann::json::parse(r.body)["run"]["info"];
        runId = info["run_id"].get<std::string>();
        artifactUri = info.value("artifact_uri", "");
        const auto& params = st->start.params;
        for (std::size_t i = 0; i < params.size(); i += 100) {
          nlohmann::json batch = nlohmann::json::array();
          for (std::size_t k = i; k < std::min(params.size(), i + 100); ++k)
            batch.push_back({{"key", params[k].first}, {"value", params[k].second}});
          const MlflowReply p = client.post("runs/log-batch", {{"run_id", runId}, {"params", batch}});
          if (!p.ok()) log::warn("mlflow: " + st->uri + ": params not logged (" + why(p) + ")");
        }
      }
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->backfill.empty()) {  // a new MLflow run for a resumed training: everything before
        for (auto it = st->backfill.rbegin(); it != st->backfill.rend(); ++it) st->queue.push_front(*it);
        st->queued += st->backfill.size();
        st->backfill.clear();
      }
      st->experimentId = expId;
      st->runId = runId;
      const std::string prefix = "mlflow-artifacts:/";
      if (artifactUri.rfind(prefix, 0) == 0) st->artifactPath = artifactUri.substr(prefix.size());
      st->ready = true;
      st->cv.notify_all();
      if (st->warned) log::info("mlflow: " + st->uri + " answers again");
      st->warned = false;
      backoff = 1;
      break;
    }
    // The points, in batches, until the run ends and the queue is empty (or the server has not
    // answered for 15 s after the end).
    std::chrono::steady_clock::time_point endBy{};
    while (true) {
      std::vector<MlflowMetric> batch;
      std::string runId;
      {
        std::unique_lock<std::mutex> lock(st->mu);
        st->cv.wait(lock, [&] { return st->stop || !st->queue.empty(); });
        if (st->stop && endBy == std::chrono::steady_clock::time_point{})
          endBy = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        if (st->queue.empty() || !st->ready) break;
        if (st->stop && std::chrono::steady_clock::now() > endBy) break;
        while (!st->queue.empty() && batch.size() < 1000) {
          batch.push_back(st->queue.front());
          st->queue.pop_front();
        }
        runId = st->runId;
      }
      nlohmann::json metrics = nlohmann::json::array();
      for (const auto& m : batch)
        metrics.push_back({{"key", m.key}, {"value", m.value}, {"timestamp", m.timestampMs}, {"step", m.step}});
      const MlflowReply r = client.post("runs/log-batch", {{"run_id", runId}, {"metrics", metrics}});
      std::unique_lock<std::mutex> lock(st->mu);
      if (r.ok()) {
        st->sent += batch.size();
        if (st->warned) log::info("mlflow: " + st->uri + " answers again");
        st->warned = false;
        backoff = 1;
        continue;
      }
      if (r.status >= 400 && r.status < 500 && r.status != 429) {  // refused: sending it again changes nothing
        st->dropped += batch.size();
        log::warn("mlflow: " + st->uri + ": " + std::to_string(batch.size()) + " points refused (" + why(r) + ")");
        continue;
      }
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) st->queue.push_front(*it);  // kept, in order
      lock.unlock();
      failed("the points could not be sent", r);
    }
    // The end: the run's status and the artifacts.
    std::string runId, status, path;
    std::vector<std::string> artifacts;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->ready) return;
      runId = st->runId;
      status = st->endStatus;
      path = st->artifactPath;
      artifacts = st->artifacts;
    }
    const MlflowReply u = client.post("runs/update", {{"run_id", runId}, {"status", status}, {"end_time", nowMs()}});
    if (!u.ok()) log::warn("mlflow: " + st->uri + ": the run's end was not recorded (" + why(u) + ")");
    for (const auto& file : artifacts) {
      std::ifstream in(file, std::ios::binary);
      if (!in) continue;
      std::ostringstream bytes;
      bytes << in.rdbuf();
      const std::string name = file.substr(file.find_last_of('/') + 1);
      if (path.empty()) {
        log::warn("mlflow: " + st->uri + ": the server does not proxy artifacts (mlflow server --serve-artifacts): " +
                  name + " not uploaded");
        break;
      }
      const MlflowReply a = client.put(path + "/" + name, bytes.str());
      if (!a.ok()) log::warn("mlflow: " + st->uri + ": " + name + " not uploaded (" + why(a) + ")");
    }
  });
}

MlflowSink::~MlflowSink() {
  if (st_->worker.joinable()) finish();
}

void MlflowSink::push(std::vector<MlflowMetric> points) {
  std::lock_guard<std::mutex> lock(st_->mu);
  for (auto& p : points) {
    const std::string prefix = p.key.substr(0, p.key.find('/'));
    const auto has = st_->serverHas.find(prefix);
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
  push({{"train/loss", r.loss, t, r.step},
        {"train/lr", r.lr, t, r.step},
        {"train/images_per_s", r.imagesPerS, t, r.step},
        {"train/grad_norm", r.gradNorm, t, r.step},
        {"train/loss_scale", r.lossScale, t, r.step}});
}

void MlflowSink::evaluation(const EvalRecord& e) { push(evalMetrics(e, nowMs())); }

void MlflowSink::epochEnds(const EpochRecord& r, std::int64_t step) { push(epochMetrics(r, step, nowMs())); }

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
  if (!st_->ready)
    log::warn("mlflow: " + st_->uri + " never answered: the run was not recorded there (" + std::to_string(st_->queued) +
              " points not sent)");
  else if (unsent > 0)
    log::warn(strf("mlflow: %zu of %zu points could not be sent to ", unsent, st_->queued) + st_->uri + " (run " +
              st_->runId + ")");
  else
    log::info(strf("mlflow: %zu points sent to ", st_->sent) + st_->uri + ", run " + st_->runId);
}

}  // namespace exprun
