#include "actors/coordinator/review.hpp"

#include <algorithm>
#include <limits>

namespace vidline::actors::coordinator {

namespace {

/// The jobs of the same shot as `j`: its shot's name when it has one (a shot list), else
/// what made it (prompt, reference, size: a batch's jobs differ only in seed).
bool same_shot(const msg::job_spec& a, const msg::job_spec& j, const std::string& shot) {
  if (!shot.empty())
    return a.shot == shot || (a.shot.empty() && a.name == shot);
  return a.name.empty() && a.prompt_sha256 == j.prompt_sha256 && a.prompt == j.prompt
         && a.reference_sha256 == j.reference_sha256 && a.reference == j.reference
         && a.width == j.width && a.height == j.height && a.seconds == j.seconds;
}

} // namespace

std::string take_stem(const std::string& shot, uint32_t take) {
  return shot + "-take-" + std::to_string(take + 1);
}

review_plan plan_review(const run& r, const ev_review& e) {
  review_plan p;
  auto refuse = [&p](const char* code, std::string why) {
    p.code = code;
    p.error = std::move(why);
    return p;
  };
  if (e.verdict != "accept" && e.verdict != "reject")
    return refuse("invalid", "verdict: must be \"accept\" or \"reject\", got \"" + e.verdict + "\"");
  if (e.another_take && e.verdict != "reject")
    return refuse("invalid", "another_take goes with the verdict \"reject\"");
  if (e.index >= r.jobs.size())
    return refuse("no_such_run", "run " + r.id + " has no job " + std::to_string(e.index)
                                   + " (it has " + std::to_string(r.jobs.size()) + ")");
  const job& j = r.jobs[e.index];
  if (j.state != job_state::succeeded && j.state != job_state::reused)
    return refuse("not_reviewable", "job " + std::to_string(e.index) + " of run " + r.id + " is "
                                      + to_string(j.state) + ": only a finished video is reviewed");
  p.verdict = e.verdict == "accept" ? "accepted" : "rejected";
  if (!e.another_take || j.retake >= 0)
    return p;  // no take asked, or added before (a retried reject adds none twice)
  if (r.cancelled)
    return refuse("not_reviewable", "run " + r.id + " is cancelled: no take is added to it");
  // The shot's next take: the seed after its highest, the take after its last.
  const std::string shot = !j.spec.shot.empty() ? j.spec.shot : j.spec.name;
  uint64_t top_seed = 0;
  uint32_t top_take = 0;
  for (const auto& k : r.jobs)
    if (same_shot(k.spec, j.spec, shot)) {
      top_seed = std::max(top_seed, k.spec.seed);
      top_take = std::max(top_take, k.spec.take);
    }
  if (top_seed == std::numeric_limits<uint64_t>::max())
    return refuse("not_reviewable", "the shot's seeds reach 2^64-1: there is no next seed");
  job t;
  t.spec = j.spec;
  t.spec.seed = top_seed + 1;
  t.spec.take = top_take + 1;
  t.spec.key.clear();  // it names the seed: recomputed for the new take
  t.spec.shot = shot;
  t.spec.name = shot.empty() ? "" : take_stem(shot, t.spec.take);
  // A name another job holds already (a shot named like another's take) goes on counting.
  auto taken = [&r](const std::string& name) {
    return std::any_of(r.jobs.begin(), r.jobs.end(),
                       [&](const job& k) { return k.spec.name == name; });
  };
  while (!t.spec.name.empty() && taken(t.spec.name))
    t.spec.name = take_stem(shot, ++t.spec.take);
  t.retake_of = e.index;
  p.take = std::move(t);
  return p;
}

} // namespace vidline::actors::coordinator
