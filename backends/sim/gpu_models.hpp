#pragma once
/// Which model each GPU of this process holds, for the sim backend: a sampler that starts
/// sampling or a decoder that starts decoding takes its GPUs, so a sampler whose GPUs another
/// took is cold on its next job (as line_sim and the scheduler's pool_view::warm assume:
/// 8 x T10 vs 2 x 4 x T10 pools on the same cards, a decoder on a pool's card), and so is
/// a sampler whose next job needs another model than the one it holds.

#include <cstdint>
#include <string>
#include <vector>

namespace vidline::backends::sim {

/// A new holder id (one per sampler or decoder instance).
uint64_t new_gpu_holder();

/// Makes `holder` the holder of `gpus` of `host` with model `model` loaded; whether it held
/// all of them already with that model (a sampler of another model is cold: a switch).
bool load_on_gpus(uint64_t holder, const std::string& host, const std::vector<std::string>& gpus,
                  const std::string& model = {});

} // namespace vidline::backends::sim
