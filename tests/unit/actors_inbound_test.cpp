// What arrives from other hosts, checked before actors act on it: orders whose names would
// leave the data directory or reach a command's argv are refused; reports whose text or
// durations the journal cannot hold are repaired; submits are held to the same rules.

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/records.hpp"
#include "actors/inbound.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "config/config.hpp"

using namespace vidline;
using namespace vidline::actors;
using namespace vidline::actors::coordinator;
using nlohmann::json;

namespace {

const std::string bad_utf8 = "exit 1: \xff\xfe\xc3 caf\xc3\xa9 \xed\xa0\x80";

msg::job_spec good_job() {
  msg::job_spec j;
  j.run_id = "20240101-120000-beef";
  j.index = 3;
  j.seed = 42;
  j.width = 416;
  j.height = 736;
  j.seconds = 5;
  j.prompt = "a red fox, caf\xc3\xa9";
  j.prompt_sha256 = to_hex(sha256_of(j.prompt));
  return j;
}

msg::decode_order good_decode_order() {
  return {"decoder", 12, good_job(), std::string(64, 'a'), 1000, "alpha"};
}

const std::vector<std::string> hostile_names = {
    "", "..", "../../etc", "a/b", "/abs", ".hidden", "-rf", "x\n", "x y", "caf\xc3\xa9",
    "\xff", std::string(129, 'a'), std::string("a\0b", 3)};

} // namespace

TEST_CASE("UTF-8: checked, and repaired byte by byte", "[inbound]") {
  CHECK(text::is_valid_utf8(""));
  CHECK(text::is_valid_utf8("plain \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (const char* bad : {"\xff", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
                          "\xf4\x90\x80\x80", "a\x80"})
    CHECK_FALSE(text::is_valid_utf8(bad));
  CHECK(text::to_valid_utf8("ok \xc3\xa9") == "ok \xc3\xa9");
  CHECK(text::to_valid_utf8("a\xff" "b") == "a\xef\xbf\xbd" "b");
  CHECK(text::is_valid_utf8(text::to_valid_utf8(bad_utf8)));
  CHECK(text::is_single_line("a b\xc3\xa9"));
  CHECK_FALSE(text::is_single_line("a\nb"));
  CHECK_FALSE(text::is_single_line("a\x7f"));
}

TEST_CASE("safe names: the config's rule, nothing that can leave a directory", "[inbound]") {
  for (const char* ok : {"20240101-120000-beef", "alpha", "gpu-host_01.lan", "r1", "7"})
    CHECK(files::is_safe_name(ok));
  for (const auto& bad : hostile_names)
    CHECK_FALSE(files::is_safe_name(bad));
}

TEST_CASE("orders with hostile names are refused before anything touches the disk",
          "[inbound]") {
  const config::knobs k;
  CHECK(inbound::check_order(msg::sample_order{"left", 1, good_job()}, k).empty());
  CHECK(inbound::check_order(good_decode_order(), k).empty());

  for (const auto& name : hostile_names) {
    CAPTURE(name);
    auto j = good_job();
    j.run_id = name;
    CHECK_FALSE(inbound::check_order(msg::sample_order{"left", 1, j}, k).empty());
    auto d = good_decode_order();
    d.job.run_id = name;
    CHECK_FALSE(inbound::check_order(d, k).empty());
    d = good_decode_order();
    d.source_host = name;
    CHECK_FALSE(inbound::check_order(d, k).empty());
  }

  auto refused = [&](auto edit) {
    auto j = good_job();
    edit(j);
    return !inbound::check_job(j, k).empty();
  };
  CHECK(refused([](msg::job_spec& j) { j.prompt_sha256 = "../x"; }));
  CHECK(refused([](msg::job_spec& j) { j.prompt_sha256 = std::string(64, 'A'); }));
  CHECK(refused([&](msg::job_spec& j) { j.prompt = std::string(k.max_prompt_bytes + 1, 'p'); }));
  CHECK(refused([](msg::job_spec& j) { j.prompt = bad_utf8; }));
  CHECK(refused([](msg::job_spec& j) { j.width = 0; }));
  CHECK(refused([](msg::job_spec& j) { j.width = 4294967288u; }));
  CHECK(refused([](msg::job_spec& j) { j.height = 737; }));
  CHECK(refused([](msg::job_spec& j) { j.seconds = 3601; }));
  CHECK(refused([](msg::job_spec& j) { j.reference = "relative.png"; }));
  CHECK(refused([](msg::job_spec& j) { j.reference = "/srv/refs/../../etc/shadow"; }));
  CHECK_FALSE(refused([](msg::job_spec& j) { j.reference = "/srv/refs/./a.png"; }));

  auto d = good_decode_order();
  d.latent_sha256 = "../../" + std::string(58, 'a');
  CHECK_FALSE(inbound::check_order(d, k).empty());
}

TEST_CASE("reference paths: absolute, no '..', no control characters", "[inbound]") {
  for (const char* ok : {"", "/a.png", "/home/u/refs/ref one.png", "/home/u/./x.png",
                         "/a//b.png", "/caf\xc3\xa9.png", "/x/..png", "/x/...", "/.a"})
    CHECK(inbound::check_reference(ok).empty());
  for (const std::string& bad :
       {std::string("a.png"), std::string("./a.png"), std::string("/"), std::string("/a/"),
        std::string("/.."), std::string("/a/../b"), std::string("/a/.."), std::string("/a\nb"),
        std::string("/a\xff"), std::string("-/a"), std::string(1, '/') + std::string(4096, 'a')})
    CHECK_FALSE(inbound::check_reference(bad).empty());
}

TEST_CASE("reports are repaired so the journal can always hold them", "[inbound]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  msg::sample_result r;
  r.pool = "left\xff";
  r.run_id = "20240101-120000-beef";
  r.outcome = msg::outcome::transient;
  r.error = bad_utf8;
  r.conditioning_s = nan;
  r.sampling_s = -inf;

  // What the coordinator would journal without the repair: the job record does not dump,
  // and a NaN written as null does not read back (the journal would not load again).
  actors::coordinator::job j;
  j.spec = good_job();
  j.error = r.error;
  CHECK_THROWS_AS(job_record(j).dump(), json::type_error);
  j.error = "";
  j.sampling_s = nan;
  CHECK_THROWS(job_from_record(json::parse(job_record(j).dump())));

  msg::pool_status s;
  s.pool = "left";
  s.host = "alpha\xc3";
  s.unacked = {r, r};
  inbound::repair(s);
  CHECK(s.host == "alpha\xef\xbf\xbd");
  for (auto& u : s.unacked) {
    CHECK(text::is_valid_utf8(u.pool));
    CHECK(text::is_valid_utf8(u.error));
    CHECK(u.conditioning_s == 0);
    CHECK(u.sampling_s == 0);
  }
  j.error = s.unacked[0].error;
  j.sampling_s = s.unacked[0].sampling_s;
  j.conditioning_s = s.unacked[0].conditioning_s;
  const actors::coordinator::job back = job_from_record(json::parse(job_record(j).dump()));
  CHECK(back.error == text::to_valid_utf8(bad_utf8));

  msg::decode_result d;
  d.output = "/data/out/\xff.mp4";
  d.error = bad_utf8;
  d.handoff_s = inf;
  d.decode_s = 12.5;
  msg::decoder_status ds;
  ds.unacked = {d};
  inbound::repair(ds);
  CHECK(text::is_valid_utf8(ds.unacked[0].output));
  CHECK(text::is_valid_utf8(ds.unacked[0].error));
  CHECK(ds.unacked[0].handoff_s == 0);
  CHECK(ds.unacked[0].decode_s == 12.5);
}

TEST_CASE("submits are held to the rules orders are checked against", "[inbound]") {
  const auto c = config::load(std::string(VIDLINE_SOURCE_DIR) +
                              "/config/examples/two_hosts_small.json");
  msg::submit_run r{"left_plus_one", "a prompt", "", 416, 736, 5, 6, 1000, "req-1"};
  CHECK(check_submit(c, r) == "");

  auto refused = [&](auto edit) {
    auto x = r;
    edit(x);
    return check_submit(c, x);
  };
  CHECK(refused([](msg::submit_run& x) { x.prompt = bad_utf8; }) ==
        "the prompt is not valid UTF-8");
  CHECK(refused([](msg::submit_run& x) { x.request_id = "a\nforged line"; }) != "");
  CHECK(refused([](msg::submit_run& x) { x.request_id = "\xff"; }) != "");
  CHECK(refused([](msg::submit_run& x) { x.reference = "/srv/../etc/shadow"; }) != "");
  CHECK(refused([](msg::submit_run& x) { x.reference = "ref.png"; }) != "");
  CHECK(refused([&](msg::submit_run& x) { x.count = c.knobs.max_jobs_per_run + 1; }) != "");
  CHECK(refused([&](msg::submit_run& x) { x.prompt.assign(c.knobs.max_prompt_bytes + 1, 'p'); })
        != "");
  CHECK(refused([](msg::submit_run& x) { x.width = 4100; }) != "");
  CHECK(refused([](msg::submit_run& x) { x.reference = "/home/u/./ref.png"; }) == "");

  // Every job a valid submit makes passes the checks its orders meet on the pools.
  msg::job_spec j{"20240101-120000-beef", 0, r.seed, r.width, r.height, r.seconds, r.prompt,
                  to_hex(sha256_of(r.prompt)), r.reference};
  CHECK(inbound::check_job(j, c.knobs) == "");
}

TEST_CASE("the prompt text held for unfinished runs is bounded, not only per run", "[inbound]") {
  config::knobs k;
  k.max_runs = 3;
  k.max_queued_prompt_bytes = 10000;
  actors::coordinator::state s;
  auto add_run = [&](uint32_t jobs, std::size_t prompt_bytes, bool done) {
    actors::coordinator::run r;
    r.id = "run-" + std::to_string(s.runs.size());
    r.done = done;
    for (uint32_t i = 0; i < jobs; ++i) {
      actors::coordinator::job j;
      j.spec = good_job();
      j.spec.prompt.assign(prompt_bytes, 'p');
      r.jobs.push_back(j);
    }
    s.runs.push_back(std::move(r));
  };
  msg::submit_run r{"m", std::string(1000, 'p'), "", 416, 736, 5, 10, 0, "req"};
  CHECK(check_queue(s, k, r) == "");                 // 10 x 1000 = 10000: fits exactly
  r.count = 11;
  CHECK(check_queue(s, k, r).find("max_queued_prompt_bytes") != std::string::npos);
  r.count = 5;
  add_run(4, 1000, false);                           // 4000 held
  CHECK(check_queue(s, k, r) == "");                 // + 5000
  add_run(100, 1000, true);                          // finished runs do not count
  CHECK(check_queue(s, k, r) == "");
  add_run(2, 1000, false);                           // 6000 held
  CHECK(check_queue(s, k, r) != "");                 // + 5000 > 10000
  add_run(0, 0, false);                              // a third unfinished run
  r.count = 1;
  CHECK(check_queue(s, k, r) == "too many unfinished runs (knob max_runs)");

  // The defaults: one run of max_jobs_per_run x max_prompt_bytes (6.25 GiB) is refused.
  const config::knobs d;
  msg::submit_run big{"m", std::string(d.max_prompt_bytes, 'p'), "", 416, 736, 5,
                      d.max_jobs_per_run, 0, ""};
  CHECK(check_queue(actors::coordinator::state{}, d, big) != "");
}
