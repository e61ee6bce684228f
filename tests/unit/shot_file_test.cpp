// Shot lists (docs/shots.md): the file parser refuses every bad input naming its line and
// field, the planner places mixed sizes by capacity with the scheduler's own machine,
// `plan --jobs` plans a list, and the decoder's run index is append-only.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/decoder/output_index.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "nodes/verbs/plan_cmd.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;

namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// Reads `text` as a shot file named `name` in `dir`; the error ("" = accepted).
std::string parse(const std::string& dir, const std::string& text, nodes::verbs::shot_list& out,
                  const std::string& name = "shots.jsonl", uint64_t max_jobs = 1000000) {
  write(dir + "/" + name, text);
  return nodes::verbs::read_shot_file(dir + "/" + name, config::knobs{}, max_jobs, out);
}

const char* good = R"({"prompt": "a", "width": 416, "height": 736, "seconds": 5, "seed": 1})";

} // namespace

TEST_CASE("a shot file: fields, takes, names, references and comments are read") {
  testing_support::temp_dir d("vl-shots");
  write(d.path() + "/ref.png", "not really a png");
  write(d.path() + "/p.txt", "a prompt from a file");
  nodes::verbs::shot_list l;
  auto why = parse(d.path(),
                   "# the episode\n"
                   "{\"prompt\": \"a cat\", \"width\": 736, \"height\": 1280, \"seconds\": 10, "
                   "\"seed\": 5, \"takes\": 3, \"name\": \"hero\", \"priority\": 2, "
                   "\"reference\": \"ref.png\"}\n"
                   "\n"
                   "{\"prompt_file\": \"p.txt\", \"width\": 416, \"height\": 736, \"seconds\": 5, "
                   "\"seed\": 0}\n",
                   l);
  REQUIRE(why.empty());
  REQUIRE(l.shots.size() == 2);
  CHECK(l.lines == std::vector<std::size_t>{2, 4});
  CHECK(l.jobs == 4);
  CHECK(l.shots[0].takes == 3);
  CHECK(l.shots[0].priority == 2);
  CHECK(l.shots[0].reference == d.path() + "/ref.png");
  CHECK(l.shots[0].reference_sha256 == to_hex(sha256_of(std::string("not really a png"))));
  CHECK(l.shots[1].prompt == "a prompt from a file");
  CHECK(l.shots[1].reference.empty());
  // Priority first, list order among equals; takes named name-take-N with seeds from seed.
  auto jobs = actors::coordinator::shot_jobs(l.shots, "run-1", "", "");
  REQUIRE(jobs.size() == 4);
  CHECK(jobs[0].name == "hero-take-1");
  CHECK(jobs[2].name == "hero-take-3");
  CHECK(jobs[2].seed == 7);
  CHECK(jobs[2].reference_sha256 == l.shots[0].reference_sha256);
  CHECK(jobs[3].name.empty());
  CHECK(jobs[3].index == 3);
  // A shot naming an input by digest alone (HTTP: reference_sha256 without a path) keeps it;
  // a shot with neither takes the run's.
  auto by_digest = l.shots;
  by_digest[0].reference.clear();
  by_digest[0].reference_sha256 = std::string(64, 'c');
  CHECK(actors::coordinator::shot_problem(by_digest[0], config::knobs{}).empty());
  jobs = actors::coordinator::shot_jobs(by_digest, "run-1", "/run/ref.png", std::string(64, 'd'));
  CHECK(jobs[0].reference_sha256 == std::string(64, 'c'));
  CHECK(jobs[0].reference.empty());
  CHECK(jobs[3].reference_sha256 == std::string(64, 'd'));
  CHECK(jobs[3].reference == "/run/ref.png");
}

TEST_CASE("a CSV shot file reads like JSON Lines") {
  testing_support::temp_dir d("vl-shots");
  nodes::verbs::shot_list l;
  auto why = parse(d.path(),
                   "prompt,width,height,seconds,seed,name\n"
                   "\"a cat, on a \"\"skateboard\"\"\",416,736,5,3,cat\n"
                   "a dog,736,1280,10,4,\n",
                   l, "shots.csv");
  REQUIRE(why.empty());
  REQUIRE(l.shots.size() == 2);
  CHECK(l.shots[0].prompt == "a cat, on a \"skateboard\"");
  CHECK(l.shots[0].name == "cat");
  CHECK(l.shots[1].seconds == 10);
  CHECK(l.shots[1].name.empty());
  CHECK(parse(d.path(), "prompt,width,height,seconds,seed\na,416,736,five,1\n", l, "bad.csv")
        == d.path() + "/bad.csv:2: seconds: must be a whole number from 1 to 3600, got \"five\"");
}

TEST_CASE("every bad shot is refused naming the file, the line and the field") {
  testing_support::temp_dir d("vl-shots");
  write(d.path() + "/ref.png", "x");
  write(d.path() + "/empty.png", "");
  std::filesystem::create_directory(d.path() + "/dir.png");
  {
    std::ofstream big(d.path() + "/big.png", std::ios::binary);
    big.seekp(static_cast<std::streamoff>(nodes::verbs::max_reference_image_bytes));
    big.put('x');
  }
  const std::string f = d.path() + "/shots.jsonl:";
  struct bad { std::string line, where; };
  const std::string base = R"("width": 416, "height": 736, "seconds": 5, "seed": 1)";
  const std::vector<bad> cases = {
    {"not json", "2: line: not valid JSON"},
    {"[1, 2]", "2: line: must be a JSON object"},
    {"{" + base + ", \"prompt\": \"a\", \"colour\": \"red\"}", "2: colour: unknown field"},
    {"{" + base + "}", "2: prompt: give exactly one of prompt and prompt_file"},
    {"{" + base + ", \"prompt\": \"a\", \"prompt_file\": \"p\"}", "2: prompt: give exactly one"},
    {"{" + base + ", \"prompt\": \"\"}", "2: prompt: is empty"},
    {"{" + base + ", \"prompt\": 7}", "2: prompt: must be a string"},
    {"{" + base + ", \"prompt_file\": \"missing.txt\"}", "2: prompt_file: "},
    {R"({"prompt": "a", "height": 736, "seconds": 5, "seed": 1})", "2: width: missing"},
    {R"({"prompt": "a", "width": 417, "height": 736, "seconds": 5, "seed": 1})",
     "2: width: must be a multiple of 8"},
    {R"({"prompt": "a", "width": 416, "height": 736, "seconds": 0, "seed": 1})",
     "2: seconds: must be from 1 to 3600"},
    {R"({"prompt": "a", "width": 416, "height": 736, "seconds": 5, "seed": -1})",
     "2: seed: must be a whole number"},
    {R"({"prompt": "a", "width": 416, "height": 736, "seconds": 5})", "2: seed: missing"},
    {"{" + base + ", \"prompt\": \"a\", \"takes\": 10000000}", "2: takes: must be from 1 to 1000"},
    {"{" + base + ", \"prompt\": \"a\", \"takes\": 0}", "2: takes: must be from 1 to 1000"},
    {"{" + base + ", \"prompt\": \"a\", \"name\": \"../x\"}", "2: name: is not a safe file stem"},
    {"{" + base + ", \"prompt\": \"a\", \"name\": \"job-3\"}", "2: name: 'job-3' starts with"},
    {"{" + base + ", \"prompt\": \"a\", \"name\": \"\"}", "2: name: is empty"},
    {"{" + base + ", \"prompt\": \"a\", \"name\": \"first\"}", "2: name: 'first' is also the name on line 1"},
    {"{" + base + ", \"prompt\": \"a\", \"priority\": 1.5}", "2: priority: must be a whole number"},
    {"{" + base + ", \"prompt\": \"a\", \"reference\": \"missing.png\"}",
     "2: reference: " + d.path() + "/missing.png does not exist"},
    {"{" + base + ", \"prompt\": \"a\", \"reference\": \"empty.png\"}", "2: reference: "},
    {"{" + base + ", \"prompt\": \"a\", \"reference\": \"dir.png\"}", "2: reference: "},
    {"{" + base + ", \"prompt\": \"a\", \"reference\": \"big.png\"}", "2: reference: "},
    {"{" + base + ", \"prompt\": \"a\", \"reference\": 3}", "2: reference: must be"},
    {"{" + base + ", \"prompt\": \"" + std::string(config::knobs{}.max_prompt_bytes + 1, 'x') + "\"}",
     "2: prompt: is "},
  };
  const std::string first = R"({"prompt": "a", "width": 416, "height": 736, "seconds": 5, "seed": 1, "name": "first"})";
  for (auto& c : cases) {
    nodes::verbs::shot_list l;
    auto why = parse(d.path(), first + "\n" + c.line + "\n" + good + "\n", l);
    INFO(c.line.substr(0, 200) << " -> " << why);
    CHECK(why.rfind(f + c.where, 0) == 0);
    CHECK(l.shots.empty());  // nothing of the file is kept
  }
  // A second take's output stem colliding with another shot's name.
  nodes::verbs::shot_list l;
  CHECK(parse(d.path(), "{" + base + ", \"prompt\": \"a\", \"name\": \"x-take-2\"}\n{" + base
                          + ", \"prompt\": \"b\", \"name\": \"x\", \"takes\": 2}\n", l)
          .rfind(f + "2: name: its output 'x-take-2' is also an output of line 1", 0) == 0);
  // Takes summed over the file, against the run's bound.
  CHECK(parse(d.path(), "{" + base + ", \"prompt\": \"a\", \"takes\": 600}\n{" + base
                          + ", \"prompt\": \"b\", \"takes\": 600}\n", l, "shots.jsonl", 1000)
          .rfind(f + "2: takes: the file's takes add up to more than 1000", 0) == 0);
  CHECK(parse(d.path(), "# nothing\n\n", l).find("holds no shots") != std::string::npos);
}

TEST_CASE("capacity: a shot no pool of the mode holds is refused by line, naming the pools") {
  testing_support::temp_dir d("vl-shots");
  auto s = nodes::verbs::load_plan_setup("", "");
  nodes::verbs::shot_list l;
  REQUIRE(parse(d.path(), std::string(good) + "\n"
                  + R"({"prompt": "b", "width": 736, "height": 1280, "seconds": 10, "seed": 2, "name": "big"})"
                  + "\n", l).empty());
  auto why = nodes::verbs::shot_file_capacity(d.path() + "/shots.jsonl", l, s.state, "four_four_plus_one");
  CHECK(why.rfind(d.path() + "/shots.jsonl:2: size: no pool of mode four_four_plus_one can hold "
                  "736x1280, 10 s", 0) == 0);
  CHECK(why.find("four_a (t10x4) holds up to 4,710,400") != std::string::npos);
  CHECK(why.find("four_b") != std::string::npos);
  CHECK(nodes::verbs::shot_file_capacity(d.path() + "/shots.jsonl", l, s.state,
                                  "four_four_xtx_plus_one").empty());
  // The planner (and the coordinator, with the same function) refuse it by shot.
  actors::planner::request req;
  req.mode = "four_four_plus_one";
  req.shots = l.shots;
  auto p = actors::planner::plan(s.state, *s.est, req);
  CHECK(p.refused.rfind("shot 2 (big): no pool of mode four_four_plus_one", 0) == 0);
}

TEST_CASE("mixed sizes: each job goes only to pools that hold it, under every policy") {
  // 736x1280x10 fits 8 x T10 and the XTX, not 4 x T10; 416x736x5 fits every pool.
  std::vector<msg::shot> shots;
  for (uint32_t i = 0; i < 24; ++i) {
    msg::shot s;
    s.prompt = "shot " + std::to_string(i);
    const bool big = i % 3 == 0;
    s.width = big ? 736 : 416;
    s.height = big ? 1280 : 736;
    s.seconds = big ? 10 : 5;
    s.seed = i;
    shots.push_back(s);
  }
  for (std::string policy : {"in_turn", "first_free", "auto"}) {
    auto s = nodes::verbs::load_plan_setup("", "", policy);
    for (std::string mode : {"four_four_xtx_plus_one", "auto"}) {
      if (mode == "auto" && policy != "auto")
        continue;
      actors::planner::request req;
      req.mode = mode;
      req.shots = shots;
      auto p = actors::planner::plan(s.state, *s.est, req);
      INFO(policy << " on " << mode << ": " << p.refused);
      REQUIRE(p.refused.empty());
      REQUIRE(p.finished);
      CHECK(p.violations.empty());
      CHECK(p.summary.succeeded == shots.size());
      std::set<std::string> small_pools;
      for (auto& j : p.jobs) {
        if (j.seconds == 10)
          CHECK((j.pool == "eight" || j.pool == "xtx"));
        else
          small_pools.insert(j.pool);
      }
      // The small shots are not kept off the 4 x T10 pools by the big ones.
      CHECK((small_pools.count("four_a") + small_pools.count("four_b")) > 0);
    }
  }
}

TEST_CASE("auto on a mixed list led by shots 4 x T10 cannot hold is not behind the fixed mode") {
  // The first shots are all 10 s (not on 4 x T10).
  auto s = nodes::verbs::load_plan_setup("", "");
  std::vector<msg::shot> shots;
  for (uint32_t i = 0; i < 12; ++i) {
    msg::shot sh;
    sh.prompt = "p" + std::to_string(i);
    const bool big = i < 4;
    sh.width = big ? 736 : 416;
    sh.height = big ? 1280 : 736;
    sh.seconds = big ? 10 : 5;
    sh.seed = i;
    shots.push_back(sh);
  }
  actors::planner::request req;
  req.mode = "four_four_xtx_plus_one";
  req.shots = shots;
  auto fixed = actors::planner::plan(s.state, *s.est, req);
  req.mode = actors::coordinator::auto_mode;
  auto a = actors::planner::plan(s.state, *s.est, req);
  REQUIRE(a.finished);
  REQUIRE(a.summary.succeeded == 12);
  CHECK(a.summary.makespan_s <= fixed.summary.makespan_s * 1.0001);
}

TEST_CASE("the run index: one line per video, appended, never rewritten, a torn line ended") {
  testing_support::temp_dir d("vl-shots");
  const std::string path = d.path() + "/index.jsonl";
  actors::decoder::cache c;
  actors::decoder::entry e;
  e.order.decoder = "rtx3080ti";
  e.order.pool = "eight";
  e.order.sampling_s = 100;
  e.order.job.run_id = "run-1";
  e.order.job.name = "hero";
  e.order.job.prompt_sha256 = std::string(64, 'a');
  e.order.job.reference_sha256 = std::string(64, 'b');
  e.output = d.path() + "/hero.simvideo";
  e.output_sha256 = std::string(64, 'c');
  CHECK(actors::decoder::append(c, path, e));
  const std::string after_one = files::read_all(path);
  CHECK(!actors::decoder::append(c, path, e));  // the same video: no second line
  actors::decoder::cache fresh;                  // after a restart: read from the file
  CHECK(!actors::decoder::append(fresh, path, e));
  CHECK(files::read_all(path) == after_one);
  auto j = nlohmann::json::parse(after_one);
  CHECK(j["name"] == "hero");
  CHECK(j["reference_sha256"] == std::string(64, 'b'));
  CHECK(j["pool"] == "eight");
  CHECK(j["timings"]["sampling_s"] == 100.0);
  // A crash mid-append left a fragment: the next line still stands whole after it.
  { std::ofstream(path, std::ios::app) << "{\"name\": \"tor"; }
  e.output = d.path() + "/other.simvideo";
  actors::decoder::cache after_crash;
  CHECK(actors::decoder::append(after_crash, path, e));
  auto text = files::read_all(path);
  CHECK(text.rfind(after_one, 0) == 0);  // earlier bytes kept
  CHECK(actors::decoder::read_keys(path).size() == 2);
  CHECK(text.back() == '\n');
}

TEST_CASE("plan --jobs: plans the list on every mode, a bad list or extra options are refused") {
  testing_support::temp_dir d("vl-shots");
  nodes::verbs::shot_list l;
  REQUIRE(parse(d.path(), std::string(good) + "\n"
                  + R"({"prompt": "b", "width": 736, "height": 1280, "seconds": 10, "seed": 2, "name": "big", "takes": 2})"
                  + "\n", l).empty());
  nodes::verbs::plan_options o;
  o.jobs = d.path() + "/shots.jsonl";
  o.mode = "all";
  CHECK(nodes::verbs::run_plan(o) == 0);
  o.mode = actors::coordinator::auto_mode;
  o.json = true;
  CHECK(nodes::verbs::run_plan(o) == 0);
  o.mode = "four_four_plus_one";  // cannot hold line 2
  CHECK(nodes::verbs::run_plan(o) == 2);
  o.mode = "all";
  o.given = {"--width"};
  CHECK(nodes::verbs::run_plan(o) == 2);
  o.given.clear();
  write(d.path() + "/shots.jsonl", std::string(good) + "\n{\"prompt\": \"x\"}\n");
  CHECK(nodes::verbs::run_plan(o) == 2);
  // The uniform form still needs its options.
  nodes::verbs::plan_options u;
  u.mode = "all";
  CHECK(nodes::verbs::run_plan(u) == 2);
  u.given = {"--width", "--height", "--seconds", "--count"};
  u.width = 416;
  u.height = 736;
  u.seconds = 5;
  u.count = 2;
  CHECK(nodes::verbs::run_plan(u) == 0);
}

TEST_CASE("auto: free pools that cannot hold the lowest queued shot take the ones they hold") {
  // Mode four_four_xtx_plus_one under auto: 736x1280x10 fits only the XTX. With three such
  // shots first, the 4 x T10 pools must not idle until the XTX has taken all three.
  auto s = nodes::verbs::load_plan_setup("", "", "auto");
  std::vector<msg::shot> shots;
  for (uint32_t i = 0; i < 9; ++i) {
    msg::shot sh;
    sh.prompt = "p" + std::to_string(i);
    const bool big = i < 3;
    sh.width = big ? 736 : 416;
    sh.height = big ? 1280 : 736;
    sh.seconds = big ? 10 : 5;
    sh.seed = i;
    shots.push_back(sh);
  }
  actors::planner::request req;
  req.mode = "four_four_xtx_plus_one";
  req.shots = shots;
  auto p = actors::planner::plan(s.state, *s.est, req);
  REQUIRE(p.policy == std::string("auto"));
  REQUIRE(p.finished);
  REQUIRE(p.summary.succeeded == 9);
  double first_small = 1e300, first_big_end = 1e300;
  for (auto& j : p.jobs) {
    REQUIRE(j.sampling);
    if (j.seconds == 10) {
      CHECK(j.pool == "xtx");
      first_big_end = std::min(first_big_end, j.sampling->end);
    } else {
      first_small = std::min(first_small, j.sampling->start);
    }
  }
  CHECK(first_small < first_big_end);
}
