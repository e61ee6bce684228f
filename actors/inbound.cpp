#include "actors/inbound.hpp"

#include <cmath>

#include "common/digest.hpp"
#include "common/names.hpp"
#include "common/text.hpp"

namespace vidline::actors::inbound {
namespace {

void repair_text(std::string& s) {
  if (!text::is_valid_utf8(s))
    s = text::to_valid_utf8(s);
}

void repair_seconds(double& s) {
  if (!std::isfinite(s) || s < 0)
    s = 0;
}

std::string name_problem(const char* what, const std::string& name) {
  if (names::is_safe_name(name))
    return "";
  return std::string(what) + " is not a safe name (1-128 characters of A-Z a-z 0-9 _ . -, "
         "not starting with '.' or '-')";
}

} // namespace

std::string check_reference(const std::string& path) {
  if (path.empty())
    return "";
  if (path.size() > max_reference_bytes)
    return "reference path longer than " + std::to_string(max_reference_bytes) + " bytes";
  if (!text::is_valid_utf8(path) || !text::is_single_line(path))
    return "reference path holds control characters or invalid UTF-8";
  if (path.front() != '/')
    return "reference path is not absolute";
  if (path.back() == '/')
    return "reference path names a directory";
  // `vidline run` sends std::filesystem::absolute(), which keeps "." parts: those pass.
  for (std::size_t start = 1; start <= path.size();) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos)
      end = path.size();
    if (std::string_view(path.data() + start, end - start) == "..")
      return "reference path holds a '..' part";
    start = end + 1;
  }
  return "";
}

std::string check_size(uint32_t width, uint32_t height, uint32_t seconds) {
  if (width == 0 || height == 0 || seconds == 0)
    return "width, height and seconds must be positive";
  if (width % 8 != 0 || height % 8 != 0)
    return "width and height must be multiples of 8";
  if (width > 8192 || height > 8192 || seconds > 3600)
    return "size out of range (at most 8192x8192, 3600 s)";
  return "";
}

std::string check_job(const msg::job_spec& j, const config::knobs& k) {
  if (auto why = name_problem("run_id", j.run_id); !why.empty())
    return why;
  if (auto why = check_size(j.width, j.height, j.seconds); !why.empty())
    return why;
  if (j.prompt.size() > k.max_prompt_bytes)
    return "prompt of " + std::to_string(j.prompt.size()) + " bytes, over max_prompt_bytes";
  if (!text::is_valid_utf8(j.prompt))
    return "prompt is not valid UTF-8";
  if (!is_sha256_hex(j.prompt_sha256))
    return "prompt_sha256 is not 64 lowercase hex digits";
  // The output file's stem: a shot's name with "-take-N" (at most 64 + 10 characters).
  if (!j.name.empty() && !names::is_safe_name(j.name, 80))
    return "name is not a safe file stem";
  if (!j.reference_sha256.empty() && !is_sha256_hex(j.reference_sha256))
    return "reference_sha256 is not 64 lowercase hex digits";
  if (auto why = check_shot_fields(j, k); !why.empty())
    return why;
  return check_reference(j.reference);
}

std::string check_shot_fields(const msg::job_spec& j, const config::knobs& k) {
  if (j.negative_prompt.size() > k.max_prompt_bytes || !text::is_valid_utf8(j.negative_prompt))
    return "negative_prompt is over max_prompt_bytes or not valid UTF-8";
  if (!j.workflow.empty())
    if (auto why = name_problem("workflow", j.workflow); !why.empty())
      return why;
  if (!j.model.empty())
    if (auto why = name_problem("model", j.model); !why.empty())
      return why;
  for (auto& p : j.params) {
    if (auto why = name_problem("a param's name", p.name); !why.empty())
      return why;
    if (p.type != "string" && p.type != "integer" && p.type != "number" && p.type != "boolean")
      return "param " + p.name + " has an unknown type";
    if (p.text.size() > k.max_prompt_bytes || !text::is_valid_utf8(p.text))
      return "param " + p.name + " is over max_prompt_bytes or not valid UTF-8";
  }
  for (auto& i : j.inputs) {
    if (auto why = name_problem("an input's name", i.name); !why.empty())
      return why;
    if (!i.sha256.empty() && !is_sha256_hex(i.sha256))
      return "input " + i.name + ": sha256 is not 64 lowercase hex digits";
    if (auto why = check_reference(i.path); !why.empty())
      return "input " + i.name + ": " + why;
  }
  return "";
}

std::string check_order(const msg::sample_order& o, const config::knobs& k) {
  return check_job(o.job, k);
}

std::string check_order(const msg::decode_order& o, const config::knobs& k) {
  if (!is_sha256_hex(o.latent_sha256))
    return "latent_sha256 is not 64 lowercase hex digits";
  if (auto why = name_problem("source_host", o.source_host); !why.empty())
    return why;
  return check_job(o.job, k);
}

std::string check_verdict(const msg::verdict_index& v, const std::string& outputs_dir) {
  if (auto why = name_problem("run_id", v.run_id); !why.empty())
    return why;
  const std::string dir = outputs_dir + "/" + v.run_id + "/";
  if (v.output.size() <= dir.size() || v.output.compare(0, dir.size(), dir) != 0)
    return "output is not in the run's output directory " + dir;
  if (!names::is_safe_name(std::string_view(v.output).substr(dir.size()), 255))
    return "output's file name is not a safe name";
  if (!is_sha256_hex(v.output_sha256))
    return "output_sha256 is not 64 lowercase hex digits";
  if (v.verdict != "accepted" && v.verdict != "rejected")
    return "verdict must be \"accepted\" or \"rejected\"";
  if (v.revision == 0)
    return "revision must be at least 1";
  if (!std::isfinite(v.at_unix))
    return "at_unix is not a finite number";
  return "";
}

void repair(msg::sample_result& r) {
  for (std::string* s : {&r.pool, &r.host, &r.run_id, &r.outcome, &r.error, &r.latent_sha256})
    repair_text(*s);
  repair_seconds(r.conditioning_s);
  repair_seconds(r.sampling_s);
}

void repair(msg::decode_result& r) {
  for (std::string* s : {&r.decoder, &r.host, &r.run_id, &r.outcome, &r.error, &r.output,
                         &r.output_sha256, &r.stage})
    repair_text(*s);
  repair_seconds(r.handoff_s);
  repair_seconds(r.decode_s);
}

void repair(msg::pool_status& s) {
  repair_text(s.pool);
  repair_text(s.host);
  for (auto& r : s.unacked)
    repair(r);
}

void repair(msg::decoder_status& s) {
  repair_text(s.decoder);
  repair_text(s.host);
  for (auto& r : s.unacked)
    repair(r);
}

} // namespace vidline::actors::inbound
