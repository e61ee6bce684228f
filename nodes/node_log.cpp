#include "nodes/node_log.hpp"

#include <sys/stat.h>

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace vidline::nodes {

bool is_regular_file(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

std::shared_ptr<spdlog::logger> make_node_logger(const std::string& dir, const std::string& name,
                                                 uint32_t file_bytes, int files,
                                                 bool stderr_is_file) {
  auto to_file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
    dir + "/node.log", file_bytes, static_cast<std::size_t>(files));
  auto to_stderr = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  if (stderr_is_file)
    to_stderr->set_level(spdlog::level::critical);
  auto logger = std::make_shared<spdlog::logger>(name, spdlog::sinks_init_list{to_file, to_stderr});
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  logger->flush_on(spdlog::level::info);
  return logger;
}

} // namespace vidline::nodes
