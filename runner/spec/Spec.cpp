// Purpose: YAML → Spec. A small located tree (file:line:col on every node) is built from each file,
// bases are deep-merged under their children, --set overrides applied, and every section is
// validated against its option declarations (fixed sections here, plugins from the Catalog).
#include "runner/spec/Spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>

#include "runner/spec/Catalog.h"
#include "runner/util/Format.h"

namespace fs = std::filesystem;

namespace exprun {
namespace {

constexpr const char* kMethods = specKey::kMethods;

struct Loc {
  std::string file;
  int line = -1;  // 0-based, -1 unknown
  int col = -1;
  std::string str() const {
    if (line < 0) return file;
    return file + ":" + std::to_string(line + 1) + ":" + std::to_string(col + 1);
  }
};

struct Node;
struct Entry;

struct Node {
  enum Kind { Null, Scalar, Seq, Map } kind = Null;
  std::string scalar;
  std::vector<Node> seq;
  std::vector<Entry> map;
  Loc loc;

  Node* child(const std::string& key);
  const Node* child(const std::string& key) const { return const_cast<Node*>(this)->child(key); }
};

struct Entry {
  std::string key;
  Loc keyLoc;
  Node value;
};

Node* Node::child(const std::string& key) {
  for (auto& e : map)
    if (e.key == key) return &e.value;
  return nullptr;
}

[[noreturn]] void fail(const Loc& loc, const std::string& path, const std::string& what) {
  std::string msg = loc.str();
  if (!msg.empty()) msg += ": ";
  if (!path.empty()) msg += path + ": ";
  throw SpecError(msg + what);
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// Bounds on what a spec may be (a real one is a few KiB, a few hundred nodes, a few levels deep):
// a "billion laughs" of nested aliases, a 100 MB file or 100,000-deep nesting is refused at once
// instead of expanding, reading or recursing for minutes (or overflowing the stack).
constexpr std::size_t kMaxSpecBytes = 1 << 20;
constexpr std::size_t kMaxSpecNodes = 100000;  // after alias expansion
constexpr int kMaxSpecDepth = 200;             // indentation columns + '-'/'?' markers + open brackets

// The deepest nesting `text` can hold, scanned before the YAML parser (which recurses per level)
// sees it: per line, its indentation, the block-sequence markers ('- ', '? ') that open it, and the
// flow brackets still open; quoted scalars and comments are skipped. Fails at the first line past
// the limit.
void checkNesting(const std::string& text, const std::string& file) {
  int flow = 0, line = 0;
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto tooDeep = [&](int col) {
    throw SpecError(Loc{file, line, col}.str() + ": nested more than " + std::to_string(kMaxSpecDepth) +
                    " levels deep (indentation, '-' markers and open brackets); a spec is limited to " +
                    std::to_string(kMaxSpecDepth));
  };
  while (i < n) {
    int level = 0;  // indentation and markers of this line
    while (i < n && (text[i] == ' ' || text[i] == '\t')) ++level, ++i;
    while (i + 1 < n && (text[i] == '-' || text[i] == '?') && (text[i + 1] == ' ' || text[i + 1] == '\t')) {
      level += 2;
      i += 2;
      while (i < n && text[i] == ' ') ++level, ++i;
      if (level + flow > kMaxSpecDepth) tooDeep(level);
    }
    if (level + flow > kMaxSpecDepth) tooDeep(level);
    int col = level;
    char quote = 0;
    for (; i < n && text[i] != '\n'; ++i, ++col) {
      const char c = text[i];
      if (quote) {
        if (c == quote && !(quote == '"' && i > 0 && text[i - 1] == '\\')) quote = 0;
        continue;
      }
      if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
        while (i < n && text[i] != '\n') ++i;
        break;
      }
      if (c == '"' || c == '\'') quote = c;
      else if (c == '[' || c == '{') ++flow;
      else if ((c == ']' || c == '}') && flow > 0) --flow;
      if (level + flow > kMaxSpecDepth) tooDeep(col);
    }
    ++i;
    ++line;
  }
}

void checkSize(std::size_t bytes, const std::string& file) {
  if (bytes > kMaxSpecBytes)
    throw SpecError(file + ": the spec is " + std::to_string(bytes) + " bytes; a spec is limited to " +
                    std::to_string(kMaxSpecBytes) + " bytes (1 MiB)");
}

Node fromYaml(const YAML::Node& y, const std::string& file, std::size_t& budget, int depth = 0) {
  if (budget == 0)
    fail(Loc{file, y.Mark().line, y.Mark().column}, "",
         "the spec expands to more than " + std::to_string(kMaxSpecNodes) +
             " nodes (nested YAML aliases?); a spec is limited to " + std::to_string(kMaxSpecNodes));
  // Past the text's own nesting (checked before parsing) only through aliases: one that contains
  // itself (`b: &b [*b]`) would recurse forever.
  if (depth > kMaxSpecDepth)
    fail(Loc{file, y.Mark().line, y.Mark().column}, "",
         "nested more than " + std::to_string(kMaxSpecDepth) +
             " levels deep once YAML aliases are expanded (an alias that contains itself?)");
  --budget;
  Node n;
  YAML::Mark m = y.Mark();
  n.loc = Loc{file, m.line, m.column};
  switch (y.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: n.kind = Node::Null; break;
    case YAML::NodeType::Scalar:
      n.kind = Node::Scalar;
      n.scalar = y.Scalar();
      break;
    case YAML::NodeType::Sequence:
      n.kind = Node::Seq;
      for (const auto& item : y) n.seq.push_back(fromYaml(item, file, budget, depth + 1));
      break;
    case YAML::NodeType::Map:
      n.kind = Node::Map;
      for (auto it = y.begin(); it != y.end(); ++it) {
        YAML::Mark km = it->first.Mark();
        Loc kl{file, km.line, km.column};
        if (!it->first.IsScalar()) fail(kl, "", "keys must be plain strings");
        std::string key = it->first.Scalar();
        if (n.child(key)) fail(kl, key, "duplicate key '" + key + "'");
        n.map.push_back(Entry{key, kl, fromYaml(it->second, file, budget, depth + 1)});
      }
      break;
  }
  return n;
}

Node fromYaml(const YAML::Node& y, const std::string& file) {
  std::size_t budget = kMaxSpecNodes;
  return fromYaml(y, file, budget);
}

// YAML text → located tree, within the bounds above.
Node parseYamlText(const std::string& text, const std::string& file) {
  checkSize(text.size(), file);
  checkNesting(text, file);
  try {
    return fromYaml(YAML::Load(text), file);
  } catch (const YAML::ParserException& e) {
    fail(Loc{file, e.mark.line, e.mark.column}, "", "YAML syntax error: " + e.msg);
  }
}

bool isPluginNode(const Node& n) { return n.kind == Node::Map && n.child("type"); }

// Deep merge: maps merge key by key; anything else (and a plugin node whose type changes) replaces.
void mergeInto(Node& dst, const Node& src) {
  if (dst.kind != Node::Map || src.kind != Node::Map) {
    dst = src;
    return;
  }
  if (isPluginNode(dst) && isPluginNode(src) && dst.child("type")->scalar != src.child("type")->scalar) {
    dst = src;
    return;
  }
  for (const auto& e : src.map) {
    if (Node* existing = dst.child(e.key))
      mergeInto(*existing, e.value);
    else
      dst.map.push_back(e);
  }
}

struct Loader {
  std::vector<std::string> files;
  std::vector<std::string> stack;

  Node loadText(const std::string& text, const std::string& file, const fs::path& dir) {
    Node n = parseYamlText(text, file);
    if (n.kind == Node::Null) fail(Loc{file}, "", "the spec is empty");
    if (n.kind != Node::Map) fail(n.loc, "", "a spec must be a mapping of sections (name, model, data, ...)");
    files.push_back(file);
    auto baseIt = std::find_if(n.map.begin(), n.map.end(), [](const Entry& e) { return e.key == "base"; });
    if (baseIt == n.map.end()) return n;
    Entry base = *baseIt;
    n.map.erase(baseIt);
    if (base.value.kind != Node::Scalar || base.value.scalar.empty())
      fail(base.value.loc, "base", "expected the path of another spec file");
    fs::path basePath = dir / base.value.scalar;
    std::error_code ec;
    const bool exists = fs::exists(basePath, ec);  // (a name too long for the filesystem: ec)
    if (ec)
      fail(base.value.loc, "base", "cannot look for base file '" + base.value.scalar + "': " + ec.message());
    if (!exists)
      fail(base.value.loc, "base", "base file '" + base.value.scalar + "' not found (looked for " +
                                       basePath.lexically_normal().string() + ")");
    Node merged = loadFile(basePath, base.value.loc);
    mergeInto(merged, n);
    return merged;
  }

  Node loadFile(const fs::path& path, const Loc& from) {
    std::error_code ec;
    std::string canon = fs::weakly_canonical(path, ec).string();
    if (ec) canon = path.string();
    if (std::find(stack.begin(), stack.end(), canon) != stack.end()) {
      std::vector<std::string> chain(std::find(stack.begin(), stack.end(), canon), stack.end());
      chain.push_back(canon);
      fail(from, "base", "inheritance cycle: " + join(chain, " -> "));
    }
    std::string text;
    {
      std::error_code sizeError;
      const auto bytes = fs::file_size(path, sizeError);
      if (!sizeError) checkSize(static_cast<std::size_t>(bytes), path.string());  // before reading it
      FILE* f = std::fopen(path.string().c_str(), "rb");
      if (!f) fail(from, "", "cannot read spec file '" + path.string() + "': " + std::strerror(errno));
      char buf[65536];
      size_t k;
      // At most one byte past the limit: a FIFO, /dev/zero or a /proc file has no size to check.
      while (text.size() <= kMaxSpecBytes && (k = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, k);
      std::fclose(f);
      checkSize(text.size(), path.string());
    }
    stack.push_back(canon);
    Node n = loadText(text, path.string(), path.parent_path());
    stack.pop_back();
    return n;
  }
};

void applyOverride(Node& root, const std::string& arg) {
  // Messages name the override, a URI's user:password@ masked (output.mlflow.tracking_uri).
  static const std::regex credentials("(://)[^/@\\s]*@");
  Loc loc{"--set '" + std::regex_replace(arg, credentials, "$1***@") + "'"};
  auto eq = arg.find('=');
  if (eq == std::string::npos) fail(loc, "", "malformed override: expected key.path=value");
  std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
  static const std::regex keyRe("^[A-Za-z_][A-Za-z0-9_]*(\\[[0-9]{1,6}\\])?(\\.[A-Za-z_][A-Za-z0-9_]*(\\[[0-9]{1,6}\\])?)*$");
  if (!std::regex_match(key, keyRe))
    fail(loc, "", "malformed override: '" + key + "' is not a key path like train.epochs or methods[0].mixup_alpha");
  if (key == "base") fail(loc, "", "'base' cannot be overridden");
  Node parsed;
  checkSize(value.size(), loc.file);
  checkNesting(value, loc.file);
  try {
    parsed = fromYaml(YAML::Load(value), loc.file);
  } catch (const YAML::Exception& e) {
    fail(loc, key, "cannot parse value '" + value + "': " + e.msg);
  }
  auto setLoc = [&](Node& n, auto& self) -> void {
    n.loc = loc;
    for (auto& c : n.seq) self(c, self);
    for (auto& e : n.map) {
      e.keyLoc = loc;
      self(e.value, self);
    }
  };
  setLoc(parsed, setLoc);
  Node* cur = &root;
  std::string path;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    std::optional<std::size_t> index;  // name[i]: element i of the list at name
    if (const auto open = part.find('['); open != std::string::npos) {
      index = std::stoul(part.substr(open + 1, part.size() - open - 2));
      part = part.substr(0, open);
    }
    path += (path.empty() ? "" : ".") + part;
    if (cur->kind == Node::Null) cur->kind = Node::Map;
    if (cur->kind != Node::Map) fail(loc, path, "cannot set a key inside a value that is not a section");
    Node* next = cur->child(part);
    if (!next) {
      cur->map.push_back(Entry{part, loc, Node{}});
      next = &cur->map.back().value;
      next->loc = loc;
    }
    cur = next;
    if (index) {
      path += "[" + std::to_string(*index) + "]";
      if (cur->kind == Node::Null) cur->kind = Node::Seq;
      if (cur->kind != Node::Seq) fail(loc, path, "not a list: cannot take element " + std::to_string(*index));
      if (*index > cur->seq.size())
        fail(loc, path, "the list has " + std::to_string(cur->seq.size()) + " element(s): give an index up to " +
                            std::to_string(cur->seq.size()) + " (that one appends)");
      if (*index == cur->seq.size()) {
        cur->seq.push_back(Node{});
        cur->seq.back().loc = loc;
      }
      cur = &cur->seq[*index];
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  *cur = parsed;
}

// ---- typed conversion -------------------------------------------------------------------------

std::string describe(const Node& n) {
  switch (n.kind) {
    case Node::Null: return "nothing";
    case Node::Scalar: return "'" + n.scalar + "'";
    case Node::Seq: return "a list";
    case Node::Map: return "a mapping";
  }
  return "?";
}

std::int64_t toInt(const Node& n, const std::string& path) {
  static const std::regex re("^[+-]?[0-9]+$");
  if (n.kind != Node::Scalar || !std::regex_match(n.scalar, re))
    fail(n.loc, path, "expected an integer, got " + describe(n));
  errno = 0;
  long long v = std::strtoll(n.scalar.c_str(), nullptr, 10);
  if (errno == ERANGE) fail(n.loc, path, "integer " + n.scalar + " is out of range");
  return v;
}

double toFloat(const Node& n, const std::string& path) {
  if (n.kind == Node::Scalar && !n.scalar.empty()) {
    const char* s = n.scalar.c_str();
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (end && *end == '\0' && std::isfinite(v)) return v;
  }
  fail(n.loc, path, "expected a number, got " + describe(n));
}

bool toBool(const Node& n, const std::string& path) {
  if (n.kind == Node::Scalar) {
    std::string s = n.scalar;
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  fail(n.loc, path, "expected true or false, got " + describe(n));
}

// Whether `s` is well-formed UTF-8 (no stray continuation bytes, overlong forms or surrogates): the
// resolved spec is written as JSON, which holds text only.
bool validUtf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + static_cast<std::size_t>(extra) >= s.size()) return false;
    std::uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static const std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<std::size_t>(extra) + 1;
  }
  return true;
}

std::string toStr(const Node& n, const std::string& path) {
  if (n.kind != Node::Scalar) fail(n.loc, path, "expected a string, got " + describe(n));
  if (!validUtf8(n.scalar)) fail(n.loc, path, "not valid UTF-8 text");
  return n.scalar;
}

void checkRange(double v, const OptionDecl& d, const Node& n, const std::string& path) {
  auto fmt = [](double x) { return valueToString(Value{x}); };
  if ((d.min && v < *d.min) || (d.max && v > *d.max)) {
    std::string range = d.min && d.max ? "between " + fmt(*d.min) + " and " + fmt(*d.max)
                        : d.min        ? "at least " + fmt(*d.min)
                                       : "at most " + fmt(*d.max);
    fail(n.loc, path, "value " + n.scalar + " is out of range: must be " + range);
  }
}

void checkChoice(const std::string& s, const OptionDecl& d, const Node& n, const std::string& path) {
  if (d.choices.empty() || std::find(d.choices.begin(), d.choices.end(), s) != d.choices.end()) return;
  std::string hint = didYouMean(s, d.choices);
  fail(n.loc, path, "invalid value '" + s + "'" + hint + "; valid: " + join(d.choices));
}

template <class T, class F>
std::vector<T> toList(const Node& n, const std::string& path, const OptionDecl& d, F conv) {
  if (n.kind != Node::Seq)
    fail(n.loc, path, std::string("expected a ") + optionTypeName(d.type) + " such as [1, 2], got " +
                          describe(n));
  std::vector<T> out;
  for (size_t i = 0; i < n.seq.size(); ++i) out.push_back(conv(n.seq[i], path + "[" + std::to_string(i) + "]"));
  return out;
}

Value convert(const Node& n, const OptionDecl& d, const std::string& path) {
  switch (d.type) {
    case OptionType::Int: {
      // An int option that lists "auto" among its choices takes it as the word.
      if (n.kind == Node::Scalar && n.scalar == kAuto &&
          std::find(d.choices.begin(), d.choices.end(), kAuto) != d.choices.end())
        return std::string(kAuto);
      auto v = toInt(n, path);
      checkRange(static_cast<double>(v), d, n, path);
      return v;
    }
    case OptionType::Float: {
      auto v = toFloat(n, path);
      checkRange(v, d, n, path);
      return v;
    }
    case OptionType::Bool: return toBool(n, path);
    case OptionType::String: {
      auto s = toStr(n, path);
      checkChoice(s, d, n, path);
      return s;
    }
    case OptionType::IntList:
      return toList<std::int64_t>(n, path, d, [&](const Node& e, const std::string& p) {
        auto v = toInt(e, p);
        checkRange(static_cast<double>(v), d, e, p);
        return v;
      });
    case OptionType::FloatList:
      return toList<double>(n, path, d, [&](const Node& e, const std::string& p) {
        auto v = toFloat(e, p);
        checkRange(v, d, e, p);
        return v;
      });
    case OptionType::StringList:
      return toList<std::string>(n, path, d, [&](const Node& e, const std::string& p) {
        auto s = toStr(e, p);
        checkChoice(s, d, e, p);
        return s;
      });
  }
  fail(n.loc, path, "unsupported option type");
}

std::vector<std::string> declNames(const OptionDecls& decls) {
  std::vector<std::string> v;
  for (const auto& d : decls) v.push_back(d.name);
  return v;
}

// Validates the keys of `node` (a map, or null for "all defaults") against `decls`.
Options validateOptions(const Node* node, const Loc& parentLoc, const OptionDecls& decls,
                        const std::string& path, const std::string& type, const std::string& owner) {
  if (node && node->kind != Node::Map && node->kind != Node::Null)
    fail(node->loc, path, "expected a mapping of options, got " + describe(*node));
  if (node && node->kind == Node::Map) {
    for (const auto& e : node->map) {
      if (!type.empty() && e.key == "type") continue;
      bool known = std::any_of(decls.begin(), decls.end(), [&](const OptionDecl& d) { return d.name == e.key; });
      if (!known) {
        auto names = declNames(decls);
        fail(e.keyLoc, path + "." + e.key,
             "unknown option '" + e.key + "' for " + owner + didYouMean(e.key, names) +
                 (names.empty() ? "; it takes no options" : "; valid: " + join(names)));
      }
    }
  }
  std::vector<std::pair<std::string, Value>> values;
  for (const auto& d : decls) {
    const Node* given = node ? node->child(d.name) : nullptr;
    if (given)
      values.emplace_back(d.name, convert(*given, d, path + "." + d.name));
    else if (d.defaultValue)
      values.emplace_back(d.name, *d.defaultValue);
    else
      fail(node ? node->loc : parentLoc, path, "missing required option '" + d.name + "' (" + d.help + ")");
  }
  return Options(type, std::move(values));
}

Options validatePluginNode(const Node* node, const Loc& parentLoc, const std::string& kind, const std::string& section,
                           const std::string& defaultType) {
  Node implicit;
  if (!node || node->kind == Node::Null) {
    if (defaultType.empty()) {
      auto names = Catalog::instance().names(kind);
      fail(node ? node->loc : parentLoc, section,
           "missing required section '" + section + "' (e.g. " + section + ": {type: " + (names.empty() ? "..." : names[0]) +
               "})");
    }
    implicit.kind = Node::Map;
    implicit.loc = parentLoc;
    node = &implicit;
  }
  if (node->kind == Node::Map && !node->child("type") && !defaultType.empty()) {
    if (node != &implicit) implicit = *node;  // options given (e.g. by --set) without a type: the default type
    Node t;
    t.kind = Node::Scalar;
    t.scalar = defaultType;
    t.loc = implicit.loc;
    implicit.map.insert(implicit.map.begin(), Entry{"type", implicit.loc, t});
    node = &implicit;
  }
  if (node->kind != Node::Map)
    fail(node->loc, section, "expected a plugin node {type: NAME, option: value, ...}, got " + describe(*node));
  const Node* typeNode = node->child("type");
  auto valid = Catalog::instance().names(kind);
  if (!typeNode) fail(node->loc, section, "missing required key 'type'; valid " + kind + " types: " + join(valid));
  std::string type = toStr(*typeNode, section + ".type");
  const PluginInfo* info = Catalog::instance().find(kind, type);
  if (!info)
    fail(typeNode->loc, section + ".type",
         "unknown " + kind + " type '" + type + "'" + didYouMean(type, valid) + "; valid: " + join(valid));
  if (info->nested.empty()) return validateOptions(node, node->loc, info->options, section, type, kind + " '" + type + "'");
  // Its nested plugin nodes are validated on their own, as plugin nodes of their kind.
  Node own = *node;
  own.map.erase(std::remove_if(own.map.begin(), own.map.end(),
                               [&](const Entry& e) {
                                 return std::any_of(info->nested.begin(), info->nested.end(),
                                                    [&](const NestedNode& n) { return n.key == e.key; });
                               }),
                own.map.end());
  OptionDecls decls = info->options;
  Options o = validateOptions(&own, node->loc, decls, section, type, kind + " '" + type + "'");
  for (const NestedNode& n : info->nested)
    o.setChild(n.key, validatePluginNode(node->child(n.key), node->loc, n.kind, section + "." + n.key, n.defaultType));
  return o;
}

// The node at a section's key path, or null; `parentLoc` gets the location of the nearest node
// on the way (where a missing section is reported).
const Node* findSection(const Node& root, const std::string& path, Loc& parentLoc) {
  const Node* cur = &root;
  parentLoc = root.loc;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    if (cur->kind != Node::Map) return nullptr;
    const Node* next = cur->child(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (!next) return nullptr;
    if (dot == std::string::npos) return next;
    parentLoc = next->loc;
    cur = next;
    start = dot + 1;
  }
}

// The sections nested directly in `path` (e.g. output -> output.checkpoint), by their key.
std::vector<std::pair<std::string, const SectionInfo*>> childSections(const std::string& path) {
  std::vector<std::pair<std::string, const SectionInfo*>> out;
  for (const auto& s : specSections())
    if (s.path.size() > path.size() + 1 && s.path.compare(0, path.size() + 1, path + ".") == 0 &&
        s.path.find('.', path.size() + 1) == std::string::npos)
      out.emplace_back(s.path.substr(path.size() + 1), &s);
  return out;
}

Options validateFixedSection(const Node* node, const Loc& parentLoc, const SectionInfo& section) {
  if (node && node->kind != Node::Map && node->kind != Node::Null)
    fail(node->loc, section.path, "expected a mapping of options, got " + describe(*node));
  const auto children = childSections(section.path);
  std::string owner = "section '" + section.path + "'";
  for (std::size_t i = 0; i < children.size(); ++i)
    owner += std::string(i == 0 ? " (or its " : ", its ") + (children[i].second->pluginKind.empty() ? "section '" : "plugin node '") +
             children[i].first + "'" + (i + 1 == children.size() ? ")" : "");
  Node own;  // the section's own keys: nested sections are validated on their own
  if (node && node->kind == Node::Map) {
    own = *node;
    own.map.erase(std::remove_if(own.map.begin(), own.map.end(),
                                 [&](const Entry& e) {
                                   return std::any_of(children.begin(), children.end(),
                                                      [&](const auto& c) { return c.first == e.key; });
                                 }),
                  own.map.end());
  }
  return validateOptions(node && node->kind == Node::Map ? &own : nullptr, node ? node->loc : parentLoc, section.decls,
                         section.path, "", owner);
}

std::vector<std::string> topLevelKeys() {
  std::vector<std::string> keys{"name", "seed"};
  for (const auto& s : specSections()) {
    const std::string top = s.path.substr(0, s.path.find('.'));
    if (std::find(keys.begin(), keys.end(), top) == keys.end()) keys.push_back(top);
  }
  keys.push_back(kMethods);
  keys.push_back("base");
  return keys;
}

// `methods:`, a list of method plugin nodes ({type: mixup, ...}); each type at most once.
std::vector<Options> validateMethods(const Node* node, const Loc& parentLoc, std::vector<Loc>& locs) {
  std::vector<Options> methods;
  if (!node || node->kind == Node::Null) return methods;
  if (node->kind != Node::Seq)
    fail(node->loc, kMethods, "expected a list of methods such as [{type: mixup, mixup_alpha: 0.2}], got " + describe(*node));
  for (std::size_t i = 0; i < node->seq.size(); ++i) {
    const std::string path = std::string(kMethods) + "[" + std::to_string(i) + "]";
    const Node& item = node->seq[i];
    methods.push_back(validatePluginNode(&item, node->loc, "method", path, ""));
    locs.push_back(item.loc);
    for (std::size_t k = 0; k < i; ++k)
      if (methods[k].type() == methods[i].type())
        fail(item.loc, path, "method '" + methods[i].type() + "' is listed twice (also methods[" + std::to_string(k) +
                                 "]): give its options once");
  }
  (void)parentLoc;
  return methods;
}

// A plugin's check of the whole spec (Catalog's SpecCheck): a SpecProblem becomes a SpecError at
// the node (or its option's) location.
void checkPlugin(const std::string& kind, const Options& node, const std::string& path, const Loc& loc,
                 const Node* yaml, const Spec& spec, std::size_t index) {
  const PluginInfo* info = Catalog::instance().find(kind, node.type());
  if (!info) return;
  const std::vector<std::string>& tasks = info->tasks;
  if (!tasks.empty() && std::find(tasks.begin(), tasks.end(), spec.task.type()) == tasks.end())
    fail(loc, path, kind + " '" + node.type() + "' works with the task" + (tasks.size() > 1 ? "s " : " ") +
                        joinStrings(tasks, ", ") + "; this spec's task is " + spec.task.type());
  if (!info->notWithShardedGradients.empty() && spec.distributed.shard == "gradients")
    fail(loc, path, kind + " '" + node.type() + "' cannot run with distributed.shard: gradients: " +
                        info->notWithShardedGradients + " (distributed.shard: optimizer keeps them)");
  if (!info->check) return;
  try {
    info->check(spec, index);
  } catch (const SpecProblem& p) {
    const Node* at = yaml && !p.key().empty() && yaml->kind == Node::Map ? yaml->child(p.key()) : nullptr;
    fail(at ? at->loc : loc, p.key().empty() ? path : path + "." + p.key(), p.what());
  }
}

// output.mlflow: an http(s) URI without credentials (they would be written into result files;
// MLflow's MLFLOW_TRACKING_USERNAME/PASSWORD or MLFLOW_TRACKING_TOKEN carry them), a named experiment.
void checkMlflow(const Node& root, const MlflowConfig& m) {
  Loc parentLoc;
  const Node* node = findSection(root, "output.mlflow", parentLoc);
  auto where = [&](const char* key) {
    const Node* n = node && node->kind == Node::Map ? node->child(key) : nullptr;
    return n ? n->loc : (node ? node->loc : parentLoc);
  };
  const std::string& uri = m.trackingUri;
  if (!uri.empty()) {
    const bool http = uri.rfind("http://", 0) == 0 || uri.rfind("https://", 0) == 0;
    if (!http)
      fail(where("tracking_uri"), "output.mlflow.tracking_uri",
           "'" + uri.substr(0, uri.find(':')) + ":...' is not an http:// or https:// URI of an MLflow tracking server");
    const std::string rest = uri.substr(uri.find("//") + 2);
    const std::string authority = rest.substr(0, rest.find('/'));
    if (authority.find('@') != std::string::npos)
      fail(where("tracking_uri"), "output.mlflow.tracking_uri",
           "credentials in the URI would be written into result files; set MLFLOW_TRACKING_USERNAME and "
           "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) instead");
    if (authority.empty()) fail(where("tracking_uri"), "output.mlflow.tracking_uri", "no host in '" + uri + "'");
  }
  if (m.experiment.empty()) fail(where("experiment"), "output.mlflow.experiment", "must not be empty");
}

Spec validate(const Node& root) {
  const auto topKeys = topLevelKeys();
  for (const auto& e : root.map)
    if (std::find(topKeys.begin(), topKeys.end(), e.key) == topKeys.end())
      fail(e.keyLoc, e.key, "unknown section '" + e.key + "'" + didYouMean(e.key, topKeys) + "; valid: " + join(topKeys));
  Spec spec;
  const Node* name = root.child("name");
  if (!name) fail(root.loc, "name", "missing required key 'name' (names the result file)");
  spec.name = toStr(*name, "name");
  static const std::regex nameRe("^[A-Za-z0-9][A-Za-z0-9._-]*$");
  if (!std::regex_match(spec.name, nameRe))
    fail(name->loc, "name", "'" + spec.name + "' is not a valid run name (letters, digits, '.', '_', '-')");
  if (const Node* seed = root.child("seed")) {
    spec.seed = toInt(*seed, "seed");
    if (spec.seed < 0) fail(seed->loc, "seed", "must be at least 0");
  }
  for (const auto& section : specSections()) {
    Loc parentLoc;
    const Node* node = findSection(root, section.path, parentLoc);
    section.set(spec, section.pluginKind.empty()
                          ? validateFixedSection(node, parentLoc, section)
                          : validatePluginNode(node, parentLoc, section.pluginKind, section.path,
                                               section.defaultTypeFor ? section.defaultTypeFor(spec) : section.defaultType));
  }
  checkMlflow(root, spec.output.mlflow);
  std::vector<Loc> methodLocs;
  const Node* methods = root.child(kMethods);
  spec.methods = validateMethods(methods, root.loc, methodLocs);
  for (const auto& section : specSections())
    if (!section.pluginKind.empty()) {
      Loc parentLoc;
      const Node* node = findSection(root, section.path, parentLoc);
      checkPlugin(section.pluginKind, section.get(spec), section.path, node ? node->loc : parentLoc, node, spec, 0);
    }
  for (std::size_t i = 0; i < spec.methods.size(); ++i)
    checkPlugin("method", spec.methods[i], std::string(kMethods) + "[" + std::to_string(i) + "]", methodLocs[i],
                &methods->seq[i], spec, i);
  return spec;
}

void emitValue(YAML::Emitter& out, const Value& v) {
  struct Visitor {
    YAML::Emitter& out;
    void operator()(std::int64_t i) const { out << i; }
    void operator()(double d) const { out << valueToString(Value{d}); }
    void operator()(bool b) const { out << YAML::TrueFalseBool << b; }
    void operator()(const std::string& s) const {
      if (s.empty())
        out << YAML::DoubleQuoted << s;
      else
        out << s;
    }
    void operator()(const std::vector<std::int64_t>& l) const {
      out << YAML::Flow << YAML::BeginSeq;
      for (auto i : l) out << i;
      out << YAML::EndSeq;
    }
    void operator()(const std::vector<double>& l) const {
      out << YAML::Flow << YAML::BeginSeq;
      for (auto d : l) out << valueToString(Value{d});
      out << YAML::EndSeq;
    }
    void operator()(const std::vector<std::string>& l) const {
      out << YAML::Flow << YAML::BeginSeq;
      for (const auto& s : l) out << s;
      out << YAML::EndSeq;
    }
  };
  std::visit(Visitor{out}, v);
}

Spec finish(Loader& loader, Node root, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) applyOverride(root, o);
  Spec spec = validate(root);
  spec.files = loader.files;
  spec.overrides = overrides;
  return spec;
}

}  // namespace

Spec loadSpec(const std::string& path, const std::vector<std::string>& overrides) {
  Loader loader;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw SpecError(path + ": spec file not found" + (ec ? " (" + ec.message() + ")" : ""));
  Node root = loader.loadFile(fs::path(path), Loc{path});
  return finish(loader, std::move(root), overrides);
}

Spec loadSpecFromString(const std::string& yaml, const std::string& virtualPath,
                        const std::vector<std::string>& overrides) {
  Loader loader;
  fs::path p(virtualPath);
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(p, ec);
  loader.stack.push_back(ec ? p.string() : canon.string());
  Node root = loader.loadText(yaml, virtualPath, p.parent_path());
  return finish(loader, std::move(root), overrides);
}

namespace {

// A section's options, then its nested sections as mappings under their keys.
// A plugin node's type, options and nested plugin nodes, as a YAML mapping's entries.
void emitNodeEntries(YAML::Emitter& out, const Options& o) {
  if (!o.type().empty()) out << YAML::Key << "type" << YAML::Value << o.type();
  for (const auto& [k, v] : o.values()) {
    out << YAML::Key << k << YAML::Value;
    emitValue(out, v);
  }
  for (const auto& [key, child] : o.children()) {
    out << YAML::Key << key << YAML::Value << YAML::BeginMap;
    emitNodeEntries(out, child);
    out << YAML::EndMap;
  }
}

// A section's options, then its nested sections as mappings under their keys.
void emitSection(YAML::Emitter& out, const Spec& spec, const SectionInfo& section) {
  out << YAML::BeginMap;
  emitNodeEntries(out, section.get(spec));
  for (const auto& [key, child] : childSections(section.path)) {
    out << YAML::Key << key << YAML::Value;
    emitSection(out, spec, *child);
  }
  out << YAML::EndMap;
}

nlohmann::json nodeJson(const Options& o) {
  nlohmann::json j = nlohmann::json::object();
  if (!o.type().empty()) j["type"] = o.type();
  for (const auto& [k, v] : o.values()) j[k] = valueToJson(v);
  for (const auto& [key, child] : o.children()) j[key] = nodeJson(child);
  return j;
}

nlohmann::json sectionJson(const Spec& spec, const SectionInfo& section) {
  nlohmann::json j = nodeJson(section.get(spec));
  for (const auto& [key, child] : childSections(section.path)) j[key] = sectionJson(spec, *child);
  return j;
}

bool isTopLevel(const SectionInfo& s) { return s.path.find('.') == std::string::npos; }

// (section, key, value) rows of a plugin node and its nested nodes.
void nodeRows(std::vector<std::array<std::string, 3>>& r, const std::string& path, const Options& o) {
  if (!o.type().empty()) r.push_back({path, "type", o.type()});
  for (const auto& [k, v] : o.values()) r.push_back({path, k, valueToString(v)});
  for (const auto& [key, child] : o.children()) nodeRows(r, path + "." + key, child);
}

}  // namespace

std::string Spec::toYaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << name;
  out << YAML::Key << "seed" << YAML::Value << seed;
  for (const auto& s : specSections())
    if (isTopLevel(s)) {
      out << YAML::Key << s.path << YAML::Value;
      emitSection(out, *this, s);
    }
  out << YAML::Key << kMethods << YAML::Value << YAML::BeginSeq;
  for (const auto& m : methods) {
    out << YAML::BeginMap;
    emitNodeEntries(out, m);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

nlohmann::json Spec::toJson() const {
  nlohmann::json j;
  j["name"] = name;
  j["seed"] = seed;
  for (const auto& s : specSections())
    if (isTopLevel(s)) j[s.path] = sectionJson(*this, s);
  j[kMethods] = nlohmann::json::array();
  for (const auto& m : methods) j[kMethods].push_back(nodeJson(m));
  return j;
}

std::vector<std::array<std::string, 3>> Spec::rows() const {
  std::vector<std::array<std::string, 3>> r{{"", "name", name}, {"", "seed", std::to_string(seed)}};
  for (const auto& s : specSections()) nodeRows(r, s.path, s.get(*this));
  for (std::size_t i = 0; i < methods.size(); ++i) nodeRows(r, std::string(kMethods) + "[" + std::to_string(i) + "]", methods[i]);
  return r;
}

std::uint64_t Spec::hash() const {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : toJson().dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string didYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t bestD = std::string::npos;
  for (const auto& c : candidates) {
    std::size_t d = editDistance(word, c);
    if (d < bestD) bestD = d, best = c;
  }
  if (best.empty() || bestD > std::max<std::size_t>(2, word.size() / 3)) return "";
  return "; did you mean '" + best + "'?";
}

}  // namespace exprun
