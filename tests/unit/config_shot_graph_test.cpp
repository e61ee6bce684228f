// The checks of a shot list's graph (config/shot_graph.hpp): names, cycles, frames,
// sequences, refused naming the lines; ranks and the links of the jobs made of it.
#include <catch2/catch.hpp>

#include "common/sha256.hpp"
#include "config/shot_graph.hpp"

using namespace vidline;
namespace g = vidline::config::graph;

namespace {

msg::shot shot(const std::string& name, uint32_t seconds = 5) {
  msg::shot s;
  s.name = name;
  s.prompt = "p " + name;
  s.width = 416;
  s.height = 736;
  s.seconds = seconds;
  return s;
}

msg::job_input from(const std::string& src, const std::string& frame = "last",
                    const std::string& name = "first_frame") {
  msg::job_input in;
  in.name = name;
  in.from = src;
  in.frame = frame;
  return in;
}

std::string check(const std::vector<msg::shot>& shots) {
  return g::graph_problem(shots, [](std::size_t i) { return "f:" + std::to_string(i + 1); });
}

} // namespace

TEST_CASE("frame_index: first, last and numbers within the video", "[graph]") {
  CHECK(g::frames_of(5) == 121);
  CHECK(g::frame_index("first", 121) == 0u);
  CHECK(g::frame_index("last", 121) == 120u);
  CHECK(g::frame_index("120", 121) == 120u);
  CHECK_FALSE(g::frame_index("121", 121));
  CHECK_FALSE(g::frame_index("-1", 121));
  CHECK_FALSE(g::frame_index("1.5", 121));
  CHECK_FALSE(g::frame_index("", 121));
}

TEST_CASE("graph_problem accepts a chain and a sequence", "[graph]") {
  std::vector<msg::shot> s{shot("a"), shot("b"), shot("c")};
  s[1].inputs.push_back(from("a"));
  s[2].inputs.push_back(from("b", "first"));
  for (auto& x : s)
    x.sequence = "long";
  CHECK(check(s) == "");
  CHECK(g::has_graph(s));
  CHECK_FALSE(g::has_graph({shot("x")}));
}

TEST_CASE("graph_problem names the line of an unknown name, itself, a bad frame", "[graph]") {
  std::vector<msg::shot> s{shot("a", 2), shot("b")};
  s[1].inputs.push_back(from("nope"));
  CHECK(check(s) == "f:2: inputs.first_frame: from: no shot of the list is named 'nope'");
  s[1].inputs[0] = from("b");
  CHECK(check(s) == "f:2: inputs.first_frame: from: a shot cannot take an input from itself");
  s[1].inputs[0] = from("a", "49");  // a 2 s video has frames 0..48
  CHECK(check(s) == "f:2: inputs.first_frame: frame: '49' is not \"first\", \"last\" or a frame "
                    "of shot 'a' (2 s: frames 0 to 48)");
  s[1].inputs[0] = from("a", "48");
  CHECK(check(s) == "");
  s[1].inputs[0].latent = true;  // a latent is the whole shot: with a frame it is refused
  CHECK(check(s) == "f:2: inputs.first_frame: frame: not with \"latent\": true");
  s[1].inputs[0].frame.clear();  // the latent alone: the workflow's check decides
  CHECK(check(s) == "");
  s[1].inputs[0] = from("a");
  s[1].inputs[0].sha256 = std::string(64, 'a');
  CHECK(check(s).find("f:2: inputs.first_frame: is both a file") == 0);
}

TEST_CASE("from_input_json reads a latent hand-over, refuses it with a frame", "[graph]") {
  msg::job_input in;
  CHECK(g::from_input_json("init_latent", {{"from", "a"}, {"latent", true}}, in) == "");
  CHECK(in.latent);
  CHECK(in.from == "a");
  CHECK(in.frame.empty());
  CHECK(g::from_input_json("init_latent", {{"from", "a"}, {"latent", true}, {"frame", "last"}}, in)
        == "frame: not with \"latent\": true (the latent is the whole shot, not a frame of it)");
  CHECK(g::from_input_json("init_latent", {{"from", "a"}, {"latent", "yes"}}, in)
        == "latent: must be true or false");
}

TEST_CASE("graph_problem names every line of a cycle", "[graph]") {
  std::vector<msg::shot> s{shot("a"), shot("b"), shot("c"), shot("d")};
  s[0].inputs.push_back(from("c"));
  s[1].inputs.push_back(from("a"));
  s[2].inputs.push_back(from("b"));
  s[3].inputs.push_back(from("c"));
  CHECK(check(s) == "f:1: inputs: the shots take from each other in a cycle: f:1 takes from "
                    "f:3 takes from f:2 takes from f:1");
}

TEST_CASE("graph_problem refuses a sequence of differing sizes or with takes", "[graph]") {
  std::vector<msg::shot> s{shot("a"), shot("b"), shot("c")};
  s[0].sequence = s[2].sequence = "ep1";
  s[2].width = 736;
  s[2].height = 416;
  CHECK(check(s) == "f:3: sequence: its size 736x416 differs from 416x736 of the sequence's "
                    "first part, f:1 (parts are joined without re-encoding)");
  s[2].width = 416;
  s[2].height = 736;
  s[1].sequence = "ep1";
  s[1].takes = 2;
  CHECK(check(s) == "f:2: takes: a part of sequence 'ep1' has one take (it has 2)");
}

TEST_CASE("shot_ranks: a chain's head outranks its tail and a lone shot", "[graph]") {
  std::vector<msg::shot> s{shot("lone"), shot("c3"), shot("c2"), shot("c1")};
  s[1].inputs.push_back(from("c2"));
  s[2].inputs.push_back(from("c1"));
  auto r = g::shot_ranks(s);
  CHECK(r[0] == Approx(1));
  CHECK(r[1] == Approx(1));
  CHECK(r[2] == Approx(2));
  CHECK(r[3] == Approx(3));
}

TEST_CASE("link_jobs: inputs point at the source's job of the same take, else take 0",
          "[graph]") {
  std::vector<msg::shot> s{shot("a"), shot("b")};
  s[0].takes = 2;
  s[1].takes = 3;
  s[1].inputs.push_back(from("a"));
  s[1].sequence = "";
  // Jobs in the order b0 b1 b2 a0 a1 (as a priority ordering would put them).
  std::vector<msg::job_spec> jobs(5);
  std::vector<std::size_t> shot_of{1, 1, 1, 0, 0};
  std::vector<uint32_t> takes{0, 1, 2, 0, 1};
  g::link_jobs(jobs, s, shot_of, takes);
  REQUIRE(jobs[0].inputs.size() == 1);
  CHECK(jobs[0].inputs[0].from_index == 3);
  CHECK(jobs[1].inputs[0].from_index == 4);
  CHECK(jobs[2].inputs[0].from_index == 3);  // a has no third take: its first
  CHECK(jobs[2].shot == "b");
  CHECK(jobs[2].take == 2);
  CHECK(jobs[3].inputs.empty());
}

TEST_CASE("sim_frame and sim_sequence follow the sim contract", "[graph]") {
  const std::string v(64, 'a');
  std::string msg = "vidline-sim-frame" + std::string(32, '\xaa') + std::string("\x78\0\0\0", 4);
  CHECK(g::sim_frame(v, 120) == [&] {
    auto d = vidline::sha256_of(msg);
    return std::string(reinterpret_cast<const char*>(d.data()), d.size());
  }());
  CHECK(g::sim_frame(v, 120).size() == 32);
  CHECK(g::sim_frame("zz", 0).empty());
  CHECK(g::sim_sequence({"ab", "cd"}) == "vidline-sim-sequence 1\npart ab\npart cd\n");
}
