// Purpose: `exprun report` — values and their formatting, speed-ups and the baseline, provenance
// flags, every bad-file error (naming file and field), CSV/JSON read back, the HTML page's charts.
#include "runner/report/Report.h"

#include <cmath>
#include <functional>
#include <sstream>

#include "runner/cli/Commands.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;
using nlohmann::json;

namespace {

struct Fixture {
  std::string name;
  std::vector<double> times;  // one per epoch
  std::vector<double> top1, loss, images;
  std::vector<std::int64_t> memory, allocated;  // allocated: peak_allocated_bytes (absent when empty; -1: not measured)
  std::string status = "completed";
  std::string host = "vm";
  std::string libtorch = "2.11.0";
  std::string precision = "fp32";
  std::int64_t worldSize = 1, globalBatch = 128;
  std::vector<double> tokens, valLoss;  // a language model: tokens_per_s and val_loss per epoch (images_per_s absent)

  json toJson() const {
    json epochs = json::array();
    for (std::size_t i = 0; i < times.size(); ++i)
      epochs.push_back(json{{"epoch", i + 1},
                            {"time_s", times[i]},
                            {"images_per_s", images.empty() ? 1000.0 : images[i]},
                            {"data_wait_s", 0.0},
                            {"train_loss", loss.empty() ? 1.0 / (i + 1) : loss[i]},
                            {"train_top1", 50.0},
                            {"val_loss", 0.5},
                            {"val_top1", top1.empty() ? 80.0 + i : top1[i]},
                            {"val_top5", 99.0},
                            {"lr", 0.1},
                            {"peak_memory_bytes", memory.empty() ? std::int64_t{1} << 30 : memory[i]},
                            {"steps", 10},
                            {"samples", 1280}});
    for (std::size_t i = 0; i < allocated.size(); ++i) epochs[i]["peak_allocated_bytes"] = allocated[i];
    json evals = json::array();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      epochs[i].erase("images_per_s");
      epochs[i]["tokens_per_s"] = tokens[i];
      epochs[i]["val_loss"] = valLoss[i];
      epochs[i]["val_perplexity"] = std::exp(valLoss[i]);
      // An evaluation in the middle of each epoch (lower than the epoch's end in the first) and at its end.
      evals.push_back(json{{"epoch", i + 1}, {"step", 10 * i + 5}, {"time_s", 100.0 * i + 50}, {"val_loss", valLoss[i] - 0.25 * (i == 0)},
                           {"val_top1", 30.0}, {"val_top5", 60.0}});
      evals.push_back(json{{"epoch", i + 1}, {"step", 10 * i + 10}, {"time_s", 100.0 * i + 100}, {"val_loss", valLoss[i]},
                           {"val_top1", top1.empty() ? 80.0 + i : top1[i]}, {"val_top5", 60.0}});
    }
    return json{{"schema", 1},
                {"name", name},
                {"status", status},
                {"spec", {{"name", name}, {"train", {{"precision", precision}}}}},
                {"provenance",
                 {{"host", host},
                  {"cpu_model", "Intel(R) Xeon(R) Processor"},
                  {"cores", 2},
                  {"device", "cpu"},
                  {"libtorch_version", libtorch},
                  {"world_size", worldSize},
                  {"global_batch", globalBatch},
                  {"precision", precision}}},
                {"epochs", epochs},
                {"evals", evals},
                {"summary", json::object()}};
  }
  std::string write(const TempDir& dir) const {
    const std::string path = dir.file(name + ".json");
    writeText(path, toJson().dump(2));
    return path;
  }
};

Fixture baseRun() {
  Fixture f;
  f.name = "ref-fp32";
  f.times = {460, 464};  // mean 462 s
  f.top1 = {70.5, 75.25};
  f.images = {1000, 1200};
  f.memory = {std::int64_t{3} << 30, (std::int64_t{7} << 30) / 2};  // max 3.5 GiB
  return f;
}

Fixture fastRun() {
  Fixture f;
  f.name = "bf16";
  f.times = {231, 231};   // 2x faster
  f.top1 = {76.0, 74.0};  // best is not the last
  f.images = {2000, 2000};
  f.precision = "bf16";
  f.worldSize = 4;
  f.globalBatch = 1024;
  f.allocated = {-1, std::int64_t{3} << 28};  // 0.75 GiB of tensors (the first epoch did not measure)
  return f;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("report") {
  TEST_CASE("one row per file: means, maxima, best and final Top-1, speed-up against the first file") {
    TempDir dir;
    Report r = buildReportFromFiles({baseRun().write(dir), fastRun().write(dir)});
    REQUIRE(r.rows.size() == 2);
    CHECK(r.baseline == 0);
    const RunSummary& a = r.rows[0].run;
    CHECK(a.name == "ref-fp32");
    CHECK(*a.meanEpochTimeS == doctest::Approx(462));
    CHECK(*a.peakMemoryBytes == (std::int64_t{7} << 30) / 2);
    CHECK(*a.bestTop1 == doctest::Approx(75.25));
    CHECK(*a.finalTop1 == doctest::Approx(75.25));
    CHECK(*a.imagesPerS == doctest::Approx(1100));
    CHECK(*r.rows[0].speedup == doctest::Approx(1.0));
    const RunSummary& b = r.rows[1].run;
    CHECK(*b.bestTop1 == doctest::Approx(76.0));
    CHECK(*b.finalTop1 == doctest::Approx(74.0));
    CHECK(*r.rows[1].speedup == doctest::Approx(2.0));
    CHECK(b.worldSize == 4);
    CHECK(b.globalBatch == 1024);
    CHECK(b.precision == "bf16");
    CHECK(!a.peakAllocatedBytes);
    CHECK(*b.peakAllocatedBytes == std::int64_t{3} << 28);

    const std::string md = renderMarkdown(r);
    CHECK(md.find(
              "| ref-fp32 | 7 min 42 s | 3.50 (process) | 75.25 % | 75.25 % | — | 1100 | — | — | 1.00× | 128 | fp32 | 1 | 2 | completed |") !=
          std::string::npos);
    CHECK(md.find("| bf16 | 3 min 51 s | 0.75 | 76.00 % | 74.00 % | — | 2000 | — | — | 2.00× | 1024 | bf16 | 4 | 2 | completed |") !=
          std::string::npos);
    CHECK(md.find("Tensor memory/process (GiB)") != std::string::npos);
    CHECK(md.find("tracking allocator") != std::string::npos);
    CHECK(md.find("Baseline: ref-fp32") != std::string::npos);
    CHECK(md.find("†") == std::string::npos);
  }

  TEST_CASE("the HTML page says what the columns mean under the comparison table, not above it") {
    TempDir dir;
    const std::string html = renderHtml(buildReportFromFiles({baseRun().write(dir), fastRun().write(dir)}));
    const auto table = html.find("</table>"), legend = html.find("<p class=\"columns\">");
    REQUIRE(table != std::string::npos);
    REQUIRE(legend != std::string::npos);
    CHECK(legend > table);
    CHECK(html.find("tracking allocator") > table);
    CHECK(html.find("MFU: counted training FLOPs") > table);
  }

  TEST_CASE("memory below 1 GiB in every run is shown in MiB, in the table and the chart") {
    // The Fashion-MNIST comparison's runs peak at 50-200 MiB of tensors: in GiB they all read 0.0.
    TempDir dir;
    Fixture small = fastRun();
    small.allocated = {std::int64_t{150} << 20, std::int64_t{200} << 20};
    Fixture smaller = baseRun();
    smaller.name = "small";
    smaller.allocated = {std::int64_t{50} << 20, std::int64_t{52} << 20};
    smaller.memory = {std::int64_t{300} << 20, std::int64_t{300} << 20};
    Report r = buildReportFromFiles({smaller.write(dir), small.write(dir)});
    const std::string md = renderMarkdown(r);
    CHECK(md.find("Tensor memory/process (MiB)") != std::string::npos);
    CHECK(md.find("| small | 7 min 42 s | 52.0 |") != std::string::npos);
    CHECK(md.find("| 200.0 |") != std::string::npos);
    CHECK(md.find("(GiB)") == std::string::npos);
    const std::string html = renderHtml(r);
    CHECK(html.find("peak MiB of live tensors") != std::string::npos);
    CHECK(html.find("200.0 MiB") != std::string::npos);
    // One run at or above 1 GiB turns the whole table to GiB.
    small.allocated = {std::int64_t{150} << 20, std::int64_t{1} << 30};
    const std::string md2 = renderMarkdown(buildReportFromFiles({smaller.write(dir), small.write(dir)}));
    CHECK(md2.find("Tensor memory/process (GiB)") != std::string::npos);
    CHECK(md2.find("| small | 7 min 42 s | 0.05 |") != std::string::npos);
    CHECK(md2.find("| 1.00 |") != std::string::npos);
  }

  TEST_CASE("--baseline chooses the reference run by name; an unknown name lists the available ones") {
    TempDir dir;
    const std::vector<std::string> files{baseRun().write(dir), fastRun().write(dir)};
    Report r = buildReportFromFiles(files, "bf16");
    CHECK(r.baseline == 1);
    CHECK(*r.rows[1].speedup == doctest::Approx(1.0));
    CHECK(*r.rows[0].speedup == doctest::Approx(0.5));
    CHECK(renderMarkdown(r).find("| 0.50× |") != std::string::npos);
    CHECK_THROWS_CONTAINING(ReportError, buildReportFromFiles(files, "fp16"), "'fp16'", "available: ref-fp32, bf16");
    CHECK(cmdReport(ReportArgs{files, "fp16", "md", ""}) == kExitBadInput);
    CHECK_THROWS_CONTAINING(ReportError, buildReport({}), "no result files");
  }

  TEST_CASE("runs from another machine or LibTorch are marked and the differences listed") {
    TempDir dir;
    Fixture other = fastRun();
    other.host = "gpu01";
    other.libtorch = "2.10.0";
    Report r = buildReportFromFiles({baseRun().write(dir), other.write(dir)});
    CHECK(r.rows[0].differs.empty());
    REQUIRE(r.rows[1].differs.size() == 2);
    CHECK(r.rows[1].differs[0] == "host vm vs gpu01");
    CHECK(r.rows[1].differs[1] == "libtorch_version 2.11.0 vs 2.10.0");
    const std::string md = renderMarkdown(r);
    CHECK(md.find("| bf16 † |") != std::string::npos);
    const std::string note =
        "† bf16: provenance differs from the baseline ref-fp32: host vm vs gpu01; libtorch_version 2.11.0 vs 2.10.0\n";
    REQUIRE(md.size() > note.size());
    CHECK(md.substr(md.size() - note.size()) == note);  // the Markdown ends with the notes
    CHECK(renderCsv(r).find("host vm vs gpu01; libtorch_version 2.11.0 vs 2.10.0") != std::string::npos);
    CHECK(renderHtml(r).find("host vm vs gpu01") != std::string::npos);
  }

  TEST_CASE("a run without epochs is listed with dashes") {
    TempDir dir;
    Fixture empty;
    empty.name = "just-started";
    empty.status = "running";
    Report r = buildReportFromFiles({baseRun().write(dir), empty.write(dir)});
    CHECK_FALSE(r.rows[1].speedup);
    CHECK_FALSE(r.rows[1].run.meanEpochTimeS);
    CHECK(renderMarkdown(r).find("| just-started | — | — | — | — | — | — | — | — | — | 128 | fp32 | 1 | 0 | running |") !=
          std::string::npos);
    json j = json::parse(renderJson(r));
    CHECK(j[1]["mean_epoch_time_s"].is_null());
    CHECK(j[1]["epochs_completed"] == 0);
    const std::string html = renderHtml(r);
    CHECK(html.find("no data") != std::string::npos);
    // As the baseline, nothing has a speed-up.
    Report r2 = buildReportFromFiles({empty.write(dir), baseRun().write(dir)});
    CHECK_FALSE(r2.rows[1].speedup);
  }

  TEST_CASE("bad result files: the error names the file and the field") {
    TempDir dir;
    auto variant = [&](const std::string& file, const std::function<void(json&)>& edit) {
      json j = baseRun().toJson();
      edit(j);
      const std::string path = dir.file(file);
      writeText(path, j.dump(2));
      return path;
    };
    const std::string missing = dir.file("absent.json");
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(missing), missing, "cannot read result file");
    const std::string invalid = dir.file("invalid.json");
    writeText(invalid, "{\n  \"schema\": 1,\n  \"name\": \"x\",\n}\n");
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(invalid), invalid, "invalid JSON", "line 4, column 1");
    std::string p = variant("schema2.json", [](json& j) { j["schema"] = 2; });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p, "schema", "unsupported result schema 2");
    p = variant("noschema.json", [](json& j) { j.erase("schema"); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": schema: missing required field");
    p = variant("noepochs.json", [](json& j) { j.erase("epochs"); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": epochs: missing required field");
    p = variant("epochsobj.json", [](json& j) { j["epochs"] = json::object(); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": epochs: expected an array");
    p = variant("notime.json", [](json& j) { j["epochs"][1].erase("time_s"); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": epochs[1].time_s: missing required field");
    p = variant("strimages.json", [](json& j) { j["epochs"][0]["images_per_s"] = "fast"; });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": epochs[0].images_per_s: expected a number",
                            "\"fast\"");
    p = variant("floatmem.json", [](json& j) { j["epochs"][0]["peak_memory_bytes"] = 1.5; });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": epochs[0].peak_memory_bytes: expected an integer");
    p = variant("status.json", [](json& j) { j["status"] = "done"; });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": status: expected completed, interrupted, requeued, cancelled or running");
    p = variant("noname.json", [](json& j) { j.erase("name"); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": name: missing required field");
    p = variant("noworld.json", [](json& j) { j["provenance"].erase("world_size"); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p + ": provenance.world_size: missing required field");
    p = variant("array.json", [](json& j) { j = json::array(); });
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(p), p, "expected a result object");
    // Through the command: exit code 2, nothing written.
    const std::string out = dir.file("out.md");
    CHECK(cmdReport(ReportArgs{{baseRun().write(dir), p}, "", "md", out}) == kExitBadInput);
    CHECK_FALSE(std::filesystem::exists(out));
  }

  TEST_CASE("CSV and JSON hold the raw numbers and read back") {
    TempDir dir;
    Report r = buildReportFromFiles({baseRun().write(dir), fastRun().write(dir)});
    auto lines = split(renderCsv(r), '\n');
    REQUIRE(lines.size() >= 3);
    auto header = split(lines[0], ',');
    CHECK(header.size() == 36);  // 22, the breakdown's cell, 12 phases and comm_overlap
    auto col = [&](const std::string& name) {
      return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    };
    auto row = split(lines[2], ',');
    REQUIRE(row.size() == header.size());
    CHECK(row[col("name")] == "bf16");
    CHECK(std::stod(row[col("mean_epoch_time_s")]) == 231.0);
    CHECK(std::stoll(row[col("peak_memory_bytes")]) == std::int64_t{1} << 30);
    CHECK(std::stoll(row[col("peak_allocated_bytes")]) == std::int64_t{3} << 28);
    CHECK(split(lines[1], ',')[col("peak_allocated_bytes")].empty());
    CHECK(std::stod(row[col("speedup")]) == 2.0);
    CHECK(std::stod(row[col("final_val_top1")]) == 74.0);
    CHECK(row[col("baseline")] == "false");
    CHECK(split(lines[1], ',')[col("baseline")] == "true");

    json j = json::parse(renderJson(r));
    REQUIRE(j.is_array());
    REQUIRE(j.size() == 2);
    CHECK(j[0]["name"] == "ref-fp32");
    CHECK(j[0]["mean_epoch_time_s"].get<double>() == 462.0);
    CHECK(j[0]["peak_memory_bytes"].get<std::int64_t>() == (std::int64_t{7} << 30) / 2);
    CHECK(j[0]["baseline"] == true);
    CHECK(j[0]["peak_allocated_bytes"].is_null());
    CHECK(j[1]["peak_allocated_bytes"] == std::int64_t{3} << 28);
    CHECK(j[1]["speedup"].get<double>() == 2.0);
    CHECK(j[1]["world_size"] == 4);
    CHECK(j[1]["provenance_differs"].empty());
  }

  TEST_CASE("CSV quotes fields with commas") {
    TempDir dir;
    Fixture f = baseRun();
    f.name = "a,\"b\"";
    Report r = buildReportFromFiles({f.write(dir)});
    CHECK(split(renderCsv(r), '\n')[1].rfind("\"a,\"\"b\"\"\",", 0) == 0);
  }

  TEST_CASE("time to target and MFU: the column, CSV/JSON fields, partial epochs out of the means, the chart") {
    TempDir dir;
    json hit = baseRun().toJson(), missed = fastRun().toJson();
    hit["epochs"][0]["mfu"] = 0.25;
    hit["epochs"][1]["mfu"] = 0.35;
    hit["epochs"][1]["partial"] = true;  // stopped inside epoch 2: its time is not an epoch's
    hit["evals"] = json::array({json{{"step", 5}, {"epoch", 1}, {"time_s", 250.0}, {"val_loss", 0.6}, {"val_top1", 60.0}, {"val_top5", 90.0}},
                                json{{"step", 10}, {"epoch", 1}, {"time_s", 470.0}, {"val_loss", 0.5}, {"val_top1", 70.5}, {"val_top5", 95.0}},
                                json{{"step", 13}, {"epoch", 2}, {"time_s", 615.5}, {"val_loss", 0.4}, {"val_top1", 75.25}, {"val_top5", 99.0}}});
    hit["summary"] = json{{"target", {{"val_top1", 75.0}}}, {"time_to_target_s", 615.5}, {"target_step", 13}, {"target_epoch", 2}};
    missed["summary"] = json{{"target", {{"val_top1", 99.0}}}, {"time_to_target_s", nullptr}};
    writeText(dir.file("hit.json"), hit.dump());
    writeText(dir.file("missed.json"), missed.dump());
    Report r = buildReportFromFiles({dir.file("hit.json"), dir.file("missed.json")});
    const RunSummary& a = r.rows[0].run;
    CHECK(a.target == "val_top1 >= 75.0");
    REQUIRE(a.timeToTargetS);
    CHECK(*a.timeToTargetS == 615.5);
    CHECK(*a.meanEpochTimeS == 460);  // the partial epoch left out
    CHECK(a.epochsCompleted == 1);
    CHECK(*a.mfu == 0.25);
    CHECK(a.evalTimeS == std::vector<double>{250.0, 470.0, 615.5});
    CHECK_FALSE(r.rows[1].run.timeToTargetS);
    CHECK_FALSE(r.rows[1].run.mfu);
    const std::string md = renderMarkdown(r);
    CHECK(md.find("| Time to target |") != std::string::npos);
    CHECK(md.find("| 10 min 16 s |") != std::string::npos);
    CHECK(md.find("| not reached |") != std::string::npos);
    CHECK(md.find("| 25.0 % |") != std::string::npos);
    const auto rows = split(renderCsv(r), '\n');
    const auto header = split(rows[0], ','), first = split(rows[1], ',');
    const auto col = [&](const std::string& name) {
      return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    };
    CHECK(first.at(col("time_to_target_s")) == "615.5");
    CHECK(first.at(col("mfu")) == "0.25");
    CHECK(split(rows[2], ',').at(col("time_to_target_s")).empty());
    CHECK(reportJson(r)[1]["time_to_target_s"].is_null());
    const std::string html = renderHtml(r);
    const auto chart = html.find("<title>Validation Top-1 against wall-clock time</title>");
    REQUIRE(chart != std::string::npos);
    CHECK(count(html.substr(chart), "<circle") >= 3);  // the three evaluations of the first run
    json bad = hit;
    bad["evals"][1]["time_s"] = "late";
    writeText(dir.file("bad.json"), bad.dump());
    CHECK_THROWS_CONTAINING(ReportError, loadRunSummary(dir.file("bad.json")), "evals[1].time_s");
  }

  TEST_CASE("the step breakdown: the three largest phases' column, raw seconds per phase, the stacked bars") {
    TempDir dir;
    json a = baseRun().toJson(), b = fastRun().toJson();
    // epoch 1 and 2 of run a: forward 3 and 5 s, backward 5 and 7, exposed comm 1 and 1, rest 1 and 1
    for (int e = 0; e < 2; ++e) {
      const double fwd = 3 + 2 * e, bwd = 5 + 2 * e;
      json parts = json::object();
      for (const char* k : {"data_wait", "h2d", "recompute", "optimizer", "ema", "eval", "checkpoint"})
        parts[k] = {{"max_s", 0.0}, {"mean_s", 0.0}, {"fraction", 0.0}};
      parts["forward"] = {{"max_s", fwd}, {"mean_s", fwd}, {"fraction", 0.0}};
      parts["backward"] = {{"max_s", bwd}, {"mean_s", bwd}, {"fraction", 0.0}};
      parts["comm_exposed"] = {{"max_s", 1.5}, {"mean_s", 1.0}, {"fraction", 0.0}};
      parts["rest"] = {{"max_s", 1.0}, {"mean_s", 1.0}, {"fraction", 0.0}};
      a["epochs"][e]["breakdown"] = {{"clock", "host"}, {"epoch_s", fwd + bwd + 2.5}, {"mean_epoch_s", fwd + bwd + 2},
                                     {"comm_overlap", 0.25 + 0.5 * e}, {"parts", parts}};
    }
    writeText(dir.file("a.json"), a.dump());
    writeText(dir.file("b.json"), b.dump());
    Report r = buildReportFromFiles({dir.file("a.json"), dir.file("b.json")});
    const RunSummary& s = r.rows[0].run;
    REQUIRE(s.phaseSeconds);
    CHECK((*s.phaseSeconds)[static_cast<int>(Phase::Forward)] == 4);  // mean over the epochs
    CHECK((*s.phaseSeconds)[static_cast<int>(Phase::Backward)] == 6);
    CHECK(*s.commOverlap == 0.5);
    CHECK(breakdownCell(s) == "bwd 50 % · fwd 33 % · comm 8 %");
    CHECK_FALSE(r.rows[1].run.phaseSeconds);  // a file from before the breakdown
    const std::string md = renderMarkdown(r);
    CHECK(md.find("| Where the time goes |") != std::string::npos);
    CHECK(md.find("| bwd 50 % · fwd 33 % · comm 8 % |") != std::string::npos);
    CHECK(reportJson(r)[0]["time_forward_s"] == 4.0);
    CHECK(reportJson(r)[0]["comm_overlap"] == 0.5);
    CHECK(reportJson(r)[1]["time_forward_s"].is_null());
    const std::string html = renderHtml(r);
    const auto chart = html.find("<title>Step breakdown per epoch</title>");
    REQUIRE(chart != std::string::npos);
    CHECK(html.find("<h2>Where the time goes</h2>") < chart);
    CHECK(count(html.substr(chart, html.find("</svg>", chart) - chart), "<rect class=\"seg\"") == 4);  // run a: 4 phases
    CHECK(html.find("fwd 4 s (33.3 %)") != std::string::npos);  // a segment's tooltip
    CHECK(html.find("comm 50 % hidden") != std::string::npos);
  }

  TEST_CASE("an MFU above 100 % shows as no figure; a precision without native arithmetic is marked") {
    TempDir dir;
    json above = baseRun().toJson(), emulated = fastRun().toJson();
    above["epochs"][0]["mfu"] = nullptr;
    above["epochs"][0]["mfu_note"] = "> 100 % (peak unknown)";
    above["epochs"][1]["mfu"] = 0.5;
    emulated["provenance"]["precision"] = "bf16";
    emulated["provenance"]["precision_native"] = false;
    emulated["provenance"]["precision_missing"] = "AVX512_BF16 or AMX-BF16";
    writeText(dir.file("above.json"), above.dump());
    writeText(dir.file("emulated.json"), emulated.dump());
    Report r = buildReportFromFiles({dir.file("above.json"), dir.file("emulated.json")});
    REQUIRE(r.rows[0].run.mfu);
    CHECK(*r.rows[0].run.mfu > 1);
    const std::string md = renderMarkdown(r), html = renderHtml(r);
    CHECK(md.find("| > 100 % (peak unknown) |") != std::string::npos);
    CHECK(md.find("| bf16 (emulated on this CPU) |") != std::string::npos);
    CHECK(html.find("&gt; 100 % (peak unknown)") != std::string::npos);
    CHECK(html.find("bf16 (emulated on this CPU)") != std::string::npos);
    const auto rows = split(renderCsv(r), '\n');
    const auto header = split(rows[0], ',');
    const auto col = [&](const std::string& name) {
      return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    };
    CHECK(split(rows[1], ',').at(col("mfu")) == "> 100 % (peak unknown)");
    CHECK(split(rows[2], ',').at(col("precision_emulated")) == "true");
    CHECK(split(rows[1], ',').at(col("precision_emulated")) == "false");
    const json j = reportJson(r);
    CHECK(j[0]["mfu"].is_null());
    CHECK(j[0]["mfu_note"] == "> 100 % (peak unknown)");
    CHECK(j[1]["precision_emulated"] == true);
  }

  TEST_CASE("HTML: self-contained page with the table, six SVG charts and escaped names") {
    TempDir dir;
    Fixture odd = fastRun();
    odd.name = "<script>alert(1)</script>&co";
    Report r = buildReportFromFiles({baseRun().write(dir), odd.write(dir)});
    const std::string html = renderHtml(r);
    CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
    CHECK(count(html, "<svg") == 6);
    CHECK(count(html, "</svg>") == 6);
    for (const char* title : {"Mean epoch time", "Throughput", "Memory per process", "Validation Top-1 per epoch",
                              "Training loss per epoch"})
      CHECK_MESSAGE(html.find(std::string("<title>") + title + "</title>") != std::string::npos, title);
    CHECK(html.find("<table class=\"report\">") != std::string::npos);
    CHECK(count(html, "<tr class=\"run") == 2);
    CHECK(html.find("7 min 42 s") != std::string::npos);
    CHECK(html.find("<script") == std::string::npos);
    CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt;&amp;co") != std::string::npos);
    CHECK(html.find("http://") == std::string::npos);
    CHECK(html.find("https://") == std::string::npos);
    CHECK(count(html, "class=\"legend\"") == 4);  // two line charts, two runs each
    CHECK(count(html, "<polyline") == 4);

    const std::string out = dir.file("sub/report.html");
    CHECK(cmdReport(ReportArgs{{baseRun().write(dir)}, "", "html", out}) == kExitOk);
    CHECK(readText(out).find("<svg") != std::string::npos);
    CHECK_THROWS_CONTAINING(ReportError, renderReport(r, "pdf"), "unknown format 'pdf'");
  }

  TEST_CASE("a run's compression figures: their own table, JSON and the Top-1 against FLOPs chart") {
    TempDir dir;
    json pruned = baseRun().toJson();
    pruned["name"] = "pruned";
    pruned["compression"] = json::array(
        {json{{"model", "fp32"}, {"params", 1000}, {"flops_per_image", 2.0e6}, {"bytes", 4000}, {"top1", 90.5},
              {"images_per_s_batch1", 100.0}, {"images_per_s_batch64", 1000.0}},
         json{{"model", "pruned fp32"}, {"params", 300}, {"flops_per_image", 0.8e6}, {"bytes", 1200}, {"top1", 90.25},
              {"images_per_s_batch1", 150.0}, {"images_per_s_batch64", 2100.0}},
         json{{"model", "pruned int8"}, {"params", 300}, {"flops_per_image", 0.8e6}, {"bytes", 330}, {"top1", 90.0},
              {"images_per_s_batch1", 120.0}, {"images_per_s_batch64", 3500.0}}});
    const std::string path = dir.file("pruned.json");
    writeText(path, pruned.dump());
    Report r = buildReportFromFiles({baseRun().write(dir), path});
    REQUIRE(r.rows[1].run.compression.size() == 3);
    CHECK(compressionMarkdown(Report{{r.rows[0]}, 0}).empty());  // no run compressed: no table
    const std::string md = renderMarkdown(r);
    CHECK(md.find("### Compression") != std::string::npos);
    CHECK(md.find("| pruned | pruned fp32 | 300 | 8e+05 | 0.00 | 90.25 % | 150 | 2100 | 2.10× |") != std::string::npos);
    CHECK(md.find("| pruned | pruned int8 | 300 | 8e+05 | 0.00 | 90.00 % | 120 | 3500 | 3.50× |") != std::string::npos);
    CHECK(reportJson(r)[1]["compression"][2]["bytes"] == 330);
    CHECK(!reportJson(r)[0].contains("compression"));
    const std::string html = renderHtml(r);
    CHECK(html.find("Top-1 against forward FLOPs") != std::string::npos);
    CHECK(html.find("<h2>Compression</h2>") != std::string::npos);
  }

  TEST_CASE("the methods a run used: their column, and each method's own columns from its section") {
    TempDir dir;
    json run = baseRun().toJson();
    run["name"] = "pruned";
    run["spec"]["methods"] = json::array({json{{"type", "prune"}, {"ratio", 0.5}}, json{{"type", "int8"}}});
    run["methods"] = json{{"prune", {{"steps", json::array()}, {"flops_removed_pct", 50.125}}}, {"int8", {{"top1", 90.0}}}};
    const std::string path = dir.file("pruned.json");
    writeText(path, run.dump());
    Report r = buildReportFromFiles({baseRun().write(dir), path});
    CHECK(r.rows[1].run.methods == std::vector<std::string>{"prune", "int8"});
    const std::string md = renderMarkdown(r);
    CHECK(md.find("| Methods | FLOPs pruned | int8 Top-1 |") != std::string::npos);
    CHECK(md.find("| — | — | — |") != std::string::npos);  // the baseline used none
    CHECK(md.find("| prune, int8 | 50.1 % | 90.00 % |") != std::string::npos);
    const auto rows = split(renderCsv(r), '\n');
    const auto header = split(rows[0], ',');
    const auto col = [&](const std::string& name) {
      return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
    };
    CHECK(split(rows[2], ',').at(col("methods")) == "prune; int8");
    CHECK(split(rows[2], ',').at(col("flops_pruned_pct")) == "50.125");
    CHECK(split(rows[1], ',').at(col("flops_pruned_pct")).empty());
    CHECK(reportJson(r)[1]["int8_top1"] == 90.0);
    CHECK(reportJson(r)[0]["methods"].empty());
    CHECK(renderHtml(r).find("<th>FLOPs pruned</th>") != std::string::npos);
    // Without methods in any run, the tables have no Methods column.
    CHECK(renderMarkdown(buildReportFromFiles({baseRun().write(dir)})).find("Methods") == std::string::npos);
  }

  TEST_CASE("language models: val loss best and final, perplexity, token accuracy and tokens/s; their chart") {
    TempDir dir;
    Fixture lm;
    lm.name = "gpt";
    lm.times = {60, 62};
    lm.top1 = {30.0, 35.5};
    lm.tokens = {12000, 13000};
    lm.valLoss = {2.5, 2.0};
    Fixture lm2 = lm;
    lm2.name = "gpt-bf16";
    lm2.valLoss = {2.6, 2.1};
    const Report r = buildReportFromFiles({lm.write(dir), lm2.write(dir)});
    CHECK(r.rows[0].run.tokens);
    CHECK(*r.rows[0].run.bestValLoss == doctest::Approx(2.0));
    CHECK(*r.rows[0].run.finalValLoss == doctest::Approx(2.0));
    CHECK(*r.rows[0].run.finalPerplexity == doctest::Approx(std::exp(2.0)));
    CHECK(*r.rows[0].run.tokensPerS == doctest::Approx(12500));
    // The mid-epoch evaluation of the first epoch (2.25) is no lower than the final 2.0; run 2's best is its final too.
    CHECK(*r.rows[1].run.bestValLoss == doctest::Approx(2.1));
    const std::string md = renderMarkdown(r);
    const std::string head = md.substr(0, md.find('\n'));
    CHECK(head.find("| Token accuracy | Val loss best | Val loss final | Perplexity |") != std::string::npos);
    CHECK(head.find("| Tokens/s |") != std::string::npos);
    CHECK(head.find("Top-1") == std::string::npos);
    CHECK(head.find("Images/s") == std::string::npos);
    CHECK(md.find("| 35.50 % | 2.0000 | 2.0000 | 7.39 |") != std::string::npos);
    CHECK(md.find("| 12500 |") != std::string::npos);
    CHECK(md.find("MFU counts FLOPs per token x tokens/s") != std::string::npos);
    const json j = reportJson(r);
    CHECK(j[1]["final_val_loss"].get<double>() == doctest::Approx(2.1));
    CHECK(j[0]["tokens_per_s"].get<double>() == doctest::Approx(12500));
    const std::string html = renderHtml(r);
    CHECK(html.find("Validation loss against wall-clock time") != std::string::npos);
    CHECK(html.find("tokens/s (all ranks)") != std::string::npos);
    CHECK(html.find("images/s (all ranks)") == std::string::npos);
    // Beside a classifier, both kinds of columns, each run's dashes where it has none.
    const Report mixed = buildReportFromFiles({baseRun().write(dir), lm.write(dir)});
    const std::string m = renderMarkdown(mixed);
    CHECK(m.find("| Top-1 best | Top-1 final | Val loss best |") != std::string::npos);
    CHECK(m.find("| Images/s | Tokens/s |") != std::string::npos);
    // A classifier-only report has no language-model column.
    CHECK(renderCsv(buildReportFromFiles({baseRun().write(dir)})).find("val_loss") == std::string::npos);
  }
}
