#include "nodes/verbs/shot_graph_fields.hpp"

#include "common/files.hpp"

namespace vidline::nodes::verbs {

std::string read_graph_fields(const nlohmann::json& j, msg::shot& s) {
  if (!j.contains("sequence"))
    return "";
  const auto& q = j["sequence"];
  if (!q.is_string() || !files::is_safe_name(q.get<std::string>(), 64))
    return "sequence: must be a safe name (1-64 of A-Z a-z 0-9 _ . -, not starting with . or "
           "-): the joined video's file stem";
  s.sequence = q.get<std::string>();
  return "";
}

} // namespace vidline::nodes::verbs
