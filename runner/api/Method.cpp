// Purpose: a spec's methods, built and called in its order (see Method.h).
#include "runner/api/Method.h"

namespace exprun {

Methods::Methods(const std::vector<Options>& nodes) {
  for (const Options& node : nodes) list_.emplace_back(node.type(), build<MethodKind>(node));
}

nlohmann::json Methods::states() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [type, m] : list_)
    if (nlohmann::json s = m->state(); !s.is_null()) j[type] = std::move(s);
  return j;
}

nlohmann::json Methods::figures() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [type, m] : list_)
    if (nlohmann::json f = m->figures(); !f.is_null()) j[type] = std::move(f);
  return j;
}

}  // namespace exprun
