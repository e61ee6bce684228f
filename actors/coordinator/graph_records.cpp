#include "actors/coordinator/graph_records.hpp"

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

using nlohmann::json;

void put_graph_status(json& out, const msg::job_spec& s) {
  auto or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  out["key"] = or_null(s.key);
  out["sequence"] = or_null(s.sequence);
  json from = json::array();
  for (auto& i : s.inputs)
    if (!i.from.empty())
      from.push_back({{"input", i.name}, {"from", i.from}, {"from_index", i.from_index},
                      {"frame", i.frame}});
  out["takes_from"] = std::move(from);
}

void put_sequences_status(json& out, const run& r) {
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
      done = done && coordinator::has_output(j.state);
      ps.push_back({{"index", i}, {"name", j.spec.name}, {"state", coordinator::to_string(j.state)},
                    {"output", j.output}, {"output_sha256", j.output_sha256},
                    {"decoder", j.decoder}});
    }
    list.push_back({{"name", name}, {"done", done}, {"parts", std::move(ps)}});
  }
  out["sequences"] = std::move(list);
}

} // namespace vidline::actors::coordinator
