/// Unit tests of the envelope codec: round trips of every message type, and refusal of
/// everything that is not a well-formed frame within limits, without large allocations.

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "messages/envelope.hpp"
#include "messages/messages.hpp"

// -- allocation probe ---------------------------------------------------------------------
// The process's malloc family is replaced by thin wrappers over glibc's own allocator that
// remember the largest single request while a probe is active. msgpack's zone allocates
// with ::malloc, operator new ends in malloc: every allocation of a decode is seen.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void __libc_free(void*);
}

namespace {
std::atomic<bool> probing{false};
std::atomic<std::size_t> largest_allocation{0};

void note_allocation(std::size_t n) {
  if (!probing.load(std::memory_order_relaxed))
    return;
  std::size_t cur = largest_allocation.load(std::memory_order_relaxed);
  while (n > cur && !largest_allocation.compare_exchange_weak(cur, n)) {
  }
}
} // namespace

extern "C" void* malloc(std::size_t n) {
  note_allocation(n);
  return __libc_malloc(n);
}
extern "C" void* calloc(std::size_t a, std::size_t b) {
  note_allocation(a * b);
  return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, std::size_t n) {
  note_allocation(n);
  return __libc_realloc(p, n);
}
extern "C" void free(void* p) { __libc_free(p); }

namespace {

using namespace vidline::msg;

/// Largest single allocation a refused hostile input may cause: msgpack's first zone
/// chunk (8 KiB) and the object handle, with room to spare; far below any claim tested.
constexpr std::size_t small_allocation = 64 * 1024;

/// Runs `f` and returns the largest single allocation it made.
template <class F>
std::size_t largest_allocation_of(F&& f) {
  largest_allocation = 0;
  probing = true;
  f();
  probing = false;
  return largest_allocation.load();
}

envelope sample_envelope(std::string type) {
  envelope e;
  e.type = std::move(type);
  e.id = 1'700'000'000'000'123ull;
  e.sender = "hostA";
  e.correlation = 42;
  e.target = "coordinator";
  return e;
}

std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list)
    s.push_back(static_cast<char>(b));
  return s;
}

decode_error decode(const std::string& s, frame& f, const decode_limits& l = {}) {
  return decode_frame(s.data(), s.size(), l, f);
}

decode_error decode(const std::string& s) {
  frame f;
  return decode(s, f);
}

/// Packs an arbitrary envelope-like array by hand, for shapes encode_frame cannot make.
template <class... Fields>
std::string raw_array(const Fields&... fields) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(sizeof...(Fields));
  (pk.pack(fields), ...);
  return std::string(buf.data(), buf.size());
}

std::string bin_of(const std::string& body) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_bin(static_cast<uint32_t>(body.size()));
  pk.pack_bin_body(body.data(), static_cast<uint32_t>(body.size()));
  return std::string(buf.data(), buf.size());
}

/// Encodes `x`, decodes it, unpacks the body and checks it packs to the same bytes.
template <class T>
void check_round_trip(const T& x) {
  INFO("type " << T::wire_name);
  const std::string body = pack_body(x);
  const envelope env = sample_envelope(T::wire_name);
  const std::string wire = encode_frame(env, body);
  frame f;
  REQUIRE(decode(wire, f) == decode_error::none);
  CHECK(f.env.version == protocol_version);
  CHECK(f.env.type == T::wire_name);
  CHECK(f.env.id == env.id);
  CHECK(f.env.sender == env.sender);
  CHECK(f.env.correlation == env.correlation);
  CHECK(f.env.target == env.target);
  CHECK(f.body == body);
  // Zero copy: the body view points into the wire bytes.
  CHECK(f.body.data() >= wire.data());
  CHECK(f.body.data() + f.body.size() <= wire.data() + wire.size());
  T back;
  REQUIRE(unpack_body_as(f.body, decode_limits{}, back));
  CHECK(pack_body(back) == body);
}

job_spec sample_job() {
  return job_spec{"run-7", 3, 1234567890123ull, 736, 1280, 5, "a cat on a skateboard",
                  std::string(64, 'a'), "/data/ref.png"};
}

sample_result sample_sample_result() {
  sample_result r;
  r.pool = "t10x8";
  r.host = "hostA";
  r.attempt = 99;
  r.run_id = "run-7";
  r.index = 3;
  r.outcome = outcome::ok;
  r.latent_sha256 = std::string(64, 'b');
  r.latent_bytes = 13'000'000;
  r.conditioning_s = 13.06;
  r.sampling_s = 110.395;
  r.cold = true;
  return r;
}

decode_result sample_decode_result() {
  decode_result r;
  r.decoder = "rtx3080ti";
  r.host = "hostB";
  r.attempt = 100;
  r.run_id = "run-7";
  r.index = 3;
  r.outcome = outcome::corrupt;
  r.error = "sha256 mismatch";
  r.output = "/data/out/run-7/3.mp4";
  r.output_sha256 = std::string(64, 'c');
  r.handoff_s = 0.012;
  r.decode_s = 11.859;
  return r;
}

} // namespace

TEST_CASE("every message type survives a round trip through a frame", "[codec]") {
  check_round_trip(sample_order{"t10x8", 99, sample_job()});
  check_round_trip(sample_sample_result());
  pool_status ps{"t10x8", "hostA", 5, 99, {sample_sample_result(), sample_sample_result()}, false};
  check_round_trip(ps);
  check_round_trip(result_ack{"t10x8", 99});
  check_round_trip(decode_order{"rtx3080ti", 100, sample_job(), std::string(64, 'b'),
                                13'000'000, "hostA"});
  check_round_trip(sample_decode_result());
  decoder_status ds{"rtx3080ti", "hostB", 2, 2, {100, 101}, 0, {sample_decode_result()}};
  check_round_trip(ds);
  check_round_trip(encode_request{std::string(64, 'd'), "a cat"});
  check_round_trip(encode_reply{std::string(64, 'd'), "/data/cond/d.pt", true, 0.0, ""});
  check_round_trip(heartbeat{"hostA", 0xfeedfacecafebeefull, 17, 1.7e9, "0.1.0",
                             std::string(64, 'c')});
  check_round_trip(peer_event{"hostB", true, 77, true});
  check_round_trip(latent_fetch{5, std::string(64, 'e'), 1u << 20, 1u << 20});
  check_round_trip(submit_run{"four_four_plus_one", "a cat", "", 416, 736, 5, 6, 42, "req-1"});
  check_round_trip(submit_reply{"run-7", ""});
  check_round_trip(status_query{""});
  check_round_trip(status_reply{"{\"runs\":[]}", ""});
  check_round_trip(shutdown_request{"test"});
}

TEST_CASE("a latent chunk carries its raw data without copies", "[codec]") {
  std::string data(1u << 20, '\0');
  std::mt19937_64 rng(7);
  for (auto& c : data)
    c = static_cast<char>(rng());
  latent_chunk c;
  c.transfer_id = 9;
  c.sha256 = std::string(64, 'f');
  c.offset = 3u << 20;
  c.total = 13'000'000;
  c.data = msgpack::type::raw_ref(data.data(), static_cast<uint32_t>(data.size()));
  const std::string body = pack_body(c);

  SECTION("the head helper produces exactly pack_body's bytes") {
    CHECK(pack_latent_chunk_head(c, data.size()) + data == body);
    latent_chunk err;
    err.transfer_id = 9;
    err.sha256 = c.sha256;
    err.error = "not found";
    CHECK(pack_latent_chunk_head(err, 0) == pack_body(err));
  }
  SECTION("encode_frame_head + body is encode_frame") {
    const envelope env = sample_envelope(latent_chunk::wire_name);
    CHECK(encode_frame_head(env, body.size()) + body == encode_frame(env, body));
  }
  SECTION("decoding references the frame's bytes") {
    const std::string wire = encode_frame(sample_envelope(latent_chunk::wire_name), body);
    frame f;
    REQUIRE(decode(wire, f) == decode_error::none);
    msgpack::object_handle keep;
    REQUIRE(unpack_body(f.body, decode_limits{}, keep));
    latent_chunk back;
    keep.get().convert(back);
    CHECK(back.transfer_id == 9);
    CHECK(back.offset == c.offset);
    CHECK(back.total == c.total);
    REQUIRE(back.data.size == data.size());
    CHECK(std::string_view(back.data.ptr, back.data.size) == data);
    CHECK(back.data.ptr >= wire.data());
    CHECK(back.data.ptr + back.data.size <= wire.data() + wire.size());
  }
  SECTION("decoding a 1 MiB chunk allocates nothing near its size") {
    const std::string wire = encode_frame(sample_envelope(latent_chunk::wire_name), body);
    std::size_t largest = largest_allocation_of([&] {
      frame f;
      REQUIRE(decode(wire, f) == decode_error::none);
      msgpack::object_handle keep;
      REQUIRE(unpack_body(f.body, decode_limits{}, keep));
    });
    CHECK(largest < small_allocation);
  }
}

TEST_CASE("frames outside the protocol are refused with their reason", "[codec]") {
  const std::string body = pack_body(result_ack{"pool", 1});
  const std::string good = encode_frame(sample_envelope("result_ack"), body);
  REQUIRE(decode(good) == decode_error::none);

  SECTION("empty and not msgpack") {
    CHECK(decode("") == decode_error::malformed);
    CHECK(decode(bytes({0xc1})) == decode_error::malformed);
    CHECK(decode("hello, is this the bus?") != decode_error::none);
  }
  SECTION("trailing bytes after a valid frame") {
    CHECK(decode(good + "x") == decode_error::malformed);
  }
  SECTION("oversized, checked before anything else") {
    decode_limits l;
    l.max_frame_bytes = good.size() - 1;
    frame f;
    CHECK(decode(good, f, l) == decode_error::oversized);
    const std::string huge(l.max_frame_bytes + 1, '\xc1');
    CHECK(decode(huge, f, l) == decode_error::oversized);
  }
  SECTION("unknown version") {
    envelope e = sample_envelope("result_ack");
    e.version = protocol_version + 1;
    CHECK(decode(encode_frame(e, body)) == decode_error::unknown_version);
    e.version = 0;
    CHECK(decode(encode_frame(e, body)) == decode_error::unknown_version);
    // A future version may change everything after the version field.
    CHECK(decode(raw_array(std::string("VIDLINE"), 2)) == decode_error::unknown_version);
  }
  SECTION("wrong magic") {
    CHECK(decode(raw_array(std::string("VIDLINX"), 1, std::string("t"), 1, std::string("s"), 0,
                           std::string("t"), 0)) == decode_error::bad_magic);
    CHECK(decode(raw_array(7, 1)) == decode_error::bad_magic);
    CHECK(decode(raw_array(std::string("vidline"), 1)) == decode_error::bad_magic);
  }
  SECTION("wrong shape") {
    CHECK(decode(pack_body(result_ack{"pool", 1})) == decode_error::bad_shape);  // a map
    CHECK(decode(bytes({0x2a})) == decode_error::bad_shape);                    // an int
    CHECK(decode(raw_array(std::string("VIDLINE"))) == decode_error::bad_shape);
    CHECK(decode(raw_array(std::string("VIDLINE"), std::string("1"))) == decode_error::bad_shape);
    CHECK(decode(raw_array(std::string("VIDLINE"), 1, std::string("result_ack"))) ==
          decode_error::bad_shape);
    const std::string v = "VIDLINE", t = "result_ack", s = "hostA", g = "coordinator";
    auto with_body = [&](const std::string& head_fields) { return head_fields + bin_of(body); };
    auto head = [&](auto type, auto id, auto sender, auto corr, auto target) {
      msgpack::sbuffer buf;
      msgpack::packer<msgpack::sbuffer> pk(buf);
      pk.pack_array(8);
      pk.pack(v);
      pk.pack(1);
      pk.pack(type);
      pk.pack(id);
      pk.pack(sender);
      pk.pack(corr);
      pk.pack(target);
      return std::string(buf.data(), buf.size());
    };
    CHECK(decode(with_body(head(t, 5, s, 0, g))) == decode_error::none);
    CHECK(decode(with_body(head(std::string(), 5, s, 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(3, 5, s, 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 0, s, 0, g))) == decode_error::bad_shape);   // id 0
    CHECK(decode(with_body(head(t, -5, s, 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, std::string(), 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, std::string("a\nb"), 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, std::string("a b"), 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, std::string("h\xc3\xa9"), 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, std::string(256, 'h'), 0, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, s, 1.5, g))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, s, 0, 7))) == decode_error::bad_shape);
    CHECK(decode(with_body(head(t, 5, s, 0, std::string()))) == decode_error::none);
    // The body must be a bin, not a str.
    CHECK(decode(head(t, 5, s, 0, g) + raw_array(body).substr(1)) == decode_error::bad_shape);
  }
  SECTION("fields added at the end of a version-1 envelope are ignored") {
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> pk(buf);
    pk.pack_array(9);
    pk.pack(std::string("VIDLINE"));
    pk.pack(1);
    pk.pack(std::string("result_ack"));
    pk.pack(5);
    pk.pack(std::string("hostA"));
    pk.pack(0);
    pk.pack(std::string("coordinator"));
    pk.pack_bin(static_cast<uint32_t>(body.size()));
    pk.pack_bin_body(body.data(), static_cast<uint32_t>(body.size()));
    pk.pack(std::string("trace-id"));
    frame f;
    CHECK(decode(std::string(buf.data(), buf.size()), f) == decode_error::none);
    CHECK(f.body == body);
  }
  SECTION("a frame truncated at every byte is refused") {
    const std::string big = encode_frame(
        sample_envelope("pool_status"),
        pack_body(pool_status{"t10x8", "hostA", 5, 99, {sample_sample_result()}, true}));
    for (std::size_t n = 0; n < big.size(); ++n) {
      INFO("truncated to " << n << " of " << big.size());
      frame f;
      CHECK(decode_frame(big.data(), n, decode_limits{}, f) != decode_error::none);
    }
    const std::string pbody = pack_body(sample_sample_result());
    for (std::size_t n = 0; n < pbody.size(); ++n) {
      msgpack::object_handle keep;
      CHECK_FALSE(unpack_body(std::string_view(pbody.data(), n), decode_limits{}, keep));
    }
  }
}

TEST_CASE("hostile headers are refused without large allocations", "[codec]") {
  // Each input claims far more than it holds; an 18-byte frame is what platform-facts.md
  // measured asking for 128 GiB from an unlimited msgpack::unpack.
  const std::string pad(13, '\0');
  struct hostile {
    const char* what;
    std::string input;
    decode_error expected;
  };
  const std::vector<hostile> cases = {
      {"array32 of 4G elements", bytes({0xdd, 0xff, 0xff, 0xff, 0xff}) + pad,
       decode_error::limit_exceeded},
      {"map32 of 4G pairs", bytes({0xdf, 0xff, 0xff, 0xff, 0xff}) + pad,
       decode_error::limit_exceeded},
      {"bin32 of 4 GiB", bytes({0xc6, 0xff, 0xff, 0xff, 0xff}) + pad,
       decode_error::limit_exceeded},
      {"str32 of 4 GiB", bytes({0xdb, 0xff, 0xff, 0xff, 0xff}) + pad,
       decode_error::limit_exceeded},
      {"ext32 of 4 GiB", bytes({0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}) + pad,
       decode_error::limit_exceeded},
      {"envelope-sized array of 16 elements holding 13 bytes",
       bytes({0xdc, 0x00, 0x10}) + pad, decode_error::malformed},
      {"bin32 of 1 MiB holding 13 bytes", bytes({0xc6, 0x00, 0x10, 0x00, 0x00}) + pad,
       decode_error::malformed},
      {"envelope with a bin claiming 4 MiB",
       raw_array(std::string("VIDLINE"), 1, std::string("t"), 1, std::string("s"), 0,
                 std::string("t")).replace(0, 1, "\x98") +
           bytes({0xc6, 0x00, 0x40, 0x00, 0x00}),
       decode_error::malformed},
  };
  for (const auto& h : cases) {
    INFO(h.what);
    CHECK(h.input.size() <= 64);
    decode_error got = decode_error::none;
    std::size_t largest = largest_allocation_of([&] { got = decode(h.input); });
    CHECK(got == h.expected);
    CHECK(largest < small_allocation);
  }

  // Bodies are decoded with the general limits (arrays up to 100000 elements, 16 deep).
  // msgpack allocates an array's elements when it reads the header, so without the
  // pre-scan these would cost 2.4 MB and 38 MB respectively.
  std::string nested;
  for (int i = 0; i < 16; ++i)
    nested += bytes({0xdd, 0x00, 0x01, 0x86, 0xa0});
  const std::vector<hostile> bodies = {
      {"array of 100000 holding 13 bytes", bytes({0xdd, 0x00, 0x01, 0x86, 0xa0}) + pad,
       decode_error::malformed},
      {"16 nested arrays of 100000", nested, decode_error::malformed},
      {"map of 1024 pairs in a 4-byte body", bytes({0xde, 0x04, 0x00, 0x01}),
       decode_error::malformed},
      {"nesting 100 deep", std::string(100, '\x91') + "\x01", decode_error::limit_exceeded},
  };
  for (const auto& h : bodies) {
    INFO(h.what);
    decode_error got = decode_error::none;
    bool unpacked = true;
    std::size_t largest = largest_allocation_of([&] {
      got = prescan(h.input.data(), h.input.size(), decode_limits{});
      msgpack::object_handle keep;
      unpacked = unpack_body(h.input, decode_limits{}, keep);
    });
    CHECK(got == h.expected);
    CHECK_FALSE(unpacked);
    CHECK(largest < small_allocation);
    // And carried inside an otherwise valid frame: the frame decodes, the body does not.
    const std::string wire = encode_frame(sample_envelope("pool_status"), h.input);
    frame f;
    REQUIRE(decode(wire, f) == decode_error::none);
    pool_status ps;
    CHECK_FALSE(unpack_body_as(f.body, decode_limits{}, ps));
  }
}

TEST_CASE("the pre-scan agrees with the limits msgpack enforces", "[codec]") {
  decode_limits l;
  l.max_array = 3;
  l.max_map = 2;
  l.max_str = 4;
  l.max_bin = 5;
  l.max_depth = 2;
  auto ok = [&](const std::string& s) { return prescan(s.data(), s.size(), l); };
  CHECK(ok(raw_array(1, 2, 3)) == decode_error::none);
  CHECK(ok(raw_array(1, 2, 3, 4)) == decode_error::limit_exceeded);
  CHECK(ok(raw_array(std::string("abcd"))) == decode_error::none);
  CHECK(ok(raw_array(std::string("abcde"))) == decode_error::limit_exceeded);
  CHECK(ok(bin_of("12345")) == decode_error::none);
  CHECK(ok(bin_of("123456")) == decode_error::limit_exceeded);
  CHECK(ok(bytes({0x91, 0x91, 0x01})) == decode_error::none);
  CHECK(ok(bytes({0x91, 0x91, 0x91, 0x01})) == decode_error::limit_exceeded);
  CHECK(ok(bytes({0x91, 0x90, 0x90})) == decode_error::malformed);  // trailing byte
  CHECK(ok(bytes({0x82, 0x01, 0x02, 0x03, 0x04})) == decode_error::none);
  CHECK(ok(bytes({0x83, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06})) == decode_error::limit_exceeded);
  CHECK(ok(bytes({0xd4, 0x01, 0x00})) == decode_error::limit_exceeded);  // ext: none allowed
  CHECK(ok(bytes({0xcb, 0, 0, 0, 0, 0, 0, 0})) == decode_error::malformed);  // short float
  CHECK(ok(bytes({0xcb, 0, 0, 0, 0, 0, 0, 0, 0})) == decode_error::none);
}

TEST_CASE("randomly damaged frames never crash or allocate much", "[codec]") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const std::string body =
      pack_body(pool_status{"t10x8", "hostA", 5, 99, {sample_sample_result()}, true});
  const std::string good = encode_frame(sample_envelope("pool_status"), body);
  std::size_t accepted = 0;
  std::size_t largest = largest_allocation_of([&] {
    for (int i = 0; i < 20000; ++i) {
      std::string s = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k)
        s[rng() % s.size()] = static_cast<char>(rng());
      if (rng() % 4 == 0)
        s.resize(rng() % s.size());
      frame f;
      if (decode_frame(s.data(), s.size(), decode_limits{}, f) == decode_error::none) {
        ++accepted;
        pool_status ps;
        (void)unpack_body_as(f.body, decode_limits{}, ps);
      }
    }
  });
  CHECK(largest < small_allocation);
  CHECK(accepted < 20000);
}
