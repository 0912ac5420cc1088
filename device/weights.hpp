// Hugging Face style checkpoints: safetensors files, single or sharded
// (model.safetensors.index.json), memory-mapped read-only.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedules/format.hpp"

namespace mk::schedule {
struct Schedule;
}

namespace mk::device {

struct WeightError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CheckpointTensor {
  std::string key;
  std::string dtype;            // as in the safetensors header: "BF16", "F32", ...; F16 and F32 read as BF16
  std::vector<uint64_t> shape;
  std::span<const uint8_t> bytes;  // into the mapped file; F16 and F32: their bf16 conversion
  std::filesystem::path file;
  std::string stored_dtype;              // as in the file ("F32" for a converted tensor)
  std::span<const uint8_t> stored_bytes;  // into the mapped file, as stored
};

class Checkpoint {
 public:
  // `path` is a folder (model.safetensors, or model.safetensors.index.json and its shards) or
  // one .safetensors file. Every header is parsed and checked (JSON, offsets inside the file,
  // sizes matching dtype x shape, no overlaps); any problem throws WeightError naming the file.
  // F16 and F32 tensors are converted to BF16 (round to nearest even) here: the device reads
  // bf16 weights, whatever the checkpoint was saved in.
  static Checkpoint open(const std::filesystem::path& path);

  const CheckpointTensor* find(const std::string& key) const;  // nullptr when absent
  const std::map<std::string, CheckpointTensor>& tensors() const { return tensors_; }
  // The tensor as stored, converted to float (BF16, F16, F32 and F8_E4M3 supported); throws WeightError if absent.
  std::vector<float> to_float(const std::string& key) const;
  // The bytes of tensor `key` in the element type a schedule gives it (check_weights first):
  // bf16 (the converted bytes of F16 and F32), f8e4m3 (as stored), f32 (an aligned copy of the
  // stored values, converted from BF16 or F16: made once, on first use).
  std::span<const uint8_t> data(const std::string& key, schedule::DType) const;
  // The first element of stored F8_E4M3 tensor `key` that is a float8 NaN, if any: scanned once
  // (check_weights runs in the tools and again in every backend), and the answer kept.
  std::optional<uint64_t> first_float8_nan(const std::string& key) const;
  // What open() was given; error messages name it.
  const std::filesystem::path& path() const { return root_; }

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

 private:
  Checkpoint();
  struct Mapping;
  std::filesystem::path root_;
  std::vector<std::unique_ptr<Mapping>> maps_;
  std::map<std::string, CheckpointTensor> tensors_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> converted_;  // bf16 copies of F16 and F32 tensors
  struct Derived;  // what data() and first_float8_nan() worked out, once
  std::unique_ptr<Derived> derived_;
};

// Checks every weight tensor of the schedule against the checkpoint: present, of the same shape,
// and of its dtype: bf16 weights BF16 (or F16, F32: converted at open), f8e4m3 weights F8_E4M3
// with no NaN byte, their f32 scales F32, BF16 or F16 and finite. Throws WeightError describing
// the first mismatch (key, what the schedule expects, what the file has, which file).
void check_weights(const schedule::Schedule&, const Checkpoint&);

struct NewTensor {
  std::string key;
  std::vector<uint64_t> shape;
  std::vector<uint16_t> bf16;  // row-major data, where dtype is BF16
  std::string dtype = "BF16";  // or F8_E4M3, F32: the little-endian bytes in raw
  std::vector<uint8_t> raw = {};
};
// Writes one safetensors file; via a temporary file and rename.
void write_safetensors(const std::filesystem::path& file, const std::vector<NewTensor>& tensors);

// A checkpoint folder of random weights for every weight tensor of a schedule (each key once):
// `dir/model.safetensors` plus a minimal `config.json`. Seeded and deterministic. 1-D weights
// (norms) are drawn near 1, matrices with std 1/sqrt(cols), embeddings with std 1. An f8e4m3
// weight is such a matrix quantized with F32 scales of its layout, each the largest magnitude it
// covers over 448: the values span e4m3's range.
void write_random_checkpoint(const schedule::Schedule&, const std::filesystem::path& dir, uint64_t seed);

}  // namespace mk::device
