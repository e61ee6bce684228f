// The sim latent against the contract (docs/sim-contract.md, version 2), recomputed here
// with a separate, plain implementation: the ident's text written out line by line, the
// message built byte by byte, one EVP_Digest per block.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <openssl/evp.h>

#include "backends/sim/latent.hpp"
#include "config/profile/profile.hpp"
#include "config/shot_identity.hpp"

namespace {

using namespace vidline::backends::sim;

std::string hex_sha256(const std::string& data);

/// The ident of the contract's example job: a uniform batch on a sim backend named "sim"
/// (its implicit default workflow), the prompt "a red fox".
std::string example_ident_text() {
  return "prompt=" + hex_sha256("a red fox") + "\nnegative_prompt=" + hex_sha256("") +
         "\nworkflow=default\nmodel=sim\n";
}

std::array<unsigned char, 32> raw_sha256(const std::string& data) {
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

vidline::digest example_ident() {
  auto d = raw_sha256(example_ident_text());
  vidline::digest out;
  std::copy(d.begin(), d.end(), out.begin());
  return out;
}

std::array<unsigned char, 32> contract_block(uint64_t seed, uint32_t w, uint32_t h, uint32_t s,
                                             uint64_t i, const vidline::digest& ident) {
  std::vector<unsigned char> m;
  for (char c : std::string("vidline-sim-latent"))
    m.push_back(static_cast<unsigned char>(c));
  auto le = [&](uint64_t v, int n) {
    for (int k = 0; k < n; ++k)
      m.push_back(static_cast<unsigned char>((v >> (8 * k)) & 0xff));
  };
  le(seed, 8);
  le(w, 4);
  le(h, 4);
  le(s, 4);
  le(i, 8);
  m.insert(m.end(), ident.begin(), ident.end());
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  if (m.size() != 78 || EVP_Digest(m.data(), m.size(), out.data(), &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("test: contract_block failed");
  return out;
}

std::string contract_latent(uint64_t seed, uint32_t w, uint32_t h, uint32_t s, uint64_t bytes,
                            const vidline::digest& ident = example_ident()) {
  std::string out;
  out.reserve(bytes + 32);
  for (uint64_t i = 0; out.size() < bytes; ++i) {
    auto b = contract_block(seed, w, h, s, i, ident);
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  out.resize(bytes);
  return out;
}

std::string hex_sha256(const std::string& data) {
  unsigned char d[32];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), d, &len, EVP_sha256(), nullptr);
  static const char* x = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) {
    out += x[c >> 4];
    out += x[c & 15];
  }
  return out;
}

std::string generated(const latent_key& key, uint64_t bytes, std::string* digest) {
  std::string out;
  std::size_t largest = 0;
  auto d = generate_latent(key, bytes, [&](std::string_view piece) {
    largest = std::max(largest, piece.size());
    out.append(piece);
    return true;
  });
  CHECK(largest <= latent_generator::piece_bytes);
  REQUIRE(d);
  *digest = *d;
  return out;
}

} // namespace

TEST_CASE("the ident is the contract's text: prompt, negative prompt, workflow, model, "
          "params and inputs in byte order", "[latent]") {
  vidline::msg::job_spec j;
  j.prompt = "a red fox";
  j.workflow = "default";
  j.model = "sim";
  CHECK(vidline::config::ident_text(j) == example_ident_text());
  CHECK(vidline::config::ident(j) == example_ident());

  j.negative_prompt = "blurry";
  j.workflow = "fl2v";
  j.model = "h3-fl2v-int8";
  j.params = {{"steps", "integer", "8"}, {"lora", "string", "turbo"}, {"cfg", "number", "2.5"},
              {"Zeta", "boolean", "true"}};
  j.inputs = {{"last_frame", std::string(64, 'b')}, {"first_frame", std::string(64, 'a')}};
  CHECK(vidline::config::ident_text(j) ==
        "prompt=" + hex_sha256("a red fox") + "\nnegative_prompt=" + hex_sha256("blurry") +
          "\nworkflow=fl2v\nmodel=h3-fl2v-int8\nparam.Zeta=true\nparam.cfg=2.5\n"
          "param.lora=turbo\nparam.steps=8\ninput.first_frame=" + std::string(64, 'a') +
          "\ninput.last_frame=" + std::string(64, 'b') + "\n");
}

TEST_CASE("block() is the contract's formula", "[latent]") {
  const latent_key key{987654321123ull, 416, 736, 5, example_ident()};
  for (uint64_t i : {0ull, 1ull, 406249ull, 1ull << 40}) {
    auto want = contract_block(987654321123ull, 416, 736, 5, i, example_ident());
    auto got = block(key, i);
    CHECK(std::equal(want.begin(), want.end(), got.begin()));
  }
  auto a = block({1, 416, 736, 5, example_ident()}, 0);
  auto b = block({1, 736, 416, 5, example_ident()}, 0);  // width and height are not interchangeable
  CHECK(a != b);
  auto other = example_ident();
  other[0] ^= 1;
  CHECK(block({1, 416, 736, 5, other}, 0) != a);  // what the shot says enters every block
}

TEST_CASE("an edited prompt yields another latent", "[latent]") {
  vidline::msg::job_spec j;
  j.seed = 42;
  j.width = 416;
  j.height = 736;
  j.seconds = 5;
  j.prompt = "a red fox";
  j.workflow = "default";
  j.model = "sim";
  std::string d1, d2;
  generated({j.seed, j.width, j.height, j.seconds, vidline::config::ident(j)}, 4096, &d1);
  j.prompt = "a red fox at dusk";
  generated({j.seed, j.width, j.height, j.seconds, vidline::config::ident(j)}, 4096, &d2);
  CHECK(d1 != d2);
  vidline::digest id2 = raw_sha256(
    "prompt=" + hex_sha256("a red fox at dusk") + "\nnegative_prompt=" + hex_sha256("") +
    "\nworkflow=default\nmodel=sim\n");
  CHECK(d2 == hex_sha256(contract_latent(42, 416, 736, 5, 4096, id2)));
}

TEST_CASE("the reference job's latent: 13,000,000 bytes, as the contract and hashlib say",
          "[latent]") {
  auto ref = profile::reference();
  uint64_t bytes = latent_bytes(ref, 416, 736, 5);
  REQUIRE(bytes == 13000000);

  latent_key key{987654321123ull, 416, 736, 5, example_ident()};
  auto t0 = std::chrono::steady_clock::now();
  std::string digest;
  std::string got = generated(key, bytes, &digest);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
  WARN("generated and hashed 13,000,000 bytes in " << ms << " ms");

  std::string want = contract_latent(987654321123ull, 416, 736, 5, bytes);
  REQUIRE(got.size() == want.size());
  CHECK(got == want);
  CHECK(digest == hex_sha256(want));
}

TEST_CASE("other jobs, truncated tails and piece boundaries", "[latent]") {
  struct job {
    uint64_t seed;
    uint32_t w, h, s;
    uint64_t bytes;
  };
  for (job j : {job{987654321128ull, 736, 1280, 5, 3 * (1u << 20) + 17},
                job{0, 1, 1, 1, 8}, job{UINT64_MAX, 544, 960, 15, (1u << 20) - 5},
                job{42, 416, 736, 5, 31}, job{42, 416, 736, 5, 0}}) {
    CAPTURE(j.seed, j.w, j.h, j.s, j.bytes);
    std::string digest;
    std::string got = generated({j.seed, j.w, j.h, j.s, example_ident()}, j.bytes, &digest);
    std::string want = contract_latent(j.seed, j.w, j.h, j.s, j.bytes);
    CHECK(got == want);
    CHECK(digest == hex_sha256(want));
  }
}

TEST_CASE("the generator streams in pieces of at most 1 MiB and can be stopped", "[latent]") {
  latent_generator gen({7, 416, 736, 5, example_ident()}, 2 * latent_generator::piece_bytes + 100);
  CHECK(gen.next().size() == latent_generator::piece_bytes);
  CHECK(gen.next().size() == latent_generator::piece_bytes);
  CHECK_THROWS_AS(gen.sha256_hex(), std::logic_error);
  CHECK(gen.next().size() == 100);
  CHECK(gen.done());
  CHECK(gen.next().empty());

  int pieces = 0;
  auto stopped = generate_latent({7, 416, 736, 5, example_ident()}, 13000000, [&](std::string_view) {
    return ++pieces < 2;
  });
  CHECK_FALSE(stopped);
  CHECK(pieces == 2);
}

TEST_CASE("latent_bytes scales by width x height x seconds, rounded to nearest", "[latent]") {
  auto ref = profile::reference();
  CHECK(latent_bytes(ref, 416, 736, 5) == 13000000);
  CHECK(latent_bytes(ref, 736, 1280, 5) == 40000000);
  CHECK(latent_bytes(ref, 416, 736, 1) == 2600000);
  CHECK(latent_bytes(ref, 544, 960, 15) == 66521739);   // 66,521,739.13
  CHECK(latent_bytes(ref, 640, 1152, 15) == 93913043);  // 93,913,043.48
  CHECK(latent_bytes(ref, 100, 100, 3) == 254755);      // 254,755.43
  CHECK(latent_bytes(ref, 1, 1, 1) == 8);               // 8.49
  CHECK(latent_bytes(ref, 0, 736, 5) == 0);
  CHECK(ref.latent_bytes({416, 736, 5}) == 13000000);

  // Halves round up: 3 bytes at 2x1x1 make 1.5 bytes at 1x1x1.
  auto j = nlohmann::json::parse(std::string(profile::reference_json()));
  j["latent"] = {{"size", "2x1x1"}, {"bytes", 3}, {"source", "test"}};
  auto p = profile::from_json(j);
  CHECK(latent_bytes(p, 1, 1, 1) == 2);
  CHECK(latent_bytes(p, 1, 1, 3) == 5);  // 4.5
  CHECK(latent_bytes(p, 2, 1, 1) == 3);
}
