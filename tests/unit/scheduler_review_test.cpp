// The review in the scheduler: a verdict on a take is recorded (and journaled with its
// job); a reject asking for another take adds a take of the shot with the next seed through
// the path of jobs added, opening a finished run (one the state forgot comes back from the
// journal); asked again it adds none; what cannot be reviewed is refused naming why.
#include <catch2/catch.hpp>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/review.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "tests/support/sched_fixtures.hpp"

using namespace vidline;
using sched_fixtures::line_of;
using sched_fixtures::run_of;

namespace {

/// Run "r" as the journal holds it once finished: shot "harbour" in two takes (seeds 100,
/// 101), shot "night" in one (seed 7); every video made.
actors::coordinator::run finished_shots() {
  actors::coordinator::run r;
  r.id = "r";
  r.mode = "m";
  r.done = true;
  r.finished_at = 50;
  auto add = [&r](const std::string& shot, const std::string& name, uint32_t take, uint64_t seed) {
    actors::coordinator::job j;
    j.spec = msg::job_spec{"r", static_cast<uint32_t>(r.jobs.size()), seed, 416, 736, 5,
                           "a harbour at dawn", "sha-h", ""};
    j.spec.shot = shot;
    j.spec.name = name;
    j.spec.take = take;
    j.state = actors::coordinator::job_state::succeeded;
    j.output = "/data/outputs/r/" + name + ".mp4";
    j.output_sha256 = std::string(64, 'a');
    r.jobs.push_back(j);
  };
  add("harbour", "harbour-take-1", 0, 100);
  add("harbour", "harbour-take-2", 1, 101);
  add("night", "night", 0, 7);
  return r;
}

const actors::coordinator::fx_review_answer& answer(const std::vector<actors::coordinator::effect>& fx) {
  for (auto& e : fx)
    if (auto* a = std::get_if<actors::coordinator::fx_review_answer>(&e))
      return *a;
  FAIL("no fx_review_answer");
  throw;
}

bool persisted(const std::vector<actors::coordinator::effect>& fx, uint32_t index) {
  for (auto& e : fx)
    if (auto* p = std::get_if<actors::coordinator::fx_persist_job>(&e); p && p->index == index)
      return true;
  return false;
}

actors::coordinator::ev_review verdict(uint32_t index, const char* v, bool another = false) {
  return actors::coordinator::ev_review{"r", index, v, another, std::nullopt};
}

} // namespace

TEST_CASE("review: a reject with another take adds the shot's next take to the finished run") {
  auto s = line_of(1);
  auto ev = verdict(0, "reject", true);
  ev.recalled = finished_shots();  // forgotten by the state: it comes back from the journal
  auto fx = actors::coordinator::step(s, ev, 60);
  const auto a = answer(fx);
  REQUIRE(a.error.empty());
  CHECK(a.verdict == "rejected");
  CHECK(a.take == 3);
  CHECK(a.take_seed == 102);  // after the shot's highest seed, 101
  auto* r = s.find_run("r");
  REQUIRE(r != nullptr);
  CHECK_FALSE(r->done);  // open again for the take
  REQUIRE(r->jobs.size() == 4);
  const auto& t = r->jobs[3];
  CHECK(t.spec.index == 3);
  CHECK(t.spec.shot == "harbour");
  CHECK(t.spec.take == 2);
  CHECK(t.spec.name == "harbour-take-3");
  CHECK(t.spec.prompt == "a harbour at dawn");
  CHECK(t.retake_of == 0);
  CHECK(r->jobs[0].verdict == "rejected");
  CHECK(r->jobs[0].reviewed_at == 60);
  CHECK(r->jobs[0].retake == 3);
  CHECK(persisted(fx, 0));
  CHECK(persisted(fx, 3));
  CHECK(actors::coordinator::check_index(s).empty());
  // The take is ordered as any queued job: the pool gets it.
  bool ordered = false;
  for (auto& e : actors::coordinator::step(s, actors::coordinator::ev_pool_status{sched_fixtures::pool_report("p0", 7, 1)}, 61))
    if (auto* o = std::get_if<actors::coordinator::fx_send_sample>(&e))
      ordered = o->order.job.index == 3 && o->order.job.seed == 102;
  CHECK(ordered);

  // Asked again (a retried click): no second take; the answer names the first.
  fx = actors::coordinator::step(s, verdict(0, "reject", true), 62);
  CHECK(answer(fx).take == 3);
  CHECK(s.find_run("r")->jobs.size() == 4);

  // A verdict on the other shot; a job with no video yet is not reviewed.
  fx = actors::coordinator::step(s, verdict(2, "accept"), 63);
  CHECK(answer(fx).error.empty());
  CHECK(answer(fx).take == -1);
  CHECK(s.find_run("r")->jobs[2].verdict == "accepted");
  fx = actors::coordinator::step(s, verdict(3, "accept"), 64);
  CHECK(answer(fx).code == "not_reviewable");
  CHECK_THAT(answer(fx).error, Catch::Contains("job 3 of run r is sampling"));
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("review: verdicts refused name what is wrong") {
  auto s = line_of(1);
  auto with = [&](actors::coordinator::ev_review e) {
    e.recalled = finished_shots();
    auto a = answer(actors::coordinator::step(s, e, 10));
    CHECK(s.runs.empty());  // refused: the forgotten run stays in the journal
    return a;
  };
  CHECK(with(verdict(0, "maybe")).code == "invalid");
  CHECK_THAT(with(verdict(0, "maybe")).error, Catch::Contains("\"accept\" or \"reject\""));
  CHECK(with(verdict(0, "accept", true)).code == "invalid");
  CHECK(with(verdict(9, "accept")).code == "no_such_run");
  CHECK_THAT(with(verdict(9, "accept")).error, Catch::Contains("has no job 9 (it has 3)"));
  CHECK(answer(actors::coordinator::step(s, actors::coordinator::ev_review{"nope", 0, "accept", false, std::nullopt}, 10)).code
        == "no_such_run");
  // A cancelled run: the journal's copy does not come back.
  auto e = verdict(0, "reject", true);
  e.recalled = finished_shots();
  e.recalled->cancelled = true;
  CHECK(answer(actors::coordinator::step(s, e, 10)).code == "no_such_run");
  CHECK(s.runs.empty());
}

TEST_CASE("review: a batch's take is the next seed of its prompt and size, unnamed") {
  auto s = line_of(1);
  auto r = run_of("r", 3);  // seeds 100..102, prompt "p", unnamed
  for (auto& j : r.jobs) {
    j.state = actors::coordinator::job_state::succeeded;
    j.output = "/o/job.simvideo";
  }
  r.done = true;
  auto e = verdict(1, "reject", true);
  e.recalled = r;
  auto a = answer(actors::coordinator::step(s, e, 5));
  REQUIRE(a.error.empty());
  CHECK(a.take_seed == 103);
  const auto& t = s.find_run("r")->jobs.at(3);
  CHECK(t.spec.name.empty());
  CHECK(t.spec.take == 1);
}

TEST_CASE("review: the verdict and the takes are journaled and in the status") {
  auto s = line_of(1);
  auto ev = verdict(1, "reject", true);
  ev.recalled = finished_shots();
  actors::coordinator::step(s, ev, 60);
  const auto& r = *s.find_run("r");
  // The journal's records read back whole.
  auto j1 = actors::coordinator::job_from_record(actors::coordinator::job_record(r.jobs[1]));
  CHECK(j1.verdict == "rejected");
  CHECK(j1.retake == 3);
  CHECK(j1.reviewed_at == 60);
  CHECK(j1.spec.shot == "harbour");
  CHECK(j1.spec.take == 1);
  auto j3 = actors::coordinator::job_from_record(actors::coordinator::job_record(r.jobs[3]));
  CHECK(j3.retake_of == 1);
  CHECK(j3.verdict.empty());
  // A record older than the review reads as not reviewed.
  auto old = actors::coordinator::job_record(r.jobs[0]);
  for (auto* k : {"verdict", "reviewed_at", "retake", "retake_of"})
    old.erase(k);
  CHECK(actors::coordinator::job_from_record(old).retake == -1);
  // The status: each job's review (null when none) and the take's origin.
  auto st = actors::coordinator::status_json(s, r, actors::coordinator::clock_note{}, 61);
  CHECK(st["jobs"][0]["review"].is_null());
  CHECK(st["jobs"][1]["review"]["verdict"] == "rejected");
  CHECK(st["jobs"][1]["review"]["take_index"] == 3);
  CHECK(st["jobs"][1]["shot"] == "harbour");
  CHECK(st["jobs"][1]["take"] == 1);
  CHECK(st["jobs"][3]["retake_of"] == 1);
  CHECK(st["jobs"][3]["name"] == "harbour-take-3");
  CHECK(st["state"] == "running");
}
