// The stepper (stepper.hpp): a client's submit admitted. A run's (`vidline run`, POST
// /v1/runs) and jobs added to an open run (`vidline submit RUN`) are checked in this order:
// their fields against the config (check_submit), the capacity of the mode's pools, a
// retried request id (answered with its first run), the queue's limits (check_queue), the
// inputs they name (held by this host: the shell said which, ev_*_request::input_sizes),
// the collection folder's videos offered; then their shots become jobs (prompt SHA-256s,
// workflows, input sizes) and the run is submitted (ev_submit) or the jobs added
// (ev_add_jobs). A refusal records nothing (no run, job or request id; the step goes on to
// dispatch as after any event); every answer is an effect (fx_submit_answer,
// fx_add_jobs_answer).

#include <map>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/submit_checks.hpp"
#include "common/digest.hpp"
#include "config/config.hpp"
#include "config/shot_graph.hpp"

namespace vidline::actors::coordinator {

namespace {

/// Every input a request names by digest (its reference, each shot's reference and
/// inputs) is one this host holds (in `held`, digest -> bytes): "" or the first that is
/// not, named by its shot and field.
std::string inputs_problem(const msg::submit_run& req, const std::map<std::string, uint64_t>& held) {
  auto need = [&](const std::string& sha, const std::string& who) -> std::string {
    if (sha.empty() || held.count(sha))
      return "";
    return who + " " + sha + " names no input the coordinator holds "
           "(upload the file first: `vidline run` does, or PUT /v1/inputs/" + sha + ")";
  };
  if (auto why = need(req.reference_sha256, "reference_sha256"); !why.empty())
    return why;
  for (std::size_t i = 0; i < req.shots.size(); ++i) {
    const std::string at = "shot " + std::to_string(i + 1) + ": ";
    if (auto why = need(req.shots[i].reference_sha256, at + "reference_sha256"); !why.empty())
      return why;
    for (auto& in : req.shots[i].inputs)
      if (auto why = need(in.sha256, at + "inputs." + in.name + ".sha256"); !why.empty())
        return why;
  }
  return "";
}

/// A job of the uniform form (a prompt and a count).
msg::job_spec uniform_spec(const std::string& run_id, uint32_t index, uint64_t seed,
                           uint32_t width, uint32_t height, uint32_t seconds,
                           const std::string& prompt, const std::string& prompt_sha256,
                           const std::string& reference) {
  msg::job_spec j;
  j.run_id = run_id;
  j.index = index;
  j.seed = seed;
  j.width = width;
  j.height = height;
  j.seconds = seconds;
  j.prompt = prompt;
  j.prompt_sha256 = prompt_sha256;
  j.reference = reference;
  return j;
}

const char* const no_config = "the coordinator has no config to check a submit against";

} // namespace

void stepper::on(const ev_submit_request& e) {
  auto reply = admit(e);
  fx.push_back(fx_submit_answer{std::move(reply)});
}

void stepper::on(const ev_add_jobs_request& e) {
  auto reply = admit(e);
  fx.push_back(fx_add_jobs_answer{std::move(reply)});
}

msg::submit_reply stepper::admit(const ev_submit_request& e) {
  const msg::submit_run& req = e.req;
  if (!s.config)
    return {"", no_config};
  const config::cluster& c = *s.config;
  if (auto why = actors::coordinator::check_submit(c, req); !why.empty())
    return {"", why};
  if (auto why = req.shots.empty()
                   ? coordinator::capacity_refusal(s, req.mode, req.width, req.height, req.seconds)
                   : coordinator::shots_capacity_refusal(s, req.mode, req.shots);
      !why.empty())
    return {"", why};
  if (!req.request_id.empty()) {
    // A retried submit is answered before the queue's limits are asked (ev_submit would
    // answer it too: it is idempotent by request id).
    if (auto* r = run_of_request(s, req.request_id))
      return {r->id, ""};
    // A run forgotten since (finished): the journal still knows the request.
    if (e.journal_run)
      return {*e.journal_run, ""};
  }
  if (auto why = actors::coordinator::check_queue(s, c.knobs, req); !why.empty())
    return {"", why};
  if (auto why = inputs_problem(req, e.input_sizes); !why.empty())
    return {"", why};
  run r;
  r.id = e.run_id;
  r.mode = req.mode;
  r.request_id = req.request_id;
  r.priority = req.priority;
  r.rerender = req.rerender;
  if (auto why = coordinator::collected_outputs(req.collected, r.collected); !why.empty())
    return {"", why};
  const auto cat = coordinator::run_catalog(c, req.mode);
  if (!req.shots.empty()) {
    std::map<std::string, std::string> sha_of;  // prompt -> its SHA-256 (the cache key)
    for (auto& spec : coordinator::shot_jobs(req.shots, r.id, req.reference, req.reference_sha256,
                                             &cat)) {
      job j;
      j.spec = std::move(spec);
      auto it = sha_of.find(j.spec.prompt);
      if (it == sha_of.end())
        it = sha_of.emplace(j.spec.prompt, to_hex(sha256_of(j.spec.prompt))).first;
      j.spec.prompt_sha256 = it->second;
      r.jobs.push_back(std::move(j));
    }
    std::vector<msg::job_spec> specs;
    for (auto& j : r.jobs)
      specs.push_back(j.spec);
    r.sequences = config::graph::sequence_parts(req.shots, specs);
  }
  auto prompt_sha = req.shots.empty() ? to_hex(sha256_of(req.prompt)) : std::string();
  for (uint32_t i = 0; req.shots.empty() && i < req.count; ++i) {
    job j;
    j.spec = uniform_spec(r.id, i, req.seed + i, req.width, req.height, req.seconds, req.prompt,
                          prompt_sha, req.reference);
    j.spec.reference_sha256 = req.reference_sha256;
    coordinator::resolve_uniform_job(cat, j.spec);
    r.jobs.push_back(std::move(j));
  }
  for (auto& j : r.jobs)
    coordinator::set_input_sizes(j.spec, e.input_sizes);
  const auto id = r.id;
  const auto before = fx.size();
  on(ev_submit{std::move(r)});
  if (auto* a = accepted_since(before))
    return {a->run_id, ""};
  return {id, ""};
}

msg::submit_jobs_reply stepper::admit(const ev_add_jobs_request& e) {
  const msg::submit_jobs& req = e.req;
  msg::submit_jobs_reply out;
  out.run_id = req.run_id;
  auto* r = s.find_run(req.run_id);
  if (r == nullptr) {
    if (e.recalled) {
      out.error = "run " + e.recalled->id + " is " + actors::coordinator::run_state(*e.recalled)
                  + ": jobs go only to an open run";
      return out;
    }
    out.error = e.recall_error.empty() ? "no run " + req.run_id : e.recall_error;
    out.code = msg::reply_code::no_such_run;
    return out;
  }
  if (!req.request_id.empty())
    if (auto it = r->added_requests.find(req.request_id); it != r->added_requests.end()) {
      out.first_index = it->second;
      out.count = req.count;
      for (auto& shot : req.shots)
        out.count += shot.takes;
      return out;  // a retried submit: added before
    }
  if (r->done || r->cancelled) {
    out.error = "run " + r->id + " is " + actors::coordinator::run_state(*r) + ": jobs go only to an open run";
    return out;
  }
  if (!s.config) {
    out.error = no_config;
    return out;
  }
  const config::cluster& c = *s.config;
  msg::submit_run as_run;
  as_run.mode = r->mode;
  as_run.prompt = req.prompt;
  as_run.reference = req.reference;
  as_run.width = req.width;
  as_run.height = req.height;
  as_run.seconds = req.seconds;
  as_run.count = req.count;
  as_run.seed = req.seed;
  as_run.request_id = req.request_id;
  as_run.reference_sha256 = req.reference_sha256;
  as_run.shots = req.shots;  // the shot form: each shot its own prompt, size, seed and takes
  uint64_t adding = req.count;
  for (auto& sh : req.shots)
    adding += sh.takes;
  std::string why = actors::coordinator::check_submit(c, as_run);
  if (why.empty())
    why = inputs_problem(as_run, e.input_sizes);
  if (why.empty() && uint64_t{r->jobs.size()} + adding > c.knobs.max_jobs_per_run)
    why = "the run has " + std::to_string(r->jobs.size()) + " jobs; " + std::to_string(adding)
          + " more is over max_jobs_per_run (" + std::to_string(c.knobs.max_jobs_per_run) + ")";
  if (why.empty())
    why = req.shots.empty()
            ? coordinator::capacity_refusal(s, r->mode, req.width, req.height, req.seconds)
            : coordinator::shots_capacity_refusal(s, r->mode, req.shots);
  if (why.empty())
    why = coordinator::added_names_problem(*r, req.shots);
  as_run.priority = r->priority;
  if (why.empty())
    why = actors::coordinator::check_queue(s, c.knobs, as_run, false);
  if (!why.empty()) {
    out.error = why;
    return out;
  }
  ev_add_jobs ev;
  ev.run_id = r->id;
  const auto cat = coordinator::run_catalog(c, r->mode);
  auto prompt_sha = to_hex(sha256_of(req.prompt));
  for (uint32_t i = 0; i < req.count; ++i) {
    job j;
    j.spec = uniform_spec(r->id, 0, req.seed + i, req.width, req.height, req.seconds,
                          req.prompt, prompt_sha, req.reference);
    j.spec.reference_sha256 = req.reference_sha256;
    coordinator::resolve_uniform_job(cat, j.spec);
    ev.jobs.push_back(std::move(j));
  }
  for (auto& spec : coordinator::shot_jobs(req.shots, r->id, "", "", &cat)) {
    job j;
    j.spec = std::move(spec);
    j.spec.index = 0;  // the machine numbers added jobs after the run's own
    j.spec.prompt_sha256 = to_hex(sha256_of(j.spec.prompt));
    ev.jobs.push_back(std::move(j));
  }
  for (auto& j : ev.jobs)
    coordinator::set_input_sizes(j.spec, e.input_sizes);
  out.count = static_cast<uint32_t>(ev.jobs.size());
  ev.request_id = req.request_id;  // recorded with the run (journaled)
  const auto before = fx.size();
  on(ev);
  if (auto* a = accepted_since(before)) {
    out.first_index = a->first_index;
    out.count = a->count;
  } else {
    out.error = "run " + req.run_id + " took no jobs";
  }
  return out;
}

const fx_accepted* stepper::accepted_since(std::size_t from) const {
  for (std::size_t i = from; i < fx.size(); ++i)
    if (auto* a = std::get_if<fx_accepted>(&fx[i]))
      return a;
  return nullptr;
}

} // namespace vidline::actors::coordinator
