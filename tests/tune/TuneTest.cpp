// Purpose: `exprun tune`'s candidates and search (runner/tune/Tune.h) with trials whose speeds and
// memory differ by construction and a clock they advance: the faster candidate wins, the global
// batch never changes, the memory budget holds (smaller micro-batches are tried where it does
// not), the budget is filled and not exceeded, a budget too small is refused, a candidate that
// does not measurably beat the spec as written does not replace it; the per-step CSV is timed
// after its warm-up; the tuned spec validates.
#include <filesystem>

#include "runner/tune/Tune.h"
#include "runner/tune/TuneTrial.h"
#include "tests/TestUtil.h"

using namespace exprun;
namespace fs = std::filesystem;

namespace {

const char* kSpec = R"(seed: 0
name: tiny
model: {type: small_cnn, width: 8, hidden: 16}
data: {type: fashion_mnist}
optimizer: {type: sgd, lr: 0.1}
train: {epochs: 1, batch_size: 64, accumulate: 2}
distributed: {comm: {type: allreduce}}
)";

TuneMachine twoCores() {
  TuneMachine m;
  m.cores = 2;
  m.native = {Precision::Fp32, Precision::Bf16};
  m.description = "test machine";
  return m;
}

// Trials by construction: images/s = 1000 x the factors of `speed`; start-up 1 s; peak memory
// 1 MiB per sample of the micro-batch (half with recomputation). Each trial advances `now`.
struct FakeTrials {
  double now = 0;
  int count = 0;
  std::function<double(const Setting&)> speed = [](const Setting&) { return 1.0; };
  TrialFn fn() {
    return [this](const Setting& s, std::int64_t steps, double limit) {
      TrialResult t;
      t.imagesPerS = 1000 * speed(s);
      t.stepS = static_cast<double>(s.globalBatch()) / t.imagesPerS;
      t.overheadS = 1.0 + 3 * t.stepS;
      t.wallS = t.overheadS + static_cast<double>(steps) * t.stepS;
      t.peakBytes = s.micro * (1 << 20) / (s.recompute ? 2 : 1);
      t.ok = t.wallS <= limit;
      if (!t.ok) t.failure = "too slow";
      now += std::min(t.wallS, limit);
      ++count;
      return t;
    };
  }
  ClockFn clock() {
    return [this] { return now; };
  }
};

TuneOutcome tuneWith(FakeTrials& f, const TuneOptions& o, const TuneMachine& m = twoCores()) {
  const Spec spec = loadSpecFromString(kSpec, "tiny.yaml");
  const Setting w = writtenSetting(spec, m, o);
  return runTune(layoutCandidates(w, m, o), [&](const Setting& b) { return refineCandidates(b, o); }, f.fn(), o,
                 f.clock());
}

}  // namespace

TEST_SUITE("tune") {
  TEST_CASE("candidates keep the global batch; layouts share the cores; precisions are the native ones") {
    TuneOptions o;
    const Spec spec = loadSpecFromString(kSpec, "tiny.yaml");
    const Setting w = writtenSetting(spec, twoCores(), o);
    CHECK(w.globalBatch() == 128);
    CHECK(w.threads == 2);  // the spec's default: the cores over the processes
    CHECK(w.fused == 1);    // small_cnn has a fused kernel, on by default
    const auto c = layoutCandidates(w, twoCores(), o);
    REQUIRE(c.size() == 8);  // 2 layouts x 2 precisions x 2 memory formats, the written one first
    CHECK(c.front() == w);
    for (const auto& s : c) {
      CHECK(s.globalBatch() == 128);
      CHECK(s.accumulate == 2);  // the written accumulation: 2 processes take micro-batches of 32
      CHECK(s.procs * s.threads == 2);
      CHECK(s.precision != Precision::Fp16);
    }
    // One changed knob first (every value of every knob is tried first), the most promising first.
    CHECK(differences(w, c[1]) == "channels_last");
    CHECK(differences(w, c[2]) == "bf16");
    CHECK(differences(w, c[3]) == "2 processes x 1 thread, micro-batch 32 x accumulate 2");
    CHECK(differences(w, c[7]) == "2 processes x 1 thread, micro-batch 32 x accumulate 2, bf16, channels_last");
    for (const auto& s : refineCandidates(c[3], o)) CHECK(s.globalBatch() == 128);
    o.precisions = parsePrecisions("fp16");
    for (std::size_t i = 1; i < layoutCandidates(w, twoCores(), o).size(); ++i)
      CHECK(layoutCandidates(w, twoCores(), o)[i].precision == Precision::Fp16);
    CHECK_THROWS_AS(parsePrecisions("fp8"), TuneError);
  }

  TEST_CASE("what differs becomes --set overrides; smaller halves the micro-batch, then recomputes") {
    TuneOptions o;
    const Setting w = writtenSetting(loadSpecFromString(kSpec, "tiny.yaml"), twoCores(), o);
    Setting s = w;
    s.precision = Precision::Bf16;
    s.procs = 2;
    s.threads = 1;
    s.micro = 32;
    CHECK(settingSets(s, w) ==
          std::vector<std::string>{"train.threads=1", "train.batch_size=32", "train.precision=bf16"});
    CHECK(differences(w, s) == "2 processes x 1 thread, micro-batch 32 x accumulate 2, bf16");
    CHECK(differences(w, w) == "-");
    Setting one = w;
    one.micro = 1;
    one.accumulate = 128;
    CHECK(smaller(w)->micro == 32);
    CHECK(smaller(w)->accumulate == 4);
    CHECK(smaller(one)->recompute);
    CHECK_FALSE(smaller(*smaller(one)));
  }

  TEST_CASE("a language model: no channels_last candidate; its table and JSON count tokens") {
    TuneOptions o;
    o.unit = "tokens";
    o.unitsPerSample = 64;
    const Spec spec = loadSpecFromString(kSpec, "tiny.yaml");
    const Setting w = writtenSetting(spec, twoCores(), o);
    const auto c = layoutCandidates(w, twoCores(), o);
    REQUIRE(c.size() == 4);  // 2 layouts x 2 precisions, the memory format as written
    for (const auto& s : c) CHECK(s.channelsLast == w.channelsLast);
    FakeTrials f;
    f.speed = [](const Setting&) { return 1.0; };
    o.budgetS = 60;
    const TuneOutcome out = tuneWith(f, o);
    CHECK(out.unit == "tokens");
    CHECK(tuneTable(out, 0).find("tokens/s") != std::string::npos);
    const nlohmann::json j = tuneJson(out, "tiny.yaml", twoCores(), o);
    CHECK(j["unit"] == "tokens");
    CHECK(j["candidates"][0].contains("median_tokens_per_s"));
  }

  TEST_CASE("the faster candidate wins, within the time budget, each finalist measured in two rounds or more") {
    FakeTrials f;
    f.speed = [](const Setting& s) {
      return (s.precision == Precision::Bf16 ? 2.0 : 1.0) * (s.procs == 1 ? 1.5 : 1.0) * (s.workers == 4 ? 1.1 : 1.0);
    };
    TuneOptions o;
    o.budgetS = 120;
    const TuneOutcome out = tuneWith(f, o);
    const Setting& win = out.candidates[out.winner].setting;
    CHECK(win.precision == Precision::Bf16);
    CHECK(win.procs == 1);
    CHECK(win.workers == 4);
    CHECK(win.globalBatch() == 128);
    CHECK(out.candidates[out.winner].successes() >= 2);
    CHECK(out.candidates[out.winner].median() == doctest::Approx(1000 * 2.0 * 1.5 * 1.1));
    CHECK(out.candidates[out.written].successes() >= 2);
    CHECK(f.now <= 1.1 * o.budgetS);  // within the budget ...
    CHECK(f.now >= 0.9 * o.budgetS);  // ... and using it
    for (std::size_t i = 1; i < out.candidates.size(); ++i)  // ranked
      if (out.candidates[i].successes() && out.candidates[i - 1].successes())
        CHECK(out.candidates[i - 1].median() >= out.candidates[i].median());
  }

  TEST_CASE("the memory budget holds: a micro-batch over it is halved at twice the accumulation") {
    FakeTrials f;
    f.speed = [](const Setting& s) { return 1 + static_cast<double>(s.micro) / 128; };  // larger is faster
    TuneOptions o;
    o.budgetS = 120;
    o.memoryBudgetBytes = 40 << 20;  // fits micro-batches up to 40
    TuneOutcome out = tuneWith(f, o);
    const CandidateRecord& win = out.candidates[out.winner];
    CHECK(win.setting.globalBatch() == 128);
    for (const auto& t : win.trials) CHECK(t.peakBytes <= o.memoryBudgetBytes);
    CHECK(win.setting.micro == 32);  // the largest that fits, as the planner would choose
    CHECK_FALSE(win.setting.recompute);
    o.memoryBudgetBytes = 3 << 18;  // 0.75 MiB: only micro-batch 1, recomputed
    out = tuneWith(f, o);
    CHECK(out.candidates[out.winner].setting.micro == 1);
    CHECK(out.candidates[out.winner].setting.recompute);
    CHECK(out.candidates[out.winner].setting.globalBatch() == 128);
    o.memoryBudgetBytes = 100 << 10;  // nothing fits
    CHECK_THROWS_CONTAINING(TuneError, tuneWith(f, o), "no candidate fits the memory budget of 0.1 MiB");
  }

  TEST_CASE("a budget too small for the trials, and a winner within 3 % of the spec as written") {
    FakeTrials f;
    TuneOptions o;
    o.budgetS = 5;
    CHECK_THROWS_CONTAINING(TuneError, tuneWith(f, o), "--time-budget 5.0 s is too small");
    CHECK(f.count == 1);
    o.budgetS = 1;  // the first trial is stopped at the budget's end
    CHECK_THROWS_CONTAINING(TuneError, tuneWith(f, o), "did not end within it");
    FakeTrials same;
    same.speed = [](const Setting& s) { return s.precision == Precision::Bf16 ? 1.02 : 1.0; };
    o.budgetS = 60;
    const TuneOutcome out = tuneWith(same, o);
    CHECK(out.winner == out.written);
    CHECK(out.candidates[out.winner].status == "chosen");
  }

  TEST_CASE("a budget that holds only the one-knob changes still combines the knobs that helped alone") {
    FakeTrials f;
    f.speed = [](const Setting& s) { return (s.precision == Precision::Bf16 ? 1.5 : 1.0) * (s.channelsLast ? 1.4 : 1.0); };
    TuneOptions o;
    o.budgetS = 40;
    const TuneOutcome out = tuneWith(f, o);
    REQUIRE_FALSE(out.notes.empty());
    CHECK(out.notes.front().find("stage 1: the budget holds 3 of its 8 candidates") == 0);
    const Setting& win = out.candidates[out.winner].setting;
    CHECK(win.precision == Precision::Bf16);  // merged from two one-knob winners of stage 1
    CHECK(win.channelsLast);
    CHECK(out.candidates[out.winner].stage == 2);
  }

  TEST_CASE("a trial's speed: the per-step CSV after the warm-up steps") {
    const std::string csv =
        "step,epoch,loss,lr,images_per_s,grad_norm,loss_scale,data_wait_s,comm_wait_s,time_s\n"
        "1,1,2.3,0.1,10,1,1,0,0,0.9\n2,1,2.2,0.1,10,1,1,0,0,1.0\n3,1,2.1,0.1,10,1,1,0,0,1.5\n"
        "4,1,2.0,0.1,10,1,1,0,0,2.0\n5,1,1.9,0.1,10,1,1,0,0,2.5\n";
    const TrialResult t = timingFromCsv(csv, 2, 100, 4.0);
    REQUIRE(t.ok);
    CHECK(t.stepS == doctest::Approx(0.5));
    CHECK(t.imagesPerS == doctest::Approx(200));
    CHECK(t.overheadS == doctest::Approx(2.5));
    CHECK_FALSE(timingFromCsv(csv, 4, 100, 4.0).ok);  // one timed step is too few
  }

  TEST_CASE("the tuned spec base:s the original, carries the changes and validates") {
    FakeTrials f;
    f.speed = [](const Setting& s) { return (s.precision == Precision::Bf16 ? 1.5 : 1.0) * (s.channelsLast ? 1.5 : 1.0); };
    TuneOptions o;
    o.budgetS = 60;
    const test::TempDir dir;
    const std::string spec = dir.file("tiny.yaml"), tuned = dir.file("out/tiny-tuned.yaml");
    test::writeText(spec, kSpec);
    fs::create_directories(dir.file("out"));
    const TuneOutcome out = tuneWith(f, o);
    const std::string yaml = tunedSpecYaml(out, spec, tuned, "tiny-tuned", {"train.epochs=2"}, twoCores());
    test::writeText(tuned, yaml);
    const Spec t = loadSpec(tuned);
    CHECK(t.name == "tiny-tuned");
    CHECK(t.train.numerics.precision == Precision::Bf16);
    CHECK(t.train.numerics.channelsLast);
    CHECK(t.train.length.epochs == 2);
    CHECK(*t.train.batching.batchSize * t.train.batching.accumulate == 128);
    CHECK(yaml.find("#   exprun run " + tuned) != std::string::npos);
    CHECK(yaml.find("chosen") != std::string::npos);
  }
}
