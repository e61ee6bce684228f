// The coordinator shell's submits: a run's (`vidline run`), and jobs added to an open run
// (`vidline submit RUN`), each checked before the machine sees it.

#include "actors/coordinator/coordinator_actor_shell.hpp"

#include <filesystem>
#include <map>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"

namespace vidline::actors::coordinator_shell {

namespace {

/// The size of the coordinator host's copy of input `sha` (<data_dir>/inputs/<sha>, put
/// there by an upload: nodes/inputs.hpp), none when it has none.
std::optional<uint64_t> stored_input_size(const shell& sh, const std::string& sha) {
  if (!is_sha256_hex(sha))
    return std::nullopt;
  std::error_code ec;
  const std::string path = data_paths::by_digest(input_dir(sh.ctx), sha);
  if (!std::filesystem::is_regular_file(path, ec))
    return std::nullopt;
  const auto n = std::filesystem::file_size(path, ec);
  if (ec || n == 0)
    return std::nullopt;
  return static_cast<uint64_t>(n);
}

/// Every input a run names by digest (its reference, each shot's reference and inputs) is
/// one this host holds: "" and `sizes` filled (digest -> bytes), or the first that is not,
/// named by its shot and field.
std::string check_inputs(const shell& sh, const msg::submit_run& req,
                         std::map<std::string, uint64_t>& sizes) {
  auto need = [&](const std::string& sha, const std::string& who) -> std::string {
    if (sha.empty() || sizes.count(sha))
      return "";
    auto n = stored_input_size(sh, sha);
    if (!n)
      return who + " " + sha + " names no input the coordinator holds "
             "(upload the file first: `vidline run` does, or PUT /v1/inputs/" + sha + ")";
    sizes[sha] = *n;
    return "";
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

} // namespace

msg::submit_reply submit(shell& sh, const msg::submit_run& req) {
  if (auto why = check_submit(*sh.ctx.cluster, req); !why.empty())
    return {"", why};
  if (auto why = req.shots.empty()
                   ? dispatching::capacity_refusal(sh.st, req.mode, req.width, req.height, req.seconds)
                   : dispatching::shots_capacity_refusal(sh.st, req.mode, req.shots);
      !why.empty())
    return {"", why};
  if (!req.request_id.empty()) {
    // A retried submit is answered before the queue's limits are asked (the machine would
    // answer it too: ev_submit is idempotent by request id).
    if (auto* r = sched::run_of_request(sh.st, req.request_id))
      return {r->id, ""};
    // A run forgotten since (finished): the journal still knows the request.
    if (auto id = sh.jnl->find_request(req.request_id))
      return {*id, ""};
  }
  if (auto why = check_queue(sh.st, sh.ctx.cluster->knobs, req); !why.empty())
    return {"", why};
  std::map<std::string, uint64_t> input_sizes;
  if (auto why = check_inputs(sh, req, input_sizes); !why.empty())
    return {"", why};
  sched::run r;
  r.id = new_run_id(sh.ctx);
  r.mode = req.mode;
  r.request_id = req.request_id;
  r.priority = req.priority;
  r.rerender = req.rerender;
  if (auto why = dispatching::collected_outputs(req.collected, r.collected); !why.empty())
    return {"", why};
  const auto cat = dispatching::run_catalog(*sh.ctx.cluster, req.mode);
  if (!req.shots.empty()) {
    std::map<std::string, std::string> sha_of;  // prompt -> its SHA-256 (the cache key)
    for (auto& spec : dispatching::shot_jobs(req.shots, r.id, req.reference, req.reference_sha256,
                                             &cat)) {
      sched::job j;
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
    sched::job j;
    j.spec = msg::job_spec{r.id, i, req.seed + i, req.width, req.height, req.seconds,
                           req.prompt, prompt_sha, req.reference};
    j.spec.reference_sha256 = req.reference_sha256;
    dispatching::resolve_uniform_job(cat, j.spec);
    r.jobs.push_back(std::move(j));
  }
  for (auto& j : r.jobs)
    dispatching::set_input_sizes(j.spec, input_sizes);
  auto id = r.id;
  auto a = handle(sh, sched::ev_submit{std::move(r)});
  return {a ? a->run_id : id, ""};
}

/// `vidline submit RUN ...`: jobs added to an open run, checked as a run's submit is.
msg::submit_jobs_reply add_jobs(shell& sh, const msg::submit_jobs& req) {
  msg::submit_jobs_reply out;
  out.run_id = req.run_id;
  auto* r = sh.st.find_run(req.run_id);
  if (r == nullptr) {
    std::string err;
    if (auto old = from_journal(sh, req.run_id, err)) {
      out.error = "run " + old->id + " is " + run_state(*old) + ": jobs go only to an open run";
      return out;
    }
    out.error = err.empty() ? "no run " + req.run_id : err;
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
    out.error = "run " + r->id + " is " + run_state(*r) + ": jobs go only to an open run";
    return out;
  }
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
  for (auto& s : req.shots)
    adding += s.takes;
  std::string why = check_submit(*sh.ctx.cluster, as_run);
  std::map<std::string, uint64_t> input_sizes;
  if (why.empty())
    why = check_inputs(sh, as_run, input_sizes);
  if (why.empty() && uint64_t{r->jobs.size()} + adding > sh.ctx.cluster->knobs.max_jobs_per_run)
    why = "the run has " + std::to_string(r->jobs.size()) + " jobs; " + std::to_string(adding)
          + " more is over max_jobs_per_run ("
          + std::to_string(sh.ctx.cluster->knobs.max_jobs_per_run) + ")";
  if (why.empty())
    why = req.shots.empty()
            ? dispatching::capacity_refusal(sh.st, r->mode, req.width, req.height, req.seconds)
            : dispatching::shots_capacity_refusal(sh.st, r->mode, req.shots);
  if (why.empty())
    why = dispatching::added_names_problem(*r, req.shots);
  as_run.priority = r->priority;
  if (why.empty())
    why = check_queue(sh.st, sh.ctx.cluster->knobs, as_run, false);
  if (!why.empty()) {
    out.error = why;
    return out;
  }
  sched::ev_add_jobs ev;
  ev.run_id = r->id;
  const auto cat = dispatching::run_catalog(*sh.ctx.cluster, r->mode);
  auto prompt_sha = to_hex(sha256_of(req.prompt));
  for (uint32_t i = 0; i < req.count; ++i) {
    sched::job j;
    j.spec = msg::job_spec{r->id, 0, req.seed + i, req.width, req.height, req.seconds,
                           req.prompt, prompt_sha, req.reference};
    j.spec.reference_sha256 = req.reference_sha256;
    dispatching::resolve_uniform_job(cat, j.spec);
    ev.jobs.push_back(std::move(j));
  }
  for (auto& spec : dispatching::shot_jobs(req.shots, r->id, "", "", &cat)) {
    sched::job j;
    j.spec = std::move(spec);
    j.spec.index = 0;  // the machine numbers added jobs after the run's own
    j.spec.prompt_sha256 = to_hex(sha256_of(j.spec.prompt));
    ev.jobs.push_back(std::move(j));
  }
  for (auto& j : ev.jobs)
    dispatching::set_input_sizes(j.spec, input_sizes);
  out.count = static_cast<uint32_t>(ev.jobs.size());
  ev.request_id = req.request_id;  // the machine records it with the run (journaled)
  if (auto a = handle(sh, ev)) {
    out.first_index = a->first_index;
    out.count = a->count;
  } else {
    out.error = "run " + req.run_id + " took no jobs";
  }
  return out;
}

} // namespace vidline::actors::coordinator_shell
