// Purpose: character-level text preparation (see CharText.h).
#include "runner/data/CharText.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runner/util/AtomicFile.h"

namespace exprun {
namespace {

// The UTF-8 characters of `text` in order; throws for a malformed sequence (its byte offset named).
std::vector<std::string> characters(const std::string& text, const std::string& path) {
  std::vector<std::string> out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (!ok) throw std::invalid_argument(path + ": not UTF-8 text (byte " + std::to_string(i) + ")");
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string uint16Bytes(const std::vector<std::uint16_t>& ids) {
  std::string out(ids.size() * 2, '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out[2 * i] = static_cast<char>(ids[i] & 0xFF);  // little-endian, as numpy's uint16 writes it here
    out[2 * i + 1] = static_cast<char>(ids[i] >> 8);
  }
  return out;
}

}  // namespace

std::vector<std::uint16_t> CharVocabulary::encode(const std::string& text) const {
  std::map<std::string, std::uint16_t> stoi;
  for (std::size_t i = 0; i < itos.size(); ++i) stoi[itos[i]] = static_cast<std::uint16_t>(i);
  std::vector<std::uint16_t> ids;
  for (const auto& ch : characters(text, "text")) {
    const auto it = stoi.find(ch);
    if (it == stoi.end()) throw std::invalid_argument("the character '" + ch + "' is not in the vocabulary");
    ids.push_back(it->second);
  }
  return ids;
}

std::string CharVocabulary::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  for (std::int64_t id : ids) out += id >= 0 && id < static_cast<std::int64_t>(itos.size()) ? itos[static_cast<std::size_t>(id)] : "?";
  return out;
}

PreparedText prepareCharText(const std::string& input, const std::string& outDir) {
  std::ifstream in(input, std::ios::binary);
  if (!in) throw std::invalid_argument(input + ": cannot read the text file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<std::string> chars = characters(ss.str(), input);
  if (chars.size() < 2) throw std::invalid_argument(input + ": the text has fewer than 2 characters");
  std::map<std::string, int> distinct;
  for (const auto& c : chars) distinct[c] = 0;
  if (distinct.size() > 65535) throw std::invalid_argument(input + ": more than 65,535 distinct characters for uint16 ids");
  CharVocabulary v;
  for (const auto& [c, unused] : distinct) v.itos.push_back(c);  // std::map: sorted by code point (UTF-8 order)
  std::map<std::string, std::uint16_t> stoi;
  for (std::size_t i = 0; i < v.itos.size(); ++i) stoi[v.itos[i]] = static_cast<std::uint16_t>(i);
  std::vector<std::uint16_t> ids;
  ids.reserve(chars.size());
  for (const auto& c : chars) ids.push_back(stoi[c]);
  const std::size_t split = static_cast<std::size_t>(static_cast<double>(ids.size()) * 0.9);
  std::filesystem::create_directories(outDir);
  writeFileAtomically(outDir + "/train.bin", uint16Bytes({ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(split)}));
  writeFileAtomically(outDir + "/val.bin", uint16Bytes({ids.begin() + static_cast<std::ptrdiff_t>(split), ids.end()}));
  const nlohmann::json meta{{"vocab_size", v.itos.size()}, {"itos", v.itos}, {"tokenizer", "char"},
                            {"source", std::filesystem::path(input).filename().string()}};
  writeFileAtomically(outDir + "/meta.json", meta.dump(1) + "\n");
  return PreparedText{static_cast<std::int64_t>(chars.size()), static_cast<std::int64_t>(split),
                      static_cast<std::int64_t>(ids.size() - split), static_cast<std::int64_t>(v.itos.size())};
}

CharVocabulary readCharVocabulary(const std::string& metaPath) {
  std::ifstream in(metaPath);
  if (!in) throw std::invalid_argument(metaPath + ": cannot read (exprun prepare-text writes it)");
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    CharVocabulary v;
    v.itos = j.at("itos").get<std::vector<std::string>>();
    return v;
  } catch (const std::exception& e) {
    throw std::invalid_argument(metaPath + ": no character vocabulary (itos): " + e.what());
  }
}

}  // namespace exprun
