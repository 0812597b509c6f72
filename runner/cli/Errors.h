// Purpose: the one mapping from what a command throws to the process's exit code and the message
// it prints. Bad input — a spec, a flag, a data file, a checkpoint, the environment, a result file —
// exits 2; a run that went non-finite, a file that cannot be written and anything unexpected
// exit 1. Every message starts with the command ("plan: ..."); checkpoint errors say
// "checkpoint:", unexpected ones "unexpected error:". A command body returns its own exit code.
#pragma once

#include <string>

namespace exprun {

// Inside a catch block: logs the exception in flight for `command` and returns its exit code.
int exitCodeOfFailure(const std::string& command);

// Runs `body` (which returns an exit code), mapping whatever it throws.
template <class F>
int guarded(const std::string& command, F&& body) {
  try {
    return body();
  } catch (...) {
    return exitCodeOfFailure(command);
  }
}

}  // namespace exprun
