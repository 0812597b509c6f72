// Purpose: the local launcher (see Launcher.h): fork/exec, output relay, failure handling.
#include "runner/dist/Launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "runner/util/Log.h"
#include "runner/util/Spawn.h"

namespace exprun {
namespace {

std::atomic<int> gSignal{0};
extern "C" void onLauncherSignal(int sig) { gSignal.store(sig); }

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int outFd = -1, errFd = -1;
  std::string outBuf, errBuf;
  bool running = false;
  int code = 0;  // exit code, or 128 + signal
};

void writeAll(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// Moves complete lines of `buf` to `fd`, each prefixed; with `flush`, the rest too.
void relay(std::string& buf, int fd, const std::string& prefix, bool flush) {
  size_t start = 0, nl;
  std::string out;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    out += prefix + buf.substr(start, nl - start + 1);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush && !buf.empty()) {
    out += prefix + buf + "\n";
    buf.clear();
  }
  if (!out.empty()) writeAll(fd, out);
}

// Starts local rank `localRank` of `attempt` with torchrun's variables; its output through pipes.
Child startWorker(const LaunchArgs& a, int localRank, int attempt, int port) {
  const int world = a.nnodes * a.nprocPerNode;
  const int rank = a.nodeRank * a.nprocPerNode + localRank;
  SpawnOptions o;
  o.who = "launch";
  o.capture = true;
  o.env = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(localRank)},
      {"LOCAL_WORLD_SIZE", std::to_string(a.nprocPerNode)},
      {"GROUP_RANK", std::to_string(a.nodeRank)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(world)},
      {"MASTER_ADDR", a.masterAddr},
      {"MASTER_PORT", std::to_string(port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(a.maxRestarts)},
      {"EXPRUN_LAUNCHER", "exprun-launch"},
  };
  return spawn(a.exe, a.workerArgs, o);
}

// Waits up to 100 ms for the workers' output and relays what came, line by line, each line
// prefixed with its rank; closes a worker's pipe at its end.
void relayOutput(std::vector<Worker>& workers) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, bool>> owners;  // (worker, is stdout)
  for (auto& w : workers) {
    if (w.outFd >= 0) fds.push_back({w.outFd, POLLIN, 0}), owners.push_back({&w, true});
    if (w.errFd >= 0) fds.push_back({w.errFd, POLLIN, 0}), owners.push_back({&w, false});
  }
  if (!fds.empty())
    ::poll(fds.data(), fds.size(), 100);
  else
    ::usleep(50 * 1000);
  for (size_t k = 0; k < fds.size(); ++k) {
    if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Worker* w = owners[k].first;
    const bool isOut = owners[k].second;
    char buf[65536];
    ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
    std::string& acc = isOut ? w->outBuf : w->errBuf;
    const std::string prefix = "[rank " + std::to_string(w->rank) + "] ";
    if (n > 0) {
      acc.append(buf, static_cast<size_t>(n));
      relay(acc, isOut ? 1 : 2, prefix, false);
    } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
      relay(acc, isOut ? 1 : 2, prefix, true);
      ::close(fds[k].fd);
      (isOut ? w->outFd : w->errFd) = -1;
    }
  }
}

// One attempt of a node's workers: started together, their output relayed, reaped as they end; the
// first failure (or a signal to the launcher) stops the rest, SIGKILL after the grace period.
class Attempt {
 public:
  Attempt(const LaunchArgs& a, int attempt, int port) : a_(a), workers_(static_cast<size_t>(a.nprocPerNode)) {
    for (int i = 0; i < a.nprocPerNode; ++i) {
      Worker& w = workers_[static_cast<size_t>(i)];
      w.rank = a.nodeRank * a.nprocPerNode + i;
      const Child c = startWorker(a, i, attempt, port);
      w.pid = c.pid;
      w.outFd = c.outFd;
      w.errFd = c.errFd;
      w.running = true;
    }
  }

  // Supervises until every worker has ended and its output is relayed. Returns {failed rank or -1,
  // exit code}.
  std::pair<int, int> supervise() {
    while (true) {
      relayOutput(workers_);
      reapEnded();
      if (int sig = gSignal.exchange(0)) {
        log::warn(strf("launch: received signal %d, forwarding it to the workers", sig));
        forwarded_ = sig;
        stopAll(sig);
      }
      if (stopping_ && std::chrono::steady_clock::now() > deadline_) {
        for (auto& w : workers_)
          if (w.running) ::kill(w.pid, SIGKILL);
        deadline_ = std::chrono::steady_clock::time_point::max();
      }
      bool anyRunning = false, anyOpen = false;
      for (auto& w : workers_) anyRunning |= w.running, anyOpen |= (w.outFd >= 0 || w.errFd >= 0);
      if (!anyRunning && !anyOpen) break;
    }
    if (failedRank_ >= 0) return {failedRank_, failedCode_};
    if (forwarded_) {
      for (auto& w : workers_)
        if (w.code != 0) return {-1, w.code};
      return {-1, 128 + forwarded_};
    }
    return {-1, 0};
  }

 private:
  void stopAll(int sig) {
    for (auto& w : workers_)
      if (w.running) ::kill(w.pid, sig);
    if (!stopping_)
      deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(a_.graceS * 1000));
    stopping_ = true;
  }

  // Reaps the workers that ended; the first that failed (not after a forwarded signal) stops the rest.
  void reapEnded() {
    for (auto& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.running = false;
      w.code = exitCodeOf(status);
      if (w.code == 0 || failedRank_ >= 0 || (stopping_ && forwarded_)) continue;
      failedRank_ = w.rank;
      failedCode_ = w.code;
      std::string how = WIFSIGNALED(status) ? " (killed by signal " + std::to_string(WTERMSIG(status)) + ")" : "";
      log::error(strf("launch: worker rank %d (pid %d) failed with exit code %d%s; stopping the other workers", w.rank,
                      static_cast<int>(w.pid), w.code, how.c_str()));
      stopAll(SIGTERM);
    }
  }

  const LaunchArgs& a_;
  std::vector<Worker> workers_;
  int failedRank_ = -1, failedCode_ = 0;
  bool stopping_ = false;
  int forwarded_ = 0;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
};

}  // namespace

int findFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("launch: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("launch: cannot find a free port");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

int launchWorkers(const LaunchArgs& in) {
  LaunchArgs a = in;
  if (a.nprocPerNode < 1) throw std::invalid_argument("--nproc-per-node must be at least 1");
  if (a.nnodes < 1) throw std::invalid_argument("--nnodes must be at least 1");
  if (a.nodeRank < 0 || a.nodeRank >= a.nnodes)
    throw std::invalid_argument("--node-rank " + std::to_string(a.nodeRank) + " must be in [0, " + std::to_string(a.nnodes) + ")");
  if (a.masterPort < 0 || a.masterPort > 65535) throw std::invalid_argument("--master-port must be in [0, 65535]");
  if (a.maxRestarts < 0) throw std::invalid_argument("--max-restarts must be at least 0");
  if (a.exe.empty()) a.exe = selfExe();
  struct sigaction sa {};
  sa.sa_handler = onLauncherSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  for (int attempt = 0;; ++attempt) {
    int port = a.masterPort;
    if (port == 0) port = a.nnodes == 1 ? findFreePort() : 29500;
    log::info(strf("launch: attempt %d: %d worker(s) on node %d of %d, world size %d, master %s:%d", attempt,
                   a.nprocPerNode, a.nodeRank, a.nnodes, a.nnodes * a.nprocPerNode, a.masterAddr.c_str(), port));
    auto [failedRank, code] = Attempt(a, attempt, port).supervise();
    if (code == 0) return 0;
    if (failedRank < 0) return code;  // stopped by a signal
    if (attempt >= a.maxRestarts) {
      log::error(strf("launch: worker rank %d failed with exit code %d%s", failedRank, code,
                      a.maxRestarts > 0 ? strf(" after %d restart(s)", attempt).c_str() : ""));
      return code;
    }
    log::warn(strf("launch: restarting all workers (restart %d of %d)", attempt + 1, a.maxRestarts));
  }
}

}  // namespace exprun
