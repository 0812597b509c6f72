// Purpose: counts the tensors one thread reads on the host (`.item()`, `aten::_local_scalar_dense`)
// while a HostReads lives: what a hot loop must not do on a GPU, where each read waits for the
// device. RecordFunction sees the op on the CPU too, so CPU tests can show a loop makes none.
#pragma once

#include <ATen/record_function.h>

#include <cstring>

namespace exprun::test {

class HostReads {
 public:
  HostReads() {
    count() = 0;
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&onOp).scopes({at::RecordScope::FUNCTION}));
  }
  ~HostReads() { at::removeCallback(handle_); }
  HostReads(const HostReads&) = delete;
  HostReads& operator=(const HostReads&) = delete;
  int seen() const { return count(); }

 private:
  static int& count() {
    thread_local int n = 0;
    return n;
  }
  static std::unique_ptr<at::ObserverContext> onOp(const at::RecordFunction& fn) {
    if (std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0) ++count();
    return nullptr;
  }
  at::CallbackHandle handle_;
};

}  // namespace exprun::test
