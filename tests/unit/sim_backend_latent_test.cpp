// The sim latent against the contract (docs/sim-contract.md), recomputed here with a
// separate, plain implementation: the message built byte by byte, one EVP_Digest per block.

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

namespace {

using namespace vidline::backends::sim;

std::array<unsigned char, 32> contract_block(uint64_t seed, uint32_t w, uint32_t h, uint32_t s,
                                             uint64_t i) {
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
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  if (m.size() != 46 || EVP_Digest(m.data(), m.size(), out.data(), &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("test: contract_block failed");
  return out;
}

std::string contract_latent(uint64_t seed, uint32_t w, uint32_t h, uint32_t s, uint64_t bytes) {
  std::string out;
  out.reserve(bytes + 32);
  for (uint64_t i = 0; out.size() < bytes; ++i) {
    auto b = contract_block(seed, w, h, s, i);
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

TEST_CASE("block() is the contract's formula", "[latent]") {
  for (uint64_t i : {0ull, 1ull, 406249ull, 1ull << 40}) {
    auto want = contract_block(987654321123ull, 416, 736, 5, i);
    auto got = block(987654321123ull, 416, 736, 5, i);
    CHECK(std::equal(want.begin(), want.end(), got.begin()));
  }
  auto a = block(1, 416, 736, 5, 0);
  auto b = block(1, 736, 416, 5, 0);  // width and height are not interchangeable
  CHECK(a != b);
}

TEST_CASE("the reference job's latent: 13,000,000 bytes, as the contract and hashlib say",
          "[latent]") {
  auto ref = profile::reference();
  uint64_t bytes = latent_bytes(ref, 416, 736, 5);
  REQUIRE(bytes == 13000000);

  latent_key key{987654321123ull, 416, 736, 5};
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
  // Computed once with Python's hashlib from the contract text, independently of C++.
  CHECK(digest == "99fae2c1e40a31a06faf02c161c0e4d015e28185dd4ad6eb5545da6370ddb035");
  CHECK(got.substr(0, 32) == std::string("\xd6\x34\xe8\x5f\x3a\xee\xcd\x23\x37\x61\xda"
                                         "\x15\x43\x6d\xab\x7d\x41\x9b\xc6\x18\x91\xf6"
                                         "\x53\xf9\xac\x35\xef\x21\x3c\xb7\xc6\xd7",
                                         32));
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
    std::string got = generated({j.seed, j.w, j.h, j.s}, j.bytes, &digest);
    std::string want = contract_latent(j.seed, j.w, j.h, j.s, j.bytes);
    CHECK(got == want);
    CHECK(digest == hex_sha256(want));
  }
}

TEST_CASE("the generator streams in pieces of at most 1 MiB and can be stopped", "[latent]") {
  latent_generator gen({7, 416, 736, 5}, 2 * latent_generator::piece_bytes + 100);
  CHECK(gen.next().size() == latent_generator::piece_bytes);
  CHECK(gen.next().size() == latent_generator::piece_bytes);
  CHECK_THROWS_AS(gen.sha256_hex(), std::logic_error);
  CHECK(gen.next().size() == 100);
  CHECK(gen.done());
  CHECK(gen.next().empty());

  int pieces = 0;
  auto stopped = generate_latent({7, 416, 736, 5}, 13000000, [&](std::string_view) {
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
