// Purpose: process-group creation and the trainer's collectives (see Dist.h).
#include "runner/dist/Dist.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "runner/dist/Interface.h"
#include "runner/util/Compat.h"
#include "runner/util/ExitCodes.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

std::chrono::milliseconds toMs(double s) { return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0)); }


std::string oneLine(std::string s) {
  auto nl = s.find('\n');
  if (nl != std::string::npos) s = s.substr(0, nl);
  return s;
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// The store's listening socket, bound to the master address's interface only (127.0.0.1 for a
// run on one node; the address MASTER_ADDR resolves to on rank 0's host otherwise), never to every
// interface as TCPStore binds by itself. Bound and listening; TCPStore takes it over.
int listenOnMasterAddress(const std::string& host, int port, bool severalNodes) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
    throw DistError("rendezvous: cannot resolve MASTER_ADDR " + host + ": " + ::gai_strerror(rc));
  std::string error = "no address";
  bool onlyLoopback = true;
  // Several nodes and a host name: a loopback address it resolves to (Debian maps the host's own
  // name to 127.0.1.1) would shut the other nodes out. (A loopback MASTER_ADDR given as such, e.g.
  // 127.0.0.1, means every "node" is on this machine.)
  severalNodes = severalNodes && !isLoopbackHost(host);
  for (addrinfo* a = found; a; a = a->ai_next) {
    const bool loopback =
        (a->ai_family == AF_INET && (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127) ||
        (a->ai_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr));
    if (severalNodes && loopback) continue;
    onlyLoopback = false;
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 2048) == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (severalNodes && onlyLoopback)
    throw DistError("rendezvous: MASTER_ADDR '" + host + "' is a loopback address on rank 0's host, which the other "
                    "nodes cannot reach (the store listens on MASTER_ADDR's interface only): set MASTER_ADDR to an "
                    "address of this host on the network the nodes share");
  throw DistError("rendezvous: rank 0 cannot host the store on " + where + " (" + error +
                  "; port in use? set MASTER_PORT; MASTER_ADDR must be an address of rank 0's host)");
}

// The rendezvous store: rank 0 hosts it, unless torchrun's agent already does (then everyone is a
// client).
c10::intrusive_ptr<c10d::Store> connectStore(const DistEnv& env, double timeoutS) {
  const std::string where = env.masterAddr + ":" + std::to_string(env.masterPort);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.masterPort);
  so.isServer = env.rank == 0 && !env.useAgentStore;
  so.numWorkers = env.useAgentStore ? std::nullopt : std::optional<std::size_t>(env.worldSize);
  so.waitWorkers = false;
  so.timeout = toMs(timeoutS);
  if (so.isServer)
    so.masterListenFd = listenOnMasterAddress(env.masterAddr, env.masterPort, env.worldSize > env.localWorldSize);
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.masterAddr, so);
  } catch (const std::exception& e) {
    if (so.isServer)
      throw DistError("rendezvous: rank 0 cannot host the store on " + where + " (port in use? set MASTER_PORT): " +
                      oneLine(e.what()));
    throw DistError("rendezvous: rank " + std::to_string(env.rank) + " cannot reach the store on " + where +
                    " within " + std::to_string(static_cast<int>(timeoutS)) + " s (MASTER_ADDR/MASTER_PORT): " +
                    oneLine(e.what()));
  }
}

// The process group of `backend` over `store`; Gloo binds to `nic`.
c10::intrusive_ptr<c10d::Backend> makeBackend(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                              const DistEnv& env, double timeoutS, const NetInterface& nic) {
  if (backend == "gloo") {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = toMs(timeoutS);
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(nic.address));
    return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", store), env.rank,
                                                       env.worldSize, opts);
  }
  if (backend == "nccl") {
#ifdef EXPRUN_WITH_NCCL
    return makeNcclBackend(c10::make_intrusive<c10d::PrefixStore>("nccl", store), env.rank, env.worldSize, timeoutS,
                           env.localRank);
#else
    throw DistError("distributed.backend: this exprun was built without NCCL (LibTorch without CUDA or no nccl.h)");
#endif
  }
  throw DistError("distributed.backend: unknown backend '" + backend + "'");
}

// Every rank sets "arrived/<rank>" (its interface as the value) and waits for all the others,
// polling, until `timeoutS`: then the ranks that never came are named. Returns, on rank 0, the
// values by rank. A store that goes away (rank 0's host died) ends the wait with a DistError.
std::vector<std::string> awaitEveryRank(c10d::Store& store, const DistEnv& env, double timeoutS,
                                        const std::string& mine) {
  const std::string where = env.masterAddr + ":" + std::to_string(env.masterPort);
  std::vector<std::string> keys;
  for (int r = 0; r < env.worldSize; ++r) keys.push_back("arrived/" + std::to_string(r));
  const auto deadline = std::chrono::steady_clock::now() + toMs(timeoutS);
  try {
    store.set(keys[env.rank], std::vector<std::uint8_t>(mine.begin(), mine.end()));
    while (!store.check(keys)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::vector<std::string> missing;
        for (int r = 0; r < env.worldSize; ++r)
          if (!store.check({keys[r]})) missing.push_back(std::to_string(r));
        throw DistError(strf("rendezvous: rank(s) %s of %d did not arrive within %.0f s (distributed.timeout_s; "
                             "this is rank %d, store at %s)",
                             joinStrings(missing, ", ").c_str(), env.worldSize, timeoutS, env.rank, where.c_str()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::vector<std::string> values;
    if (env.rank == 0)
      for (const auto& k : keys) {
        const auto v = store.get(k);
        values.emplace_back(v.begin(), v.end());
      }
    return values;
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError("rendezvous: rank " + std::to_string(env.rank) + " lost the store at " + where +
                    " (rank 0's host; did it exit?): " + oneLine(e.what()));
  }
}

// Ends the process when the rendezvous has no group `timeoutS` + 30 s after it began, whatever it
// is waiting on (a peer that died in the middle of Gloo's connections can leave it waiting for
// good); disarmed when the group is formed.
class RendezvousWatchdog {
 public:
  RendezvousWatchdog(const DistEnv& env, double timeoutS) {
    const double limit = timeoutS + 30;
    thread_ = std::thread([this, env, limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (done_.wait_for(lock, toMs(limit), [this] { return formed_; })) return;
      log::error(strf("rendezvous: rank %d of %d has no process group %.0f s after it began (distributed.timeout_s "
                      "+ 30 s; MASTER_ADDR %s:%d): a peer did not arrive or died during the rendezvous; exiting",
                      env.rank, env.worldSize, limit, env.masterAddr.c_str(), env.masterPort));
      std::_Exit(kExitFailure);
    });
  }
  ~RendezvousWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      formed_ = true;
    }
    done_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool formed_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Dist> Dist::join(const DistEnv& env, const std::string& backend, double timeoutS,
                                 const std::string& interface) {
  auto d = std::make_unique<Dist>();
  d->env_ = env;
  if (backend == "nccl" && !compat::cudaAvailable())  // refused for one process too
    throw DistError("distributed.backend: 'nccl' needs CUDA, and no CUDA device is available (use gloo)");
  if (backend == "nccl" && env.distributed() && env.localWorldSize > compat::cudaDeviceCount())  // before the group forms
    throw DistError(strf("distributed.backend: 'nccl' needs one CUDA device per process of a node, and this node runs "
                         "%d processes on %d CUDA device(s) (start fewer processes per node, or use backend: gloo)",
                         env.localWorldSize, compat::cudaDeviceCount()));
  if (!env.distributed()) return d;
  RendezvousWatchdog watchdog(env, timeoutS);
  // Keys of this attempt only (torchrun's agent store outlives restarts).
  d->store_ = c10::make_intrusive<c10d::PrefixStore>("exprun/attempt_" + std::to_string(env.restartCount),
                                                      connectStore(env, timeoutS));
  d->backendName_ = backend;
  NetInterface nic;
  if (backend == "gloo") nic = chooseInterface(interface, env.masterAddr);
  try {  // for the message of a collective that fails later: who this rank is
    const std::string host = hostName() + (nic.address.empty() ? "" : ", " + nic.address);
    d->store_->set("host/" + std::to_string(env.rank), std::vector<std::uint8_t>(host.begin(), host.end()));
  } catch (const std::exception& e) {
    throw DistError("rendezvous: rank " + std::to_string(env.rank) + " lost the store at " + env.masterAddr + ":" +
                    std::to_string(env.masterPort) + " (rank 0's host; did it exit?): " + oneLine(e.what()));
  }
  const auto arrived = awaitEveryRank(*d->store_, env, timeoutS, nic.text());
  if (backend == "gloo") {
    d->interfaces_ = arrived;
    if (env.rank == 0)
      for (std::size_t r = 0; r < arrived.size(); ++r) log::info(strf("gloo: rank %zu binds to ", r) + arrived[r]);
  }
  try {
    d->backend_ = makeBackend(backend, d->store_, env, timeoutS, nic);
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError("rendezvous: rank " + std::to_string(env.rank) + " could not form the " + backend +
                    " process group of " + std::to_string(env.worldSize) + " via " + env.masterAddr + ":" +
                    std::to_string(env.masterPort) + ": " + oneLine(e.what()));
  }
  return d;
}

std::unique_ptr<Dist> Dist::alone(const torch::Device& device) {
  auto d = std::make_unique<Dist>();
  d->env_.launcher = "alone";
  d->store_ = c10::make_intrusive<c10d::HashStore>();
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  d->backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(d->store_, 0, 1, opts);
  d->backendName_ = "gloo";
  d->device_ = device;
  return d;
}

void Dist::checkSameSpec(std::uint64_t hash) {
  if (!active()) return;
  const std::string mine = std::to_string(hash);
  const std::string prefix = "spec_hash/" + std::to_string(checks_++) + "/";  // each call its own keys
  store_->set(prefix + std::to_string(rank()), std::vector<std::uint8_t>(mine.begin(), mine.end()));
  std::vector<int> differing;
  std::string reference;
  for (int r = 0; r < worldSize(); ++r) {
    auto v = store_->get(prefix + std::to_string(r));
    std::string s(v.begin(), v.end());
    if (r == 0) reference = s;
    else if (s != reference) differing.push_back(r);
  }
  if (!differing.empty()) {
    std::string ranks;
    for (int r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw DistError("the resolved spec differs between ranks: rank(s) " + ranks +
                    " resolved another spec than rank 0 (same file, --set options and bases on every rank?)");
  }
}

void Dist::broadcastModel(torch::nn::Module& model) {
  if (!active()) return;
  Waiting w(*this, "the broadcast of the model's parameters and buffers");
  torch::NoGradGuard g;
  std::vector<torch::Tensor> all;
  for (auto& p : model.parameters()) all.push_back(p);
  for (auto& b : model.buffers()) all.push_back(b);
  for (auto& t : all) {
    std::vector<torch::Tensor> v{t.is_contiguous() ? t : t.contiguous()};
    c10d::BroadcastOptions o;
    o.rootRank = 0;
    backend_->broadcast(v, o)->wait();
    if (!t.is_contiguous()) t.copy_(v[0]);
  }
}

void Dist::reduceTensor(torch::Tensor& t, c10d::ReduceOp op) {
  std::vector<torch::Tensor> ts{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  Waiting w(*this, op == c10d::ReduceOp::MAX ? "an all-reduce (max) of the run's meters or flags"
                                             : "an all-reduce (sum) of the run's meters",
            -1, 0, t.numel() * static_cast<std::int64_t>(t.element_size()));
  backend_->allreduce(ts, o)->wait();
}

std::vector<double> Dist::reduce(std::vector<double> v, c10d::ReduceOp op) {
  if (!active() || v.empty()) return v;
  torch::Tensor t = torch::tensor(v, torch::kFloat64).to(device_);
  reduceTensor(t, op);
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::vector<double> Dist::sum(std::vector<double> v) { return reduce(std::move(v), c10d::ReduceOp::SUM); }
std::vector<double> Dist::max(std::vector<double> v) { return reduce(std::move(v), c10d::ReduceOp::MAX); }

void Dist::reduceFields(std::initializer_list<double*> fields, c10d::ReduceOp op) {
  std::vector<double> v;
  for (double* f : fields) v.push_back(*f);
  v = reduce(std::move(v), op);
  std::size_t i = 0;
  for (double* f : fields) *f = v[i++];
}

void Dist::sumInPlace(std::initializer_list<double*> fields) { reduceFields(fields, c10d::ReduceOp::SUM); }
void Dist::maxInPlace(std::initializer_list<double*> fields) { reduceFields(fields, c10d::ReduceOp::MAX); }

void Dist::maxInPlace(torch::Tensor& t) {
  if (active()) reduceTensor(t, c10d::ReduceOp::MAX);
}

void Dist::sumInPlace(torch::Tensor& t) {
  if (active()) reduceTensor(t, c10d::ReduceOp::SUM);
}

std::vector<double> Dist::gather(double v) {
  std::vector<double> slots(static_cast<size_t>(worldSize()), 0.0);
  slots[static_cast<size_t>(rank())] = v;
  return sum(slots);
}

void Dist::barrier() {
  if (!active()) return;
  sum({0.0});  // an allreduce is a barrier on every backend, including NCCL without device ids
}

c10::intrusive_ptr<c10d::Work> Dist::reduceScatterAsync(torch::Tensor& out, torch::Tensor& in) {
  allreducedBytes_ += static_cast<std::int64_t>(in.nbytes());
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return backend_->_reduce_scatter_base(out, in, o);
}

c10::intrusive_ptr<c10d::Work> Dist::allgatherAsync(torch::Tensor& out, torch::Tensor& in) {
  allreducedBytes_ += static_cast<std::int64_t>(out.nbytes());
  return backend_->_allgather_base(out, in);
}

c10::intrusive_ptr<c10d::Work> Dist::allreduceAsync(torch::Tensor& t) {
  allreducedBytes_ += t.numel() * static_cast<std::int64_t>(t.element_size());
  std::vector<torch::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return backend_->allreduce(v, o);
}

Dist::Waiting::Waiting(Dist& d, const char* what, int index, int count, std::int64_t bytes)
    : d_(d), exceptions_(std::uncaught_exceptions()) {
  d_.waiting_ = Wait{what, index, count, bytes};
}

// Left by an exception (a timeout, a lost peer): the wait is the one that failed.
Dist::Waiting::~Waiting() {
  if (std::uncaught_exceptions() > exceptions_ && !d_.failed_.what) d_.failed_ = d_.waiting_;
  d_.waiting_ = Wait{};
}

std::string Dist::failedCollective() const {
  if (!failed_.what) return "";
  std::string s = failed_.what;
  std::vector<std::string> details;
  if (failed_.index >= 0) details.push_back(strf("bucket %d of %d", failed_.index + 1, failed_.count));
  if (failed_.bytes > 0) details.push_back(strf("%.3g MB", static_cast<double>(failed_.bytes) / 1e6));
  if (!details.empty()) s += " (" + joinStrings(details, ", ") + ")";
  return s;
}

namespace {

// What the store says after a failure, read on a thread of its own: a store on a host cut off
// blocks its client until its timeout, which the caller does not wait for.
struct Roll {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<bool> answered;
  std::vector<std::string> hosts;
  std::string storeError;
};

void callTheRoll(const std::shared_ptr<Roll>& roll, c10::intrusive_ptr<c10d::Store> store, int rank, int world,
                 double windowS, std::string mine) {
  std::vector<bool> answered(static_cast<std::size_t>(world), false);
  std::vector<std::string> hosts(static_cast<std::size_t>(world));
  std::string error;
  try {
    store->setTimeout(toMs(windowS));
    store->set("failed/" + std::to_string(rank), std::vector<std::uint8_t>(mine.begin(), mine.end()));
    const auto deadline = std::chrono::steady_clock::now() + toMs(windowS);
    for (;;) {
      bool all = true;
      for (int r = 0; r < world; ++r) {
        if (!answered[r]) answered[r] = store->check({"failed/" + std::to_string(r)});
        all = all && answered[r];
      }
      if (all || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (int r = 0; r < world; ++r) {
      const std::string key = "host/" + std::to_string(r);
      if (!store->check({key})) continue;
      const auto v = store->get(key);
      hosts[r].assign(v.begin(), v.end());
    }
  } catch (const std::exception& e) {
    error = oneLine(e.what());
  }
  std::lock_guard<std::mutex> lock(roll->mu);
  roll->answered = std::move(answered);
  roll->hosts = std::move(hosts);
  roll->storeError = std::move(error);
  roll->done = true;
  roll->cv.notify_all();
}

}  // namespace

std::string Dist::diagnoseFailure(const std::string& error, const std::string& where, double timeoutS) {
  const std::string me = strf("rank %d of %d (host %s)", rank(), worldSize(), hostName().c_str());
  std::string what = failedCollective();
  if (what.empty()) what = "a collective";
  const bool timedOut = error.find("imed out") != std::string::npos || error.find("imeout") != std::string::npos;
  std::string msg = timedOut ? strf("%s timed out at %s on %s: it waited %.0f s, the bound distributed.timeout_s sets "
                                    "on every collective",
                                    what.c_str(), where.c_str(), me.c_str(), timeoutS)
                             : strf("%s failed at %s on %s: %s", what.c_str(), where.c_str(), me.c_str(),
                                    oneLine(error).c_str());
  if (!active()) return msg;
  // The roll call: every rank that is still there posts itself; whoever does not within the
  // window is named, with the host it announced at the rendezvous.
  const double window = std::min(10.0, std::max(3.0, timeoutS / 3));
  auto roll = std::make_shared<Roll>();
  std::thread(callTheRoll, roll, store_, rank(), worldSize(), window, where).detach();
  std::unique_lock<std::mutex> lock(roll->mu);
  const std::string storeAt = env_.masterAddr + ":" + std::to_string(env_.masterPort);
  if (!roll->cv.wait_for(lock, toMs(window + 3), [&] { return roll->done; }) || !roll->storeError.empty()) {
    msg += strf(". The store at %s (rank 0's host) did not answer either within %.0f s%s: this host is likely the one "
                "cut off, or rank 0's host is down",
                storeAt.c_str(), window, roll->storeError.empty() ? "" : (" (" + roll->storeError + ")").c_str());
    return msg;
  }
  std::vector<std::string> missing, present;
  for (int r = 0; r < worldSize(); ++r) {
    const std::string host = roll->hosts[r].empty() ? "" : " (host " + roll->hosts[r] + ")";
    (roll->answered[r] ? present : missing).push_back(std::to_string(r) + host);
  }
  if (missing.empty())
    msg += strf(". Every rank answered the store at %s afterwards (a slow rank or link rather than a lost one?)",
                storeAt.c_str());
  else
    msg += strf(". Rank(s) %s did not answer within %.0f s afterwards (cut off, hung or gone); rank(s) %s did",
                joinStrings(missing, ", ").c_str(), window, joinStrings(present, ", ").c_str());
  return msg;
}

}  // namespace exprun
