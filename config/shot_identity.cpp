#include "config/shot_identity.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::config {

std::string number_text(double v) {
  // nlohmann writes the shortest round-trip digits, in the same notation as Python's json
  // and repr except in [1e15, 1e16), where it already switches to an exponent: written
  // out there, so the text is the same whichever of the two a checker uses.
  std::string s = nlohmann::json(v).dump();
  auto e = s.find('e');
  if (e == std::string::npos) return s;
  int exp = std::atoi(s.c_str() + e + 1);
  if (exp != 15) return s;
  std::string m = s.substr(0, e);
  bool negative = !m.empty() && m[0] == '-';
  std::string digits;
  for (char c : m)
    if (c >= '0' && c <= '9') digits += c;
  const std::size_t point = static_cast<std::size_t>(exp) + 1;  // digits before the point
  std::string out = digits.size() <= point
                        ? digits + std::string(point - digits.size(), '0') + ".0"
                        : digits.substr(0, point) + "." + digits.substr(point);
  return (negative ? "-" : "") + out;
}

std::optional<msg::param_value> param_of(const std::string& name, const nlohmann::json& value) {
  msg::param_value p;
  p.name = name;
  if (value.is_string()) {
    p.type = "string";
    p.text = value.get<std::string>();
  } else if (value.is_boolean()) {
    p.type = "boolean";
    p.text = value.get<bool>() ? "true" : "false";
  } else if (value.is_number_integer()) {
    p.type = "integer";
    p.text = value.dump();
  } else if (value.is_number_float()) {
    p.type = "number";
    p.text = number_text(value.get<double>());
  } else {
    return std::nullopt;
  }
  return p;
}

nlohmann::json param_json(const msg::param_value& p) {
  if (p.type == "string") return p.text;
  if (p.type == "boolean") return p.text == "true";
  auto v = nlohmann::json::parse(p.text, nullptr, false);
  return v.is_discarded() ? nlohmann::json(p.text) : v;
}

namespace {

template <typename T>
std::vector<const T*> by_name(const std::vector<T>& items) {
  std::vector<const T*> out;
  out.reserve(items.size());
  for (const auto& i : items) out.push_back(&i);
  std::sort(out.begin(), out.end(), [](const T* a, const T* b) { return a->name < b->name; });
  return out;
}

} // namespace

std::string ident_text(const msg::job_spec& job) {
  std::string t;
  t += "prompt=" + to_hex(sha256_of(job.prompt)) + "\n";
  t += "negative_prompt=" + to_hex(sha256_of(job.negative_prompt)) + "\n";
  t += "workflow=" + job.workflow + "\n";
  t += "model=" + job.model + "\n";
  for (const auto* p : by_name(job.params)) t += "param." + p->name + "=" + p->text + "\n";
  for (const auto* i : by_name(job.inputs)) t += "input." + i->name + "=" + i->sha256 + "\n";
  return t;
}

vidline::digest ident(const msg::job_spec& job) { return sha256_of(ident_text(job)); }

bool inputs_known(const msg::job_spec& job) {
  return std::all_of(job.inputs.begin(), job.inputs.end(),
                     [](const msg::job_input& i) { return !i.sha256.empty(); });
}

std::string job_key(const msg::job_spec& job) {
  if (!inputs_known(job)) return "";
  std::string t = "vidline-job-key 1\n";
  t += "ident=" + to_hex(ident(job)) + "\n";
  t += "seed=" + std::to_string(job.seed) + "\n";
  t += "size=" + std::to_string(job.width) + "x" + std::to_string(job.height) + "\n";
  t += "seconds=" + std::to_string(job.seconds) + "\n";
  return to_hex(sha256_of(t));
}

} // namespace vidline::config
