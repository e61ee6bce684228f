/// A collection folder as a source of outputs to reuse (collection_reuse.hpp).

#include "nodes/verbs/collection_reuse.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/coordinator/input_maker.hpp"
#include "actors/decoder/output_index.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

namespace {

std::string str_of(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

} // namespace

collection_offers read_collection(const config::cluster& c, const std::string& dir,
                                  std::size_t max) {
  collection_offers out;
  std::ifstream in(dir + "/" + actors::decoder::file_name);
  if (!in)
    return out;
  // file -> (its last line's position, the line): the last line of a name holds.
  std::map<std::string, std::pair<std::size_t, json>> last;
  std::string text;
  for (std::size_t n = 0; std::getline(in, text); ++n) {
    json l = json::parse(text, nullptr, false);
    if (!l.is_object() || l.value("sequence", false))
      continue;
    const std::string file = str_of(l, "file");
    if (!is_sha256_hex(str_of(l, "key")) || !is_sha256_hex(str_of(l, "output_sha256"))
        || !files::is_safe_name(file))
      continue;
    last[file] = {n, std::move(l)};
  }
  std::vector<std::pair<std::size_t, const json*>> newest;
  for (auto& [file, e] : last)
    newest.emplace_back(e.first, &e.second);
  std::sort(newest.begin(), newest.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  if (newest.size() > max) {
    out.notes.push_back(fmt::format("{}: {} videos indexed; only the newest {} are offered for "
                                    "reuse", dir, newest.size(), max));
    newest.resize(max);
  }
  for (auto& [pos, lp] : newest) {
    const json& l = *lp;
    collection_video v;
    v.offer.key = str_of(l, "key");
    v.offer.output_sha256 = str_of(l, "output_sha256");
    v.offer.file = str_of(l, "file");
    v.offer.decoder = str_of(l, "decoder");
    v.offer.run_id = str_of(l, "run_id");
    v.offer.index = l.value("index", 0u);
    v.path = dir + "/" + v.offer.file;
    v.name = str_of(l, "name");
    v.sim = actors::coordinator::decoder_backend_type(c, v.offer.decoder) == "sim";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(v.path, ec)) {
      out.notes.push_back(v.path + " is gone: its job renders again");
      continue;
    }
    const std::string have = sha256_file_hex(v.path, &v.offer.bytes);
    if (have != v.offer.output_sha256) {
      out.notes.push_back(fmt::format("{} is not the video its index line names (SHA-256 {}, "
                                      "indexed {}): its job renders again",
                                      v.path, have.empty() ? "unreadable" : have,
                                      v.offer.output_sha256));
      continue;
    }
    out.videos.push_back(std::move(v));
  }
  return out;
}

} // namespace vidline::nodes::verbs
