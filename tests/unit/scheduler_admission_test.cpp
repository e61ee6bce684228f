// Admission inside the machine: a client's submit (ev_submit_request) and jobs added to an
// open run (ev_add_jobs_request) are checked and expanded by the step itself and answered by
// an effect; a refusal records nothing; a retried request id names the first run.
#include <catch2/catch.hpp>

#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "common/digest.hpp"
#include "tests/support/sched_fixtures.hpp"
#include "config/config.hpp"

using namespace vidline;

using sched_fixtures::all_of;

namespace {

config::cluster small_config() {
  return config::load(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/two_hosts_small.json");
}

/// The state the coordinator starts with for `c`.
actors::coordinator::state state_for(const config::cluster& c) {
  auto s = actors::coordinator::initial_state(c, 1.0);
  actors::coordinator::configure_dispatch(s, c);
  return s;
}

msg::shot shot_of(const std::string& name, const std::string& prompt, uint32_t takes) {
  msg::shot sh;
  sh.name = name;
  sh.prompt = prompt;
  sh.width = 416;
  sh.height = 736;
  sh.seconds = 5;
  sh.seed = 10;
  sh.takes = takes;
  return sh;
}

/// A shot list of two shots (2 takes and 1).
msg::submit_run shots_request(const std::string& request_id = "") {
  msg::submit_run r;
  r.mode = "left_plus_one";
  r.request_id = request_id;
  r.shots = {shot_of("hero", "a hero walks", 2), shot_of("villain", "a villain waits", 1)};
  return r;
}

/// Steps a submit; its answer (exactly one).
msg::submit_reply submit(actors::coordinator::state& s, actors::coordinator::ev_submit_request ev, double now,
                         std::vector<actors::coordinator::effect>* fx_out = nullptr) {
  auto fx = actors::coordinator::step(s, ev, now);
  auto answers = all_of<actors::coordinator::fx_submit_answer>(fx);
  REQUIRE(answers.size() == 1);
  if (fx_out != nullptr)
    *fx_out = fx;
  return answers[0].reply;
}

msg::submit_jobs_reply add(actors::coordinator::state& s, actors::coordinator::ev_add_jobs_request ev, double now,
                           std::vector<actors::coordinator::effect>* fx_out = nullptr) {
  auto fx = actors::coordinator::step(s, ev, now);
  auto answers = all_of<actors::coordinator::fx_add_jobs_answer>(fx);
  REQUIRE(answers.size() == 1);
  if (fx_out != nullptr)
    *fx_out = fx;
  return answers[0].reply;
}

} // namespace

TEST_CASE("an accepted submit expands its shots into jobs, ordered and keyed by prompt") {
  const auto c = small_config();
  auto s = state_for(c);
  std::vector<actors::coordinator::effect> fx;
  const auto reply = submit(s, {shots_request(), "run-a", {}, std::nullopt}, 0, &fx);
  CHECK(reply.error == "");
  CHECK(reply.run_id == "run-a");
  REQUIRE(s.runs.size() == 1);
  const auto& r = s.runs[0];
  CHECK(r.id == "run-a");
  CHECK(r.mode == "left_plus_one");
  REQUIRE(r.jobs.size() == 3);
  CHECK(r.jobs[0].spec.name == "hero-take-1");
  CHECK(r.jobs[1].spec.name == "hero-take-2");
  CHECK(r.jobs[2].spec.name == "villain");
  CHECK(r.jobs[1].spec.seed == 11);
  CHECK(r.jobs[0].spec.prompt_sha256 == to_hex(sha256_of(std::string("a hero walks"))));
  CHECK(r.jobs[2].spec.prompt_sha256 == to_hex(sha256_of(std::string("a villain waits"))));
  for (auto& j : r.jobs) {
    CHECK(j.spec.run_id == "run-a");
    CHECK(j.spec.workflow != "");  // the mode's default workflow, resolved at admission
  }
  CHECK(all_of<actors::coordinator::fx_persist_run>(fx).size() == 1);
  CHECK(all_of<actors::coordinator::fx_accepted>(fx).size() == 1);
  CHECK(actors::coordinator::check_index(s).empty());
}

TEST_CASE("the uniform form becomes count jobs of one prompt, seeds counting up") {
  const auto c = small_config();
  auto s = state_for(c);
  msg::submit_run req{"left_plus_one", "a prompt", "", 416, 736, 5, 3, 1000, "req-u"};
  const auto reply = submit(s, {req, "run-u", {}, std::nullopt}, 0);
  CHECK(reply.error == "");
  REQUIRE(s.runs.size() == 1);
  REQUIRE(s.runs[0].jobs.size() == 3);
  CHECK(s.runs[0].request_id == "req-u");
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK(s.runs[0].jobs[i].spec.index == i);
    CHECK(s.runs[0].jobs[i].spec.seed == 1000 + i);
    CHECK(s.runs[0].jobs[i].spec.prompt_sha256 == to_hex(sha256_of(std::string("a prompt"))));
  }
}

TEST_CASE("a refused submit answers why and records nothing") {
  const auto c = small_config();
  auto s = state_for(c);
  const std::string sha(64, 'a');

  SECTION("an input digest this host does not hold") {
    auto req = shots_request();
    req.shots[1].reference_sha256 = sha;
    std::vector<actors::coordinator::effect> fx;
    const auto reply = submit(s, {req, "run-a", {}, std::nullopt}, 0, &fx);
    CHECK(reply.run_id == "");
    CHECK(reply.error == "shot 2: reference_sha256 " + sha + " names no input the coordinator "
                         "holds (upload the file first: `vidline run` does, or PUT /v1/inputs/"
                         + sha + ")");
    CHECK(s.runs.empty());
    CHECK(all_of<actors::coordinator::fx_persist_run>(fx).empty());
    CHECK(all_of<actors::coordinator::fx_accepted>(fx).empty());
    // Held, the same request is admitted, and the jobs carry the input's size.
    const auto ok = submit(s, {req, "run-b", {{sha, 1234}}, std::nullopt}, 1);
    CHECK(ok.error == "");
    REQUIRE(s.runs.size() == 1);
    CHECK(s.runs[0].jobs.back().spec.reference_sha256 == sha);
    CHECK(s.runs[0].jobs.back().spec.reference_bytes == 1234);
  }

  SECTION("the queue's limit on unfinished runs") {
    auto limited = c;
    limited.knobs.max_runs = 1;
    s = state_for(limited);
    CHECK(submit(s, {shots_request(), "run-a", {}, std::nullopt}, 0).error == "");
    std::vector<actors::coordinator::effect> fx;
    const auto reply = submit(s, {shots_request(), "run-b", {}, std::nullopt}, 1, &fx);
    CHECK(reply.run_id == "");
    CHECK(reply.error == "too many unfinished runs (knob max_runs)");
    REQUIRE(s.runs.size() == 1);
    CHECK(s.runs[0].id == "run-a");
    CHECK(all_of<actors::coordinator::fx_persist_run>(fx).empty());
  }

  SECTION("an unknown mode, checked first") {
    auto req = shots_request();
    req.mode = "nowhere";
    const auto reply = submit(s, {req, "run-a", {}, std::nullopt}, 0);
    CHECK(reply.error == "unknown mode 'nowhere' (known: " + actors::coordinator::known_modes(c) + ")");
    CHECK(s.runs.empty());
  }

  SECTION("a state without a config admits nothing") {
    actors::coordinator::state bare = s;
    bare.config.reset();
    const auto reply = submit(bare, {shots_request(), "run-a", {}, std::nullopt}, 0);
    CHECK(reply.error != "");
    CHECK(bare.runs.empty());
  }
}

TEST_CASE("a retried request id answers the first run's id, before the queue's limits") {
  auto c = small_config();
  c.knobs.max_runs = 1;  // a second run would be refused: the retry is not one
  auto s = state_for(c);
  CHECK(submit(s, {shots_request("req-1"), "run-a", {}, std::nullopt}, 0).run_id == "run-a");
  std::vector<actors::coordinator::effect> fx;
  const auto again = submit(s, {shots_request("req-1"), "run-b", {}, std::nullopt}, 1, &fx);
  CHECK(again.error == "");
  CHECK(again.run_id == "run-a");
  CHECK(s.runs.size() == 1);
  CHECK(all_of<actors::coordinator::fx_persist_run>(fx).empty());

  // A run the state forgot: the journal's answer (gathered by the shell) names it.
  auto fresh = state_for(c);
  const auto recalled = submit(fresh, {shots_request("req-1"), "run-c", {}, std::string("run-a")},
                               2);
  CHECK(recalled.error == "");
  CHECK(recalled.run_id == "run-a");
  CHECK(fresh.runs.empty());
}

TEST_CASE("jobs added to an open run are admitted as a run's submit is") {
  const auto c = small_config();
  auto s = state_for(c);
  REQUIRE(submit(s, {shots_request(), "run-a", {}, std::nullopt}, 0).error == "");

  msg::submit_jobs more;
  more.run_id = "run-a";
  more.request_id = "add-1";
  more.shots = {shot_of("extra", "one more", 2)};
  const auto reply = add(s, {more, {}, std::nullopt, ""}, 1);
  CHECK(reply.error == "");
  CHECK(reply.first_index == 3);
  CHECK(reply.count == 2);
  REQUIRE(s.runs[0].jobs.size() == 5);
  CHECK(s.runs[0].jobs[3].spec.name == "extra-take-1");
  CHECK(s.runs[0].jobs[4].spec.prompt_sha256 == to_hex(sha256_of(std::string("one more"))));

  // Retried: the first answer again, nothing added.
  const auto again = add(s, {more, {}, std::nullopt, ""}, 2);
  CHECK(again.error == "");
  CHECK(again.first_index == 3);
  CHECK(again.count == 2);
  CHECK(s.runs[0].jobs.size() == 5);

  // A name the run already has as an output: refused, nothing added.
  more.request_id = "add-2";
  const auto clash = add(s, {more, {}, std::nullopt, ""}, 3);
  CHECK(clash.error == "shot 1 (extra): name: output 'extra-take-1' is already an output of run "
                       "run-a");
  CHECK(s.runs[0].jobs.size() == 5);

  // No such run: the journal's record (gathered by the shell) or none.
  more.run_id = "gone";
  const auto none = add(s, {more, {}, std::nullopt, ""}, 4);
  CHECK(none.error == "no run gone");
  CHECK(none.code == msg::reply_code::no_such_run);
  actors::coordinator::run old;
  old.id = "gone";
  old.done = true;
  const auto finished = add(s, {more, {}, old, ""}, 5);
  CHECK(finished.error.rfind("run gone is ", 0) == 0);
  CHECK(finished.error.find(": jobs go only to an open run") != std::string::npos);
  CHECK(finished.code == "");
}
