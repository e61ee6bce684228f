#include "nodes/verbs/shot_graph_fields.hpp"

#include "common/files.hpp"

namespace vidline::nodes {

using nlohmann::json;

bool is_from_input(const json& v) { return v.is_object() && v.contains("from"); }

std::string read_graph_fields(const json& j, msg::shot& s) {
  if (j.contains("sequence")) {
    const auto& q = j["sequence"];
    if (!q.is_string() || !files::is_safe_name(q.get<std::string>(), 64))
      return "sequence: must be a safe name (1-64 of A-Z a-z 0-9 _ . -, not starting with . "
             "or -): the joined video's file stem";
    s.sequence = q.get<std::string>();
  }
  if (!j.contains("inputs"))
    return "";
  if (!j["inputs"].is_object())
    return "inputs: must be an object of named inputs";
  for (auto& [name, v] : j["inputs"].items()) {
    if (!is_from_input(v))
      continue;
    const std::string what = "inputs." + name + ": ";
    msg::job_input in;
    in.name = name;
    for (auto& [key, unused] : v.items())
      if (key != "from" && key != "frame" && key != "latent")
        return what + key + ": unknown field (the fields: from, frame, latent)";
    if (!v["from"].is_string() || v["from"].get<std::string>().empty())
      return what + "from: must be the name of another shot of the list";
    in.from = v["from"].get<std::string>();
    if (v.contains("frame")) {
      const auto& f = v["frame"];
      if (f.is_string())
        in.frame = f.get<std::string>();
      else if (f.is_number_unsigned())
        in.frame = std::to_string(f.get<uint64_t>());
      else
        return what + "frame: must be \"first\", \"last\" or a frame number (from 0)";
    }
    if (v.contains("latent")) {
      if (!v["latent"].is_boolean())
        return what + "latent: must be true or false";
      in.latent = v["latent"].get<bool>();
    }
    if (!in.latent && in.frame.empty())
      in.frame = "last";  // the usual continuation: where the other shot ended
    s.inputs.push_back(std::move(in));
  }
  return "";
}

} // namespace vidline::nodes
