#pragma once
/// ComfyUI workflow templates: an API-format workflow (JSON) whose string values may hold
/// placeholders `{{name}}`, rendered into the workflow a job submits.
///
/// Rendering works on the parsed JSON tree, never on text, so no value can break out of
/// its string: a prompt full of quotes, backslashes or braces stays one string value.
/// - a string that is exactly one placeholder, "{{seed}}", becomes the value itself, typed
///   (a number stays a number: ComfyUI's INT inputs want numbers);
/// - a placeholder inside a longer string, "vidline/{{job}}/video", is replaced by the
///   value's text (a string as it is, a number in decimal);
/// - only the template is scanned: a value holding "{{seed}}" stays that text;
/// - object keys (node ids, input names) are never substituted, and a key holding "{{" is
///   an error, as is an unknown placeholder, a malformed one ("{{ }}", "{{x", "{{X}}"),
///   or a string value that is not valid UTF-8.
///
/// Pure: no I/O, no exceptions out of `render` (so it can be fuzzed with any input).

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::backends::comfyui {

/// Placeholder values by name: strings, integers, numbers or booleans.
using template_values = std::map<std::string, nlohmann::json>;

/// A rendered workflow, or what is wrong and where (a JSON pointer into the template).
struct render_result {
  bool ok = false;
  nlohmann::json workflow;
  std::string error;          ///< "" when ok
  std::string where;          ///< JSON pointer of the offending value ("" = the whole)
};

/// Renders a parsed template.
render_result render(const nlohmann::json& tmpl, const template_values& values);

/// Parses template text (strict JSON), then renders it.
render_result render(std::string_view template_text, const template_values& values);

/// Every placeholder name a template uses, sorted, each once. Malformed ones are skipped
/// (render reports them).
std::vector<std::string> placeholders_of(const nlohmann::json& tmpl);

/// "" when `workflow` has the shape of an API-format workflow: an object of nodes, each
/// an object with a string `class_type` and an object `inputs`, every link
/// ["<node id>", <output index>] naming a node of the workflow. Otherwise what is wrong.
std::string check_api_format(const nlohmann::json& workflow);

/// Whether `n` is a shot's own placeholder: param.NAME or input.NAME (NAME as a workflow
/// declares it: A-Z a-z 0-9 _ . -).
bool is_shot_placeholder(std::string_view n);

/// Whether `s` is valid UTF-8.
bool valid_utf8(std::string_view s);

} // namespace vidline::backends::comfyui
