#include "backends/comfyui/template.hpp"

#include <algorithm>
#include <optional>
#include <set>

namespace vidline::backends::comfyui {
namespace {

using json = nlohmann::json;

/// A piece of a template string: literal text or a placeholder name.
struct piece {
  bool placeholder = false;
  std::string text;
};

bool name_start(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

} // namespace

bool is_shot_placeholder(std::string_view n) {
  for (std::string_view group : {"param.", "input."})
    if (n.size() > group.size() && n.substr(0, group.size()) == group)
      return std::all_of(n.begin() + group.size(), n.end(), [](char c) {
        return name_char(c) || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
      });
  return false;
}

namespace {

/// Splits a template string; nullopt and `error` set when a "{{" is not a placeholder.
std::optional<std::vector<piece>> split(std::string_view s, std::string& error) {
  std::vector<piece> out;
  std::size_t i = 0;
  while (i < s.size()) {
    auto open = s.find("{{", i);
    if (open == std::string_view::npos) {
      out.push_back({false, std::string(s.substr(i))});
      break;
    }
    if (open > i)
      out.push_back({false, std::string(s.substr(i, open - i))});
    auto close = s.find("}}", open + 2);
    if (close == std::string_view::npos) {
      error = "'{{' without '}}'";
      return std::nullopt;
    }
    std::string_view name = s.substr(open + 2, close - open - 2);
    if (!is_shot_placeholder(name) &&
        (name.empty() || !name_start(name[0]) || !std::all_of(name.begin(), name.end(), name_char))) {
      error = "'{{" + std::string(name.substr(0, 40)) +
              "}}' is not a placeholder (names are lowercase a-z, 0-9, _; or param.NAME, "
              "input.NAME)";
      return std::nullopt;
    }
    out.push_back({true, std::string(name)});
    i = close + 2;
  }
  return out;
}

std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

/// The text form of a value inside a longer string.
std::optional<std::string> as_text(const json& v) {
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_number_unsigned())
    return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer())
    return std::to_string(v.get<int64_t>());
  if (v.is_boolean())
    return v.get<bool>() ? "true" : "false";
  if (v.is_number_float())
    return v.dump();
  return std::nullopt;
}

struct renderer {
  const template_values& values;
  std::string error;
  std::string where;

  bool fail(std::string e, std::string w) {
    error = std::move(e);
    where = std::move(w);
    return false;
  }

  bool string_value(const std::string& s, const std::string& path, json& out) {
    if (!valid_utf8(s))
      return fail("the template's text is not valid UTF-8", path);
    std::string err;
    auto pieces = split(s, err);
    if (!pieces)
      return fail(err, path);
    bool any = std::any_of(pieces->begin(), pieces->end(), [](const piece& p) { return p.placeholder; });
    if (!any) {
      out = s;
      return true;
    }
    auto value_of = [&](const std::string& name) -> const json* {
      auto it = values.find(name);
      if (it == values.end()) {
        std::string known;
        for (auto& [k, v] : values)
          known += (known.empty() ? "" : ", ") + k;
        fail("unknown placeholder {{" + name + "}}; known: " + known, path);
        return nullptr;
      }
      if (it->second.is_string() && !valid_utf8(it->second.get_ref<const std::string&>())) {
        fail("the value of {{" + name + "}} is not valid UTF-8", path);
        return nullptr;
      }
      if (!as_text(it->second)) {
        fail("the value of {{" + name + "}} is not a string, number or boolean", path);
        return nullptr;
      }
      return &it->second;
    };
    if (pieces->size() == 1) {  // exactly one placeholder: the typed value
      const json* v = value_of(pieces->front().text);
      if (v == nullptr)
        return false;
      out = *v;
      return true;
    }
    std::string text;
    for (auto& p : *pieces) {
      if (!p.placeholder) {
        text += p.text;
        continue;
      }
      const json* v = value_of(p.text);
      if (v == nullptr)
        return false;
      text += *as_text(*v);
    }
    out = std::move(text);
    return true;
  }

  bool walk(const json& in, const std::string& path, json& out, int depth) {
    if (depth > 64)
      return fail("nested deeper than 64 levels", path);
    switch (in.type()) {
    case json::value_t::object: {
      out = json::object();
      for (auto& [k, v] : in.items()) {
        std::string p = path + "/" + escape_pointer_token(k);
        if (k.find("{{") != std::string::npos)
          return fail("placeholders are not allowed in keys", p);
        if (!valid_utf8(k))
          return fail("a key is not valid UTF-8", p);
        json o;
        if (!walk(v, p, o, depth + 1))
          return false;
        out[k] = std::move(o);
      }
      return true;
    }
    case json::value_t::array: {
      out = json::array();
      std::size_t i = 0;
      for (auto& v : in) {
        json o;
        if (!walk(v, path + "/" + std::to_string(i++), o, depth + 1))
          return false;
        out.push_back(std::move(o));
      }
      return true;
    }
    case json::value_t::string:
      return string_value(in.get_ref<const std::string&>(), path, out);
    default:
      out = in;
      return true;
    }
  }
};

void collect(const json& j, std::set<std::string>& names, int depth) {
  if (depth > 64)
    return;
  if (j.is_object() || j.is_array()) {
    for (auto& v : j)
      collect(v, names, depth + 1);
  } else if (j.is_string()) {
    std::string err;
    if (auto pieces = split(j.get_ref<const std::string&>(), err))
      for (auto& p : *pieces)
        if (p.placeholder)
          names.insert(p.text);
  }
}

} // namespace

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  auto cont = [&](std::size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  while (i < s.size()) {
    unsigned char c = b(i);
    std::size_t n = 0;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF && cont(i + 1))
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF && cont(i + 1) && cont(i + 2) &&
             !(c == 0xE0 && b(i + 1) < 0xA0) && !(c == 0xED && b(i + 1) > 0x9F))
      n = 3;
    else if (c >= 0xF0 && c <= 0xF4 && cont(i + 1) && cont(i + 2) && cont(i + 3) &&
             !(c == 0xF0 && b(i + 1) < 0x90) && !(c == 0xF4 && b(i + 1) > 0x8F))
      n = 4;
    else
      return false;
    i += n;
  }
  return true;
}

render_result render(const nlohmann::json& tmpl, const template_values& values) {
  render_result r;
  renderer w{values, {}, {}};
  json out;
  try {
    if (!w.walk(tmpl, "", out, 0)) {
      r.error = w.error;
      r.where = w.where;
      return r;
    }
  } catch (const std::exception& e) {  // allocation; nothing else throws on a parsed tree
    r.error = e.what();
    return r;
  }
  r.ok = true;
  r.workflow = std::move(out);
  return r;
}

render_result render(std::string_view template_text, const template_values& values) {
  json tmpl = json::parse(template_text.begin(), template_text.end(), nullptr, false);
  if (tmpl.is_discarded()) {
    render_result r;
    r.error = "the template is not valid JSON";
    return r;
  }
  return render(tmpl, values);
}

std::vector<std::string> placeholders_of(const nlohmann::json& tmpl) {
  std::set<std::string> names;
  collect(tmpl, names, 0);
  return {names.begin(), names.end()};
}

std::string check_api_format(const nlohmann::json& w) {
  if (!w.is_object() || w.empty())
    return "an API-format workflow is a non-empty object of nodes by id (export it with "
           "'Save (API Format)', not 'Save')";
  if (w.contains("nodes") && w.contains("links"))
    return "this is a UI-format workflow (it has 'nodes' and 'links'): export it with "
           "'Save (API Format)'";
  for (auto& [id, node] : w.items()) {
    std::string at = "node " + id;
    if (!node.is_object())
      return at + ": not an object";
    if (!node.contains("class_type") || !node["class_type"].is_string() ||
        node["class_type"].get_ref<const std::string&>().empty())
      return at + ": no class_type";
    if (!node.contains("inputs") || !node["inputs"].is_object())
      return at + ": no inputs object";
    for (auto& [name, in] : node["inputs"].items()) {
      // A link: [source node id, output index].
      if (in.is_array() && in.size() == 2 && in[0].is_string() && in[1].is_number_integer()) {
        if (!w.contains(in[0].get<std::string>()))
          return at + ": input '" + name + "' links to node " + in[0].get<std::string>() +
                 ", which the workflow does not have";
      }
    }
  }
  return "";
}

} // namespace vidline::backends::comfyui
