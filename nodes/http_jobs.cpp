#include "nodes/http_server_impl.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "nodes/http_review.hpp"
#include "nodes/http_thumbnail.hpp"
#include "nodes/http_video.hpp"

// One job of a run in the HTTP API (docs/http.md): its video (ranges served), the
// thumbnail of its review card and a reviewer's verdict on it.

namespace vidline::nodes {

using nlohmann::json;

std::optional<std::pair<json, std::string>> http_server::impl::job_video(
  const httplib::Request& req, httplib::Response& res) {
  const std::string run_id = req.matches[1];
  const auto index = std::stoul(std::string(req.matches[2]));
  auto st = status_of_run(run_id, res);
  if (!st)
    return std::nullopt;
  const json* job = nullptr;
  for (auto& j : (*st)["jobs"])
    if (j.value("index", uint64_t{0}) == index)
      job = &j;
  if (job == nullptr) {
    send_error(res, 404, "run " + run_id + " has no job " + std::to_string(index) + " (it has " +
                             std::to_string((*st)["jobs"].size()) + ")");
    return std::nullopt;
  }
  if (((*job)["state"] != "succeeded" && (*job)["state"] != "reused") || !(*job)["output"].is_string()) {
    send_error(res, 409, "job " + std::to_string(index) + " of run " + run_id + " is " +
                             (*job)["state"].get<std::string>() + ": its video is not made");
    return std::nullopt;
  }
  std::string why;
  int why_status = 404;
  const std::string path = local_video(*cluster, *self, run_id, *job, why, why_status);
  if (path.empty()) {
    send_error(res, why_status, why);
    return std::nullopt;
  }
  return std::make_pair(*job, path);
}

// A frame of the video for its review card (nodes/http_thumbnail.hpp).
void http_server::impl::thumbnail(const httplib::Request& req, httplib::Response& res) {
  auto v = job_video(req, res);
  if (!v)
    return;
  const auto& [job, path] = *v;
  const std::string sha = job["output_sha256"].is_string() ? job["output_sha256"].get<std::string>() : "";
  if (path.size() < 4 || path.compare(path.size() - 4, 4, ".mp4") != 0 || sha.size() != 64) {
    // A sim video holds no picture: a placeholder of the same size says so.
    res.set_content(std::string("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"320\" "
                                "height=\"180\"><rect width=\"320\" height=\"180\" "
                                "fill=\"#eef1f4\"/><text x=\"160\" y=\"95\" "
                                "text-anchor=\"middle\" font-family=\"sans-serif\" "
                                "font-size=\"14\" fill=\"#8a949e\">no picture (a sim video)"
                                "</text></svg>"),
                    "image/svg+xml");
    return;
  }
  std::string why;
  int status = 500;
  const std::string jpeg = thumbnail_of(path, sha, self->data_dir, why, status);
  if (jpeg.empty()) {
    send_error(res, status, why);
    return;
  }
  std::ifstream in(jpeg, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) {
    send_error(res, 500, "cannot read the thumbnail " + jpeg);
    return;
  }
  res.set_header("Cache-Control", "private, max-age=86400");  // by the video's digest: fixed
  res.set_content(bytes, "image/jpeg");
}

void http_server::impl::video(const httplib::Request& req, httplib::Response& res) {
  auto v = job_video(req, res);
  if (!v)
    return;
  const auto& [job_rec, path] = *v;
  const json* job = &job_rec;
  const auto index = job->value("index", uint64_t{0});
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  auto in = std::make_shared<std::ifstream>(path, std::ios::binary);
  if (ec || !*in) {
    send_error(res, 500, "cannot read the video of job " + std::to_string(index));
    return;
  }
  const bool mp4 = path.size() > 4 && path.compare(path.size() - 4, 4, ".mp4") == 0;
  const std::string name = std::filesystem::path((*job)["output"].get<std::string>()).filename().string();
  res.set_header("Content-Disposition", "inline; filename=\"" + name + "\"");
  res.set_header("Accept-Ranges", "bytes");
  if (!(*job)["output_sha256"].is_null())
    res.set_header("X-Vidline-Sha256", (*job)["output_sha256"].get<std::string>());
  // With its length known, httplib answers a Range request 206 with just those bytes.
  res.set_content_provider(
    static_cast<size_t>(size), mp4 ? "video/mp4" : "application/octet-stream",
    [in](size_t offset, size_t length, httplib::DataSink& sink) {
      std::vector<char> buf(std::min<size_t>(length, 1 << 20));
      in->seekg(static_cast<std::streamoff>(offset));
      in->read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto got = in->gcount();
      if (got <= 0)
        return false;
      return sink.write(buf.data(), static_cast<size_t>(got));
    });
}

// A reviewer's verdict on a take (nodes/http_review.hpp).
void http_server::impl::review(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  auto r = parse_review(req.matches[1], static_cast<uint32_t>(std::stoul(std::string(req.matches[2]))),
                        req.body, err);
  if (!r) {
    send_error(res, err.status, err.message);
    return;
  }
  auto a = client().review(*r);
  if (const int status = review_status(a); status != 200)
    send_error(res, status, a.error);
  else
    send_json(res, 200, review_json(a));
}

} // namespace vidline::nodes
