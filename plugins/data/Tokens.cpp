// Purpose: data plugin `tokens` — token ids for a language model, read from nanoGPT's layout
// (train.bin, val.bin: raw uint16; meta.json with the vocabulary size) or llm.c's shards (a 1,024-byte
// header, magic 20240520 with uint16 tokens or 20240801 with uint32; *train*.bin / *val*.bin),
// memory-mapped. A sample is a window of block_size + 1 tokens (inputs and next-token targets):
// training windows start at random positions drawn from (seed, epoch, sample index), so a resumed
// or re-sharded run sees the stream one process would; evaluation reads fixed, evenly spaced windows.
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "runner/api/Data.h"

namespace exprun {
namespace {

struct TokensSettings {
  std::string dir;
  std::string format = "auto";
  std::int64_t blockSize = 256, vocabSize = 0;
  std::int64_t epochWindows = 0, evalBatches = 20, evalBatchSize = 12;
};
const OptionTable<TokensSettings> kOptions{{
    field("dir", &TokensSettings::dir, "folder of train.bin / val.bin (nanoGPT) or of *train*.bin / *val*.bin shards (llm.c)"),
    oneOf("format", &TokensSettings::format, {"auto", "nanogpt", "llmc"},
          "nanogpt: raw uint16 files with meta.json; llmc: shards with llm.c's 1,024-byte header; auto: by the files"),
    field("block_size", &TokensSettings::blockSize, "tokens a sample feeds the model (its targets: the next ones)", {1, 1 << 20}),
    field("vocab_size", &TokensSettings::vocabSize, "vocabulary (0: meta.json's; llm.c shards: GPT-2's 50257)", {0}),
    field("epoch_windows", &TokensSettings::epochWindows,
          "training windows an epoch counts (0: the training tokens / block_size)", {0}),
    field("eval_batches", &TokensSettings::evalBatches, "evaluation batches of eval_batch_size windows each", {1}),
    field("eval_batch_size", &TokensSettings::evalBatchSize,
          "windows an evaluation batch counts here (the fixed set is eval_batches x this; train.eval_batch_size "
          "batches them as it likes)",
          {1}),
}};

// A memory-mapped file of tokens: `count` ids of `width` bytes from `data`.
struct TokenFile {
  std::string path;
  const std::uint8_t* base = nullptr;
  std::size_t bytes = 0;
  const std::uint8_t* data = nullptr;
  std::int64_t count = 0;
  int width = 2;
  TokenFile() = default;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile() {
    if (base) ::munmap(const_cast<std::uint8_t*>(base), bytes);
  }
  std::int64_t at(std::int64_t i) const {
    if (width == 2) {
      std::uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return v;
    }
    std::uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
};

std::unique_ptr<TokenFile> mapFile(const std::string& path) {
  auto f = std::make_unique<TokenFile>();
  f->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw DataError("tokens: " + path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  ::fstat(fd, &st);
  f->bytes = static_cast<std::size_t>(st.st_size);
  if (f->bytes > 0) {
    void* p = ::mmap(nullptr, f->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw DataError("tokens: " + path + ": cannot map (" + std::strerror(errno) + ")");
    }
    f->base = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

// llm.c's header: 256 int32, [0] magic, [1] version, [2] the token count.
void readLlmcHeader(TokenFile& f) {
  if (f.bytes < 1024) throw DataError("tokens: " + f.path + ": shorter than llm.c's 1,024-byte header");
  std::int32_t h[3];
  std::memcpy(h, f.base, sizeof h);
  if (h[0] == 20240520 && h[1] == 1) {
    f.width = 2;
  } else if (h[0] == 20240801 && h[1] == 7) {
    f.width = 4;
  } else {
    throw DataError("tokens: " + f.path + ": magic " + std::to_string(h[0]) + " version " + std::to_string(h[1]) +
                    " is not llm.c's (20240520 version 1: uint16 tokens; 20240801 version 7: uint32)");
  }
  f.data = f.base + 1024;
  f.count = h[2];
  if (f.bytes != 1024 + static_cast<std::size_t>(f.count) * f.width)
    throw DataError("tokens: " + f.path + ": the header says " + std::to_string(f.count) + " tokens, the file holds " +
                    std::to_string((f.bytes - 1024) / f.width));
}

std::vector<std::string> globSorted(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

// One split: its files end to end, read as one sequence.
struct SplitTokens {
  std::vector<std::unique_ptr<TokenFile>> files;
  std::vector<std::int64_t> starts;  // each file's first position
  std::int64_t count = 0;
  // Token i of the split, checked against the vocabulary.
  std::int64_t at(std::int64_t i, std::int64_t vocab) const {
    const auto it = std::upper_bound(starts.begin(), starts.end(), i) - 1;
    const TokenFile& f = *files[static_cast<std::size_t>(it - starts.begin())];
    const std::int64_t v = f.at(i - *it);
    if (v >= vocab)
      throw DataError("tokens: " + f.path + ": token " + std::to_string(v) + " at position " + std::to_string(i - *it) +
                      " is not below the vocabulary size " + std::to_string(vocab));
    return v;
  }
};

class Tokens : public Dataset {
 public:
  explicit Tokens(TokensSettings s) : s_(std::move(s)) {}

  // The vocabulary: data.vocab_size, else meta.json's (a small file: read here too, before load(),
  // as a model is built for it), else GPT-2's for llm.c's shards.
  DataInfo info() const override {
    const std::int64_t v = vocab_ > 0 ? vocab_ : s_.vocabSize > 0 ? s_.vocabSize : metaVocab(format());
    return DataInfo{0, 0, 0, v, v, s_.blockSize};
  }

  void load() override {
    if (s_.dir.empty()) throw DataError("data.dir: give the folder of the token files");
    const std::string format = this->format();
    if (format == "nanogpt") {
      loadSplit(train_, {s_.dir + "/train.bin"}, false, "train");
      loadSplit(val_, {s_.dir + "/val.bin"}, false, "val");
    } else {
      loadSplit(train_, globSorted(s_.dir + "/*train*.bin"), true, "train");
      loadSplit(val_, globSorted(s_.dir + "/*val*.bin"), true, "val");
    }
    vocab_ = s_.vocabSize > 0 ? s_.vocabSize : metaVocab(format);
  }

  std::int64_t size(Split s) const override {
    if (s == Split::Test) return s_.evalBatches * s_.evalBatchSize;
    return s_.epochWindows > 0 ? s_.epochWindows : std::max<std::int64_t>(1, train_.count / s_.blockSize);
  }

  // Window k of the split: training windows at a position drawn from (seed, k), evaluation's at
  // evenly spaced positions. x: the block_size tokens, y: the next ones.
  Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t seed) const override {
    const SplitTokens& t = s == Split::Train ? train_ : val_;
    const std::int64_t n = static_cast<std::int64_t>(indices.size()), b = s_.blockSize;
    const std::int64_t span = t.count - b - 1;  // the last start that leaves room for the targets
    torch::Tensor x = torch::empty({n, b}, batchMemory(torch::kInt64));
    torch::Tensor y = torch::empty({n, b}, batchMemory(torch::kInt64));
    auto* xp = x.data_ptr<std::int64_t>();
    auto* yp = y.data_ptr<std::int64_t>();
    const std::int64_t windows = size(Split::Test);
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t k = indices[static_cast<std::size_t>(r)];
      std::int64_t start;
      if (s == Split::Train) {
        std::mt19937_64 rng(sampleSeed(seed, k));
        start = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(span + 1));
      } else {
        start = windows > 1 ? k * span / (windows - 1) : 0;
      }
      for (std::int64_t i = 0; i < b; ++i) {
        xp[r * b + i] = t.at(start + i, vocab_);
        yp[r * b + i] = t.at(start + i + 1, vocab_);
      }
    }
    return Batch{x, y};
  }

 private:
  std::string format() const {
    if (s_.format != "auto") return s_.format;
    if (std::ifstream(s_.dir + "/train.bin").good()) return "nanogpt";
    if (!globSorted(s_.dir + "/*train*.bin").empty()) return "llmc";
    throw DataError("tokens: " + s_.dir + ": neither nanoGPT's train.bin nor llm.c's *train*.bin shards");
  }

  void loadSplit(SplitTokens& t, const std::vector<std::string>& paths, bool llmc, const char* name) {
    if (paths.empty())
      throw DataError("tokens: " + s_.dir + ": no " + name + " split (" + (llmc ? "*" + std::string(name) + "*.bin shards" :
                                                                                  std::string(name) + ".bin") + ")");
    for (const auto& p : paths) {
      auto f = mapFile(p);
      if (llmc) {
        readLlmcHeader(*f);
      } else {
        if (f->bytes % 2 != 0) throw DataError("tokens: " + p + ": " + std::to_string(f->bytes) + " bytes is not uint16 tokens");
        f->data = f->base;
        f->width = 2;
        f->count = static_cast<std::int64_t>(f->bytes / 2);
      }
      t.starts.push_back(t.count);
      t.count += f->count;
      t.files.push_back(std::move(f));
    }
    if (t.count < s_.blockSize + 1)
      throw DataError("tokens: the " + std::string(name) + " split of " + s_.dir + " has " + std::to_string(t.count) +
                      " tokens, fewer than block_size + 1 = " + std::to_string(s_.blockSize + 1));
  }

  std::int64_t metaVocab(const std::string& format) const {
    const std::string path = s_.dir + "/meta.json";
    std::ifstream in(path);
    if (!in) {
      if (format == "llmc") return 50257;  // llm.c's shards hold GPT-2 tokens
      throw DataError("tokens: " + path + ": missing (it gives vocab_size; or set data.vocab_size)");
    }
    try {
      const nlohmann::json j = nlohmann::json::parse(in);
      const std::int64_t v = j.at("vocab_size").get<std::int64_t>();
      if (v <= 0) throw std::invalid_argument("not positive");
      return v;
    } catch (const std::exception& e) {
      throw DataError("tokens: " + path + ": no positive vocab_size (" + e.what() + ")");
    }
  }

  TokensSettings s_;
  SplitTokens train_, val_;
  std::int64_t vocab_ = 0;
};

PluginInfo tokensInfo() {
  PluginInfo info;
  info.name = "tokens";
  info.help = "token ids for language models: nanoGPT's train.bin/val.bin or llm.c's shards, memory-mapped";
  info.options = kOptions.decls();
  info.impliedTask = "language_model";
  return info;
}

const Register<DataKind> kRegistered{tokensInfo(), [](const Options& o) { return std::make_unique<Tokens>(kOptions.read(o)); }};

}  // namespace
}  // namespace exprun
