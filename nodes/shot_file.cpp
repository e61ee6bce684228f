#include "nodes/shot_file.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/planner/plan.hpp"
#include "common/files.hpp"

namespace vidline::nodes {

using nlohmann::json;

std::string read_prompt_file(const std::string& path, const config::knobs& k, std::string& why) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    why = path + " does not exist";
    return "";
  }
  if (std::filesystem::is_directory(st)) {
    why = path + " is a directory, not a file";
    return "";
  }
  if (std::filesystem::is_regular_file(st)) {
    auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > k.max_prompt_bytes) {
      why = path + " is " + std::to_string(size) + " bytes, over knobs.max_prompt_bytes ("
            + std::to_string(k.max_prompt_bytes) + ", the most a prompt may have on the bus)";
      return "";
    }
  }
  std::string text;
  try {
    text = files::read_all(path);
  } catch (const std::exception& e) {
    why = e.what();
    return "";
  }
  if (text.size() > k.max_prompt_bytes)  // a pipe or a device: its size was not known
    why = path + " gave " + std::to_string(text.size()) + " bytes, over knobs.max_prompt_bytes ("
          + std::to_string(k.max_prompt_bytes) + ")";
  else if (text.empty())
    why = path + " is empty";
  return why.empty() ? text : "";
}

namespace {

/// A whole number field from lo to hi, or why not.
std::string whole(const json& v, uint64_t lo, uint64_t hi, uint64_t& out) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    return "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi)
           + ", got " + v.dump();
  out = v.get<uint64_t>();
  if (out < lo || out > hi)
    return "must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got "
           + std::to_string(out);
  return "";
}

} // namespace

std::string read_shot_file(const std::string& path, const config::knobs& k, uint64_t max_jobs,
                           shot_list& out) {
  out = {};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return path + ": is a directory, not a file";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return path + ": cannot be read (does it exist?)";
  const auto folder = std::filesystem::path(path).parent_path();
  const std::set<std::string> known = {"prompt", "prompt_file", "width", "height", "seconds",
                                       "seed", "takes", "name", "priority"};
  std::map<std::string, std::size_t> name_line, stem_line;
  shot_list got;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string at = path + ":" + std::to_string(n) + ": ";
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#')
      continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      return at + "line: not valid JSON (" + std::string(e.what()) + ")";
    }
    if (!j.is_object())
      return at + "line: must be a JSON object ({...}), got " + std::string(j.type_name());
    for (auto& [key, v] : j.items())
      if (!known.count(key))
        return at + key + ": unknown field (the fields: " + shot_fields + ")";
    msg::shot s;
    const bool has_prompt = j.contains("prompt"), has_file = j.contains("prompt_file");
    if (has_prompt == has_file)
      return at + "prompt: give exactly one of prompt and prompt_file";
    if (has_prompt) {
      if (!j["prompt"].is_string())
        return at + "prompt: must be a string";
      s.prompt = j["prompt"].get<std::string>();
    } else {
      if (!j["prompt_file"].is_string() || j["prompt_file"].get<std::string>().empty())
        return at + "prompt_file: must be a file name (relative to the shot file's folder)";
      auto p = std::filesystem::path(j["prompt_file"].get<std::string>());
      if (p.is_relative())
        p = folder / p;
      std::string why;
      s.prompt = read_prompt_file(p.string(), k, why);
      if (!why.empty())
        return at + "prompt_file: " + why;
    }
    uint64_t v = 0;
    struct num { const char* field; uint64_t lo, hi; bool required; };
    for (const num& f : {num{"width", 8, 8192, true}, num{"height", 8, 8192, true},
                         num{"seconds", 1, 3600, true}, num{"seed", 0, UINT64_MAX, true},
                         num{"takes", 1, planner::max_takes, false}}) {
      if (!j.contains(f.field)) {
        if (f.required)
          return at + f.field + ": missing";
        continue;
      }
      if (auto why = whole(j[f.field], f.lo, f.hi, v); !why.empty())
        return at + f.field + ": " + why;
      const std::string name = f.field;
      if (name == "width") s.width = static_cast<uint32_t>(v);
      else if (name == "height") s.height = static_cast<uint32_t>(v);
      else if (name == "seconds") s.seconds = static_cast<uint32_t>(v);
      else if (name == "seed") s.seed = v;
      else s.takes = static_cast<uint32_t>(v);
    }
    if (j.contains("name")) {
      if (!j["name"].is_string())
        return at + "name: must be a string";
      s.name = j["name"].get<std::string>();
      if (s.name.empty())
        return at + "name: is empty (leave it out for job-<index>-<seed> outputs)";
    }
    if (j.contains("priority")) {
      auto& p = j["priority"];
      if (!p.is_number_integer()
          || (p.is_number_unsigned() && p.get<uint64_t>() > uint64_t{INT32_MAX})
          || (!p.is_number_unsigned()
              && (p.get<int64_t>() < INT32_MIN || p.get<int64_t>() > INT32_MAX)))
        return at + "priority: must be a whole number from " + std::to_string(INT32_MIN) + " to "
               + std::to_string(INT32_MAX) + ", got " + p.dump();
      s.priority = static_cast<int32_t>(p.get<int64_t>());
    }
    if (auto why = planner::shot_problem(s, k); !why.empty())
      return at + why;
    if (!s.name.empty()) {
      if (auto [it, fresh] = name_line.emplace(s.name, n); !fresh)
        return at + "name: '" + s.name + "' is also the name on line " + std::to_string(it->second);
      for (uint32_t t = 0; t < s.takes; ++t)
        if (auto [it, fresh] = stem_line.emplace(planner::shot_stem(s, t), n); !fresh)
          return at + "name: its output '" + planner::shot_stem(s, t)
                 + "' is also an output of line " + std::to_string(it->second);
    }
    got.jobs += s.takes;
    if (got.jobs > max_jobs)
      return at + "takes: the file's takes add up to more than " + std::to_string(max_jobs)
             + " jobs (the most one run may have)";
    got.shots.push_back(std::move(s));
    got.lines.push_back(n);
  }
  if (in.bad())
    return path + ": read error";
  if (got.shots.empty())
    return path + ": holds no shots (every line blank or a # comment)";
  out = std::move(got);
  return "";
}

std::string jobs_exclusive_error(const std::vector<std::string>& given) {
  if (given.empty())
    return "";
  return "--jobs FILE gives each shot its prompt, size and seed: it goes without "
         "--prompt-file, --count, --width, --height, --seconds and --seed (got "
         + given.front() + ")";
}

} // namespace vidline::nodes
