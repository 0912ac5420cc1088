// Where each schedule tensor lives for one backend: a base address per tensor id.
// kv caches are laid out [kv_heads][max_context][head_dim].
#pragma once
#include <cstdint>

#include "schedules/format.hpp"

namespace mk::device {

struct TensorTable {
  void* const* base = nullptr;  // indexed by tensor id
  uint32_t count = 0;

  template <class T>
  MK_HD T* at(uint32_t id) const {
    return static_cast<T*>(base[id]);
  }
};

}  // namespace mk::device
