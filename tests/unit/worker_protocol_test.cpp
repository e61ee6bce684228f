// The worker protocol's codec (backends/worker/protocol.*): every message round-trips, and
// every malformed line is refused with an error that names what is wrong.

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "backends/worker/protocol.hpp"
#include "backends/worker/worker_options.hpp"
#include "config/config.hpp"

using namespace vidline::backends::worker;
using json = nlohmann::json;

namespace {

std::string line(const json& j) { return j.dump(); }

std::optional<worker_message> decode(const json& j, std::string& error) {
  return decode_worker_line(line(j), error);
}

} // namespace

TEST_CASE("worker protocol: a request round-trips with every field", "[worker]") {
  request r;
  r.id = "a17";
  r.stage = "sample";
  r.run_id = "run-9";
  r.index = 4;
  r.seed = 18446744073709551557ull;  // above 2^63: must not lose bits
  r.width = 736;
  r.height = 416;
  r.seconds = 5;
  r.frames = 121;
  r.fps = 24;
  r.prompt = "a \"quoted\" prompt\nwith a newline and é";
  r.prompt_file = "/d/work/a17/prompt.txt";
  r.conditioning = "/d/conditioning/c.bin";
  r.reference = "/ref/x.png";
  r.output = "/d/work/a17/product-l.bin";
  r.work_dir = "/d/work/a17";
  r.timeout_s = 1800;
  std::string text = encode_request(r);
  REQUIRE(text.back() == '\n');
  REQUIRE(text.find('\n') == text.size() - 1);  // one line, whatever the prompt holds
  std::string error;
  auto back = decode_request(std::string_view(text).substr(0, text.size() - 1), error);
  REQUIRE(back);
  CHECK(back->id == r.id);
  CHECK(back->stage == r.stage);
  CHECK(back->seed == r.seed);
  CHECK(back->frames == 121);
  CHECK(back->prompt == r.prompt);
  CHECK(back->conditioning == r.conditioning);
  CHECK(back->reference == r.reference);
  CHECK(back->output == r.output);
  CHECK(back->timeout_s == 1800);
  CHECK(json::parse(text)["v"] == protocol_version);
}

TEST_CASE("worker protocol: the worker's messages decode", "[worker]") {
  std::string error;
  auto h = decode({{"v", 1}, {"type", "hello"}, {"stages", {"sample", "decode"}}, {"pid", 7}}, error);
  REQUIRE(h);
  CHECK(h->type == worker_message::kind::hello);
  CHECK(h->stages == std::vector<std::string>{"sample", "decode"});

  auto p = decode({{"v", 1}, {"type", "progress"}, {"id", "a1"}, {"step", 3}, {"steps", 30}}, error);
  REQUIRE(p);
  CHECK(p->type == worker_message::kind::progress);
  CHECK(p->step == 3);
  CHECK(p->steps == 30);

  auto r = decode({{"v", 1}, {"type", "result"}, {"id", "a1"}, {"outcome", "capacity"},
                   {"cold", true}, {"error", "CUDA out of memory"}, {"future_field", 1}},
                  error);
  REQUIRE(r);
  CHECK(r->type == worker_message::kind::result);
  CHECK(r->outcome == "capacity");
  CHECK(r->cold);
  CHECK(r->error == "CUDA out of memory");

  auto g = decode({{"v", 1}, {"type", "pong"}, {"seq", 12}}, error);
  REQUIRE(g);
  CHECK(g->seq == 12);
  CHECK(json::parse(encode_ping(12))["seq"] == 12);
  CHECK(json::parse(encode_cancel("a1"))["type"] == "cancel");
  CHECK(json::parse(encode_shutdown())["type"] == "shutdown");
}

TEST_CASE("worker protocol: malformed lines are refused, naming the problem", "[worker]") {
  auto refused = [](const std::string& text) {
    std::string error;
    auto m = decode_worker_line(text, error);
    CHECK_FALSE(m);
    return error;
  };
  CHECK(refused("not json") == "not a JSON object");
  CHECK(refused("[1,2]") == "not a JSON object");
  CHECK(refused(R"({"type":"hello","stages":[]})") == "no protocol version 'v'");
  CHECK(refused(R"({"v":3,"type":"hello","stages":[]})").find("protocol version 3") != std::string::npos);
  CHECK(refused(R"({"v":1})") == "no message 'type'");
  CHECK(refused(R"({"v":1,"type":"dance"})") == "unknown message type 'dance'");
  CHECK(refused(R"({"v":1,"type":"hello","stages":"sample"})") == "hello: 'stages' must be a list");
  CHECK(refused(R"({"v":1,"type":"hello","stages":["paint"]})").find("unknown stage") != std::string::npos);
  CHECK(refused(R"({"v":1,"type":"result","outcome":"ok"})") == "result: no request 'id'");
  CHECK(refused(R"({"v":1,"type":"result","id":"a","outcome":"great"})").find("outcome 'great'") != std::string::npos);
  CHECK(refused(R"({"v":1,"type":"result","id":"a","outcome":"corrupt"})").find("known: ok, capacity") != std::string::npos);
  CHECK(refused(R"({"v":1,"type":"result","id":"a","outcome":"ok","cold":"yes"})") ==
        "field 'cold' has the wrong type or range");
  CHECK(refused(R"({"v":1,"type":"progress","id":"a","step":4,"steps":3})").find("step 4 of 3") != std::string::npos);
  CHECK(refused(R"({"v":1,"type":"progress","id":"a","step":0,"steps":0})").find("steps must be > 0") != std::string::npos);
  CHECK(refused(R"({"v":1,"type":"progress","id":"a","step":-1,"steps":3})") ==
        "field 'step' has the wrong type or range");
  std::string error;
  CHECK_FALSE(decode_request(R"({"v":1,"type":"request","id":"a"})", error));
  CHECK(error == "request: 'id' and 'output' are required");
}

TEST_CASE("worker protocol: load and loaded, and the model a result names", "[worker]") {
  load_request l{"load-p0", "sample", "fl2v", "h3-fl2v-int8"};
  std::string text = encode_load(l);
  REQUIRE(text.back() == '\n');
  std::string error;
  auto back = decode_load(std::string_view(text).substr(0, text.size() - 1), error);
  REQUIRE(back);
  CHECK(back->id == "load-p0");
  CHECK(back->stage == "sample");
  CHECK(back->workflow == "fl2v");
  CHECK(back->model == "h3-fl2v-int8");
  CHECK_FALSE(decode_load(line({{"v", 2}, {"type", "load"}}), error));
  CHECK(error.find("id") != std::string::npos);

  auto hello = decode({{"v", 2}, {"type", "hello"}, {"stages", {"sample"}}, {"load", true}}, error);
  REQUIRE(hello);
  CHECK(hello->takes_load);
  auto old = decode({{"v", 1}, {"type", "hello"}, {"stages", {"sample"}}}, error);
  REQUIRE(old);
  CHECK_FALSE(old->takes_load);

  auto loaded = decode({{"v", 2}, {"type", "loaded"}, {"id", "load-p0"}, {"model", "m"},
                        {"model_identity", "sha256:ab"}, {"load_s", 4.5}}, error);
  REQUIRE(loaded);
  CHECK(loaded->type == worker_message::kind::loaded);
  CHECK(loaded->outcome == "ok");
  CHECK(loaded->model == "m");
  CHECK(loaded->model_identity == "sha256:ab");
  CHECK(loaded->load_s == 4.5);
  auto refused = decode({{"v", 2}, {"type", "loaded"}, {"id", "x"}, {"outcome", "fatal"},
                         {"error", "no such file"}}, error);
  REQUIRE(refused);
  CHECK(refused->outcome == "fatal");

  auto result = decode({{"v", 2}, {"type", "result"}, {"id", "a"}, {"outcome", "ok"},
                        {"model", "m"}, {"model_identity", "sha256:cd"}}, error);
  REQUIRE(result);
  CHECK(result->model == "m");
  CHECK(result->model_identity == "sha256:cd");
  auto plain = decode({{"v", 2}, {"type", "result"}, {"id", "a"}, {"outcome", "ok"}}, error);
  REQUIRE(plain);
  CHECK(plain->model.empty());
  CHECK(plain->model_identity.empty());
  CHECK_FALSE(decode({{"v", 2}, {"type", "result"}, {"id", "a"}, {"outcome", "ok"},
                      {"model_identity", 5}}, error));
  CHECK(error.find("model_identity") != std::string::npos);
}

TEST_CASE("worker protocol: checkpoint, resume and preempt", "[worker][checkpoint]") {
  request r;
  r.id = "a9";
  r.stage = "sample";
  r.output = "/d/work/a9/product-l.bin";
  r.work_dir = "/d/work/a9";
  std::string error;

  SECTION("a request without checkpoints says nothing of them: an older worker sees no change") {
    const auto j = json::parse(encode_request(r));
    CHECK_FALSE(j.contains("checkpoint"));
    CHECK_FALSE(j.contains("resume"));
    auto back = decode_request(line(j), error);
    REQUIRE(back);
    CHECK(back->checkpoint_dir.empty());
    CHECK(back->resume_step == 0);
    CHECK(back->resume_file.empty());
  }

  SECTION("the checkpoint folder, its interval and the resume point round-trip") {
    r.checkpoint_dir = "/d/work/a9/checkpoints";
    r.checkpoint_interval_s = 2.5;
    r.resume_step = 24;
    r.resume_file = "/d/latents/ab.latent";
    r.resume_sha256 = std::string(64, 'a');
    const std::string text = encode_request(r);
    const auto j = json::parse(text);
    CHECK(j["checkpoint"]["dir"] == "/d/work/a9/checkpoints");
    CHECK(j["checkpoint"]["interval_s"] == 2.5);
    CHECK(j["resume"]["step"] == 24);
    auto back = decode_request(std::string_view(text).substr(0, text.size() - 1), error);
    REQUIRE(back);
    CHECK(back->checkpoint_dir == r.checkpoint_dir);
    CHECK(back->checkpoint_interval_s == 2.5);
    CHECK(back->resume_step == 24);
    CHECK(back->resume_file == r.resume_file);
    CHECK(back->resume_sha256 == r.resume_sha256);
  }

  SECTION("a resume point of the wrong type is refused, naming the field") {
    auto j = json::parse(encode_request(r));
    j["resume"] = {{"step", -3}, {"file", "/x"}, {"sha256", ""}};
    CHECK_FALSE(decode_request(line(j), error));
    CHECK(error.find("'step'") != std::string::npos);
    j["resume"] = {{"step", 3}, {"file", 7}};
    CHECK_FALSE(decode_request(line(j), error));
    CHECK(error.find("'file'") != std::string::npos);
    j.erase("resume");
    j["checkpoint"] = {{"dir", "/c"}, {"interval_s", "often"}};
    CHECK_FALSE(decode_request(line(j), error));
    CHECK(error.find("'interval_s'") != std::string::npos);
  }

  SECTION("preempt names its request") {
    const std::string text = encode_preempt("a9");
    REQUIRE(text.back() == '\n');
    const auto j = json::parse(text);
    CHECK(j["type"] == "preempt");
    CHECK(j["id"] == "a9");
    CHECK(j["v"] == protocol_version);
  }

  SECTION("a worker's checkpoint decodes; steps may go unsaid") {
    auto c = decode({{"v", 2}, {"type", "checkpoint"}, {"id", "a9"}, {"step", 12}, {"steps", 30},
                     {"file", "/d/work/a9/checkpoints/12.ckpt"}},
                    error);
    REQUIRE(c);
    CHECK(c->type == worker_message::kind::checkpoint);
    CHECK(c->id == "a9");
    CHECK(c->step == 12);
    CHECK(c->steps == 30);
    CHECK(c->file == "/d/work/a9/checkpoints/12.ckpt");
    auto unsaid = decode({{"v", 2}, {"type", "checkpoint"}, {"id", "a9"}, {"step", 40},
                          {"file", "/c/40.ckpt"}},
                         error);
    REQUIRE(unsaid);
    CHECK(unsaid->steps == 0);
    CHECK(unsaid->step == 40);
  }

  SECTION("a malformed checkpoint is refused, naming what is wrong") {
    auto refused = [&](const json& j) {
      CHECK_FALSE(decode(j, error));
      return error;
    };
    const std::string need = "checkpoint: needs 'file' and a 'step' > 0 (and <= 'steps' when given)";
    CHECK(refused({{"v", 2}, {"type", "checkpoint"}, {"id", "a"}, {"step", 0}, {"file", "/f"}}) == need);
    CHECK(refused({{"v", 2}, {"type", "checkpoint"}, {"id", "a"}, {"step", 3}}) == need);
    CHECK(refused({{"v", 2}, {"type", "checkpoint"}, {"id", "a"}, {"step", 31}, {"steps", 30},
                   {"file", "/f"}}) == need);
    CHECK(refused({{"v", 2}, {"type", "checkpoint"}, {"step", 3}, {"file", "/f"}})
          == "checkpoint: no request 'id'");
    CHECK(refused({{"v", 2}, {"type", "checkpoint"}, {"id", "a"}, {"step", "3"}, {"file", "/f"}})
          == "field 'step' has the wrong type or range");
  }

  SECTION("preempted is a result's outcome, never a load's") {
    auto p = decode({{"v", 2}, {"type", "result"}, {"id", "a9"}, {"outcome", "preempted"},
                     {"error", "made way at step 12 of 30"}},
                    error);
    REQUIRE(p);
    CHECK(p->outcome == "preempted");
    CHECK_FALSE(decode({{"v", 2}, {"type", "loaded"}, {"id", "l"}, {"outcome", "preempted"}}, error));
    CHECK(error.find("outcome 'preempted'") != std::string::npos);
  }
}

TEST_CASE("worker protocol: the line reader splits a stream and refuses overlong lines", "[worker]") {
  line_reader r;
  CHECK(r.feed("{\"a\":"));
  CHECK_FALSE(r.next());
  CHECK(r.feed("1}\n{\"b\":2}\r\n{\"c\""));
  CHECK(r.next() == std::optional<std::string>("{\"a\":1}"));
  CHECK(r.next() == std::optional<std::string>("{\"b\":2}"));
  CHECK_FALSE(r.next());
  CHECK(r.feed(":3}\n"));
  CHECK(r.next() == std::optional<std::string>("{\"c\":3}"));
  line_reader big;
  std::string chunk(64 * 1024, 'x');
  bool ok = true;
  for (std::size_t n = 0; n <= max_line_bytes / chunk.size() && ok; ++n)
    ok = big.feed(chunk);
  CHECK_FALSE(ok);
}

TEST_CASE("worker options: defaults, and errors that name the field", "[worker]") {
  auto o = parse_worker_options("w", {{"argv", {"/usr/bin/python3", "w.py", "--gpus", "{devices}"}}});
  CHECK(o.argv.size() == 4);
  CHECK(o.max_restarts == 5);
  CHECK(o.cancel_grace_s == 5);
  auto error_of = [](const json& j) {
    try {
      parse_worker_options("w", j);
    } catch (const vidline::config::config_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of(json()).find("/backends/w/options") != std::string::npos);
  CHECK(error_of({{"argv", json::array()}}).find("/backends/w/options/argv") != std::string::npos);
  CHECK(error_of({{"argv", {"w.py", "{seed}"}}}).find("no placeholder {seed}") != std::string::npos);
  CHECK(error_of({{"argv", {"w.py"}}, {"cancel_grace_s", -1}}).find("cancel_grace_s") != std::string::npos);
  CHECK(error_of({{"argv", {"w.py"}}, {"sample", {}}}).find("sample") != std::string::npos);
  CHECK(error_of({{"argv", {"w.py"}}, {"log_dir", "rel"}}).find("absolute") != std::string::npos);
}
