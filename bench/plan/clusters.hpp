#pragma once
/// bench_plan's two clusters besides the embedded reference: two servers of T10s with an
/// XTX, and an XTX farm feeding one slow decoder.

namespace vidline::bench::plan_bench {

/// Two servers of 8 x T10 (each 8 or 4+4), the XTX, and two decoders of different speed.
inline constexpr const char* two_servers = R"json({
  "cluster": "two_servers", "coordinator": "host_a", "plaintext": true,
  "hosts": [
    {"name": "host_a", "address": "127.0.0.1", "port": 7611, "data_dir": "/tmp/vidline-bench/a",
     "gpus": [
       {"id": "t10-0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 0},
       {"id": "t10-1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 1},
       {"id": "t10-2", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 2},
       {"id": "t10-3", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 3},
       {"id": "t10-4", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 4},
       {"id": "t10-5", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 5},
       {"id": "t10-6", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 6},
       {"id": "t10-7", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 7}]},
    {"name": "host_b", "address": "127.0.0.1", "port": 7612, "data_dir": "/tmp/vidline-bench/b",
     "gpus": [
       {"id": "rtx3080ti", "model": "RTX 3080 Ti", "vendor": "nvidia", "memory_gib": 12, "index": 0},
       {"id": "xtx", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 0}]},
    {"name": "host_c", "address": "127.0.0.1", "port": 7613, "data_dir": "/tmp/vidline-bench/c",
     "gpus": [
       {"id": "t10-0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 0},
       {"id": "t10-1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 1},
       {"id": "t10-2", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 2},
       {"id": "t10-3", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 3},
       {"id": "t10-4", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 4},
       {"id": "t10-5", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 5},
       {"id": "t10-6", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 6},
       {"id": "t10-7", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 7},
       {"id": "t10-8", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 8}]}],
  "backends": {"sim": {"type": "sim", "time_scale": 0.01, "profile": ""}},
  "pools": [
    {"name": "eight", "host": "host_a", "backend": "sim", "profile": "t10x8",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3", "t10-4", "t10-5", "t10-6", "t10-7"]},
    {"name": "four_a", "host": "host_a", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]},
    {"name": "four_b", "host": "host_a", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-4", "t10-5", "t10-6", "t10-7"]},
    {"name": "xtx", "host": "host_b", "gpus": ["xtx"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "eight_c", "host": "host_c", "backend": "sim", "profile": "t10x8",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3", "t10-4", "t10-5", "t10-6", "t10-7"]},
    {"name": "four_c", "host": "host_c", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]},
    {"name": "four_d", "host": "host_c", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-4", "t10-5", "t10-6", "t10-7"]}],
  "decoders": [
    {"name": "rtx3080ti", "host": "host_b", "gpu": "rtx3080ti", "backend": "sim", "profile": "rtx3080ti"},
    {"name": "t10dec", "host": "host_c", "gpu": "t10-8", "backend": "sim", "profile": "t10"}],
  "encoders": [
    {"name": "encoder_a", "host": "host_a", "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"], "backend": "sim", "profile": "t10x4"},
    {"name": "encoder_b", "host": "host_b", "gpus": ["xtx"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "encoder_c", "host": "host_c", "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"], "backend": "sim", "profile": "t10x4"}],
  "modes": {
    "eights_xtx": {"pools": ["eight", "eight_c", "xtx"], "decoders": ["rtx3080ti", "t10dec"]},
    "fours_xtx": {"pools": ["four_a", "four_b", "four_c", "four_d", "xtx"], "decoders": ["rtx3080ti", "t10dec"]},
    "mixed": {"pools": ["eight", "four_c", "four_d", "xtx"], "decoders": ["rtx3080ti", "t10dec"]},
    "fours_one_decoder": {"pools": ["four_a", "four_b", "four_c", "four_d"], "decoders": ["rtx3080ti"]}
  }
})json";

/// Four XTX cards and a 4 x T10 pool feeding one slow decoder (a lone T10): decoder-bound.
inline constexpr const char* xtx_farm = R"json({
  "cluster": "xtx_farm", "coordinator": "host_d", "plaintext": true,
  "hosts": [
    {"name": "host_d", "address": "127.0.0.1", "port": 7621, "data_dir": "/tmp/vidline-bench/d",
     "gpus": [
       {"id": "xtx-0", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 0},
       {"id": "xtx-1", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 1},
       {"id": "xtx-2", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 2},
       {"id": "xtx-3", "model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "index": 3}]},
    {"name": "host_e", "address": "127.0.0.1", "port": 7622, "data_dir": "/tmp/vidline-bench/e",
     "gpus": [
       {"id": "t10-0", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 0},
       {"id": "t10-1", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 1},
       {"id": "t10-2", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 2},
       {"id": "t10-3", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 3},
       {"id": "t10-4", "model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "index": 4}]}],
  "backends": {"sim": {"type": "sim", "time_scale": 0.01, "profile": ""}},
  "pools": [
    {"name": "xtx_0", "host": "host_d", "gpus": ["xtx-0"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "xtx_1", "host": "host_d", "gpus": ["xtx-1"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "xtx_2", "host": "host_d", "gpus": ["xtx-2"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "xtx_3", "host": "host_d", "gpus": ["xtx-3"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "four_e", "host": "host_e", "backend": "sim", "profile": "t10x4",
     "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"]}],
  "decoders": [
    {"name": "t10dec", "host": "host_e", "gpu": "t10-4", "backend": "sim", "profile": "t10"}],
  "encoders": [
    {"name": "encoder_d", "host": "host_d", "gpus": ["xtx-0"], "backend": "sim", "profile": "rx7900xtx"},
    {"name": "encoder_e", "host": "host_e", "gpus": ["t10-0", "t10-1", "t10-2", "t10-3"], "backend": "sim", "profile": "t10x4"}],
  "modes": {
    "all_xtx": {"pools": ["xtx_0", "xtx_1", "xtx_2", "xtx_3"], "decoders": ["t10dec"]},
    "xtx_and_four": {"pools": ["xtx_0", "xtx_1", "xtx_2", "xtx_3", "four_e"], "decoders": ["t10dec"]},
    "two_xtx": {"pools": ["xtx_0", "xtx_1"], "decoders": ["t10dec"]},
    "four_only": {"pools": ["four_e"], "decoders": ["t10dec"]}
  }
})json";

} // namespace vidline::bench::plan_bench
