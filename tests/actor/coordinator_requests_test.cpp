// The coordinator asked in-process, as the node's HTTP API asks it: CAF requests through its
// typed contract (coordinator_role), each answered with the reply the same request gets from
// a command-line client. A real actor system, the reference cluster, a journal on disk.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "config/config.hpp"
#include "nodes/state/journal_sqlite.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;

namespace {

/// An outbox that reaches nobody: the coordinator's orders and replies to clients go nowhere.
class silent_outbox : public actors::outbox {
public:
  explicit silent_outbox(std::string host) : host_(std::move(host)) {}
  const std::string& self_host() const override { return host_; }
  void send_packed(const std::string&, const std::string&, const std::string&,
                   std::string) override {}
  void reply_packed(const std::string&, uint64_t, const std::string&, std::string) override {}
  caf::actor local(const std::string&) const override { return {}; }
  void fetch_latent(const std::string&, const std::string&, uint64_t, const std::string&,
                    std::function<void(actors::fetch_result)> done) override {
    done({"not_found", "no data plane in this test", 0, 0});
  }
  void fetch_input(const std::string&, const std::string&, uint64_t, const std::string&,
                   std::function<void(actors::fetch_result)> done) override {
    done({"not_found", "no data plane in this test", 0, 0});
  }

private:
  std::string host_;
};

/// The coordinator's context on the reference cluster's coordinator host, data under `dir`.
actors::context coordinator_context(const std::string& dir) {
  auto cluster = std::make_shared<const config::cluster>(
    config::load(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/reference.json"));
  actors::context ctx;
  ctx.host = cluster->coordinator;
  ctx.cluster = cluster;
  ctx.out = std::make_shared<silent_outbox>(ctx.host);
  ctx.data_dir = dir;
  ctx.run_now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
  };
  ctx.random64 = [n = std::make_shared<uint64_t>(41)] { return ++*n; };
  return ctx;
}

} // namespace

TEST_CASE("the coordinator answers CAF requests through its contract") {
  testing_support::temp_dir dir("vl-coord-requests");
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto jnl = std::make_shared<nodes::state::sqlite_journal>(dir.path() + "/journal.db");
  actors::coordinator::coordinator_role coord =
    sys.spawn(actors::coordinator::coordinator_actor, coordinator_context(dir.path()), jnl,
              actors::coordinator::input_fetchers{});
  caf::scoped_actor self{sys};
  const auto timeout = std::chrono::seconds(10);

  // Typed replies; a CAF error (a timeout, a contract the actor broke) fails the test.
  auto ask = [&](auto request, auto reply) {
    std::string failed = "no answer";
    self->request(coord, timeout, std::move(request))
      .receive([&](decltype(reply)& r) {
                 reply = std::move(r);
                 failed.clear();
               },
               [&](caf::error& e) { failed = sys.render(e); });
    INFO(failed);
    REQUIRE(failed.empty());
    return reply;
  };

  auto before = ask(msg::runs_query{true}, msg::runs_reply{});
  CHECK(before.error.empty());
  CHECK(nlohmann::json::parse(before.json).empty());

  auto refused = ask(msg::submit_run{"no_such_mode", "a prompt", "", 416, 736, 5, 2, 1000, "r0"},
                     msg::submit_reply{});
  CHECK(refused.run_id.empty());
  CHECK(refused.error.find("unknown mode 'no_such_mode'") != std::string::npos);

  auto made = ask(msg::submit_run{"four_four_plus_one", "a prompt", "", 416, 736, 5, 2, 1000,
                                  "r1"},
                  msg::submit_reply{});
  REQUIRE(made.error.empty());
  REQUIRE(!made.run_id.empty());
  // A retried submit (same request id) makes no second run.
  auto again = ask(msg::submit_run{"four_four_plus_one", "a prompt", "", 416, 736, 5, 2, 1000,
                                   "r1"},
                   msg::submit_reply{});
  CHECK(again.run_id == made.run_id);

  auto after = ask(msg::runs_query{true}, msg::runs_reply{});
  CHECK(after.error.empty());
  CHECK(after.json.find(made.run_id) != std::string::npos);

  auto status = ask(msg::status_query{made.run_id, 0, 0}, msg::status_reply{});
  CHECK(status.error.empty());
  CHECK(status.json.find(made.run_id) != std::string::npos);

  auto drained = ask(msg::drain_request{"pool", "no_such_pool", true, "test"}, msg::drain_reply{});
  CHECK(drained.code == "not_found");
  CHECK(drained.targets.empty());

  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
}
