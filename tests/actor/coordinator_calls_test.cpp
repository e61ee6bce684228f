// The coordinator asked in its own process, as the HTTP API asks it: a real coordinator
// actor with its journal, found through a router that has no bus at all, answers the
// client's requests as CAF requests (runs, a submit, its status, a refusal, an unknown run),
// and a request gets no answer before the actor system runs and once it stops.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/coordinator_calls.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/state/journal_sqlite.hpp"
#include "nodes/router.hpp"
#include "tests/support/cluster.hpp"

using namespace vidline;
using namespace testing_support;

namespace {

int exit_code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const nodes::verbs::coordinator_error& e) {
    return e.exit_code();
  }
  return nodes::verbs::exit_code::ok;
}

} // namespace

TEST_CASE("coordinator calls in process: CAF requests answered as the bus answers them") {
  temp_dir dir;
  const auto c = std::make_shared<const config::cluster>(
    config::load(write_reference_config(dir.path(), 0.01)));
  const auto& host = c->coordinator;
  auto rt = std::make_shared<nodes::router>(host, nodes::bus::wire_limits(c->knobs));  // no bus
  auto calls = std::make_shared<nodes::in_process_calls>(rt);
  nodes::verbs::coordinator_client cl(*c, calls);

  // No actor system yet: no answer, as from a node not up (the request waited its time).
  CHECK(exit_code_of([&] { cl.runs(false, 100); }) == nodes::verbs::exit_code::unreachable);

  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  actors::context ctx;
  ctx.host = host;
  ctx.cluster = c;
  ctx.out = rt;
  ctx.data_dir = c->find_host(host)->data_dir;
  ctx.run_now = [] { return 0.0; };
  ctx.random64 = [n = uint64_t{0}]() mutable { return ++n; };
  auto jnl = std::make_shared<nodes::state::sqlite_journal>(dir.path() + "/journal.db");
  auto coordinator = sys.spawn(actors::coordinator::coordinator_actor, ctx, jnl, actors::coordinator::input_fetchers{});
  rt->put("coordinator", caf::actor_cast<caf::actor>(coordinator));
  calls->attach(&sys);

  CHECK(cl.runs(false).empty());

  msg::submit_run run;
  run.mode = "four_four_xtx_plus_one";
  run.prompt = "asked in process";
  run.width = 416;
  run.height = 736;
  run.seconds = 5;
  run.count = 2;
  run.seed = 7;
  run.request_id = "in-process-1";
  const auto id = cl.submit(run);
  CHECK(!id.empty());
  CHECK(cl.submit(run) == id);  // the request id: a retry returns the same run
  auto st = cl.status(id);
  REQUIRE(st);
  CHECK((*st)["run_id"] == id);
  CHECK((*st)["jobs"].size() == 2);
  auto list = cl.runs(false);
  REQUIRE(list.size() == 1);
  CHECK(list[0]["run_id"] == id);

  // The coordinator's refusals and errors, with the exit codes the CLI gives them.
  msg::submit_run bad = run;
  bad.request_id = "in-process-2";
  bad.mode = "no_such_mode";
  CHECK(exit_code_of([&] { cl.submit(bad); }) == nodes::verbs::exit_code::refused);
  CHECK(exit_code_of([&] { cl.status("no-such-run"); }) == nodes::verbs::exit_code::no_such_run);
  CHECK(exit_code_of([&] { cl.resume("no-such-run"); }) == nodes::verbs::exit_code::no_such_run);

  msg::cancel_run cancel;
  cancel.run_id = id;
  CHECK(cl.cancel(cancel).error.empty());
  CHECK((*cl.status(id))["state"] == "cancelled");

  // Stopped: every request goes unanswered at once.
  calls->attach(nullptr);
  CHECK(exit_code_of([&] { cl.runs(false, 60000); }) == nodes::verbs::exit_code::unreachable);
  caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
}
