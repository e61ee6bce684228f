// The supervisor with a real actor system: a crashing child is restarted within its
// restart budget; past the budget the supervisor gives up (the node then exits).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>

#include <caf/all.hpp>

#include "actors/supervisor/supervisor.hpp"
#include "messages/actor_types.hpp"

using namespace vidline;

namespace {

/// A registry that lets the test wait for the n-th (re)start of a child.
class recording_registry : public actors::registry {
public:
  void put(const std::string& name, caf::actor handle) override {
    std::lock_guard<std::mutex> lock(mtx_);
    last_ = std::move(handle);
    ++puts_;
    cv_.notify_all();
  }
  void remove(const std::string&, const caf::actor_addr&) override {}

  /// The handle of the n-th start, waiting up to 10 s for it.
  caf::actor wait_for_start(int n) {
    std::unique_lock<std::mutex> lock(mtx_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return puts_ >= n; });
    return puts_ >= n ? last_ : caf::actor{};
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  caf::actor last_;
  int puts_ = 0;
};

caf::behavior crashing_child(caf::event_based_actor*) {
  return {[](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("boom"); }};
}

} // namespace

TEST_CASE("a crashed child is restarted, past its budget the supervisor gives up") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  recording_registry reg;
  std::promise<std::string> gave_up;
  actors::supervisor::supervisor_options so;
  so.children.push_back({"child", config::restart_policy{2, 30},
                         [](actors::supervisor::supervisor_role::pointer self) {
                           return self->spawn(crashing_child);
                         }});
  so.reg = &reg;
  so.now = [] { return 0.0; };  // every crash within one period
  so.give_up = [&](const std::string& child, const std::string&) { gave_up.set_value(child); };
  auto sup = sys.spawn(actors::supervisor::supervisor, so);
  for (int start = 1; start <= 3; ++start) {
    auto child = reg.wait_for_start(start);
    REQUIRE(child);
    caf::anon_send(child, msg::crash_atom::value);
  }
  // Two restarts allowed; the third crash spends the budget.
  auto verdict = gave_up.get_future();
  REQUIRE(verdict.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(verdict.get() == "child");
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST_CASE("crashes spread beyond the period never spend the budget") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  recording_registry reg;
  std::atomic<double> clock{0};
  std::atomic<bool> gave_up{false};
  actors::supervisor::supervisor_options so;
  so.children.push_back({"child", config::restart_policy{1, 30},
                         [](actors::supervisor::supervisor_role::pointer self) {
                           return self->spawn(crashing_child);
                         }});
  so.reg = &reg;
  so.now = [&] { return clock.load(); };
  so.give_up = [&](const std::string&, const std::string&) { gave_up = true; };
  auto sup = sys.spawn(actors::supervisor::supervisor, so);
  for (int start = 1; start <= 5; ++start) {
    auto child = reg.wait_for_start(start);
    REQUIRE(child);
    clock = clock + 100;  // each crash 100 s after the last: outside the 30 s period
    caf::anon_send(child, msg::crash_atom::value);
  }
  REQUIRE(reg.wait_for_start(6));  // restarted a fifth time
  CHECK(!gave_up);
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
}
