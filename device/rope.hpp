// RoPE frequencies, including Llama-3's "llama3" scaling; shared by the emulator and the GPU.
#pragma once
#include <cmath>

#include "schedules/ops/attention.hpp"

namespace mk::device {

// The rotation angle of pair i (i < head_dim/2) at `pos`, in double: fp32 angles drift by
// pos * 2^-24 radians, too much at long contexts.
MK_HD inline double rope_angle(const schedule::AttentionPayload& p, uint32_t i, uint32_t pos) {
  const double two_pi = 6.283185307179586;
  double inv_freq = pow(static_cast<double>(p.rope_theta), -2.0 * i / p.head_dim);
  if (p.rope_scaling == static_cast<uint32_t>(schedule::RopeScaling::llama3)) {
    const double orig = p.rope_original_max_position, factor = p.rope_factor;
    const double low = p.rope_low_freq_factor, high = p.rope_high_freq_factor;
    const double wavelen = two_pi / inv_freq;
    if (wavelen > orig / low) {
      inv_freq /= factor;
    } else if (wavelen >= orig / high) {
      const double smooth = (orig / wavelen - low) / (high - low);
      inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
    }
  }
  return pos * inv_freq;
}

}  // namespace mk::device
