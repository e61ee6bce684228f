// Two real node processes started from different cluster configs refuse each other's
// hello (nodes/bus/hello.hpp): both log the refusal with a count and neither sees the other
// up; restarted from an identical copy of the first config (another path, another
// layout), the second node is accepted on both sides.
#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "config/config.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"
#include "vidline/version.hpp"

using namespace vidline;
using testing_support::temp_dir;
using nlohmann::json;

namespace {

bool wait_for(const std::function<bool()>& done, double seconds) {
  const auto deadline =
    std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a log file
  }
  return true;
}

std::string node_log(const std::string& dir, const std::string& host) {
  return testing_support::read_file(dir + "/" + host + "/logs/node.log");
}

} // namespace

TEST_CASE("nodes started from different configs refuse each other, and the same config joins") {
  temp_dir tmp("vl-hello");
  const std::string& dir = tmp.path();
  const std::string config_a = testing_support::write_reference_config(dir, 0.01);
  auto cfg = json::parse(testing_support::read_file(config_a));

  // host_b's copy differs in one knob only: a stale copy left on one host.
  auto edited = cfg;
  edited["knobs"]["log_files"] = 9;
  const std::string config_b = dir + "/edited.json";
  std::ofstream(config_b) << edited.dump(2);
  const std::string digest_a = config::digest(config::load(config_a));
  const std::string digest_b = config::digest(config::load(config_b));
  REQUIRE(digest_a != digest_b);

  auto a = testing_support::start_node(dir, config_a, "host_a");
  auto b = testing_support::start_node(dir, config_b, "host_b");

  const std::string refused_b = "refusing peer host_b: it was started from another cluster config";
  const std::string refused_a = "refusing peer host_a: it was started from another cluster config";
  INFO("logs under " << dir);
  REQUIRE(wait_for([&] {
    return node_log(dir, "host_a").find(refused_b) != std::string::npos &&
           node_log(dir, "host_b").find(refused_a) != std::string::npos;
  }, 30));
  const std::string log_a = node_log(dir, "host_a"), log_b = node_log(dir, "host_b");
  // The first line says which build and which config.
  const std::string first_a = log_a.substr(0, log_a.find('\n'));
  CHECK_THAT(first_a, Catch::Contains(std::string("vidline ") + version_string +
                                      " node host_a starting") &&
                        Catch::Contains(digest_a));
  CHECK_THAT(log_b.substr(0, log_b.find('\n')), Catch::Contains(digest_b));
  // Both refusals name both digests and carry the count; neither side took the other up.
  CHECK_THAT(log_a, Catch::Contains(digest_b.substr(0, 16)) && Catch::Contains("hellos refused]"));
  CHECK_THAT(log_b, Catch::Contains(digest_a.substr(0, 16)));
  CHECK(log_a.find("peer_up host_b") == std::string::npos);
  CHECK(log_b.find("peer_up host_a") == std::string::npos);

  // host_b again, from an identical copy of host_a's config: another path, another layout.
  b->signal(SIGTERM);
  REQUIRE(b->wait(30) == 0);
  const std::string copy = dir + "/copy/cluster.json";
  std::filesystem::create_directories(dir + "/copy");
  std::ofstream(copy) << cfg.dump();
  b = testing_support::start_node(dir, copy, "host_b");
  REQUIRE(wait_for([&] {
    return node_log(dir, "host_a").find("peer_up host_b") != std::string::npos &&
           node_log(dir, "host_b").find("peer_up host_a") != std::string::npos;
  }, 30));
  CHECK_THAT(node_log(dir, "host_a"), Catch::Contains("peer host_b now runs vidline"));
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(30) == 0);
  CHECK(b->wait(30) == 0);
}
