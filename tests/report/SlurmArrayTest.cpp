// Purpose: `exprun sweep --slurm`'s job script — one array task per grid point, the tasks and GPUs
// asked for, the signal before the time limit, requeue, the runs' specs — and the MLflow helpers
// that need no server (params flattened from the spec, credentials kept out of messages). The
// real cluster and server: tests/cli/slurm_test.sh and mlflow_test.sh.
#include "runner/live/Mlflow.h"
#include "runner/report/SlurmSweep.h"

#include <filesystem>

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {

const char* kSlurmSpec = R"(name: small-cnn
model: {type: small_cnn, width: 8, hidden: 16}
data: {type: fashion_mnist, train_limit: 256, test_limit: 128}
optimizer: {type: sgd, lr: 0.2}
train: {epochs: 1, batch_size: 32, max_steps: 2}
)";

}  // namespace

TEST_SUITE("slurm") {
  TEST_CASE("the job script: one array task per grid point, tasks and GPUs per node, USR1 before the limit, requeue") {
    TempDir dir;
    const std::string spec = dir.file("tiny.yaml");
    writeText(spec, kSlurmSpec);
    const Sweep sweep = prepareSweep(spec, {"optimizer.lr=0.1,0.2,0.4"}, {}, dir.file("out"));
    SlurmArrayOptions o;
    o.exe = "/opt/exprun/bin/exprun";
    o.partition = "gpu";
    o.time = "4:00:00";
    o.nodes = 2;
    o.gpusPerNode = 4;
    o.signalS = 120;
    o.sbatchArgs = {"--mem=64G"};
    const std::string script = writeSlurmArray(sweep, o);
    const std::string text = readText(script);
    for (const char* want : {"#SBATCH --array=0-2\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=4\n",
                             "#SBATCH --gpus-per-node=4\n", "#SBATCH --partition=gpu\n", "#SBATCH --time=4:00:00\n",
                             "#SBATCH --signal=USR1@120\n", "#SBATCH --requeue\n", "#SBATCH --mem=64G\n",
                             "srun --kill-on-bad-exit=1 '/opt/exprun/bin/exprun' run \"$SPEC\" --out "})
      CHECK_MESSAGE(text.find(want) != std::string::npos, want);
    CHECK(text.find("--overwrite") == std::string::npos);
    // Task i runs line i+1 of runs.txt: the resolved specs, in grid order.
    const std::string runs = readText(dir.file("out/small-cnn-sweep.slurm/runs.txt"));
    CHECK(runs.find("small-cnn__lr-0.1.yaml\n") < runs.find("small-cnn__lr-0.4.yaml\n"));
    CHECK(std::filesystem::exists(dir.file("out/small-cnn-sweep.slurm/small-cnn__lr-0.2.yaml")));
    // CPU tasks: one rank per node unless told.
    SlurmArrayOptions cpu;
    cpu.exe = "/x/exprun";
    const std::string plain = slurmArrayScript(sweep, cpu, dir.file("specs"));
    CHECK(plain.find("#SBATCH --ntasks-per-node=1\n") != std::string::npos);
    CHECK(plain.find("--gpus-per-node") == std::string::npos);
    CHECK(plain.find("#SBATCH --signal=USR1@90\n") != std::string::npos);
  }

  TEST_CASE("a folder without a submitted array is said so") {
    TempDir dir;
    CHECK_THROWS_CONTAINING(SweepError, slurmArrayState(dir.path.string()), "no Slurm sweep here");
  }
}

TEST_SUITE("mlflow") {
  TEST_CASE("params: the resolved spec flattened by key path; credentials never shown") {
    const auto p = flattenParams(nlohmann::json::parse(R"({"name": "x", "optimizer": {"type": "sgd", "lr": 0.1},
                                                            "train": {"milestones": [1, 2], "ema": {}}})"));
    const std::vector<std::pair<std::string, std::string>> want{
        {"name", "x"}, {"optimizer.lr", "0.1"}, {"optimizer.type", "sgd"}, {"train.ema", "{}"}, {"train.milestones", "[1,2]"}};
    CHECK(p == want);
    CHECK(redactedUri("https://me:secret@mlflow.example.org:5000/x") == "https://***@mlflow.example.org:5000/x");
    CHECK(redactedUri("http://127.0.0.1:5000") == "http://127.0.0.1:5000");
  }
}
