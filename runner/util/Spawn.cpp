// Purpose: starting child processes (see Spawn.h).
#include "runner/util/Spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

namespace exprun {

Child spawn(const std::string& exe, const std::vector<std::string>& args, const SpawnOptions& o) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (o.capture && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0))
    throw std::runtime_error(o.who + ": pipe failed: " + std::strerror(errno));
  std::vector<std::string> argvStore{exe};
  argvStore.insert(argvStore.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argvStore) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::cout << std::flush;  // nothing buffered is written twice
  std::cerr << std::flush;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(o.who + ": fork failed: " + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    if (o.capture) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
    } else if (!o.logFile.empty()) {
      const int fd = ::open(o.logFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        const std::string msg = o.who + ": cannot write " + o.logFile + ": " + std::strerror(errno) + "\n";
        const ssize_t ignored = ::write(2, msg.data(), msg.size());
        (void)ignored;
        ::_exit(127);
      }
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execv(exe.c_str(), argv.data());
    const std::string msg = o.who + ": cannot execute " + exe + ": " + std::strerror(errno) + "\n";
    const ssize_t ignored = ::write(2, msg.data(), msg.size());
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a signal sent before the child's own call finds the group
  Child c;
  c.pid = pid;
  if (o.capture) {
    ::close(out[1]);
    ::close(err[1]);
    c.outFd = out[0];
    c.errFd = err[0];
  }
  return c;
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int waitExitCode(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 1;
  return exitCodeOf(status);
}

std::string selfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string findProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

CommandResult runCommand(const std::string& program, const std::vector<std::string>& args, double timeoutS,
                         const std::string& who) {
  const std::string exe = findProgram(program);
  if (exe.empty()) throw std::runtime_error(who + ": " + program + " not found on PATH");
  SpawnOptions o;
  o.capture = true;
  o.who = who;
  const Child c = spawn(exe, args, o);
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(timeoutS * 1000));
  pollfd fds[2] = {{c.outFd, POLLIN, 0}, {c.errFd, POLLIN, 0}};
  std::string* into[2] = {&r.out, &r.err};
  int open = 2;
  bool killed = false;
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-c.pid, SIGKILL);
      killed = true;
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(std::min<long>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[k].fd, buf, sizeof buf);
      if (got > 0) {
        into[k]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  r.code = waitExitCode(c.pid);
  if (killed) r.err += who + ": " + program + " did not finish within " + std::to_string(static_cast<int>(timeoutS)) + " s\n";
  return r;
}

}  // namespace exprun
