// Purpose: the process group of a data-parallel run: a c10d TCPStore (rank 0 hosts it, listening
// on MASTER_ADDR's interface only — loopback on one node —, or torchrun's agent does), then c10d's
// ProcessGroupGloo (CPU) or ProcessGroupNCCL (CUDA, one GPU per local rank), plus the few
// collectives the trainer needs. A single process has no group and every collective is the identity.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner/dist/DistEnv.h"

namespace exprun {

// A collective of a formed group that failed: timed out (distributed.timeout_s) or lost a peer.
// Its message says which collective, at which step, which ranks answered afterwards and how to
// resume; it ends the process with kExitCollective.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dist {
 public:
  // One process, no group.
  Dist() = default;
  // Joins the group described by `env` with `backend` ("gloo" or "nccl"); `timeout_s` bounds the
  // rendezvous and every collective. Gloo binds to `interface` (distributed.interface), else as
  // runner/dist/Interface.h chooses. Every rank announces itself in the store first, so that a rank
  // that does not arrive within the timeout is named; a rendezvous that still has no group
  // `timeout_s` + 30 s after it began ends the process (exit 1), whatever it waits on. Throws
  // DistError with a clear message on failure.
  static std::unique_ptr<Dist> join(const DistEnv& env, const std::string& backend, double timeoutS,
                                    const std::string& interface = "");
  // A group of this process alone (Gloo over an in-memory store, world size 1): everything a
  // data-parallel step allocates and runs, with no peer to wait for (the memory planner's probes).
  static std::unique_ptr<Dist> alone(const torch::Device& device);

  int rank() const { return env_.rank; }
  int worldSize() const { return env_.worldSize; }
  const DistEnv& env() const { return env_; }
  const std::string& backendName() const { return backendName_; }
  // Rank 0: every rank's Gloo interface ("veth1 10.233.0.2 (route to MASTER_ADDR 10.233.0.1)"),
  // indexed by rank; empty without a Gloo group.
  const std::vector<std::string>& interfaces() const { return interfaces_; }
  bool active() const { return backend_.defined(); }
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }

  // Every rank publishes its spec hash; all compare with rank 0's. A mismatch throws on every rank.
  void checkSameSpec(std::uint64_t hash);
  // Rank 0's parameters and buffers overwrite everyone's.
  void broadcastModel(torch::nn::Module& model);
  // Elementwise sum / max of small host vectors across ranks.
  std::vector<double> sum(std::vector<double> v);
  std::vector<double> max(std::vector<double> v);
  // The same, in place on named fields: dist.maxInPlace({&t.seconds, &t.dataWait}).
  void sumInPlace(std::initializer_list<double*> fields);
  void maxInPlace(std::initializer_list<double*> fields);
  // Elementwise max / sum of a tensor on the run's device across ranks, in place (no host read).
  void maxInPlace(torch::Tensor& t);
  void sumInPlace(torch::Tensor& t);
  // Every rank's value, indexed by rank.
  std::vector<double> gather(double v);
  void barrier();
  // In-place SUM allreduce of a tensor on the run's device (Gloo: CPU; NCCL: CUDA). The comm hooks'
  // collectives: their payload is counted in allreducedBytes().
  c10::intrusive_ptr<c10d::Work> allreduceAsync(torch::Tensor& t);
  // Bytes this rank has passed to allreduceAsync so far: the payload of the gradient exchange (a
  // ring allreduce sends about 2(n-1)/n of it per rank over the wire).
  std::int64_t allreducedBytes() const { return allreducedBytes_.load(); }
  // Sharding's collectives (SUM reduce-scatter of `in` into this rank's chunk `out`; all-gather of
  // every rank's `in` into `out`, rank-major), asynchronous; their payload counted in
  // allreducedBytes() too (the input, the output: a ring sends about (n-1)/n of it per rank).
  c10::intrusive_ptr<c10d::Work> reduceScatterAsync(torch::Tensor& out, torch::Tensor& in);
  c10::intrusive_ptr<c10d::Work> allgatherAsync(torch::Tensor& out, torch::Tensor& in);
  torch::Device device() const { return device_; }
  void setDevice(torch::Device d) { device_ = d; }

  // What this rank waits on, for the message of a collective that fails: set before each wait,
  // cleared when it returns (not when it throws). `what` is a literal; `index` of `count` a bucket.
  class Waiting {
   public:
    Waiting(Dist& d, const char* what, int index = -1, int count = 0, std::int64_t bytes = 0);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    Dist& d_;
    int exceptions_;
  };
  // The collective a wait threw in ("" when none did): "the gradient all-reduce (bucket 2 of 3, 4.2 MB)".
  std::string failedCollective() const;
  // After a collective failed (`error`, the backend's message) at `where` ("step 37 of epoch 2"):
  // every rank posts itself in the store and, for a few seconds, looks for the others; returns the
  // message of the CollectiveError: the collective, the step, the ranks (with their hosts) that did
  // not answer, that distributed.timeout_s bounded it. Bounded in time whatever the store does.
  std::string diagnoseFailure(const std::string& error, const std::string& where, double timeoutS);

 private:
  std::vector<double> reduce(std::vector<double> v, c10d::ReduceOp op);
  void reduceFields(std::initializer_list<double*> fields, c10d::ReduceOp op);
  void reduceTensor(torch::Tensor& t, c10d::ReduceOp op);  // in place, waited for

  DistEnv env_;
  std::string backendName_ = "none";
  std::vector<std::string> interfaces_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  torch::Device device_{torch::kCPU};
  int checks_ = 0;
  std::atomic<std::int64_t> allreducedBytes_{0};
  struct Wait {
    const char* what = nullptr;
    int index = -1, count = 0;
    std::int64_t bytes = 0;
  };
  Wait waiting_;  // set by Waiting
  Wait failed_;   // the wait that threw
};

#ifdef EXPRUN_WITH_NCCL
// Defined in NcclBackend.cpp, compiled only when LibTorch has CUDA and nccl.h is present.
c10::intrusive_ptr<c10d::Backend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                  double timeoutS, int localRank);
#endif

}  // namespace exprun
