#include "nodes/verbs/sequence_join.hpp"

#include <chrono>
#include <filesystem>

#include "common/spawn/child.hpp"
#include "common/files.hpp"
#include "config/shot_graph.hpp"

namespace vidline::nodes::verbs {

namespace {

/// Runs a tool; "" when it exited 0 (its stdout in `out`), else why not.
std::string tool(const std::vector<std::string>& argv, const std::string& scratch,
                 std::string* out = nullptr) {
  spawn::child_spec spec;
  spec.argv = argv;
  spec.env = spawn::current_environment();
  spec.stdout_path = scratch + ".out";
  spec.stderr_path = scratch + ".err";
  spawn::child_limits lim;
  lim.timeout = std::chrono::minutes(5);
  auto end = spawn::run_child(spec, lim);
  std::string err;
  try {
    if (out != nullptr)
      *out = files::read_all(scratch + ".out");
    err = files::read_all(scratch + ".err");
  } catch (const std::exception&) {
  }
  std::error_code ec;
  std::filesystem::remove(scratch + ".out", ec);
  std::filesystem::remove(scratch + ".err", ec);
  if (end.how == spawn::child_end::kind::exited && end.exit_code == 0)
    return "";
  if (end.how == spawn::child_end::kind::spawn_failed)
    return argv[0] + " could not be started: " + end.error;
  if (err.size() > 300)
    err = err.substr(err.size() - 300);
  return argv[0] + " failed: " + err;
}

} // namespace

std::string join_sequence(bool sim, const std::vector<std::string>& parts,
                          const std::vector<std::string>& part_sha256s, const std::string& dest) {
  if (parts.empty())
    return "the sequence has no parts";
  try {
    if (sim) {
      files::write_atomic(dest, config::graph::sim_sequence(part_sha256s));
      return "";
    }
    const std::string scratch = dest + ".join";
    std::string first;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      std::string got;
      if (auto why = tool({"ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                           "stream=codec_name,width,height,r_frame_rate", "-of", "csv=p=0",
                           parts[i]},
                          scratch, &got);
          !why.empty())
        return "part " + std::to_string(i + 1) + " (" + parts[i] + "): " + why;
      if (i == 0)
        first = got;
      else if (got != first)
        return "part " + std::to_string(i + 1) + " (" + parts[i] + ") has codec, size or rate "
               + got.substr(0, got.find('\n')) + ", the first part "
               + first.substr(0, first.find('\n')) + ": not joined without re-encoding";
    }
    std::string list;
    for (auto& p : parts) {
      std::string quoted;
      for (char c : std::filesystem::absolute(p).string())
        quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      list += "file '" + quoted + "'\n";
    }
    files::write_atomic(scratch + ".txt", list);
    const std::string part = dest + ".part" + std::filesystem::path(dest).extension().string();
    auto why = tool({"ffmpeg", "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i",
                     scratch + ".txt", "-c", "copy", part},
                    scratch);
    std::error_code ec;
    std::filesystem::remove(scratch + ".txt", ec);
    if (!why.empty()) {
      std::filesystem::remove(part, ec);
      return why;
    }
    files::fsync_file(part);
    files::rename_durable(part, dest);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

} // namespace vidline::nodes::verbs
