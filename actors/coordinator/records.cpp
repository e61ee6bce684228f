// Runs and jobs as the journal records them (records.hpp): every field, and read back.

#include "actors/coordinator/records.hpp"

#include "config/profile/kinds.hpp"

#include <iterator>
#include <set>
#include <stdexcept>

namespace vidline::actors::coordinator {

using nlohmann::json;

namespace {

json spec_record(const msg::job_spec& s) {
  json j = {{"run_id", s.run_id}, {"index", s.index}, {"seed", s.seed}, {"width", s.width},
          {"height", s.height}, {"seconds", s.seconds}, {"prompt", s.prompt},
          {"prompt_sha256", s.prompt_sha256}, {"reference", s.reference}, {"name", s.name},
          {"reference_sha256", s.reference_sha256}};
  if (s.reference_bytes != 0)  // an input the sampling host pulls (nodes/data/inputs.hpp)
    j["reference_bytes"] = s.reference_bytes;
  // The shot model's fields, each only when set (a journal older than them reads as unset).
  for (auto [key, v] : {std::pair<const char*, const std::string*>{"negative_prompt", &s.negative_prompt},
                        {"workflow", &s.workflow}, {"model", &s.model}, {"shot", &s.shot},
                        {"key", &s.key}, {"sequence", &s.sequence}})
    if (!v->empty())
      j[key] = *v;
  if (s.take != 0)
    j["take"] = s.take;
  if (!s.params.empty()) {
    json ps = json::array();
    for (auto& p : s.params)
      ps.push_back({{"name", p.name}, {"type", p.type}, {"text", p.text}});
    j["params"] = ps;
  }
  if (!s.inputs.empty()) {
    json is = json::array();
    for (auto& i : s.inputs)
      is.push_back({{"name", i.name}, {"sha256", i.sha256}, {"bytes", i.bytes}, {"path", i.path},
                    {"from", i.from}, {"from_index", i.from_index}, {"frame", i.frame},
                    {"latent", i.latent}});
    j["inputs"] = is;
  }
  return j;
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
  s.name = r.value("name", "");  // a journal older than shot lists: unnamed
  s.reference_sha256 = r.value("reference_sha256", "");
  s.reference_bytes = r.value("reference_bytes", uint64_t{0});
  s.negative_prompt = r.value("negative_prompt", "");
  s.workflow = r.value("workflow", "");
  s.model = r.value("model", "");
  s.shot = r.value("shot", "");
  s.key = r.value("key", "");
  s.sequence = r.value("sequence", "");
  s.take = r.value("take", uint32_t{0});
  if (auto it = r.find("params"); it != r.end() && it->is_array())
    for (auto& p : *it)
      s.params.push_back({p.at("name").get<std::string>(), p.at("type").get<std::string>(),
                          p.at("text").get<std::string>()});
  if (auto it = r.find("inputs"); it != r.end() && it->is_array())
    for (auto& i : *it) {
      msg::job_input in;
      in.name = i.at("name").get<std::string>();
      in.sha256 = i.value("sha256", "");
      in.bytes = i.value("bytes", uint64_t{0});
      in.path = i.value("path", "");
      in.from = i.value("from", "");
      in.from_index = i.value("from_index", int64_t{-1});
      in.frame = i.value("frame", "");
      in.latent = i.value("latent", false);
      s.inputs.push_back(std::move(in));
    }
  return s;
}

json clock_record(const stage_clock& c) {
  return json::array({c.pool_start, c.sampler_start, c.sampler_end, c.decode_ordered,
                      c.fetch_start, c.fetched, c.decode_start, c.decode_end});
}

stage_clock clock_from(const json& r) {
  stage_clock c;
  if (!r.is_array())
    return c;
  double* f[] = {&c.pool_start, &c.sampler_start, &c.sampler_end, &c.decode_ordered,
                 &c.fetch_start, &c.fetched, &c.decode_start, &c.decode_end};
  for (std::size_t i = 0; i < std::size(f) && i < r.size(); ++i)
    *f[i] = r[i].get<double>();
  return c;
}

/// A job's kept checkpoints (job::checkpoints), oldest first.
json checkpoints_record(const std::vector<kept_checkpoint>& cs) {
  json out = json::array();
  for (auto& k : cs)
    out.push_back({{"step", k.ref.step}, {"steps", k.ref.steps}, {"sha256", k.ref.sha256},
                   {"bytes", k.ref.bytes}, {"host", k.ref.host},
                   {"made_unix_s", k.ref.made_unix_s}, {"attempt", k.ref.attempt},
                   {"kind", k.kind}});
  return out;
}

/// The same read back; a journal written before checkpoints has none.
std::vector<kept_checkpoint> checkpoints_from(const json& r) {
  std::vector<kept_checkpoint> out;
  if (!r.is_array())
    return out;
  for (auto& c : r) {
    kept_checkpoint k;
    k.ref.step = c.at("step").get<uint32_t>();
    k.ref.steps = c.value("steps", 0u);
    k.ref.sha256 = c.at("sha256").get<std::string>();
    k.ref.bytes = c.value("bytes", uint64_t{0});
    k.ref.host = c.at("host").get<std::string>();
    k.ref.made_unix_s = c.value("made_unix_s", 0.0);
    k.ref.attempt = c.value("attempt", uint64_t{0});
    k.kind = config::profile::current_kind(c.value("kind", ""));
    out.push_back(std::move(k));
  }
  return out;
}

json failures_record(const std::vector<failed_attempt>& fs) {
  json out = json::array();
  for (auto& f : fs)
    out.push_back({{"stage", f.stage}, {"lane", f.lane}, {"start", f.start}, {"end", f.end},
                   {"reason", f.reason}});
  return out;
}

std::vector<failed_attempt> failures_from(const json& r) {
  std::vector<failed_attempt> out;
  if (!r.is_array())
    return out;
  for (auto& f : r)
    out.push_back({f.at("stage").get<std::string>(), f.at("lane").get<std::string>(),
                   f.at("start").get<double>(), f.at("end").get<double>(),
                   f.at("reason").get<std::string>()});
  return out;
}

} // namespace

json job_record(const job& j) {
  json r = {{"spec", spec_record(j.spec)},
          {"state", coordinator::to_string(j.state)},
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
          {"reused_from", j.reused_from},
          {"error", j.error},
          {"capacity_failed", j.capacity_failed},
          {"cold", j.cold},
          {"sampled_model", j.sampled_model},
          {"model_identity", j.model_identity},
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
          {"retracted", j.retracted},
          {"gpu_s_redone", j.gpu_s_redone},
          {"counted_attempts", j.counted_attempts},
          {"attempt_at", j.attempt_at},
          {"ran", clock_record(j.ran)},
          {"failures", failures_record(j.failures)},
          {"failures_total", j.failures_total},
          {"verdict", j.verdict},
          {"reviewed_at", j.reviewed_at},
          {"retake", j.retake},
          {"retake_of", j.retake_of},
          {"sampling_energy_j", j.sampling_energy_j},
          {"decode_energy_j", j.decode_energy_j}};
  // The verdict's way to the run index (verdicts.hpp), only once there is one.
  if (j.verdict_revision != 0) {
    r["verdict_revision"] = j.verdict_revision;
    r["verdict_indexed"] = j.verdict_indexed;
  }
  // Sampling checkpoints (checkpoints.hpp), only once there are any.
  if (!j.checkpoints.empty())
    r["checkpoints"] = checkpoints_record(j.checkpoints);
  if (j.checkpoint_floor != 0)
    r["checkpoint_floor"] = j.checkpoint_floor;
  if (j.resumed_step != 0)
    r["resumed_step"] = j.resumed_step;
  if (j.preemptions != 0)
    r["preemptions"] = j.preemptions;
  return r;
}

job job_from_record(const json& r) {
  job j;
  j.spec = spec_from(r.at("spec"));
  auto st = coordinator::job_state_from(r.at("state").get<std::string>());
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
  j.reused_from = r.value("reused_from", "");
  j.error = r.at("error").get<std::string>();
  // Kinds by their current names: a journal older than a kind's rename has its old one.
  for (const auto& kind : r.value("capacity_failed", std::set<std::string>{}))
    j.capacity_failed.insert(config::profile::current_kind(kind));
  j.cold = r.value("cold", false);
  j.sampled_model = r.value("sampled_model", "");  // a journal older than it: unknown
  j.model_identity = r.value("model_identity", "");
  j.sample_start = r.at("sample_start").get<double>();
  j.sample_end = r.at("sample_end").get<double>();
  j.decode_start = r.at("decode_start").get<double>();
  j.decode_end = r.at("decode_end").get<double>();
  j.conditioning_s = r.value("conditioning_s", 0.0);
  j.sampling_s = r.value("sampling_s", 0.0);
  j.handoff_s = r.value("handoff_s", 0.0);
  j.decode_s = r.value("decode_s", 0.0);
  j.pool_kind = config::profile::current_kind(r.value("pool_kind", ""));
  j.encoder_kind = config::profile::current_kind(r.value("encoder_kind", ""));
  j.decoder_kind = config::profile::current_kind(r.value("decoder_kind", ""));
  j.handoff_same_host = r.value("handoff_same_host", false);
  j.latent_attempt = r.value("latent_attempt", uint64_t{0});
  j.duplicates = r.value("duplicates", 0u);
  j.fenced = r.value("fenced", 0u);
  j.retracted = r.value("retracted", 0u);
  j.gpu_s_redone = r.value("gpu_s_redone", 0.0);
  j.counted_attempts = r.value("counted_attempts", std::set<uint64_t>{});
  j.attempt_at = r.value("attempt_at", -1.0);
  j.ran = clock_from(r.value("ran", json()));
  j.failures = failures_from(r.value("failures", json()));
  j.failures_total = r.value("failures_total", static_cast<uint32_t>(j.failures.size()));
  j.verdict = r.value("verdict", "");  // a journal older than the review: none
  j.reviewed_at = r.value("reviewed_at", -1.0);
  j.retake = r.value("retake", int64_t{-1});
  j.retake_of = r.value("retake_of", int64_t{-1});
  // A verdict journaled before verdicts were carried to the run index: its first revision,
  // not confirmed, so it is sent to its video's host now.
  j.verdict_revision = r.value("verdict_revision", j.verdict.empty() ? 0u : 1u);
  j.verdict_indexed = r.value("verdict_indexed", 0u);
  j.sampling_energy_j = r.value("sampling_energy_j", -1.0);
  j.decode_energy_j = r.value("decode_energy_j", -1.0);
  // A journal written before checkpoints: none kept, the job resumes from step 0.
  j.checkpoints = checkpoints_from(r.value("checkpoints", json()));
  j.checkpoint_floor = r.value("checkpoint_floor", uint64_t{0});
  j.resumed_step = r.value("resumed_step", 0u);
  j.preemptions = r.value("preemptions", 0u);
  return j;
}

namespace {

/// A run's collection folder's outputs by key, as the journal keeps them.
json collected_record(const std::map<std::string, held_output>& c) {
  json out = json::object();
  for (auto& [key, h] : c)
    out[key] = {{"file", h.output}, {"sha256", h.sha256}, {"decoder", h.decoder},
                {"run_id", h.run_id}, {"index", h.index}};
  return out;
}

std::map<std::string, held_output> collected_from(const json& j) {
  std::map<std::string, held_output> out;
  if (!j.is_object())
    return out;
  for (auto& [key, h] : j.items())
    out[key] = held_output{h.value("file", ""), h.value("sha256", ""),
                                  h.value("decoder", ""), h.value("run_id", ""),
                                  h.value("index", 0u), true};
  return out;
}

} // namespace

json run_record(const run& r) {
  return {{"id", r.id}, {"mode", r.mode}, {"request_id", r.request_id},
          {"submitted_at", r.submitted_at}, {"finished_at", r.finished_at}, {"done", r.done},
          {"priority", r.priority}, {"cancelled", r.cancelled},
          {"added_requests", r.added_requests}, {"rerender", r.rerender},
          {"sequences", r.sequences}, {"collected", collected_record(r.collected)}};
}

run run_from_record(const json& j) {
  run r;
  r.id = j.at("id").get<std::string>();
  r.mode = j.at("mode").get<std::string>();
  r.request_id = j.value("request_id", "");
  r.submitted_at = j.at("submitted_at").get<double>();
  r.finished_at = j.at("finished_at").get<double>();
  r.done = j.at("done").get<bool>();
  r.priority = j.value("priority", 0);
  r.cancelled = j.value("cancelled", false);
  r.added_requests = j.value("added_requests", std::map<std::string, uint32_t>{});
  r.rerender = j.value("rerender", false);
  r.sequences = j.value("sequences", std::map<std::string, std::vector<uint32_t>>{});
  r.collected = collected_from(j.value("collected", json::object()));
  return r;
}

} // namespace vidline::actors::coordinator
