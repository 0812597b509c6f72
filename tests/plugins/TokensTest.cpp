// Purpose: language modelling end to end on the CPU: `exprun prepare-text`'s character tokens
// (nanoGPT's shakespeare_char rules), the `tokens` data plugin (nanoGPT's files and llm.c's shards;
// training windows from (seed, epoch, sample), fixed evaluation windows; bad files named), the
// `language_model` task (the loss over tokens, token counts, the task a tokens spec implies), and a
// small GPT trained on them whose result file speaks of tokens.
#include <cstring>
#include <fstream>

#include "runner/api/Kinds.h"
#include "runner/api/Task.h"
#include "runner/data/CharText.h"
#include "runner/spec/Spec.h"
#include "runner/train/Trainer.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {

const char* kText =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair.\n";

std::string corpus(const test::TempDir& dir, int copies = 40) {
  std::string text;
  for (int i = 0; i < copies; ++i) text += kText;
  test::writeText(dir.file("text.txt"), text);
  prepareCharText(dir.file("text.txt"), dir.file("tok"));
  return dir.file("tok");
}

std::unique_ptr<Dataset> tokens(const std::string& dirPath, const std::string& extra = "") {
  const Spec s = loadSpecFromString("name: t\nmodel: {type: gpt}\ndata: {type: tokens, dir: " + dirPath +
                                        ", block_size: 8, eval_batches: 2, eval_batch_size: 3" + extra + "}\n",
                                    "t.yaml");
  auto d = build<DataKind>(s.data);
  d->load();
  return d;
}

std::vector<std::uint16_t> readUint16(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint16_t> v;
  for (std::uint16_t x; in.read(reinterpret_cast<char*>(&x), 2);) v.push_back(x);
  return v;
}

}  // namespace

TEST_SUITE("tokens") {
  TEST_CASE("prepare-text: sorted characters, the first 90 % trains, uint16 ids, the vocabulary in meta.json") {
    test::TempDir dir;
    test::writeText(dir.file("t.txt"), "hello, wörld\nhello again");
    const PreparedText p = prepareCharText(dir.file("t.txt"), dir.file("out"));
    const CharVocabulary v = readCharVocabulary(dir.file("out/meta.json"));
    CHECK(p.characters == 24);  // ö is one character
    CHECK(p.vocabSize == static_cast<std::int64_t>(v.itos.size()));
    CHECK(v.itos.front() == "\n");
    CHECK(v.itos.back() == "ö");
    CHECK(std::is_sorted(v.itos.begin(), v.itos.end()));
    const auto train = readUint16(dir.file("out/train.bin")), val = readUint16(dir.file("out/val.bin"));
    CHECK(train.size() == 21);  // int(24 * 0.9)
    CHECK(val.size() == 3);
    std::vector<std::int64_t> all(train.begin(), train.end());
    all.insert(all.end(), val.begin(), val.end());
    CHECK(v.decode(all) == "hello, wörld\nhello again");
    CHECK(v.encode("hello") == std::vector<std::uint16_t>(train.begin(), train.begin() + 5));
    test::writeText(dir.file("bad.txt"), std::string("ok \xff\xfe"));
    CHECK_THROWS_CONTAINING(std::invalid_argument, prepareCharText(dir.file("bad.txt"), dir.file("o2")), "bad.txt",
                            "UTF-8");
    CHECK_THROWS_CONTAINING(std::invalid_argument, prepareCharText(dir.file("none.txt"), dir.file("o3")), "none.txt");
  }

  TEST_CASE("windows: the next tokens as targets, training starts from (seed, sample), fixed evaluation windows") {
    test::TempDir dir;
    auto d = tokens(corpus(dir));
    const DataInfo info = d->info();
    CHECK(info.vocabSize == readCharVocabulary(dir.file("tok/meta.json")).itos.size());
    CHECK(info.sequenceLength == 8);
    CHECK(d->size(Split::Test) == 6);
    const Batch a = d->makeBatch(Split::Train, {0, 1, 2}, 17), b = d->makeBatch(Split::Train, {2, 1, 0}, 17);
    CHECK(a.x.sizes() == torch::IntArrayRef{3, 8});
    CHECK(torch::equal(a.x.narrow(1, 1, 7), a.y.narrow(1, 0, 7)));  // y is x shifted by one
    CHECK(torch::equal(a.x[0], b.x[2]));                             // a sample's window: its own, wherever batched
    CHECK_FALSE(torch::equal(a.x, d->makeBatch(Split::Train, {0, 1, 2}, 18).x));  // another epoch, other windows
    const Batch e1 = d->makeBatch(Split::Test, {0, 5}, 1), e2 = d->makeBatch(Split::Test, {0, 5}, 99);
    CHECK(torch::equal(e1.x, e2.x));  // evaluation ignores the seed
    const auto val = readUint16(dir.file("tok/val.bin"));
    CHECK(e1.x[0][0].item<std::int64_t>() == val[0]);                 // the first window starts the split
    CHECK(e1.y[1][7].item<std::int64_t>() == val[val.size() - 1]);    // the last one ends it
  }

  TEST_CASE("llm.c's shards: both header versions, split by name; bad files are named") {
    test::TempDir dir;
    auto shard = [&](const std::string& name, std::int32_t magic, std::int32_t version, std::int64_t n, int width,
                     std::int32_t claimed) {
      std::string bytes(1024, '\0');
      const std::int32_t h[3] = {magic, version, claimed};
      std::memcpy(bytes.data(), h, sizeof h);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t v = static_cast<std::uint32_t>(i % 50);
        bytes.append(reinterpret_cast<const char*>(&v), static_cast<std::size_t>(width));
      }
      test::writeText(dir.file("s/" + name), bytes);
    };
    shard("data_train_000001.bin", 20240520, 1, 40, 2, 40);
    shard("data_train_000002.bin", 20240801, 7, 40, 4, 40);
    shard("data_val_000000.bin", 20240520, 1, 30, 2, 30);
    auto d = tokens(dir.file("s"));
    CHECK(d->info().vocabSize == 50257);  // GPT-2's, when no meta.json says otherwise
    const Batch b = d->makeBatch(Split::Train, {0, 1, 2, 3}, 5);
    CHECK(b.x.max().item<std::int64_t>() < 50);
    CHECK(d->size(Split::Train) == 10);  // 80 tokens / block_size 8
    shard("data_val_000000.bin", 20240520, 1, 30, 2, 31);
    CHECK_THROWS_CONTAINING(DataError, tokens(dir.file("s")), "data_val_000000.bin", "31 tokens");
    shard("data_val_000000.bin", 12345, 1, 30, 2, 30);
    CHECK_THROWS_CONTAINING(DataError, tokens(dir.file("s")), "data_val_000000.bin", "magic 12345");
    shard("data_val_000000.bin", 20240520, 1, 5, 2, 5);
    CHECK_THROWS_CONTAINING(DataError, tokens(dir.file("s")), "val split", "block_size + 1");
    CHECK_THROWS_CONTAINING(DataError, tokens(dir.file("nothing")), "nothing", "neither nanoGPT's train.bin");
    // A token beyond the vocabulary is named with its file and place when a window reads it.
    test::TempDir other;
    auto small = tokens(corpus(other, 2), ", vocab_size: 3");
    CHECK_THROWS_CONTAINING(DataError, small->makeBatch(Split::Test, {0}, 0), "val.bin", "vocabulary size 3");
  }

  TEST_CASE("methods made for class targets or residual image branches are refused with a language model") {
    for (const char* m : {"mixup", "stochastic_depth"}) {
      CAPTURE(m);
      CHECK_THROWS_CONTAINING(SpecError,
                              loadSpecFromString(std::string("name: t\nmodel: {type: gpt}\ndata: {type: tokens, dir: /x}\n"
                                                             "methods: [{type: ") + m + "}]\n", "t.yaml"),
                              "t.yaml", "methods[0]", std::string(m) + "' works with the task classification",
                              "task is language_model");
      // The same method with an image task is fine.
      CHECK_NOTHROW(loadSpecFromString(std::string("name: t\nmodel: {type: resnet18}\ndata: {type: synthetic}\n"
                                                   "methods: [{type: ") + m + "}]\n", "t.yaml"));
    }
  }

  TEST_CASE("a tokens spec implies the language_model task; its loss is the mean over tokens") {
    const Spec s = loadSpecFromString("name: t\nmodel: {type: gpt}\ndata: {type: tokens, dir: /x}\n", "t.yaml");
    CHECK(s.task.type() == "language_model");
    CHECK(s.toJson()["task"]["type"] == "language_model");
    const Spec c = loadSpecFromString("name: c\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n", "c.yaml");
    CHECK(c.task.type() == "classification");
    auto task = build<TaskKind>(s.task);
    CHECK(task->unit() == "tokens");
    torch::manual_seed(2);
    const torch::Tensor out = torch::randn({2, 5, 7}), y = torch::randint(7, {2, 5});
    CHECK(task->units(y) == 10);
    const torch::Tensor flat = torch::nn::functional::cross_entropy(out.reshape({10, 7}), y.reshape({10}));
    CHECK(task->loss(out, y, torch::Tensor(), 0.0).item<double>() == doctest::Approx(flat.item<double>()));
    const EvalSums e = task->evalSums(out, y);
    CHECK(e.units == 10);
    CHECK(e.lossSum.item<double>() == doctest::Approx(10 * flat.item<double>()));
    CHECK(e.hits[0].item<std::int64_t>() == out.argmax(-1).eq(y).sum().item<std::int64_t>());
    CHECK_THROWS_CONTAINING(c10::Error, task->loss(out, y, torch::ones({10, 7}), 0.0), "soft targets");
  }

  TEST_CASE("a small GPT trains on the tokens: the loss falls, the result file counts tokens and perplexity") {
    test::TempDir dir;
    const std::string tok = corpus(dir, 80);
    const Spec s = loadSpecFromString(
        "name: lm\nseed: 3\nmodel: {type: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16}\n"
        "data: {type: tokens, dir: " + tok + ", block_size: 16, eval_batches: 2, eval_batch_size: 8}\n"
        "optimizer: {type: adamw, lr: 3.0e-3, base_batch: 8, weight_decay: 0.1, decay_norm_and_bias: false}\n"
        "train: {epochs: 1, max_steps: 60, batch_size: 8, eval_batch_size: 8, eval_every_steps: 30, threads: 1, "
        "workers: 0, log_every: 0}\n",
        "lm.yaml");
    const TrainOutcome out = Trainer(s).run(dir.file("lm.json"));
    const nlohmann::json& e = out.result["epochs"][0];
    CHECK(e.contains("tokens_per_s"));
    CHECK_FALSE(e.contains("images_per_s"));
    CHECK(e["samples"] == 60 * 8 * 16);  // tokens
    CHECK(e["val_perplexity"].get<double>() == doctest::Approx(std::exp(e["val_loss"].get<double>())));
    const auto& evals = out.result["evals"];
    REQUIRE(evals.size() == 2);  // steps 30 and 60: the run's last step evaluated once, as the epoch's end
    CHECK(evals[0]["step"] == 30);
    CHECK(evals[1]["step"] == 60);
    CHECK(evals[0]["val_loss"].get<double>() > evals[evals.size() - 1]["val_loss"].get<double>());
    CHECK(e["val_loss"].get<double>() < std::log(40.0));  // well below a uniform guess over the characters
    // FLOPs per token: at least 6 x the blocks' 2 x 12 x 32² weights (forward and backward of their products).
    CHECK(out.result["provenance"]["flops_per_image"].get<double>() > 6.0 * 2 * 12 * 32 * 32);
  }
}
