#include "nodes/http_events.hpp"

#include <map>

#include "nodes/verbs/line_text.hpp"

namespace vidline::nodes::events {

using nlohmann::json;

namespace {

const json& member(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object())
    return null_value;
  auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

/// A job's or a run's state that does not change any more (`vidline cancel` makes
/// `cancelled`, of a job or of a whole run).
bool final_state(const json& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

/// A job's record without what the `progress` event carries.
json job_view(const json& job) {
  json v = job;
  if (v.is_object())
    v.erase("progress");
  return v;
}

std::size_t failures_total(const json& job) {
  const auto& t = member(job, "failed_attempts_total");
  if (t.is_number_unsigned())
    return t.get<std::size_t>();
  const auto& f = member(job, "failed_attempts");
  return f.is_array() ? f.size() : 0;
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

json run_summary(const json& st) {
  std::size_t done = 0, total = 0;
  const auto& jobs = member(st, "jobs");
  if (jobs.is_array())
    for (auto& j : jobs) {
      ++total;
      done += final_state(member(j, "state")) ? 1 : 0;
    }
  return {{"run_id", member(st, "run_id")}, {"state", member(st, "state")},
          {"mode", member(st, "mode")},     {"priority", member(st, "priority")},
          {"done", done},
          {"total", total},                 {"summary", member(st, "summary")},
          {"outages", member(st, "outages")}, {"now_s", member(st, "now_s")}};
}

std::vector<event> run_events(const json& before, const json& now) {
  std::vector<event> out;
  if (!now.is_object())
    return out;
  const json& run_id = member(now, "run_id");
  if (before.is_null() || member(before, "run_id") != run_id) {
    out.push_back({"snapshot", now});
    if (final_state(member(now, "state")))
      out.push_back({"end", {{"run_id", run_id}, {"state", member(now, "state")},
                             {"summary", member(now, "summary")}}});
    return out;
  }
  // Jobs by index: a status lists them in order, but nothing here relies on it.
  std::map<int64_t, const json*> old_jobs;
  if (member(before, "jobs").is_array())
    for (auto& j : before["jobs"])
      if (member(j, "index").is_number_integer())
        old_jobs[j["index"].get<int64_t>()] = &j;
  if (member(now, "jobs").is_array())
    for (auto& j : now["jobs"]) {
      if (!member(j, "index").is_number_integer())
        continue;
      const auto index = j["index"].get<int64_t>();
      // Every event of a job names its shot beside the index ("job 4 harbour-dawn ...").
      const std::string label = verbs::job_label(j);
      auto it = old_jobs.find(index);
      const json* old = it == old_jobs.end() ? nullptr : it->second;
      if (old == nullptr || job_view(*old) != job_view(j)) {
        json data = job_view(j);
        data["run_id"] = run_id;
        data["label"] = label;
        out.push_back({"job", std::move(data)});
      }
      const json& p = member(j, "progress");
      if (p.is_object() && (old == nullptr || member(*old, "progress") != p))
        out.push_back({"progress", {{"run_id", run_id}, {"index", index}, {"label", label},
                                    {"step", member(p, "step")}, {"steps", member(p, "steps")}}});
      // New failed attempts: the list holds the newest (at most 8), the total counts all.
      const std::size_t had = old == nullptr ? 0 : failures_total(*old);
      const std::size_t has = failures_total(j);
      const json& list = member(j, "failed_attempts");
      if (has > had && list.is_array()) {
        const std::size_t fresh = std::min(has - had, list.size());
        for (std::size_t k = list.size() - fresh; k < list.size(); ++k) {
          json f = list[k];
          f["run_id"] = run_id;
          f["index"] = index;
          f["label"] = label;
          out.push_back({"failure", std::move(f)});
        }
      }
      if (member(j, "state") == "failed" && (old == nullptr || member(*old, "state") != "failed"))
        out.push_back({"failure", {{"run_id", run_id}, {"index", index}, {"label", label}, {"stage", "job"},
                                   {"lane", nullptr}, {"reason", member(j, "error")}}});
    }
  const json a = run_summary(before), b = run_summary(now);
  auto without_clock = [](json s) {
    s.erase("now_s");
    return s;
  };
  if (without_clock(a) != without_clock(b))
    out.push_back({"run", b});
  if (final_state(member(now, "state")) && !final_state(member(before, "state")))
    out.push_back({"end", {{"run_id", run_id}, {"state", member(now, "state")},
                           {"summary", member(now, "summary")}}});
  return out;
}

std::vector<event> cluster_events(const json& before, const json& now) {
  if (!now.is_object() || before == now)
    return {};
  // The cards' figures (`gpus`) change with every reading: they alone make no event.
  if (before.is_object()) {
    json b = before, n = now;
    b.erase("gpus");
    n.erase("gpus");
    if (b == n)
      return {};
  }
  return {{"cluster", now}};
}

std::string sse_text(const event& e, uint64_t id) {
  return "id: " + std::to_string(id) + "\nevent: " + e.name + "\ndata: " + dump(e.data) + "\n\n";
}

} // namespace vidline::nodes::events
