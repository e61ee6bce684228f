#include "actors/context.hpp"

namespace vidline::actors {

std::string latent_dir(const context& c) { return c.data_dir + "/latents"; }
std::string output_dir(const context& c) { return c.data_dir + "/outputs"; }
std::string input_dir(const context& c) { return c.data_dir + "/" + inputs_subdir; }
std::string work_dir(const context& c) { return c.data_dir + "/work"; }
std::string conditioning_dir(const context& c) { return c.data_dir + "/conditioning"; }

} // namespace vidline::actors
