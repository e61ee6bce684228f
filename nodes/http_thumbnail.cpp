#include "nodes/http_thumbnail.hpp"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/spawn/child.hpp"
#include "common/files.hpp"
#include "nodes/http_video.hpp"

namespace vidline::nodes {

namespace {

/// One ffmpeg at a time: a page of many cards asks for their frames together, and two
/// requests for the same frame make it once.
std::mutex ffmpeg_mutex;

/// The last lines of a log file, for an error message.
std::string tail_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
    t.pop_back();
  return t.size() > 400 ? "..." + t.substr(t.size() - 400) : t;
}

} // namespace

std::string thumbnail_of(const std::string& video, const std::string& sha256,
                         const std::string& data_dir, std::string& why, int& status) {
  const std::string dir = data_dir + "/" + review_subdir;
  const std::string dest = dir + "/" + sha256 + ".jpg";
  std::error_code ec;
  std::lock_guard<std::mutex> l(ffmpeg_mutex);
  if (std::filesystem::is_regular_file(dest, ec))
    return dest;  // renamed into place only once whole
  try {
    files::make_dirs(dir);
  } catch (const std::exception& e) {
    why = e.what();
    status = 500;
    return "";
  }
  const std::string part = dest + ".part";
  const std::string log = dest + ".log";
  spawn::child_spec spec;
  spec.argv = {"ffmpeg", "-nostdin", "-v", "error", "-y", "-i", video, "-vf",
               "thumbnail=24,scale='min(" + std::to_string(thumbnail_max_width) + ",iw)':-2",
               "-frames:v", "1", "-f", "image2", "-c:v", "mjpeg", part};
  spec.env = spawn::current_environment();
  spec.stderr_path = log;
  spawn::child_limits limits;
  limits.timeout = std::chrono::seconds(thumbnail_timeout_s);
  limits.grace = std::chrono::seconds(1);
  const auto end = spawn::run_child(spec, limits);
  using kind = spawn::child_end::kind;
  if (end.how == kind::spawn_failed) {
    why = "ffmpeg cannot be started on this host (" + end.error +
          "): install it (Debian: apt install ffmpeg) for the review's thumbnails";
    status = 501;
    return "";
  }
  if (end.how != kind::exited || end.exit_code != 0 ||
      !std::filesystem::is_regular_file(part, ec) || std::filesystem::file_size(part, ec) == 0) {
    why = std::string("ffmpeg took no frame of the video") +
          (end.how == kind::timed_out ? " within " + std::to_string(thumbnail_timeout_s) + " s"
                                      : " (exit " + std::to_string(end.exit_code) + ")") +
          ": " + tail_of(log);
    status = 500;
    std::filesystem::remove(part, ec);
    return "";
  }
  std::filesystem::rename(part, dest, ec);
  if (ec) {
    why = "cannot keep the thumbnail at " + dest + ": " + ec.message();
    status = 500;
    return "";
  }
  std::filesystem::remove(log, ec);
  return dest;
}

} // namespace vidline::nodes
