// Purpose: the one way exprun starts child processes (the workers of `exprun launch`, the runs of
// `exprun sweep`): fork + exec of an executable with extra environment variables, in a process
// group of its own (so a terminal's Ctrl-C reaches the parent alone, which forwards it), with
// SIGINT/SIGTERM back to their defaults in the child and, optionally, its stdout and stderr read
// through pipes. Torch-free.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace exprun {

struct SpawnOptions {
  std::vector<std::pair<std::string, std::string>> env;  // set in the child, over the parent's
  bool capture = false;  // the child's stdout and stderr into pipes (Child::outFd, errFd)
  std::string who;       // the caller, for messages ("launch", "sweep")
  std::string logFile;   // non-empty (and no capture): the child's stdout and stderr go to this file
};

struct Child {
  pid_t pid = -1;
  int outFd = -1, errFd = -1;  // read ends of the pipes (capture), closed by the caller
};

// Starts `exe` with `args` (argv[1...]). Throws std::runtime_error when it cannot fork; a child
// that cannot exec prints why and exits with 127.
Child spawn(const std::string& exe, const std::vector<std::string>& args, const SpawnOptions& options);

// Waits for `pid` (retrying on EINTR): its exit code, or 128 + the signal that ended it.
int waitExitCode(pid_t pid);
// The exit code of a waitpid() status: the code, or 128 + the signal.
int exitCodeOf(int status);

// `program`'s path: as given when it holds a '/', else the first executable of that name on PATH
// ("" when there is none).
std::string findProgram(const std::string& program);

struct CommandResult {
  int code = 0;  // exit code, or 128 + signal (killed after the timeout: 128 + SIGKILL)
  std::string out, err;
};
// Runs `program` (findProgram) with `args`, its stdout and stderr captured, killed after
// `timeoutS`. Throws std::runtime_error naming `program` when it is not found or cannot start.
CommandResult runCommand(const std::string& program, const std::vector<std::string>& args, double timeoutS,
                         const std::string& who);

// The path of this process's executable (/proc/self/exe), to start more of itself.
std::string selfExe();

}  // namespace exprun
