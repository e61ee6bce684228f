#include "config/shot_graph.hpp"

#include <algorithm>
#include <map>

#include "common/sha256.hpp"

namespace vidline::config::graph {

std::optional<uint32_t> frame_index(const std::string& frame, uint32_t frames) {
  if (frames == 0)
    return std::nullopt;
  if (frame == "first")
    return 0u;
  if (frame == "last")
    return frames - 1;
  if (frame.empty() || frame.size() > 9
      || !std::all_of(frame.begin(), frame.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  const auto k = static_cast<uint32_t>(std::stoul(frame));
  if (k >= frames)
    return std::nullopt;
  return k;
}

std::string from_input_json(const std::string& name, const nlohmann::json& v,
                            msg::job_input& in) {
  in = {};
  in.name = name;
  for (auto& [key, unused] : v.items())
    if (key != "from" && key != "frame" && key != "latent")
      return key + ": unknown field (an input taken from another shot: from, frame, latent)";
  if (!v["from"].is_string() || v["from"].get<std::string>().empty())
    return "from: must be the name of another shot of the list";
  in.from = v["from"].get<std::string>();
  if (v.contains("frame")) {
    const auto& f = v["frame"];
    if (f.is_string())
      in.frame = f.get<std::string>();
    else if (f.is_number_unsigned())
      in.frame = std::to_string(f.get<uint64_t>());
    else
      return "frame: must be \"first\", \"last\" or a frame number (from 0)";
  }
  if (v.contains("latent")) {
    if (!v["latent"].is_boolean())
      return "latent: must be true or false";
    in.latent = v["latent"].get<bool>();
  }
  if (in.latent && !in.frame.empty())
    return "frame: not with \"latent\": true (the latent is the whole shot, not a frame of it)";
  if (!in.latent && in.frame.empty())
    in.frame = "last";  // the usual continuation: where the other shot ended
  return "";
}

bool has_graph(const std::vector<msg::shot>& shots) {
  for (auto& s : shots) {
    if (!s.sequence.empty())
      return true;
    for (auto& in : s.inputs)
      if (!in.from.empty())
        return true;
  }
  return false;
}

namespace {

std::map<std::string, std::size_t> names_of(const std::vector<msg::shot>& shots) {
  std::map<std::string, std::size_t> out;
  for (std::size_t i = 0; i < shots.size(); ++i)
    if (!shots[i].name.empty())
      out.emplace(shots[i].name, i);
  return out;
}

/// The shots each shot takes from (resolved names only), in input order.
std::vector<std::vector<std::size_t>> sources_of(const std::vector<msg::shot>& shots,
                                                 const std::map<std::string, std::size_t>& names) {
  std::vector<std::vector<std::size_t>> out(shots.size());
  for (std::size_t i = 0; i < shots.size(); ++i)
    for (auto& in : shots[i].inputs)
      if (auto it = names.find(in.from); !in.from.empty() && it != names.end())
        out[i].push_back(it->second);
  return out;
}

std::string input_problem(const std::vector<msg::shot>& shots, std::size_t i,
                          const msg::job_input& in,
                          const std::map<std::string, std::size_t>& names) {
  const std::string what = "inputs." + in.name + ": ";
  if (in.from.empty()) {
    if (!in.frame.empty() || in.latent)
      return what + "'frame' and 'latent' go with 'from' (the shot it is taken from)";
    return "";
  }
  if (!in.sha256.empty() || !in.path.empty())
    return what + "is both a file and taken from shot '" + in.from + "': give one";
  auto it = names.find(in.from);
  if (it == names.end())
    return what + "from: no shot of the list is named '" + in.from + "'";
  if (it->second == i)
    return what + "from: a shot cannot take an input from itself";
  if (in.latent)  // whether its workflow continues from a latent: config::resolve_shot
    return in.frame.empty() ? "" : what + "frame: not with \"latent\": true";
  const auto& src = shots[it->second];
  const uint32_t frames = frames_of(src.seconds);
  if (in.frame.empty())
    return what + "frame: missing (\"first\", \"last\" or a frame number)";
  if (!frame_index(in.frame, frames))
    return what + "frame: '" + in.frame + "' is not \"first\", \"last\" or a frame of shot '"
           + in.from + "' (" + std::to_string(src.seconds) + " s: frames 0 to "
           + std::to_string(frames - 1) + ")";
  return "";
}

} // namespace

std::string graph_problem(const std::vector<msg::shot>& shots,
                          const std::function<std::string(std::size_t)>& label) {
  const auto names = names_of(shots);
  for (std::size_t i = 0; i < shots.size(); ++i)
    for (auto& in : shots[i].inputs)
      if (auto why = input_problem(shots, i, in, names); !why.empty())
        return label(i) + ": " + why;
  // Cycles: a depth-first walk along `from`; a shot met again on the walk's path closes one.
  const auto sources = sources_of(shots, names);
  std::vector<int> color(shots.size(), 0);  // 0 new, 1 on the path, 2 done
  for (std::size_t root = 0; root < shots.size(); ++root) {
    if (color[root] != 0)
      continue;
    std::vector<std::pair<std::size_t, std::size_t>> path{{root, 0}};  // (shot, next source)
    color[root] = 1;
    while (!path.empty()) {
      auto& [at, next] = path.back();
      if (next == sources[at].size()) {
        color[at] = 2;
        path.pop_back();
        continue;
      }
      const std::size_t to = sources[at][next++];
      if (color[to] == 2)
        continue;
      if (color[to] == 0) {
        color[to] = 1;
        path.emplace_back(to, 0);
        continue;
      }
      std::string cycle;
      bool in_cycle = false;
      for (auto& [k, unused] : path) {
        in_cycle = in_cycle || k == to;
        if (in_cycle)
          cycle += label(k) + " takes from ";
      }
      return label(to) + ": inputs: the shots take from each other in a cycle: " + cycle
             + label(to);
    }
  }
  // Sequences: parts in list order, one take each, one size.
  std::map<std::string, std::size_t> first_part;
  for (std::size_t i = 0; i < shots.size(); ++i) {
    const auto& s = shots[i];
    if (s.sequence.empty())
      continue;
    if (s.takes > 1)
      return label(i) + ": takes: a part of sequence '" + s.sequence
             + "' has one take (it has " + std::to_string(s.takes) + ")";
    auto [it, fresh] = first_part.emplace(s.sequence, i);
    const auto& f = shots[it->second];
    if (!fresh && (f.width != s.width || f.height != s.height))
      return label(i) + ": sequence: its size " + std::to_string(s.width) + "x"
             + std::to_string(s.height) + " differs from " + std::to_string(f.width) + "x"
             + std::to_string(f.height) + " of the sequence's first part, " + label(it->second)
             + " (parts are joined without re-encoding)";
  }
  return "";
}

std::vector<double> shot_ranks(const std::vector<msg::shot>& shots) {
  const auto sources = sources_of(shots, names_of(shots));
  std::vector<std::vector<std::size_t>> takers(shots.size());
  std::vector<std::size_t> pending(shots.size(), 0);  // takers not yet ranked
  for (std::size_t i = 0; i < shots.size(); ++i)
    for (std::size_t s : sources[i]) {
      takers[s].push_back(i);
      ++pending[s];
    }
  std::vector<double> rank(shots.size(), 0);
  for (std::size_t i = 0; i < shots.size(); ++i)
    rank[i] = double(shots[i].width) * shots[i].height * shots[i].seconds / (416.0 * 736 * 5);
  // From the ends of the chains back to their heads (Kahn's order on the reversed edges).
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < shots.size(); ++i)
    if (pending[i] == 0)
      ready.push_back(i);
  std::vector<double> best(shots.size(), 0);  // the longest path among a shot's takers
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    rank[i] += best[i];
    for (std::size_t s : sources[i]) {
      best[s] = std::max(best[s], rank[i]);
      if (--pending[s] == 0)
        ready.push_back(s);
    }
  }
  return rank;
}

uint32_t source_job(const std::vector<msg::shot>& shots, const std::vector<uint32_t>& first_job,
                    std::size_t source, uint32_t take) {
  return first_job[source] + (take < shots[source].takes ? take : 0);
}

void link_jobs(std::vector<msg::job_spec>& jobs, const std::vector<msg::shot>& shots,
               const std::vector<std::size_t>& shot_of, const std::vector<uint32_t>& takes) {
  const auto names = names_of(shots);
  std::vector<uint32_t> first_job(shots.size(), 0);
  for (std::size_t k = jobs.size(); k-- > 0;)
    if (takes[k] == 0)
      first_job[shot_of[k]] = static_cast<uint32_t>(k);
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    auto& j = jobs[k];
    const auto& s = shots[shot_of[k]];
    j.shot = s.name;
    j.take = takes[k];
    j.sequence = s.sequence;
    if (j.inputs.empty()) {
      j.inputs = s.inputs;
      std::sort(j.inputs.begin(), j.inputs.end(),
                [](const msg::job_input& a, const msg::job_input& b) { return a.name < b.name; });
    }
    for (auto& in : j.inputs) {
      auto it = names.find(in.from);
      if (in.from.empty() || it == names.end())
        continue;
      in.from_index = source_job(shots, first_job, it->second, takes[k]);
      in.sha256.clear();  // made when the source's video is
      in.bytes = 0;
    }
  }
}

std::map<std::string, std::vector<uint32_t>> sequence_parts(const std::vector<msg::shot>& shots,
                                                            const std::vector<msg::job_spec>& jobs) {
  std::map<std::string, std::vector<uint32_t>> out;
  std::map<std::string, uint32_t> job_of;  // shot name -> its first take's job
  for (auto& j : jobs)
    if (j.take == 0 && !j.shot.empty())
      job_of.emplace(j.shot, j.index);
  for (auto& s : shots)
    if (!s.sequence.empty())
      if (auto it = job_of.find(s.name); it != job_of.end())
        out[s.sequence].push_back(it->second);
  return out;
}

std::string sim_frame(const std::string& video_sha256, uint32_t k) {
  if (video_sha256.size() != 64)
    return "";
  std::string msg = "vidline-sim-frame";
  for (std::size_t i = 0; i < 64; i += 2) {
    auto nib = [](char c) -> int {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    const int hi = nib(video_sha256[i]), lo = nib(video_sha256[i + 1]);
    if (hi < 0 || lo < 0)
      return "";
    msg.push_back(static_cast<char>(hi * 16 + lo));
  }
  for (int b = 0; b < 4; ++b)
    msg.push_back(static_cast<char>((k >> (8 * b)) & 0xff));
  const auto d = sha256_of(msg);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::string sim_sequence(const std::vector<std::string>& part_sha256s) {
  std::string out = "vidline-sim-sequence 1\n";
  for (auto& p : part_sha256s)
    out += "part " + p + "\n";
  return out;
}

} // namespace vidline::config::graph
