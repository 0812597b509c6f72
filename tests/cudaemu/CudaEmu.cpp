// Purpose: the emulator's scheduler (tests/cudaemu/CudaEmu.h): a block's threads as fibers, run
// between barriers one at a time, released when their block or warp has all arrived.
#include "tests/cudaemu/CudaEmu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudaemu {
namespace {

constexpr std::size_t kStackBytes = 256 * 1024;  // reserved, touched only as used
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kMaxDynamicShared = 48 * 1024;
constexpr std::int64_t kMaxRounds = 10000;  // barrier rounds of one block: beyond, a kernel that never ends

enum class State { Ready, AtSync, AtWarp, Done };

struct Fiber {
  ucontext_t ctx{};
  uint3 idx{};
  State state = State::Ready;
  const char* file = nullptr;  // where it called __syncthreads()
  int line = 0;
};

struct Stack {
  void* base = nullptr;
  Stack() {
    base = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw std::runtime_error("cudaemu: no memory for a fiber's stack");
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() { munmap(base, kStackBytes); }
};

struct Runtime {
  const std::function<void()>* body = nullptr;
  dim3 grid, block;
  uint3 blockIdx{};
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<Stack>> stacks;
  std::vector<unsigned char> shared;
  std::vector<std::uint64_t> slots;
  int current = -1;
  ucontext_t scheduler{};
  std::exception_ptr error;
  unsigned seed = 0;
  std::mt19937 rng;
  cudaError_t last = cudaSuccess;
  Counts counts;
};

Runtime& rt() {
  static thread_local Runtime r;
  return r;
}

Fiber& running() {
  Runtime& r = rt();
  if (r.current < 0) throw std::logic_error("cudaemu: a CUDA built-in used outside a kernel");
  return r.fibers[static_cast<std::size_t>(r.current)];
}

void yieldAs(State s) {
  Runtime& r = rt();
  Fiber& f = running();
  f.state = s;
  swapcontext(&f.ctx, &r.scheduler);
}

void entry() {
  Runtime& r = rt();
  try {
    (*r.body)();
  } catch (...) {
    if (!r.error) r.error = std::current_exception();
  }
  r.fibers[static_cast<std::size_t>(r.current)].state = State::Done;
  // returns to r.scheduler (uc_link)
}

std::string where(const Runtime& r) {
  return "block (" + std::to_string(r.blockIdx.x) + "," + std::to_string(r.blockIdx.y) + "," +
         std::to_string(r.blockIdx.z) + ")";
}

// Releases the warps whose lanes all wait at a shuffle, else the block's barrier when every thread
// still running waits there; false when neither can happen (a divergent barrier).
bool release(Runtime& r) {
  const std::size_t n = r.fibers.size();
  bool any = false;
  for (std::size_t w = 0; w < n; w += 32) {
    const std::size_t end = std::min(n, w + 32);
    std::size_t atWarp = 0;
    for (std::size_t i = w; i < end; ++i) atWarp += r.fibers[i].state == State::AtWarp;
    if (atWarp == 0) continue;
    if (atWarp != end - w)
      throw std::runtime_error("cudaemu: " + where(r) + ": a warp shuffle that not every lane of warp " +
                               std::to_string(w / 32) + " reaches (divergent or exited lanes)");
    for (std::size_t i = w; i < end; ++i) r.fibers[i].state = State::Ready;
    any = true;
  }
  if (any) return true;
  std::size_t atSync = 0, live = 0;
  for (const Fiber& f : r.fibers) {
    atSync += f.state == State::AtSync;
    live += f.state != State::Done;
  }
  if (atSync == 0 || atSync != live) return false;
  // The device matches barriers by count, not place; CUDA leaves it undefined, so it fails here.
  const Fiber* first = nullptr;
  for (const Fiber& f : r.fibers)
    if (f.state == State::AtSync) {
      if (first && (first->line != f.line || std::string(first->file ? first->file : "") != (f.file ? f.file : "")))
        throw std::runtime_error("cudaemu: " + where(r) +
                                 ": threads of the block wait at different __syncthreads() calls (divergent): line " +
                                 std::to_string(first->line) + " and line " + std::to_string(f.line));
      first = &f;
    }
  for (Fiber& f : r.fibers)
    if (f.state == State::AtSync) f.state = State::Ready;
  ++r.counts.barriers;
  return true;
}

void runBlock(Runtime& r) {
  const unsigned n = r.block.x * r.block.y * r.block.z;
  while (r.stacks.size() < n) r.stacks.push_back(std::make_unique<Stack>());
  r.fibers.assign(n, Fiber{});
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = r.fibers[i];
    f.idx = uint3{i % r.block.x, (i / r.block.x) % r.block.y, i / (r.block.x * r.block.y)};
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = r.stacks[i]->base;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &r.scheduler;
    makecontext(&f.ctx, entry, 0);
  }
  std::fill(r.shared.begin(), r.shared.end(), 0xFF);
  r.slots.assign(n, 0);
  std::vector<unsigned> order(n);
  std::iota(order.begin(), order.end(), 0u);
  for (std::int64_t round = 0;; ++round) {
    if (round > kMaxRounds)
      throw std::runtime_error("cudaemu: " + where(r) + ": more than " + std::to_string(kMaxRounds) +
                               " barrier rounds (a kernel that does not end?)");
    if (r.seed != 0) std::shuffle(order.begin(), order.end(), r.rng);
    for (unsigned i : order) {
      if (r.fibers[i].state != State::Ready) continue;
      r.current = static_cast<int>(i);
      swapcontext(&r.scheduler, &r.fibers[i].ctx);
      r.current = -1;
      if (r.error) std::rethrow_exception(r.error);
    }
    if (std::all_of(r.fibers.begin(), r.fibers.end(), [](const Fiber& f) { return f.state == State::Done; })) break;
    if (!release(r))
      throw std::runtime_error("cudaemu: " + where(r) +
                               ": a barrier that the block's running threads cannot all reach");
  }
}

bool validConfig(const Cfg& c) {
  const unsigned long long threads = 1ULL * c.block.x * c.block.y * c.block.z;
  if (threads == 0 || threads > kMaxThreads || c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64) return false;
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535)
    return false;
  return c.shared <= kMaxDynamicShared;
}

}  // namespace

void launch(const Cfg& cfg, const std::function<void()>& body) {
  Runtime& r = rt();
  if (r.current >= 0) throw std::logic_error("cudaemu: a launch from inside a kernel");
  if (!validConfig(cfg)) {
    r.last = cudaErrorInvalidConfiguration;
    return;
  }
  r.body = &body;
  r.grid = cfg.grid;
  r.block = cfg.block;
  r.shared.assign(cfg.shared, 0xFF);
  r.error = nullptr;
  r.rng.seed(r.seed);
  ++r.counts.launches;
  struct Reset {
    Runtime& r;
    ~Reset() {
      r.body = nullptr;
      r.current = -1;
      r.error = nullptr;
    }
  } reset{r};
  for (unsigned z = 0; z < cfg.grid.z; ++z)
    for (unsigned y = 0; y < cfg.grid.y; ++y)
      for (unsigned x = 0; x < cfg.grid.x; ++x) {
        r.blockIdx = uint3{x, y, z};
        runBlock(r);
        ++r.counts.blocks;
        r.counts.threads += static_cast<std::int64_t>(r.fibers.size());
      }
}

const uint3& threadIndex() { return running().idx; }
const uint3& blockIndex() { return rt().blockIdx; }
const dim3& blockDimension() { return rt().block; }
const dim3& gridDimension() { return rt().grid; }

void syncthreads(const char* file, int line) {
  Fiber& f = running();
  f.file = file;
  f.line = line;
  yieldAs(State::AtSync);
}

void* dynamicSharedBytes() {
  Runtime& r = rt();
  return r.shared.empty() ? nullptr : r.shared.data();
}

int laneId() { return rt().current % 32; }

std::uint64_t warpExchange(std::uint64_t bits, int srcLane, bool valid) {
  Runtime& r = rt();
  const int me = r.current, base = me - me % 32;
  r.slots[static_cast<std::size_t>(me)] = bits;
  yieldAs(State::AtWarp);
  const int src = base + srcLane;
  const std::uint64_t out =
      valid && src < static_cast<int>(r.slots.size()) ? r.slots[static_cast<std::size_t>(src)] : bits;
  yieldAs(State::AtWarp);  // every lane has read before any lane's next shuffle writes
  return out;
}

cudaError_t getLastError() {
  Runtime& r = rt();
  const cudaError_t e = r.last;
  r.last = cudaSuccess;
  return e;
}

void setOrder(unsigned seed) { rt().seed = seed; }

Counts counts() { return rt().counts; }

}  // namespace cudaemu
