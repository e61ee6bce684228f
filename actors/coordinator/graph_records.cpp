#include "actors/coordinator/graph_records.hpp"

namespace vidline::actors {

using nlohmann::json;

void put_graph_fields(json& out, const msg::job_spec& s) {
  if (!s.inputs.empty()) {
    json ins = json::array();
    for (auto& i : s.inputs) {
      json x = {{"name", i.name}, {"sha256", i.sha256}, {"bytes", i.bytes}};
      if (!i.path.empty()) x["path"] = i.path;
      if (!i.from.empty()) x["from"] = i.from;
      if (i.from_index >= 0) x["from_index"] = i.from_index;
      if (!i.frame.empty()) x["frame"] = i.frame;
      if (i.latent) x["latent"] = true;
      ins.push_back(std::move(x));
    }
    out["inputs"] = std::move(ins);
  }
  if (!s.shot.empty()) out["shot"] = s.shot;
  if (s.take != 0) out["take"] = s.take;
  if (!s.key.empty()) out["key"] = s.key;
  if (!s.sequence.empty()) out["sequence"] = s.sequence;
}

void get_graph_fields(const json& r, msg::job_spec& s) {
  if (r.contains("inputs") && r["inputs"].is_array()) {
    s.inputs.clear();
    for (auto& x : r["inputs"]) {
      msg::job_input i;
      i.name = x.at("name").get<std::string>();
      i.sha256 = x.value("sha256", "");
      i.bytes = x.value("bytes", uint64_t{0});
      i.path = x.value("path", "");
      i.from = x.value("from", "");
      i.from_index = x.value("from_index", int64_t{-1});
      i.frame = x.value("frame", "");
      i.latent = x.value("latent", false);
      s.inputs.push_back(std::move(i));
    }
  }
  s.shot = r.value("shot", "");
  s.take = r.value("take", 0u);
  s.key = r.value("key", "");
  s.sequence = r.value("sequence", "");
}

} // namespace vidline::actors

namespace vidline::actors {

void put_graph_status(json& out, const msg::job_spec& s) {
  auto or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  out["shot"] = or_null(s.shot);
  out["take"] = s.take;
  out["key"] = or_null(s.key);
  out["sequence"] = or_null(s.sequence);
  json ins = json::array();
  for (auto& i : s.inputs) {
    json x = {{"name", i.name}, {"sha256", or_null(i.sha256)}};
    if (!i.from.empty()) {
      x["from"] = i.from;
      x["from_index"] = i.from_index;
      x["frame"] = i.frame;
    }
    ins.push_back(std::move(x));
  }
  out["inputs"] = std::move(ins);
}

} // namespace vidline::actors

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors {

void put_sequences_status(json& out, const sched::run& r) {
  if (r.sequences.empty())
    return;
  json list = json::array();
  for (auto& [name, parts] : r.sequences) {
    json ps = json::array();
    bool done = true;
    for (uint32_t i : parts) {
      if (i >= r.jobs.size()) {
        done = false;
        continue;
      }
      const auto& j = r.jobs[i];
      done = done && sched::has_output(j.state);
      ps.push_back({{"index", i}, {"name", j.spec.name}, {"state", sched::to_string(j.state)},
                    {"output", j.output}, {"output_sha256", j.output_sha256},
                    {"decoder", j.decoder}});
    }
    list.push_back({{"name", name}, {"done", done}, {"parts", std::move(ps)}});
  }
  out["sequences"] = std::move(list);
}

} // namespace vidline::actors
