// libFuzzer target: the ComfyUI workflow template renderer (backends/comfyui/template.*).
//
// Input: `<values JSON object> NUL <template text>`; without a NUL byte the whole input is
// the template and the values are a fixed hostile set (quotes, braces, "{{seed}}" inside
// a value, extreme numbers). The fuzzer thus mutates both the template and the values.
//
// Checked, besides "no crash, no sanitizer report, no exception out of render":
// - a rendered workflow has the template's shape: the same keys, the same array sizes,
//   the same non-string values; a string that is exactly "{{name}}" became values[name],
//   any other string stayed a string, and a string without "{{" is unchanged
//   (no value breaks out of its string, nothing is substituted twice);
// - it dumps as JSON (valid UTF-8 everywhere) and parses back to itself;
// - every name placeholders_of lists for it is a known value;
// - check_api_format never throws, on the template or the workflow.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "backends/comfyui/template.hpp"

namespace comfy = vidline::backends::comfyui;
using json = nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_template: property violated: %s\n", what.c_str());
  std::abort();
}

comfy::template_values hostile_values() {
  return {{"prompt", "a \"quoted\" prompt, \\ backslash, {{seed}}, }} {{ and\n newline \xc3\xa9"},
          {"negative_prompt", ""},
          {"seed", uint64_t{18446744073709551615ull}},
          {"width", 416},
          {"height", -736},
          {"seconds", 5.5},
          {"frames", 121},
          {"fps", 24},
          {"reference_image", "vidline/r1-0/reference.png"},
          {"latent_prefix", "vidline/{{job}}/latent"},
          {"output_prefix", "../../etc/passwd"},
          {"run_id", "r1"},
          {"index", 0},
          {"job", true},
          {"bad_utf8", "\xff\xfe invalid UTF-8 \xc3"}};
}

/// The name of a string that is exactly one well-formed placeholder, else "".
std::string whole_placeholder(const std::string& s) {
  if (s.size() < 5 || s.compare(0, 2, "{{") != 0 || s.compare(s.size() - 2, 2, "}}") != 0)
    return "";
  const std::string name = s.substr(2, s.size() - 4);
  // template.hpp: names are lowercase a-z, 0-9 and _, not starting with a digit.
  const auto start = [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; };
  if (!start(name[0]))
    return "";
  for (char c : name)
    if (!start(c) && !(c >= '0' && c <= '9'))
      return "";
  return name;
}

void same_shape(const json& t, const json& w, const comfy::template_values& values,
                const std::string& at) {
  if (t.is_object()) {
    if (!w.is_object() || w.size() != t.size())
      fail("object changed shape at '" + at + "'");
    for (auto& [k, v] : t.items()) {
      auto it = w.find(k);
      if (it == w.end())
        fail("key lost at '" + at + "/" + k + "'");
      same_shape(v, *it, values, at + "/" + k);
    }
  } else if (t.is_array()) {
    if (!w.is_array() || w.size() != t.size())
      fail("array changed size at '" + at + "'");
    for (std::size_t i = 0; i < t.size(); ++i)
      same_shape(t[i], w[i], values, at + "/" + std::to_string(i));
  } else if (t.is_string()) {
    const auto& s = t.get_ref<const std::string&>();
    if (s.find("{{") == std::string::npos) {
      if (w != t)
        fail("a string without placeholders changed at '" + at + "'");
      return;
    }
    const std::string name = whole_placeholder(s);
    if (!name.empty()) {
      auto v = values.find(name);
      if (v == values.end() || w != v->second)
        fail("\"{{" + name + "}}\" did not become its value at '" + at + "'");
      return;
    }
    if (!w.is_string())
      fail("a string with text around placeholders is no longer a string at '" + at + "'");
  } else if (w != t) {
    fail("a non-string value changed at '" + at + "'");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(bytes), size);
  static const comfy::template_values defaults = hostile_values();
  comfy::template_values values = defaults;
  std::string_view text = input;
  if (const auto nul = input.find('\0'); nul != std::string_view::npos) {
    text = input.substr(nul + 1);
    const std::string_view head = input.substr(0, nul);
    json v = json::parse(head.begin(), head.end(), nullptr, false);
    if (v.is_object()) {
      values.clear();
      for (auto& [k, x] : v.items())
        values[k] = x;
    }
  }

  const comfy::render_result r = comfy::render(text, values);
  if (!r.ok) {
    if (r.error.empty())
      fail("render failed without saying why");
    return 0;
  }
  if (!r.error.empty() || !r.where.empty())
    fail("render succeeded with an error: " + r.error);

  // Parsing again is cheap next to rendering and gives the tree to compare with.
  const json tmpl = json::parse(text.begin(), text.end(), nullptr, false);
  if (tmpl.is_discarded())
    fail("render accepted text that does not parse");
  same_shape(tmpl, r.workflow, values, "");

  std::string dumped;
  try {
    dumped = r.workflow.dump();
  } catch (const json::exception& e) {
    fail(std::string("the rendered workflow does not dump: ") + e.what());
  }
  if (json::parse(dumped, nullptr, false) != r.workflow)
    fail("the rendered workflow does not parse back to itself");

  for (const auto& name : comfy::placeholders_of(tmpl))
    if (values.find(name) == values.end())
      fail("rendered, yet the template uses an unknown placeholder {{" + name + "}}");
  try {
    (void)comfy::check_api_format(tmpl);
    (void)comfy::check_api_format(r.workflow);
  } catch (const std::exception& e) {
    fail(std::string("check_api_format threw: ") + e.what());
  }
  return 0;
}
