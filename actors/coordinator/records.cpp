#include "actors/coordinator/records.hpp"

#include <stdexcept>

namespace vidline::actors {

using nlohmann::json;

namespace {

json spec_record(const msg::job_spec& s) {
  return {{"run_id", s.run_id}, {"index", s.index}, {"seed", s.seed}, {"width", s.width},
          {"height", s.height}, {"seconds", s.seconds}, {"prompt", s.prompt},
          {"prompt_sha256", s.prompt_sha256}, {"reference", s.reference}};
}

msg::job_spec spec_from(const json& r) {
  msg::job_spec s;
  s.run_id = r.at("run_id").get<std::string>();
  s.index = r.at("index").get<uint32_t>();
  s.seed = r.at("seed").get<uint64_t>();
  s.width = r.at("width").get<uint32_t>();
  s.height = r.at("height").get<uint32_t>();
  s.seconds = r.at("seconds").get<uint32_t>();
  s.prompt = r.at("prompt").get<std::string>();
  s.prompt_sha256 = r.at("prompt_sha256").get<std::string>();
  s.reference = r.value("reference", "");
  return s;
}

json null_if_empty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

} // namespace

json job_record(const sched::job& j) {
  return {{"spec", spec_record(j.spec)},
          {"state", sched::to_string(j.state)},
          {"attempt", j.attempt},
          {"sample_attempts", j.sample_attempts},
          {"decode_attempts", j.decode_attempts},
          {"corrupt_handoffs", j.corrupt_handoffs},
          {"lost_attempts", j.lost_attempts},
          {"handoff_failures", j.handoff_failures},
          {"pool", j.pool},
          {"decoder", j.decoder},
          {"latent_sha256", j.latent_sha256},
          {"latent_bytes", j.latent_bytes},
          {"latent_host", j.latent_host},
          {"output", j.output},
          {"output_sha256", j.output_sha256},
          {"error", j.error},
          {"capacity_failed", j.capacity_failed},
          {"cold", j.cold},
          {"sample_start", j.sample_start},
          {"sample_end", j.sample_end},
          {"decode_start", j.decode_start},
          {"decode_end", j.decode_end},
          {"conditioning_s", j.conditioning_s},
          {"sampling_s", j.sampling_s},
          {"handoff_s", j.handoff_s},
          {"decode_s", j.decode_s},
          {"pool_kind", j.pool_kind},
          {"encoder_kind", j.encoder_kind},
          {"decoder_kind", j.decoder_kind},
          {"handoff_same_host", j.handoff_same_host},
          {"latent_attempt", j.latent_attempt},
          {"duplicates", j.duplicates},
          {"fenced", j.fenced},
          {"counted_attempts", j.counted_attempts}};
}

sched::job job_from_record(const json& r) {
  sched::job j;
  j.spec = spec_from(r.at("spec"));
  auto st = sched::job_state_from(r.at("state").get<std::string>());
  if (!st)
    throw std::runtime_error("unknown job state " + r.at("state").get<std::string>());
  j.state = *st;
  j.attempt = r.at("attempt").get<uint64_t>();
  j.sample_attempts = r.at("sample_attempts").get<uint32_t>();
  j.decode_attempts = r.at("decode_attempts").get<uint32_t>();
  j.corrupt_handoffs = r.value("corrupt_handoffs", 0u);
  j.lost_attempts = r.value("lost_attempts", 0u);
  j.handoff_failures = r.value("handoff_failures", 0u);
  j.pool = r.at("pool").get<std::string>();
  j.decoder = r.at("decoder").get<std::string>();
  j.latent_sha256 = r.at("latent_sha256").get<std::string>();
  j.latent_bytes = r.at("latent_bytes").get<uint64_t>();
  j.latent_host = r.at("latent_host").get<std::string>();
  j.output = r.at("output").get<std::string>();
  j.output_sha256 = r.value("output_sha256", "");
  j.error = r.at("error").get<std::string>();
  j.capacity_failed = r.value("capacity_failed", std::set<std::string>{});
  j.cold = r.value("cold", false);
  j.sample_start = r.at("sample_start").get<double>();
  j.sample_end = r.at("sample_end").get<double>();
  j.decode_start = r.at("decode_start").get<double>();
  j.decode_end = r.at("decode_end").get<double>();
  j.conditioning_s = r.value("conditioning_s", 0.0);
  j.sampling_s = r.value("sampling_s", 0.0);
  j.handoff_s = r.value("handoff_s", 0.0);
  j.decode_s = r.value("decode_s", 0.0);
  j.pool_kind = r.value("pool_kind", "");
  j.encoder_kind = r.value("encoder_kind", "");
  j.decoder_kind = r.value("decoder_kind", "");
  j.handoff_same_host = r.value("handoff_same_host", false);
  j.latent_attempt = r.value("latent_attempt", uint64_t{0});
  j.duplicates = r.value("duplicates", 0u);
  j.fenced = r.value("fenced", 0u);
  j.counted_attempts = r.value("counted_attempts", std::set<uint64_t>{});
  return j;
}

json run_record(const sched::run& r) {
  return {{"id", r.id}, {"mode", r.mode}, {"request_id", r.request_id},
          {"submitted_at", r.submitted_at}, {"finished_at", r.finished_at}, {"done", r.done}};
}

sched::run run_from_record(const json& j) {
  sched::run r;
  r.id = j.at("id").get<std::string>();
  r.mode = j.at("mode").get<std::string>();
  r.request_id = j.value("request_id", "");
  r.submitted_at = j.at("submitted_at").get<double>();
  r.finished_at = j.at("finished_at").get<double>();
  r.done = j.at("done").get<bool>();
  return r;
}

json cluster_json(const sched::state& s) {
  json pools = json::object();
  for (auto& [name, p] : s.pools)
    pools[name] = {{"host", p.host}, {"kind", p.kind}, {"alive", p.alive},
                   {"busy", p.assigned.has_value() || p.reported_busy != 0}};
  json decoders = json::object();
  for (auto& [name, d] : s.decoders)
    decoders[name] = {{"host", d.host}, {"kind", d.kind}, {"alive", d.alive},
                      {"credits", d.credits()}, {"holding", d.holding.size()},
                      {"pending", d.pending}, {"fenced", d.fenced}, {"unacked", d.unacked},
                      {"epoch", d.epoch}, {"seq", d.last_seq}};
  json hosts = json::object();
  for (auto& [name, up] : s.hosts_up)
    hosts[name] = up;
  return {{"pools", pools}, {"decoders", decoders}, {"hosts_up", hosts}};
}

std::string run_state(const sched::run& r) {
  if (!r.done)
    return "running";
  for (auto& j : r.jobs)
    if (j.state == sched::job_state::failed)
      return "failed";
  return "succeeded";
}

json status_json(const sched::run& r, const clock_note& clock) {
  json jobs = json::array();
  for (auto& j : r.jobs) {
    auto rel = [&](double t) { return t < 0 ? json(nullptr) : json(t - r.submitted_at); };
    // The last attempt's stages, back from when its result came in: conditioning then
    // sampling on the pool, handoff then decode on the decoder (the plan's `stages`).
    auto span = [&](double end, double seconds) -> json {
      return {{"start_s", end - seconds - r.submitted_at}, {"end_s", end - r.submitted_at}};
    };
    json stages = {{"conditioning", nullptr}, {"sampling", nullptr}, {"handoff", nullptr},
                   {"decode", nullptr}};
    if (j.sample_end >= 0) {
      if (j.conditioning_s > 0)
        stages["conditioning"] = span(j.sample_end - j.sampling_s, j.conditioning_s);
      stages["sampling"] = span(j.sample_end, j.sampling_s);
    }
    if (j.decode_end >= 0) {
      stages["handoff"] = span(j.decode_end - j.decode_s, j.handoff_s);
      stages["decode"] = span(j.decode_end, j.decode_s);
    }
    jobs.push_back({{"index", j.spec.index},
                    {"seed", j.spec.seed},
                    {"width", j.spec.width},
                    {"height", j.spec.height},
                    {"seconds", j.spec.seconds},
                    {"state", sched::to_string(j.state)},
                    {"pool", null_if_empty(j.pool)},
                    {"decoder", null_if_empty(j.decoder)},
                    {"attempts", j.sample_attempts},
                    {"decode_attempts", j.decode_attempts},
                    {"latent_sha256", null_if_empty(j.latent_sha256)},
                    {"latent_bytes", j.latent_bytes},
                    {"latent_host", null_if_empty(j.latent_host)},
                    {"output", null_if_empty(j.output)},
                    {"output_sha256", null_if_empty(j.output_sha256)},
                    {"error", j.state == sched::job_state::failed ? null_if_empty(j.error)
                                                                   : json(nullptr)},
                    {"cold", j.cold},
                    {"progress", j.state == sched::job_state::sampling &&
                                     j.progress_attempt == j.attempt && j.progress_steps > 0
                                   ? json{{"step", j.progress_step}, {"steps", j.progress_steps}}
                                   : json(nullptr)},
                    {"done_twice", j.duplicates},
                    {"fenced", j.fenced},
                    {"times", {{"sample_start_s", rel(j.sample_start)},
                               {"sample_end_s", rel(j.sample_end)},
                               {"decode_start_s", rel(j.decode_start)},
                               {"decode_end_s", rel(j.decode_end)},
                               {"conditioning_s", j.conditioning_s},
                               {"sampling_s", j.sampling_s},
                               {"handoff_s", j.handoff_s},
                               {"decode_s", j.decode_s}}},
                    {"stages", std::move(stages)}});
  }
  auto sum = sched::summarize(r);
  return {{"run_id", r.id},
          {"state", run_state(r)},
          {"mode", r.mode},
          {"clock", {{"simulated", clock.simulated},
                     {"time_scale", clock.time_scale},
                     {"note", clock.simulated
                                ? "times are simulated seconds of the sim backend's scaled clock"
                                : "times are real seconds"}}},
          {"jobs", jobs},
          {"summary", {{"succeeded", sum.succeeded},
                       {"failed", sum.failed},
                       {"done_twice", sum.done_twice},
                       {"fenced", sum.fenced},
                       {"first_finish_s", sum.first_finish_s},
                       {"makespan_s", sum.makespan_s},
                       {"clips_per_hour", sum.clips_per_hour}}}};
}

} // namespace vidline::actors
