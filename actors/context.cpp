#include "actors/context.hpp"

namespace vidline::actors {

std::string latent_dir(const context& c) { return data_paths::latent_dir(c.data_dir); }
std::string output_dir(const context& c) { return data_paths::output_dir(c.data_dir); }
std::string input_dir(const context& c) { return data_paths::input_dir(c.data_dir); }
std::string work_dir(const context& c) { return data_paths::work_dir(c.data_dir); }
std::string conditioning_dir(const context& c) {
  return data_paths::conditioning_dir(c.data_dir);
}
std::string output_blob_dir(const context& c) { return data_paths::output_blob_dir(c.data_dir); }

} // namespace vidline::actors
