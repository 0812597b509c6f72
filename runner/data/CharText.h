// Purpose: a text file as character-level tokens, by nanoGPT's shakespeare_char rules: the
// vocabulary is the text's distinct characters (Unicode code points) sorted, the first 90 % of the
// text trains and the rest validates, ids as uint16 in train.bin / val.bin, and meta.json with the
// vocabulary (vocab_size, itos), which the tokens data plugin and `exprun sample` read. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exprun {

struct CharVocabulary {
  std::vector<std::string> itos;  // id -> the character (UTF-8)
  std::vector<std::uint16_t> encode(const std::string& text) const;  // throws for a character not in it
  std::string decode(const std::vector<std::int64_t>& ids) const;
};

struct PreparedText {
  std::int64_t characters = 0, trainTokens = 0, valTokens = 0, vocabSize = 0;
};

// Writes OUTDIR/{train.bin,val.bin,meta.json} for INPUT (atomically; OUTDIR made). Throws
// std::invalid_argument naming the file for a missing, empty or non-UTF-8 input.
PreparedText prepareCharText(const std::string& input, const std::string& outDir);
// meta.json's vocabulary, for sampling. Throws std::invalid_argument naming the file.
CharVocabulary readCharVocabulary(const std::string& metaPath);

}  // namespace exprun
