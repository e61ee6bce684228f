// The coordinator's checks of a submit (submit_checks.hpp): its fields (check_submit) and its
// room beside the runs held (check_queue).

#include "actors/coordinator/submit_checks.hpp"

#include <cstdint>

#include "actors/coordinator/admission.hpp"
#include "actors/inbound.hpp"
#include "common/digest.hpp"
#include "common/text.hpp"

namespace vidline::actors::coordinator {

namespace {
std::string check_uniform(const config::cluster& c, const msg::submit_run& r);
} // namespace

std::string check_submit(const config::cluster& c, const msg::submit_run& r) {
  if (!coordinator::resolve_mode(c, r.mode))
    return "unknown mode '" + r.mode + "' (known: " + coordinator::known_modes(c) + ")";
  if (!r.shots.empty()) {
    if (!r.prompt.empty() || r.width != 0 || r.height != 0 || r.seconds != 0 || r.count != 0
        || r.seed != 0)
      return "a shot list comes without prompt, width, height, seconds, count or seed";
    if (r.shots.size() > c.knobs.max_jobs_per_run)
      return "the shot list has " + std::to_string(r.shots.size())
             + " shots, over max_jobs_per_run (" + std::to_string(c.knobs.max_jobs_per_run) + ")";
    if (auto why = coordinator::shots_problem(r.shots, c.knobs, c.knobs.max_jobs_per_run);
        !why.empty())
      return why;
  } else if (auto why = inbound::check_size(r.width, r.height, r.seconds); !why.empty())
    return why;
  else if (auto why = check_uniform(c, r); !why.empty())
    return why;
  if (r.request_id.size() > 128)
    return "request_id is too long";
  if (!text::is_valid_utf8(r.request_id) || !text::is_single_line(r.request_id))
    return "request_id holds control characters or invalid UTF-8";
  if (auto why = inbound::check_reference(r.reference); !why.empty())
    return why;
  if (!r.reference_sha256.empty() && !is_sha256_hex(r.reference_sha256))
    return "reference_sha256 must be 64 lowercase hex digits";
  if (r.priority < -max_priority || r.priority > max_priority)
    return "priority " + std::to_string(r.priority) + " is out of range (-"
           + std::to_string(max_priority) + " .. " + std::to_string(max_priority) + ")";
  // Last: the workflows the run's pools declare (the same check as the CLI's and the API's).
  const auto cat = coordinator::run_catalog(c, r.mode);
  return r.shots.empty()
           ? coordinator::uniform_workflow_problem(cat, r.reference, r.reference_sha256)
           : coordinator::shots_workflow_problem(cat, r.shots, r.reference, r.reference_sha256);
}

namespace {

/// The uniform form's own checks (count, seed range, prompt).
std::string check_uniform(const config::cluster& c, const msg::submit_run& r) {
  if (r.count == 0)
    return "count must be at least 1";
  if (r.count > c.knobs.max_jobs_per_run)
    return "count " + std::to_string(r.count) + " is over max_jobs_per_run ("
           + std::to_string(c.knobs.max_jobs_per_run) + ")";
  if (r.seed > UINT64_MAX - (r.count - 1))
    return "seed " + std::to_string(r.seed) + " with count " + std::to_string(r.count)
           + ": the last job's seed would pass 2^64-1";
  if (r.prompt.empty())
    return "the prompt is empty";
  if (r.prompt.size() > c.knobs.max_prompt_bytes)
    return "the prompt is " + std::to_string(r.prompt.size()) + " bytes, over max_prompt_bytes ("
           + std::to_string(c.knobs.max_prompt_bytes) + ")";
  // The prompt goes into the journal's JSON and into every job's order: text only.
  if (!text::is_valid_utf8(r.prompt))
    return "the prompt is not valid UTF-8";
  return "";
}

} // namespace

std::string check_queue(const state& s, const config::knobs& k, const msg::submit_run& r,
                        bool new_run) {
  uint64_t unfinished = 0, queued = 0;
  for (const auto& run : s.runs) {
    if (run.done)
      continue;
    ++unfinished;
    // Each job carries its prompt (a shot list's jobs differ in theirs).
    for (const auto& j : run.jobs)
      queued += j.spec.prompt.size();
  }
  if (new_run && unfinished >= k.max_runs)
    return "too many unfinished runs (knob max_runs)";
  uint64_t adding = uint64_t{r.count} * r.prompt.size();
  for (const auto& sh : r.shots)
    adding += uint64_t{sh.takes} * sh.prompt.size();
  if (queued + adding > k.max_queued_prompt_bytes)
    return "the run's prompt text (" + std::to_string(adding) + " bytes over its jobs) does not"
           " fit beside the " +
           std::to_string(queued) + " bytes held for unfinished runs (knob "
           "max_queued_prompt_bytes: " + std::to_string(k.max_queued_prompt_bytes) + ")";
  return "";
}

} // namespace vidline::actors::coordinator
