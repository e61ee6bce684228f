#include "nodes/verbs/shot_file.hpp"
#include "config/shot_graph.hpp"
#include "nodes/verbs/shot_graph_fields.hpp"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/inbound.hpp"
#include "actors/planner/plan.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"

namespace vidline::nodes::verbs {

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

std::string read_reference(const std::string& path, std::string& abs_path, std::string& sha256) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    return path + " does not exist";
  if (!std::filesystem::is_regular_file(st))
    return path + " is not a regular file";
  auto size = std::filesystem::file_size(path, ec);
  if (ec)
    return path + ": " + ec.message();
  if (size == 0)
    return path + " is empty";
  if (size > max_reference_image_bytes)
    return path + " is " + std::to_string(size) + " bytes, over the limit of "
           + std::to_string(max_reference_image_bytes) + " bytes for a reference image";
  abs_path = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec)
    return path + ": " + ec.message();
  if (auto why = actors::inbound::check_reference(abs_path); !why.empty())
    return path + ": " + why;
  try {
    sha256 = sha256_file_hex(abs_path);
  } catch (const std::exception& e) {
    return path + ": cannot be read (" + e.what() + ")";
  }
  return "";
}

namespace {

/// One CSV record of a line (no field spans lines): cells, or why not.
std::string csv_cells(const std::string& line, std::vector<std::string>& cells) {
  cells.clear();
  std::string cell;
  std::size_t i = 0;
  while (true) {
    cell.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size())
          return "a quoted cell must end on its line (a closing \"), cell " +
                 std::to_string(cells.size() + 1);
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        cell += line[i++];
      }
      if (i < line.size() && line[i] != ',')
        return "text after a quoted cell, cell " + std::to_string(cells.size() + 1);
    } else {
      while (i < line.size() && line[i] != ',')
        cell += line[i++];
    }
    cells.push_back(cell);
    if (i >= line.size())
      return "";
    ++i;  // the comma
  }
}

bool numeric_field(const std::string& f) {
  return f == "width" || f == "height" || f == "seconds" || f == "seed" || f == "takes"
         || f == "priority";
}

/// A CSV line as the JSON object a JSON Lines file would hold (empty cells left out).
std::string csv_object(const std::vector<std::string>& header, const std::string& line,
                       json& out) {
  std::vector<std::string> cells;
  if (auto why = csv_cells(line, cells); !why.empty())
    return "line: " + why;
  if (cells.size() != header.size())
    return "line: has " + std::to_string(cells.size()) + " cells, the header "
           + std::to_string(header.size());
  out = json::object();
  for (std::size_t c = 0; c < cells.size(); ++c) {
    if (cells[c].empty())
      continue;
    // param.NAME and input.NAME columns: members of params and inputs (params as text,
    // read as their declared types when checked).
    for (const char* group : {"param.", "input."})
      if (header[c].rfind(group, 0) == 0 && header[c].size() > std::strlen(group)) {
        out[group[0] == 'p' ? "params" : "inputs"][header[c].substr(std::strlen(group))] = cells[c];
        break;
      }
    if (header[c].rfind("param.", 0) == 0 || header[c].rfind("input.", 0) == 0)
      continue;
    if (!numeric_field(header[c])) {
      out[header[c]] = cells[c];
      continue;
    }
    json v;
    try {
      v = json::parse(cells[c]);
    } catch (const json::exception&) {
      v = cells[c];  // reported as not a whole number below
    }
    out[header[c]] = v;
  }
  return "";
}

/// The shot of one line's object, or "FIELD: what is wrong".
std::string shot_of(const json& j, const std::filesystem::path& folder, const config::knobs& k,
                    msg::shot& s) {
  static const std::set<std::string> known = {"prompt", "prompt_file", "reference", "width",
                                              "height", "seconds", "seed", "takes", "name",
                                              "priority", "negative_prompt", "workflow",
                                              "params", "inputs", "sequence"};
  if (!j.is_object())
    return "line: must be a JSON object ({...}), got " + std::string(j.type_name());
  for (auto& [key, v] : j.items())
    if (!known.count(key))
      return key + ": unknown field (the fields: " + shot_fields + ")";
  const bool has_prompt = j.contains("prompt"), has_file = j.contains("prompt_file");
  if (has_prompt == has_file)
    return "prompt: give exactly one of prompt and prompt_file";
  if (has_prompt) {
    if (!j["prompt"].is_string())
      return "prompt: must be a string";
    s.prompt = j["prompt"].get<std::string>();
  } else {
    if (!j["prompt_file"].is_string() || j["prompt_file"].get<std::string>().empty())
      return "prompt_file: must be a file name (relative to the shot file's folder)";
    auto p = std::filesystem::path(j["prompt_file"].get<std::string>());
    if (p.is_relative())
      p = folder / p;
    std::string why;
    s.prompt = read_prompt_file(p.string(), k, why);
    if (!why.empty())
      return "prompt_file: " + why;
  }
  uint64_t v = 0;
  struct num { const char* field; uint64_t lo, hi; bool required; };
  for (const num& f : {num{"width", 8, 8192, true}, num{"height", 8, 8192, true},
                       num{"seconds", 1, 3600, true}, num{"seed", 0, UINT64_MAX, true},
                       num{"takes", 1, actors::coordinator::max_takes, false}}) {
    if (!j.contains(f.field)) {
      if (f.required)
        return std::string(f.field) + ": missing";
      continue;
    }
    if (auto why = whole(j[f.field], f.lo, f.hi, v); !why.empty())
      return f.field + (": " + why);
    const std::string name = f.field;
    if (name == "width") s.width = static_cast<uint32_t>(v);
    else if (name == "height") s.height = static_cast<uint32_t>(v);
    else if (name == "seconds") s.seconds = static_cast<uint32_t>(v);
    else if (name == "seed") s.seed = v;
    else s.takes = static_cast<uint32_t>(v);
  }
  if (j.contains("name")) {
    if (!j["name"].is_string())
      return "name: must be a string";
    s.name = j["name"].get<std::string>();
    if (s.name.empty())
      return "name: is empty (leave it out for job-<index>-<seed> outputs)";
  }
  if (j.contains("priority")) {
    auto& p = j["priority"];
    if (!p.is_number_integer()
        || (p.is_number_unsigned() && p.get<uint64_t>() > uint64_t{INT32_MAX})
        || (!p.is_number_unsigned()
            && (p.get<int64_t>() < INT32_MIN || p.get<int64_t>() > INT32_MAX)))
      return "priority: must be a whole number from " + std::to_string(INT32_MIN) + " to "
             + std::to_string(INT32_MAX) + ", got " + p.dump();
    s.priority = static_cast<int32_t>(p.get<int64_t>());
  }
  if (auto why = read_shot_model(j, folder.string(), s); !why.empty())
    return why;
  if (auto why = read_graph_fields(j, s); !why.empty())
    return why;
  if (auto why = actors::coordinator::shot_problem(s, k); !why.empty())
    return why;
  // Last: the only field that reads a large file.
  if (j.contains("reference")) {
    if (!j["reference"].is_string() || j["reference"].get<std::string>().empty())
      return "reference: must be an image file's name (relative to the shot file's folder)";
    auto p = std::filesystem::path(j["reference"].get<std::string>());
    if (p.is_relative())
      p = folder / p;
    if (auto why = read_reference(p.string(), s.reference, s.reference_sha256); !why.empty())
      return "reference: " + why;
  }
  return "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

} // namespace

std::string read_shot_file(const std::string& path, const config::knobs& k, uint64_t max_jobs,
                           shot_list& out, const config::catalog* cat) {
  out = {};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return path + ": is a directory, not a file";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return path + ": cannot be read (does it exist?)";
  std::string lower = path;
  for (auto& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool csv = ends_with(lower, ".csv");
  const auto folder = std::filesystem::path(path).parent_path();
  std::map<std::string, std::size_t> name_line, stem_line;
  std::vector<std::string> header;  // CSV: the columns
  shot_list got;
  std::string line;
  std::size_t n = 0;
  // A line longer than this is refused before it is parsed (a prompt is at most
  // max_prompt_bytes, escaped at most 6 bytes a byte, plus the other fields).
  const uint64_t max_line = 6 * uint64_t{k.max_prompt_bytes} + 64 * 1024;
  // Every bad line is reported (up to max_bad_lines), so one edit fixes them all.
  std::vector<std::string> bad;
  std::size_t bad_total = 0;
  auto refuse = [&](std::string why) {
    if (++bad_total <= max_bad_lines)
      bad.push_back(std::move(why));
  };
  while (std::getline(in, line)) {
    ++n;
    const std::string at = path + ":" + std::to_string(n) + ": ";
    if (line.size() > max_line) {
      refuse(at + "line: is " + std::to_string(line.size()) + " bytes long, over "
             + std::to_string(max_line));
      continue;
    }
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#')
      continue;
    json j;
    if (csv && header.empty()) {
      if (auto why = csv_cells(line, header); !why.empty())
        return at + "header: " + why;
      std::set<std::string> seen;
      for (auto& h : header) {
        auto a = h.find_first_not_of(" \t"), b = h.find_last_not_of(" \t");
        h = a == std::string::npos ? "" : h.substr(a, b - a + 1);
        if (!seen.insert(h).second)
          return at + h + ": the header names this column twice";
      }
      continue;
    }
    if (csv) {
      if (auto why = csv_object(header, line, j); !why.empty()) {
        refuse(at + why);
        continue;
      }
    } else {
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        refuse(at + "line: not valid JSON (" + std::string(e.what()) + ")");
        continue;
      }
    }
    msg::shot s;
    if (auto why = shot_of(j, folder, k, s); !why.empty()) {
      refuse(at + why);
      continue;
    }
    if (cat != nullptr) {
      config::resolved_shot r;
      if (auto why = config::resolve_shot(*cat, s, r, csv); !why.empty()) {
        refuse(at + why);
        continue;
      }
      if (csv)
        s.params = r.params;  // typed now, as a JSON line would have given them
    }
    if (!s.name.empty()) {
      if (auto [it, fresh] = name_line.emplace(s.name, n); !fresh) {
        refuse(at + "name: '" + s.name + "' is also the name on line " + std::to_string(it->second));
        continue;
      }
      std::string clash;
      for (uint32_t t = 0; t < s.takes && clash.empty(); ++t)
        if (auto [it, fresh] = stem_line.emplace(actors::coordinator::shot_stem(s, t), n); !fresh)
          clash = at + "name: its output '" + actors::coordinator::shot_stem(s, t)
                  + "' is also an output of line " + std::to_string(it->second);
      if (!clash.empty()) {
        refuse(clash);
        continue;
      }
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
  if (!bad.empty()) {
    std::string all;
    for (auto& b : bad)
      all += (all.empty() ? "" : "\n") + b;
    if (bad_total > bad.size())
      all += "\n" + path + ": " + std::to_string(bad_total) + " lines are wrong; the first " +
             std::to_string(bad.size()) + " are shown";
    return all;
  }
  if (got.shots.empty())
    return path + ": holds no shots (every line blank or a # comment)";
  if (auto why = config::graph::graph_problem(
        got.shots, [&](std::size_t i) { return path + ":" + std::to_string(got.lines[i]); });
      !why.empty())
    return why;
  out = std::move(got);
  return "";
}

std::string shot_file_capacity(const std::string& path, const shot_list& list,
                               const actors::coordinator::state& s, const std::string& mode) {
  for (std::size_t i = 0; i < list.shots.size(); ++i) {
    const auto& sh = list.shots[i];
    if (auto why = actors::coordinator::capacity_refusal(s, mode, sh.width, sh.height, sh.seconds);
        !why.empty())
      return path + ":" + std::to_string(list.lines[i]) + ": size: " + why;
  }
  return "";
}

std::string jobs_exclusive_error(const std::vector<std::string>& given) {
  if (given.empty())
    return "";
  return "--jobs FILE gives each shot its prompt, size and seed: it goes without "
         "--prompt-file, --count, --width, --height, --seconds and --seed (got "
         + given.front() + ")";
}

} // namespace vidline::nodes::verbs
