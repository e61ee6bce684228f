// The coordinator shell's requests about runs it holds or its journal does: cancel,
// status, runs, resume and review; and drain.

#include "actors/coordinator/coordinator_actor_shell.hpp"

#include <algorithm>
#include <deque>
#include <set>

namespace vidline::actors::coordinator {

namespace {

/// JSON text for a client. Invalid UTF-8 is replaced, never thrown on: a byte that slipped
/// past the inbound checks must not kill the coordinator.
std::string dump_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Room for the envelope and the reply's own fields around a status's JSON in one frame.
constexpr std::size_t status_frame_headroom = 4096;

/// A status reply, or an error when its JSON would not fit a frame: the client's socket
/// would drop the frame and the client could only time out.
msg::status_reply status_or_too_large(shell& sh, const std::string& what, std::string text) {
  const std::size_t limit = sh.ctx.cluster->knobs.max_frame_bytes;
  if (text.size() + status_frame_headroom <= limit)
    return {std::move(text), "", ""};
  return {"",
          "the status of " + what + " is " + std::to_string(text.size())
            + " bytes, over max_frame_bytes " + std::to_string(limit)
            + " (less 4096 for the envelope); raise knobs.max_frame_bytes or split the batch",
          msg::reply_code::too_large};
}

} // namespace

/// `vidline cancel RUN [--job I]`.
msg::cancel_reply cancel(shell& sh, const msg::cancel_run& req) {
  msg::cancel_reply out;
  out.run_id = req.run_id;
  auto* r = sh.st.find_run(req.run_id);
  std::string err;
  if (r == nullptr)
    if (auto old = from_journal(sh, req.run_id, err)) {
      // Forgotten, so finished: nothing is left to cancel.
      if (req.one_job && req.index >= old->jobs.size()) {
        out.error = "run " + old->id + " has no job " + std::to_string(req.index) + " (it has "
                    + std::to_string(old->jobs.size()) + ")";
        out.code = msg::reply_code::no_such_run;
        return out;
      }
      out.state = run_state(*old);
      return out;
    }
  if (r == nullptr) {
    out.error = err.empty() ? "no run " + req.run_id : err;
    out.code = msg::reply_code::no_such_run;
    return out;
  }
  if (req.one_job && req.index >= r->jobs.size()) {
    out.error = "run " + r->id + " has no job " + std::to_string(req.index) + " (it has "
                + std::to_string(r->jobs.size()) + ")";
    out.code = msg::reply_code::no_such_run;
    return out;
  }
  for (auto& j : r->jobs) {
    if ((req.one_job && j.spec.index != req.index) || coordinator::is_final(j.state))
      continue;
    ++out.cancelled;
    if (j.state == job_state::sampling || j.state == job_state::decoding)
      ++out.in_flight;
  }
  ev_cancel ev{r->id, std::nullopt};
  if (req.one_job)
    ev.job = req.index;
  handle(sh, ev);
  r = sh.st.find_run(req.run_id);
  out.state = run_state(*r);
  return out;
}

msg::status_reply status(shell& sh, const std::string& run_id, status_page page) {
  if (run_id == "@cluster") {
    auto c = cluster_json(sh.st);
    c["hosts_up"][sh.ctx.cluster->coordinator] = true;  // the host answering is up
    c["gpus"] = gpus_json(sh.gpus, *sh.ctx.cluster, sh.st, sh.ctx.run_now());
    return status_or_too_large(sh, "the cluster", dump_text(c));
  }
  const run* r = nullptr;
  if (run_id.empty()) {
    if (!sh.st.runs.empty())
      r = &sh.st.runs.back();
  } else {
    r = sh.st.find_run(run_id);
  }
  // A run the state forgot: its records in the journal answer (the newest one recorded,
  // when none is asked for and none is in memory).
  std::optional<run> old;
  std::string err;
  if (r == nullptr) {
    if (run_id.empty()) {
      try {
        auto newest = sh.jnl->load_newest(1, {});
        if (!newest.empty())
          old = std::move(newest.back());
      } catch (const std::exception& e) {
        err = std::string("cannot read the journal: ") + e.what();
      }
    } else {
      old = from_journal(sh, run_id, err);
    }
    if (old)
      r = &*old;
  }
  if (r == nullptr)
    return {"", !err.empty() ? err : run_id.empty() ? "no runs yet" : "no run " + run_id,
            msg::reply_code::no_such_run};
  auto j = status_json(sh.st, *r, sh.clock, sh.ctx.run_now(), page);
  j["from_journal"] = old.has_value();
  return status_or_too_large(sh, "run " + r->id + " (" + std::to_string(r->jobs.size()) + " jobs)",
                             dump_text(j));
}

/// `vidline runs`: the runs in memory and, beside them, those only the journal holds.
msg::runs_reply runs(shell& sh, bool all) {
  std::set<std::string> here;
  for (auto& r : sh.st.runs)
    here.insert(r.id);
  std::deque<run> old;
  try {
    // Without --all the listing shows 20 finished runs: no more can come from the journal.
    old = sh.jnl->load_newest(all ? 0 : 20, here);
  } catch (const std::exception& e) {
    return {"", std::string("cannot read the journal: ") + e.what(), ""};
  }
  auto text = dump_text(runs_json(sh.st, sh.ctx.run_now(), all, old));
  if (text.size() + status_frame_headroom > sh.ctx.cluster->knobs.max_frame_bytes)
    return {"", "the run list is " + std::to_string(text.size())
                  + " bytes, over max_frame_bytes; ask without --all",
            msg::reply_code::too_large};
  return {text, "", ""};
}

/// `vidline resume RUN`: a forgotten run is recalled from the journal (when it has failed
/// jobs and was not cancelled) and resumed.
msg::resume_reply resume(shell& sh, const std::string& run_id) {
  msg::resume_reply reply{run_id, 0, "", "", ""};
  auto failed = [](const run& r) {
    return std::count_if(r.jobs.begin(), r.jobs.end(), [](const job& j) {
      return j.state == job_state::failed;
    });
  };
  ev_resume ev{run_id, std::nullopt};
  long before = 0;
  if (auto* r = sh.st.find_run(run_id)) {
    before = failed(*r);
  } else {
    std::string err;
    ev.recalled = from_journal(sh, run_id, err);
    if (!ev.recalled) {
      reply.error = err.empty() ? "no run " + run_id : err;
      reply.code = msg::reply_code::no_such_run;
      return reply;
    }
    before = failed(*ev.recalled);
    reply.state = run_state(*ev.recalled);
  }
  handle(sh, ev);
  sh.recent.reset();  // perhaps recalled: the state holds it now, and it will change
  if (auto* r = sh.st.find_run(run_id)) {
    reply.reopened = static_cast<uint32_t>(before - failed(*r));
    reply.state = run_state(*r);
  }
  return reply;
}

/// A reviewer's verdict (review_take): recorded by the machine, which adds the take a
/// reject asks for and sends the verdict to the run index on the video's host (verdicts.hpp);
/// a run the state forgot comes back from the journal.
msg::review_reply review(shell& sh, const msg::review_take& req) {
  msg::review_reply out;
  out.run_id = req.run_id;
  out.index = req.index;
  ev_review ev{req.run_id, req.index, req.verdict, req.another_take, std::nullopt};
  const run* r = sh.st.find_run(req.run_id);
  if (r == nullptr) {
    std::string err;
    ev.recalled = from_journal(sh, req.run_id, err);
    if (!ev.recalled) {
      out.error = err.empty() ? "no run " + req.run_id : err;
      out.code = msg::reply_code::no_such_run;
      return out;
    }
    r = &*ev.recalled;
  }
  const auto max_jobs = sh.ctx.cluster->knobs.max_jobs_per_run;
  if (req.another_take && req.index < r->jobs.size() && r->jobs[req.index].retake < 0
      && r->jobs.size() + 1 > max_jobs) {
    out.error = "the run has " + std::to_string(r->jobs.size()) + " jobs: another take is over "
                "max_jobs_per_run (" + std::to_string(max_jobs) + ")";
    out.code = "not_reviewable";
    return out;
  }
  auto fx = coordinator::step(sh.st, ev, sh.ctx.run_now(), sh.ctx.mono_now());
  for (auto& x : fx)
    if (auto* a = std::get_if<fx_review_answer>(&x)) {
      out.error = a->error;
      out.code = a->code;
      out.verdict = a->verdict;
      out.take_index = a->take;
      out.take_seed = a->take_seed;
    }
  execute(sh, fx);
  sh.recent.reset();  // perhaps recalled: the state holds it now
  if (auto* now = sh.st.find_run(req.run_id))
    out.state = run_state(*now);
  return out;
}

msg::drain_reply drain(shell& sh, const msg::drain_request& req) {
  auto fx = coordinator::step(sh.st, ev_drain{req.kind, req.name, req.drain, req.reason},
                        sh.ctx.run_now(), sh.ctx.mono_now());
  msg::drain_reply reply;
  for (auto& x : fx)
    if (auto* a = std::get_if<fx_drain_answer>(&x)) {
      reply.targets = a->targets;
      reply.error = a->error;
      reply.code = a->error.empty() ? "" : "not_found";
    }
  execute(sh, fx);
  return reply;
}

} // namespace vidline::actors::coordinator
