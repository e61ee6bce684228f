#pragma once
/// The production shot list of the benchmarks, modelled on the reference line
/// owner's episode: 70% of 5 s shots and 30% of 10 s, half at 736x1280 and half at 416x736
/// (in runs of three), each shot its own prompt, seed, name and reference image. bench_plan
/// plans it; bench_plan_live writes it as a shot file and runs it on real nodes.

#include <cstdint>
#include <string>
#include <vector>

#include "common/sha256.hpp"
#include "messages/messages.hpp"

namespace vidline::bench {

/// `n` shots in episode order. Their references are named, not read: `reference` is
/// /refs/<name>.png and `reference_sha256` the digest of that name (the planner reads no
/// file; bench_plan_live writes a real image per shot and its shot file names those).
inline std::vector<msg::shot> episode(uint32_t n) {
  std::vector<msg::shot> out;
  for (uint32_t i = 0; i < n; ++i) {
    msg::shot s;
    s.prompt = "episode 1, shot " + std::to_string(i + 1) + ": scene " + std::to_string(i / 4 + 1)
               + ", camera " + std::to_string(i % 4 + 1);
    const bool ten = (i * 3) % 10 < 3;  // 3 of every 10
    const bool tall = (i / 3) % 2 == 0;   // runs of three at each size
    s.width = tall ? 736 : 416;
    s.height = tall ? 1280 : 736;
    s.seconds = ten ? 10 : 5;
    s.seed = 987654321123ull + i;
    s.name = "ep1-shot" + std::to_string(i + 1);
    s.reference = "/refs/ep1-shot" + std::to_string(i + 1) + ".png";
    s.reference_sha256 = to_hex(sha256_of(s.reference));
    out.push_back(std::move(s));
  }
  return out;
}

} // namespace vidline::bench
