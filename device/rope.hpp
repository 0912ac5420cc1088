// RoPE frequencies, including Llama-3's "llama3" scaling; shared by the emulator and the GPU.
#pragma once
#include <cmath>

#include "schedules/ops/attention.hpp"

namespace mk::device {

// The rotation angle of pair i (i < head_dim/2) at `pos`, in float32 as Hugging Face computes
// it (inverse frequency, scaling and position product all in float32): the float32 reference
// is what we are compared with, and double-precision sin/cos of angles in the thousands took
// the GPU's slow argument-reduction path (about 10 us per attention task).
MK_HD inline float rope_angle(const schedule::AttentionPayload& p, uint32_t i, uint32_t pos) {
  const float two_pi = 6.283185307179586f;
  float inv_freq = 1.0f / powf(p.rope_theta, static_cast<float>(2 * i) / static_cast<float>(p.head_dim));
  if (p.rope_scaling == static_cast<uint32_t>(schedule::RopeScaling::llama3)) {
    const float orig = p.rope_original_max_position, factor = p.rope_factor;
    const float low = p.rope_low_freq_factor, high = p.rope_high_freq_factor;
    const float wavelen = two_pi / inv_freq;
    if (wavelen > orig / low) {
      inv_freq /= factor;
    } else if (wavelen >= orig / high) {
      const float smooth = (orig / wavelen - low) / (high - low);
      inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq;
    }
  }
  return static_cast<float>(pos) * inv_freq;
}

}  // namespace mk::device
