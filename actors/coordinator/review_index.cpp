#include "actors/coordinator/review_index.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/decoder/output_index.hpp"

namespace vidline::actors {

using nlohmann::json;

bool index_verdict(const std::string& data_dir, const sched::job& j, double unix_s) {
  const std::string dir = data_dir + "/outputs/" + j.spec.run_id;
  if (j.verdict.empty() || j.output_sha256.empty() || j.output.rfind(dir + "/", 0) != 0)
    return false;
  const std::string path = dir + "/" + output_index::file_name;
  // The video's own line: the last of its file with its SHA-256.
  const std::string file = j.output.substr(dir.size() + 1);
  json base;
  std::ifstream in(path, std::ios::binary);
  std::string text;
  while (std::getline(in, text)) {
    auto l = json::parse(text, nullptr, false);
    if (l.is_object() && l.value("file", "") == file && l.value("output_sha256", "") == j.output_sha256)
      base = std::move(l);
  }
  if (base.is_null())
    return false;
  const json take = j.retake >= 0 ? json(j.retake) : json(nullptr);
  if (base.contains("review") && base["review"].is_object()
      && base["review"].value("verdict", "") == j.verdict && base["review"]["take_index"] == take)
    return false;  // said already (a verdict given again)
  base["review"] = {{"verdict", j.verdict}, {"at_unix", unix_s}, {"take_index", take}};
  const std::string name = base.value("name", "");
  // Keyed apart from the video's own line: a verdict changed is a line of its own.
  const std::string key = j.output_sha256 + " " + j.verdict + " " + std::to_string(j.retake);
  output_index::cache c;
  return output_index::append_line(c, path, name, key,
                                   base.dump(-1, ' ', false, json::error_handler_t::replace));
}

} // namespace vidline::actors
