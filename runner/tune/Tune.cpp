// Purpose: tune's candidates and its search (see Tune.h); the trials themselves: TuneTrial.cpp.
#include "runner/tune/Tune.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "runner/util/Format.h"
#include "runner/util/Log.h"

namespace exprun {

bool Setting::operator==(const Setting& o) const {
  return procs == o.procs && threads == o.threads && micro == o.micro && accumulate == o.accumulate &&
         precision == o.precision && channelsLast == o.channelsLast && fused == o.fused && workers == o.workers &&
         comm == o.comm && bucketMb == o.bucketMb && recompute == o.recompute;
}

namespace {

std::string layoutText(const Setting& s) {
  std::string t = strf("%d process%s", s.procs, s.procs == 1 ? "" : "es");
  if (s.threads > 0) t += strf(" x %lld thread%s", static_cast<long long>(s.threads), s.threads == 1 ? "" : "s");
  return t;
}

std::string batchText(const Setting& s) {
  return strf("micro-batch %lld x accumulate %lld", static_cast<long long>(s.micro),
              static_cast<long long>(s.accumulate));
}

}  // namespace

std::string describe(const Setting& s) {
  std::string t = layoutText(s) + ", " + batchText(s) + ", " + precisionName(s.precision) +
                  (s.channelsLast ? ", channels_last" : ", NCHW");
  if (s.fused >= 0) t += s.fused ? ", fused" : ", not fused";
  t += strf(", %lld worker(s)", static_cast<long long>(s.workers));
  if (s.procs > 1) {
    t += ", " + s.comm;
    if (s.bucketMb > 0) t += strf(" %g MiB buckets", s.bucketMb);
  }
  if (s.recompute) t += ", recompute every block";
  return t;
}

std::string differences(const Setting& a, const Setting& b) {
  std::vector<std::string> d;
  if (a.procs != b.procs || a.threads != b.threads) d.push_back(layoutText(b));
  if (a.micro != b.micro || a.accumulate != b.accumulate) d.push_back(batchText(b));
  if (a.precision != b.precision) d.push_back(precisionName(b.precision));
  if (a.channelsLast != b.channelsLast) d.push_back(b.channelsLast ? "channels_last" : "NCHW");
  if (a.fused != b.fused) d.push_back(b.fused ? "fused" : "not fused");
  if (a.workers != b.workers) d.push_back(strf("%lld worker(s)", static_cast<long long>(b.workers)));
  if (a.comm != b.comm) d.push_back(b.comm);
  if (a.bucketMb != b.bucketMb) d.push_back(strf("%g MiB buckets", b.bucketMb));
  if (a.recompute != b.recompute) d.push_back(b.recompute ? "recompute every block" : "no recomputation");
  return d.empty() ? "-" : joinStrings(d, ", ");
}

std::vector<std::string> settingSets(const Setting& s, const Setting& w) {
  std::vector<std::string> v;
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  if (s.threads != w.threads) v.push_back("train.threads=" + std::to_string(s.threads));
  if (s.micro != w.micro) v.push_back("train.batch_size=" + std::to_string(s.micro));
  if (s.accumulate != w.accumulate) v.push_back("train.accumulate=" + std::to_string(s.accumulate));
  if (s.precision != w.precision) v.push_back(std::string("train.precision=") + precisionName(s.precision));
  if (s.channelsLast != w.channelsLast) v.push_back("train.channels_last=" + flag(s.channelsLast));
  if (s.fused != w.fused && s.fused >= 0) v.push_back("model.fused=" + flag(s.fused == 1));
  if (s.workers != w.workers) v.push_back("train.workers=" + std::to_string(s.workers));
  if (s.comm != w.comm) v.push_back("distributed.comm.type=" + s.comm);
  if (s.bucketMb != w.bucketMb) v.push_back(strf("distributed.comm.bucket_mb=%g", s.bucketMb));
  if (s.recompute && !w.recompute)
    v.insert(v.end(), {"train.activation_checkpointing=[all]", "train.activation_checkpointing_every=1"});
  if (!s.recompute && w.recompute) v.push_back("train.activation_checkpointing=[]");
  return v;
}

nlohmann::json settingJson(const Setting& s) {
  return {{"processes", s.procs},        {"threads", s.threads},
          {"batch_size", s.micro},       {"accumulate", s.accumulate},
          {"global_batch", s.globalBatch()}, {"precision", precisionName(s.precision)},
          {"channels_last", s.channelsLast}, {"fused", s.fused < 0 ? nlohmann::json() : nlohmann::json(s.fused == 1)},
          {"workers", s.workers},        {"comm", s.comm},
          {"bucket_mb", s.bucketMb},     {"recompute", s.recompute}};
}

std::vector<Precision> parsePrecisions(const std::string& list) {
  std::vector<Precision> out;
  for (const auto& word : splitString(list, ',')) {
    Precision p;
    if (word == "fp32") p = Precision::Fp32;
    else if (word == "bf16") p = Precision::Bf16;
    else if (word == "fp16") p = Precision::Fp16;
    else throw TuneError("--precisions: unknown precision '" + word + "' (expected fp32, bf16 or fp16, comma-separated)");
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  if (out.empty()) throw TuneError("--precisions: no precision given (e.g. fp32,bf16)");
  return out;
}

Setting writtenSetting(const Spec& spec, const TuneMachine& machine, const TuneOptions& o) {
  Setting s;
  s.procs = machine.cuda ? std::max(1, o.nproc) : o.nproc;
  s.threads = spec.train.execution.threads;
  if (!machine.cuda && s.threads == 0) s.threads = std::max(1, machine.cores / std::max(1, s.procs));  // as chooseThreads
  s.accumulate = spec.train.batching.accumulate;
  if (spec.train.batching.batchSize) {
    s.micro = *spec.train.batching.batchSize;
  } else {
    const std::int64_t g = spec.train.batching.globalBatch;
    if (g <= 0 || g % s.procs != 0)
      throw TuneError("train.batch_size is auto: tune needs train.global_batch, a multiple of --nproc (" +
                      std::to_string(s.procs) + ")");
    s.micro = g / s.procs;
    s.accumulate = 1;
  }
  s.precision = spec.train.numerics.precision;
  s.channelsLast = spec.train.numerics.channelsLast;
  if (spec.model.has("fused")) s.fused = std::get<bool>(spec.model.value("fused")) ? 1 : 0;
  s.workers = spec.train.execution.workers;
  s.comm = spec.distributed.comm.type();
  if (spec.distributed.comm.has("bucket_mb")) s.bucketMb = std::get<double>(spec.distributed.comm.value("bucket_mb"));
  s.recompute = !spec.train.numerics.activationCheckpointing.empty();
  return s;
}

std::vector<Setting> layoutCandidates(const Setting& written, const TuneMachine& m, const TuneOptions& o) {
  // bf16 first (autocast's usual choice, no loss scaling), then fp16, then fp32.
  const std::vector<Precision>& allowed = o.precisions.empty() ? m.native : o.precisions;
  std::vector<Precision> precisions;
  for (Precision p : {Precision::Bf16, Precision::Fp16, Precision::Fp32})
    if (std::find(allowed.begin(), allowed.end(), p) != allowed.end() ||
        (p == Precision::Fp32 && o.precisions.empty()))
      precisions.push_back(p);
  std::vector<int> layouts;
  if (m.cuda) {
    layouts.push_back(std::max(1, m.gpus));
  } else {
    const int most = o.maxProcs > 0 ? o.maxProcs : m.cores;
    for (int p = 1; p <= most; p *= 2)
      if (written.globalBatch() % p == 0 && m.cores % p == 0) layouts.push_back(p);
  }
  const std::int64_t g = written.globalBatch();
  std::vector<Setting> all;
  const std::vector<bool> formats = o.unit == "images" ? std::vector<bool>{true, false} : std::vector<bool>{written.channelsLast};
  for (bool cl : formats)
    for (Precision precision : precisions)
      for (int p : layouts) {
        Setting s = written;
        s.procs = p;
        s.threads = m.cuda ? written.threads : m.cores / p;
        // The written accumulation where the layout allows it (stage 2 tries its neighbours).
        s.accumulate = g % (static_cast<std::int64_t>(p) * written.accumulate) == 0 ? written.accumulate : 1;
        s.micro = g / (p * s.accumulate);
        s.precision = precision;
        s.channelsLast = cl;
        if (std::find(all.begin(), all.end(), s) == all.end() && s != written) all.push_back(s);
      }
  // One changed knob first (layout, precision, memory format), then two, then three: a budget that
  // holds only the front of the list still tries every value of every knob once. Within a count,
  // the most promising first: channels_last, bf16, fp16, fp32.
  auto changed = [&](const Setting& s) {
    return (s.procs != written.procs) + (s.precision != written.precision) + (s.channelsLast != written.channelsLast);
  };
  std::stable_sort(all.begin(), all.end(), [&](const Setting& a, const Setting& b) { return changed(a) < changed(b); });
  all.insert(all.begin(), written);
  return all;
}

std::vector<Setting> refineCandidates(const Setting& best, const TuneOptions& o) {
  std::vector<Setting> out{best};
  auto add = [&](Setting s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  if (best.micro % 2 == 0) {
    Setting s = best;
    s.micro /= 2;
    s.accumulate *= 2;
    add(s);
  }
  if (best.accumulate % 2 == 0) {
    Setting s = best;
    s.micro *= 2;
    s.accumulate /= 2;
    add(s);
  }
  if (best.fused >= 0) {
    Setting s = best;
    s.fused = 1 - best.fused;
    add(s);
  }
  for (std::int64_t w : {0, 1, 2, 4}) {
    Setting s = best;
    s.workers = w;
    add(s);
  }
  if (best.procs > 1 && best.bucketMb > 0)
    for (double mb : {best.bucketMb / 4, best.bucketMb * 4}) {
      Setting s = best;
      s.bucketMb = mb;
      add(s);
    }
  if (best.recompute && o.memoryBudgetBytes > 0) {  // recomputation only where the budget needs it
    Setting s = best;
    s.recompute = false;
    add(s);
  }
  if (best.procs > 1 && o.allowLossyComm && best.bucketMb > 0)
    for (const char* hook : {"bf16_compress", "fp16_compress"}) {
      Setting s = best;
      s.comm = hook;
      add(s);
    }
  return out;
}

std::optional<Setting> smaller(const Setting& s, double fraction) {
  Setting t = s;
  if (s.micro % 2 == 0 && s.micro > 1) {
    do {
      t.micro /= 2;
      t.accumulate *= 2;
    } while (t.micro % 2 == 0 && t.micro > 1 && static_cast<double>(t.micro) > fraction * static_cast<double>(s.micro));
    return t;
  }
  if (!s.recompute) {
    t.recompute = true;
    return t;
  }
  return std::nullopt;
}

double CandidateRecord::median() const {
  std::vector<double> v;
  for (const auto& t : trials)
    if (t.ok) v.push_back(t.imagesPerS);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool CandidateRecord::failed() const {
  return std::any_of(trials.begin(), trials.end(), [](const TrialResult& t) { return !t.ok; });
}

int CandidateRecord::successes() const {
  return static_cast<int>(std::count_if(trials.begin(), trials.end(), [](const TrialResult& t) { return t.ok; }));
}

}  // namespace exprun
