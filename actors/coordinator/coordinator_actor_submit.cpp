// The coordinator shell's submits: a run's (`vidline run`, POST /v1/runs), and jobs added
// to an open run (`vidline submit RUN`). The machine admits them (stepper_admission.cpp);
// the shell gathers what only I/O tells first: the new run's id, the sizes of the inputs the
// request names that this host holds, the journal's answer for a request id or a run the
// state forgot.

#include "actors/coordinator/coordinator_actor_shell.hpp"

#include <filesystem>
#include <map>

#include "actors/coordinator/admission.hpp"
#include "common/digest.hpp"

namespace vidline::actors::coordinator {

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

/// The sizes of the inputs among `digests` that this host holds (digest -> bytes): what the
/// machine checks a submit's inputs against.
std::map<std::string, uint64_t> held_inputs(const shell& sh,
                                            const std::vector<std::string>& digests) {
  std::map<std::string, uint64_t> held;
  for (auto& sha : digests)
    if (!held.count(sha))
      if (auto n = stored_input_size(sh, sha))
        held[sha] = *n;
  return held;
}

} // namespace

msg::submit_reply submit(shell& sh, const msg::submit_run& req) {
  ev_submit_request ev;
  ev.req = req;
  ev.run_id = new_run_id(sh.ctx);
  ev.input_sizes = held_inputs(sh, coordinator::input_digests(req.shots, req.reference_sha256));
  // A run forgotten since (finished): the journal still knows the request.
  if (!req.request_id.empty() && coordinator::run_of_request(sh.st, req.request_id) == nullptr)
    ev.journal_run = sh.jnl->find_request(req.request_id);
  msg::submit_reply reply;
  std::vector<effect> answers;
  handle(sh, ev, &answers);
  for (auto& a : answers)
    if (auto* x = std::get_if<fx_submit_answer>(&a))
      reply = x->reply;
  return reply;
}

/// `vidline submit RUN ...`: jobs added to an open run, checked as a run's submit is.
msg::submit_jobs_reply add_jobs(shell& sh, const msg::submit_jobs& req) {
  ev_add_jobs_request ev;
  ev.req = req;
  ev.input_sizes = held_inputs(sh, coordinator::input_digests(req.shots, req.reference_sha256));
  if (sh.st.find_run(req.run_id) == nullptr)
    ev.recalled = from_journal(sh, req.run_id, ev.recall_error);
  msg::submit_jobs_reply reply;
  std::vector<effect> answers;
  handle(sh, ev, &answers);
  for (auto& a : answers)
    if (auto* x = std::get_if<fx_add_jobs_answer>(&a))
      reply = x->reply;
  return reply;
}

} // namespace vidline::actors::coordinator
