#include "backends/sim/checkpoint.hpp"

#include <sstream>

namespace vidline::backends::sim {
namespace {

std::string chain(const latent_key& key, uint32_t step) {
  digest d = block(key, 0);
  for (uint32_t i = 1; i <= step; ++i) {
    std::string m(reinterpret_cast<const char*>(d.data()), d.size());
    for (int b = 0; b < 4; ++b)
      m.push_back(static_cast<char>((i >> (8 * b)) & 0xff));
    d = sha256_of(m);
  }
  return to_hex(d);
}

} // namespace

std::string checkpoint_text(const latent_key& key, uint32_t step, uint32_t steps) {
  std::ostringstream t;
  t << "vidline-sim-checkpoint 1\n"
    << "job " << to_hex(block(key, 0)) << "\n"
    << "step " << step << " of " << steps << "\n"
    << "state " << chain(key, step) << "\n";
  return t.str();
}

std::optional<uint32_t> checkpoint_step(const latent_key& key, uint32_t steps,
                                        const std::string& text) {
  std::istringstream in(text);
  std::string magic, version, job_word, job, step_word, of_word, state_word, state;
  uint32_t step = 0, of = 0;
  if (!(in >> magic >> version >> job_word >> job >> step_word >> step >> of_word >> of
          >> state_word >> state))
    return std::nullopt;
  if (magic != "vidline-sim-checkpoint" || version != "1" || job_word != "job"
      || step_word != "step" || of_word != "of" || state_word != "state")
    return std::nullopt;
  if (of != steps || step == 0 || step > steps || job != to_hex(block(key, 0))
      || state != chain(key, step))
    return std::nullopt;
  return step;
}

} // namespace vidline::backends::sim
