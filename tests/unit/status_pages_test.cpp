// Status pages (docs/design.md, "Status pages"): status_json slices a run's jobs by offset
// and limit, and every page says which jobs it holds (`page`) and counts all of them by
// state (`states`), so a run of any size is followed from small answers. A run of 100,000
// jobs: each page the client asks for (coordinator_client::page_jobs) fits a frame, a page
// of one job is small, and the pages together are every job once.
#include <catch2/catch.hpp>

#include <chrono>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"

using namespace vidline;
using nlohmann::json;

namespace {

actors::coordinator::state state_with_run(uint32_t count) {
  actors::coordinator::state s;
  s.modes["m"] = {};
  actors::coordinator::run r;
  r.id = "r1";
  r.mode = "m";
  r.submitted_at = 100;
  for (uint32_t i = 0; i < count; ++i) {
    actors::coordinator::job j;
    j.spec = msg::job_spec{"r1", i, 100 + i, 416, 736, 5, "a prompt", std::string(64, 'p'), ""};
    // A third succeeded (with the fields of a finished job), a third failed after the most
    // failed attempts kept, the rest queued.
    if (i % 3 == 0) {
      j.state = actors::coordinator::job_state::succeeded;
      j.latent_sha256 = std::string(64, 'a');
      j.output_sha256 = std::string(64, 'b');
      j.output = "/var/lib/vidline/out/r1/" + std::to_string(i) + ".mp4";
      j.pool = "pool_a";
      j.decoder = "decoder_b";
      j.ran.pool_start = 100 + i;
      j.ran.sampler_start = 101 + i;
      j.ran.sampler_end = 150 + i;
      j.ran.decode_ordered = 151 + i;
      j.ran.fetch_start = 151 + i;
      j.ran.fetched = 152 + i;
      j.ran.decode_start = 153 + i;
      j.ran.decode_end = 160 + i;
    } else if (i % 3 == 1) {
      j.state = actors::coordinator::job_state::failed;
      j.error = "decoder_b: the backend exited with status 1";
      for (std::size_t f = 0; f < actors::coordinator::max_failures_kept; ++f)
        j.failures.push_back({"decode", "decoder_b", 100.0 + f, 101.0 + f,
                              "the backend exited with status 1 (see its log)"});
      j.failures_total = 12;
    }
    r.jobs.push_back(std::move(j));
  }
  s.runs.push_back(std::move(r));
  actors::coordinator::reindex(s);
  return s;
}

json page_of(const actors::coordinator::state& s, std::size_t offset, std::size_t limit) {
  return actors::coordinator::status_json(s, s.runs.back(), actors::coordinator::clock_note{false, 1.0}, 200,
                             actors::coordinator::status_page{offset, limit});
}

} // namespace

TEST_CASE("status_json slices the jobs and counts every job by state", "[status][pages]") {
  auto s = state_with_run(10);
  auto p = page_of(s, 3, 4);
  REQUIRE(p["jobs"].size() == 4);
  for (int k = 0; k < 4; ++k)
    CHECK(p["jobs"][k]["index"].get<int>() == 3 + k);
  CHECK(p["page"] == json({{"offset", 3}, {"jobs", 4}, {"jobs_total", 10}}));
  CHECK(p["states"] == json({{"succeeded", 4}, {"failed", 3}, {"queued", 3}}));
  // The run-wide figures are of the whole run, whatever the page.
  CHECK(p["summary"]["succeeded"].get<int>() == 4);
  CHECK(p["summary"]["failed"].get<int>() == 3);

  // limit 0: all from offset; a limit past the end: what is left.
  CHECK(page_of(s, 7, 0)["jobs"].size() == 3);
  CHECK(page_of(s, 8, 100)["page"] == json({{"offset", 8}, {"jobs", 2}, {"jobs_total", 10}}));
  // An offset past the end: no jobs, never an error; the counts still come.
  auto past = page_of(s, 50, 5);
  CHECK(past["jobs"].empty());
  CHECK(past["page"] == json({{"offset", 10}, {"jobs", 0}, {"jobs_total", 10}}));
  CHECK(past["states"]["queued"].get<int>() == 3);
  // No page asked: the whole run, as before pages.
  auto whole = actors::coordinator::status_json(s, s.runs.back(), actors::coordinator::clock_note{false, 1.0}, 200);
  CHECK(whole["jobs"].size() == 10);
  CHECK(whole["jobs"] == page_of(s, 0, 0)["jobs"]);
}

TEST_CASE("a run of 100,000 jobs is read in pages that fit a frame", "[status][pages][big]") {
  auto c = config::load(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/two_hosts_small.json");
  nodes::verbs::coordinator_client cl(c);
  const std::size_t per_page = cl.page_jobs();
  REQUIRE(per_page >= 16);
  const std::size_t frame_room = c.knobs.max_frame_bytes - 4096;  // the coordinator's headroom

  const uint32_t n = 100000;
  auto s = state_with_run(n);
  // The whole status would not fit a frame: what the pages are for.
  // (~1.3 KB a job: 100,000 jobs are ~130 MB, against 8 MiB.)
  // One page of one job is small, whatever the run's size: what `wait` polls.
  auto started = std::chrono::steady_clock::now();
  auto one = page_of(s, 0, 1);
  auto took = std::chrono::steady_clock::now() - started;
  CHECK(one.dump().size() < 16384);
  CHECK(one["page"]["jobs_total"].get<uint32_t>() == n);
  CHECK(one["states"] == json({{"succeeded", 33334}, {"failed", 33333}, {"queued", 33333}}));
  CHECK(took < std::chrono::milliseconds(500));  // counting 100,000 jobs, not rendering them

  std::set<uint32_t> seen;
  std::size_t largest = 0, pages = 0;
  for (std::size_t offset = 0; offset < n;) {
    auto p = page_of(s, offset, per_page);
    const std::size_t bytes = p.dump().size();
    largest = std::max(largest, bytes);
    REQUIRE(bytes <= frame_room);
    REQUIRE(p["page"]["offset"].get<std::size_t>() == offset);
    REQUIRE_FALSE(p["jobs"].empty());
    for (auto& j : p["jobs"])
      REQUIRE(seen.insert(j["index"].get<uint32_t>()).second);
    offset += p["jobs"].size();
    ++pages;
  }
  CHECK(seen.size() == n);
  CHECK(*seen.rbegin() == n - 1);
  INFO("pages " << pages << ", largest " << largest << " bytes");
  CHECK(pages == (n + per_page - 1) / per_page);
}
