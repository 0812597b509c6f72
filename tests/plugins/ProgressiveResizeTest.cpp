// Purpose: the `progressive_resize` method: FFCV's schedule (interpolated between the ramp's
// epochs, rounded to the step), training batches of that size while evaluation keeps the data's,
// the FLOPs per image following the size, train.largest_resolution holding the end size, a resumed
// run training at the uninterrupted one's sizes bit for bit; bad schedules exit 2 naming the key, a
// model that cannot take the small size is refused before training.
#include <filesystem>

#include "runner/checkpoint/Checkpoint.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::TempDir;

namespace {

const char* kSpec = R"(name: r
seed: 3
model: {type: resnet18}
data: {type: fashion_mnist, train_limit: 128, test_limit: 64}
optimizer: {type: sgd, lr: 0.05, base_batch: 32, momentum: 0.9}
train: {epochs: 4, batch_size: 32, threads: 1, workers: 0, log_every: 0, eval_batch_size: 64}
output: {tensorboard: false}
methods: [{type: progressive_resize, start_size: 16, end_size: 28, start_epoch: 1, end_epoch: 4, step: 4}]
)";

Spec resizeSpec(const std::vector<std::string>& sets = {}) { return loadSpecFromString(kSpec, "r.yaml", sets); }

}  // namespace

TEST_SUITE("progressive_resize") {
  TEST_CASE("sizes follow FFCV's schedule; FLOPs per image follow the size; evaluation keeps the data's") {
    const TrainOutcome out = Trainer(resizeSpec()).run("");
    const auto& f = out.result["methods"]["progressive_resize"];
    CHECK(f["sizes"] == nlohmann::json{{"1", 16}, {"2", 20}, {"3", 24}, {"4", 28}});
    CHECK(f["schedule"] == "16→28 px, epochs 1→4");
    double last = 0;
    for (const auto& e : out.result["epochs"]) {
      const double perImage = e["flops_per_s"].get<double>() / e["images_per_s"].get<double>();
      CHECK(perImage > last);  // a larger image each epoch costs more
      last = perImage;
      CHECK(e["val_top1"].get<double>() > 0);  // evaluated at 28 x 28
    }
    const double full = out.result["provenance"]["flops_per_image"].get<double>();
    CHECK(last == doctest::Approx(full).epsilon(1e-9));  // the last epoch at the data's own size
    // In between, the interpolated size rounded to a multiple of the step (FFCV's get_resolution):
    // 12 + 16/3 = 17.3 -> 16, 12 + 32/3 = 22.7 -> 24.
    const TrainOutcome rounded =
        Trainer(resizeSpec({"methods[0].start_size=12", "methods[0].step=8", "train.epochs=4"})).run("");
    CHECK(rounded.result["methods"]["progressive_resize"]["sizes"] == nlohmann::json{{"1", 12}, {"2", 16}, {"3", 24}, {"4", 28}});
  }

  TEST_CASE("train.largest_resolution holds the end size; a resumed run trains at the same sizes, bit for bit") {
    const TrainOutcome largest = Trainer(resizeSpec({"train.largest_resolution=true", "train.epochs=2",
                                                     "methods[0].end_epoch=2"}))
                                     .run("");
    CHECK(largest.result["methods"]["progressive_resize"]["sizes"] == nlohmann::json{{"1", 28}, {"2", 28}});
    TempDir tmp;
    const std::vector<std::string> sets{"output.checkpoint.every_epochs=1", "output.save_weights=true"};
    const TrainOutcome full = Trainer(resizeSpec(sets)).run(tmp.file("a/r.json"));
    Trainer resumed(resizeSpec(sets));
    resumed.setResume(ResumeRequest{tmp.file("a/r.ckpt/step-000000008"), false});  // after epoch 2
    const TrainOutcome again = resumed.run(tmp.file("b/r.json"));
    CHECK(again.result["methods"] == full.result["methods"]);
    CHECK(again.result["epochs"][3]["train_loss"] == full.result["epochs"][3]["train_loss"]);
    CHECK(test::readText(tmp.file("a/r.weights.pt")) == test::readText(tmp.file("b/r.weights.pt")));
  }

  TEST_CASE("bad schedules exit 2 naming the key; a model that cannot take the size is refused") {
    CHECK_THROWS_CONTAINING(SpecError, resizeSpec({"methods[0].end_size=32"}), "methods[0].end_size",
                            "8 to 28 (its size)");
    CHECK_THROWS_CONTAINING(SpecError, resizeSpec({"methods[0].start_size=4"}), "methods[0].start_size");
    CHECK_THROWS_CONTAINING(SpecError, resizeSpec({"methods[0].end_epoch=5"}), "methods[0].end_epoch", "train.epochs: 4");
    CHECK_THROWS_CONTAINING(SpecError, resizeSpec({"methods[0].start_epoch=4"}), "methods[0].start_epoch");
    CHECK_THROWS_CONTAINING(SpecError, resizeSpec({"data={type: synthetic, height: 28, width: 28}"}), "methods[0]",
                            "one size only");
    CHECK_THROWS_CONTAINING(SpecError, resizeSpec({"methods[1]={type: prune, ratio: 0.3}"}), "methods[0]", "use one of them");
    CHECK_THROWS_CONTAINING(std::invalid_argument, Trainer(resizeSpec({"model={type: small_cnn}"})).run(""),
                            "progressive_resize: model 'small_cnn' cannot take 16x16 images");
  }
}
