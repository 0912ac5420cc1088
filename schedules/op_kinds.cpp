#include "schedules/op_kinds.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "schedules/ops.hpp"

namespace mk::schedule {

std::string name_range(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  if (names.size() == 1) return names.front();
  size_t prefix = names.front().size(), suffix = names.front().size();
  for (const std::string& n : names) {
    const std::string& f = names.front();
    size_t p = 0;
    while (p < prefix && p < n.size() && n[p] == f[p]) ++p;
    prefix = p;
    size_t s = 0;
    while (s < suffix && s < n.size() && s < f.size() && n[n.size() - 1 - s] == f[f.size() - 1 - s]) ++s;
    suffix = s;
  }
  auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  const std::string& f = names.front();
  while (prefix > 0 && digit(f[prefix - 1])) --prefix;  // "a1{0..1}" reads worse than "a{10..11}"
  while (suffix > 0 && digit(f[f.size() - suffix])) --suffix;
  for (const std::string& n : names)
    if (prefix + suffix > n.size()) return names.front() + " .. " + names.back();
  auto middle = [&](const std::string& n) { return n.substr(prefix, n.size() - prefix - suffix); };
  return f.substr(0, prefix) + "{" + middle(f) + ".." + middle(names.back()) + "}" + f.substr(f.size() - suffix);
}

std::string shade(const std::string& hex, size_t i, size_t n) {
  unsigned r = 0, g = 0, b = 0;
  if (n <= 1 || hex.size() != 7 || std::sscanf(hex.c_str(), "#%02x%02x%02x", &r, &g, &b) != 3) return hex;
  // RGB -> HSL, set the lightness, back.
  const double R = r / 255.0, G = g / 255.0, B = b / 255.0;
  const double mx = std::max({R, G, B}), mn = std::min({R, G, B}), l0 = (mx + mn) / 2, d = mx - mn;
  double h = 0, s = 0;
  if (d > 0) {
    s = d / (1 - std::fabs(2 * l0 - 1));
    h = mx == R ? std::fmod((G - B) / d, 6.0) : mx == G ? (B - R) / d + 2 : (R - G) / d + 4;
    if (h < 0) h += 6;
  }
  // Neighbouring kinds (in op order) apart: lightness in an interleaved order, hue turned a little.
  const size_t half = (n + 1) / 2, rank = i % 2 == 0 ? i / 2 : half + i / 2;
  const double l = 0.30 + 0.45 * double(rank) / double(n - 1);
  h = std::fmod(h + 6 + (double(i) / double(n - 1) - 0.5) * 0.8, 6.0);  // +-24 degrees
  const double c = (1 - std::fabs(2 * l - 1)) * s, x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1)), m = l - c / 2;
  double rgb[3];
  const int sector = static_cast<int>(h) % 6;
  const double table[6][3] = {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}, {c, 0, x}};
  for (int k = 0; k < 3; ++k) rgb[k] = table[sector][k] + m;
  char out[8];
  std::snprintf(out, sizeof out, "#%02x%02x%02x", static_cast<unsigned>(std::lround(rgb[0] * 255)),
                static_cast<unsigned>(std::lround(rgb[1] * 255)), static_cast<unsigned>(std::lround(rgb[2] * 255)));
  return out;
}

OpKinds op_kinds(const std::vector<Op>& ops) {
  OpKinds k;
  k.kind_of.assign(ops.size(), 0);
  std::map<int, std::vector<uint32_t>> by_layer;
  for (uint32_t o = 0; o < ops.size(); ++o)
    if (ops[o].layer >= 0) by_layer[ops[o].layer].push_back(o);
  if (!by_layer.empty()) {
    k.first_layer = by_layer.begin()->first;
    k.last_layer = by_layer.rbegin()->first;
    const std::vector<uint32_t>& first = by_layer.begin()->second;
    k.repeated = static_cast<int>(by_layer.size()) == k.last_layer - k.first_layer + 1;
    for (const auto& [layer, list] : by_layer) {
      k.repeated = k.repeated && list.size() == first.size();
      for (size_t i = 0; k.repeated && i < list.size(); ++i) k.repeated = ops[list[i]].opcode == ops[first[i]].opcode;
    }
  }
  std::map<int, uint32_t> position_kind;  // block position -> kind
  std::map<uint32_t, int> position_of;
  for (const auto& [layer, list] : by_layer)
    for (size_t i = 0; i < list.size(); ++i) position_of[list[i]] = static_cast<int>(i);
  for (uint32_t o = 0; o < ops.size(); ++o) {
    const bool folded = k.repeated && ops[o].layer >= 0;
    if (folded) {
      const int pos = position_of[o];
      auto [it, fresh] = position_kind.emplace(pos, static_cast<uint32_t>(k.kinds.size()));
      if (fresh) k.kinds.push_back({"", ops[o].opcode, "", pos, {}});
      k.kind_of[o] = it->second;
    } else {
      k.kind_of[o] = static_cast<uint32_t>(k.kinds.size());
      k.kinds.push_back({ops[o].name, ops[o].opcode, "", -1, {}});
    }
    k.kinds[k.kind_of[o]].ops.push_back(o);
  }
  std::map<Opcode, std::vector<uint32_t>> by_opcode;
  for (uint32_t i = 0; i < k.kinds.size(); ++i) {
    OpKind& kind = k.kinds[i];
    if (kind.position >= 0) {
      std::vector<std::string> names;
      for (uint32_t o : kind.ops) names.push_back(ops[o].name);
      kind.label = name_range(names);
    }
    by_opcode[kind.opcode].push_back(i);
  }
  for (const auto& [opcode, list] : by_opcode)
    for (size_t i = 0; i < list.size(); ++i) k.kinds[list[i]].colour = shade(op_colour(opcode), i, list.size());
  return k;
}

}  // namespace mk::schedule
