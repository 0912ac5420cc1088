// Times and rates as the tools print them for people: fixed notation (never 1.26644e+06), three
// significant digits below 100 and none after the point above (4479 us/token, 223 tokens/s, 99.7,
// 9.2, 0.0123), trailing zeros dropped. Machine-readable output (--json) keeps full precision.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace mk {

inline std::string show_fixed(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  const double magnitude = std::fabs(value);
  int decimals = 0;
  if (magnitude > 0 && magnitude < 100) decimals = std::min(6, 2 - static_cast<int>(std::floor(std::log10(magnitude))));
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  std::string s = text;
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

}  // namespace mk
