#include "device/weights.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "common/checked_json.hpp"
#include "common/input_file.hpp"
#include "common/output_file.hpp"
#include "device/bf16.hpp"
#include "device/fp8.hpp"
#include "schedules/limits.hpp"
#include "schedules/schedule.hpp"

namespace mk::device {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A read-only mapping of one whole file; unmapped when the checkpoint goes away.
struct MappedFile {
  fs::path file;
  const uint8_t* data = nullptr;
  size_t size = 0;
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data) munmap(const_cast<uint8_t*>(data), size);
  }
};

}  // namespace

// The private name the header declares; the helpers below work on the base.
struct Checkpoint::Mapping : MappedFile {};

namespace {

template <class... Args>
[[noreturn]] void fail(const fs::path& file, Args&&... args) {
  std::ostringstream s;
  s << file.string() << ": ";
  (s << ... << args);
  throw WeightError(s.str());
}

template <class T>
std::string shape_string(const std::vector<T>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes per element of every dtype the safetensors format defines; 0 when unknown.
uint64_t safetensors_dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4},     {"F32", 4},     {"I64", 8}, {"U64", 8},
      {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void map_file(const fs::path& file, MappedFile& m) {
  // O_NONBLOCK: a FIFO in place of a shard is refused below instead of blocking here.
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(file, "cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(file, "not a regular file");
  }
  m.file = file;
  m.size = static_cast<size_t>(st.st_size);
  if (m.size > 0) {  // mmap refuses length 0; an empty file is rejected by the parser anyway
    void* p = mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(file, "cannot map: ", std::strerror(err));
    }
    m.data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
}

// Parses JSON with the shared checks (common/checked_json.hpp); throws WeightError naming
// `file` and which of its parts (`what`) is wrong.
json parse_json(const fs::path& file, const char* what, std::string_view text) {
  try {
    return io::parse_checked_json(text, limits::kMaxNesting);
  } catch (const io::JsonError& e) {
    fail(file, what, ": ", e.what());
  }
}

// Reads a JSON array of non-negative integers; false (the caller reports it) on anything else.
bool get_u64_array(const json& j, std::vector<uint64_t>& out) {
  if (!j.is_array()) return false;
  out.clear();
  for (const json& v : j) {
    if (!v.is_number_unsigned()) return false;
    out.push_back(v.get<uint64_t>());
  }
  return true;
}

// Element count of a shape; false when it overflows 64 bits (a hostile header).
bool checked_elements(const std::vector<uint64_t>& shape, uint64_t& n) {
  n = 1;
  for (uint64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return false;
  return true;
}

// One header entry: type-checks the fields and checks the byte range against dtype x shape.
CheckpointTensor parse_entry(const fs::path& file, const std::string& key, const json& entry,
                             const uint8_t* data, uint64_t data_size) {
  if (!entry.is_object()) fail(file, "tensor '", key, "': expected an object, found ", entry.type_name());
  auto field = [&](const char* name) -> const json& {
    auto it = entry.find(name);
    if (it == entry.end()) fail(file, "tensor '", key, "': missing field '", name, "'");
    return *it;
  };
  CheckpointTensor t;
  t.key = key;
  t.file = file;
  const json& dtype = field("dtype");
  if (!dtype.is_string()) fail(file, "tensor '", key, "': dtype must be a string, found ", dtype.type_name());
  t.dtype = dtype.get<std::string>();
  const uint64_t elem_bytes = safetensors_dtype_bytes(t.dtype);
  if (elem_bytes == 0)
    fail(file, "tensor '", key, "': unknown dtype '", t.dtype, "' (expected BF16, F16, F32, F64, I8..I64, U8..U64, BOOL, F8_E4M3 or F8_E5M2)");
  if (!get_u64_array(field("shape"), t.shape))
    fail(file, "tensor '", key, "': shape must be an array of non-negative integers, found ", field("shape").dump());
  std::vector<uint64_t> off;
  if (!get_u64_array(field("data_offsets"), off) || off.size() != 2)
    fail(file, "tensor '", key, "': data_offsets must be two non-negative integers [begin, end], found ",
         field("data_offsets").dump());
  const std::string offs = "data_offsets [" + std::to_string(off[0]) + ", " + std::to_string(off[1]) + "]";
  if (off[0] > off[1]) fail(file, "tensor '", key, "': ", offs, " end before begin");
  if (off[1] > data_size)
    fail(file, "tensor '", key, "': ", offs, " outside the data area of ", data_size, " bytes (file truncated?)");
  uint64_t n = 0, need = 0;
  const bool fits = checked_elements(t.shape, n) && !__builtin_mul_overflow(n, elem_bytes, &need);
  if (!fits || need != off[1] - off[0])
    fail(file, "tensor '", key, "': ", offs, " give ", off[1] - off[0], " bytes but ", t.dtype, " ",
         shape_string(t.shape), " needs ", fits ? std::to_string(need) : std::string("more than 2^64"));
  t.bytes = {data + off[0], static_cast<size_t>(off[1] - off[0])};
  return t;
}

// Rejects two tensors sharing bytes: writers never do that, so it means a corrupt header. Each
// tensor is compared with the one reaching furthest among those before it (not just the
// previous one, which may be short or empty).
void check_no_overlap(const fs::path& file, std::vector<CheckpointTensor>& ts) {
  std::sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) { return a.bytes.data() < b.bytes.data(); });
  const CheckpointTensor* furthest = nullptr;
  for (const CheckpointTensor& cur : ts) {
    if (cur.bytes.empty()) continue;
    if (furthest && cur.bytes.data() < furthest->bytes.data() + furthest->bytes.size())
      fail(file, "tensors '", furthest->key, "' and '", cur.key, "' overlap in the data area");
    if (!furthest || cur.bytes.data() + cur.bytes.size() > furthest->bytes.data() + furthest->bytes.size()) furthest = &cur;
  }
}

std::vector<CheckpointTensor> parse_safetensors(const MappedFile& m) {
  const fs::path& file = m.file;
  if (m.size < 8) fail(file, "file is ", m.size, " bytes, shorter than the 8-byte header length");
  const uint64_t n = read_u64_le(m.data);
  // A safetensors file's JSON header starts with '{' right after its length. Another file (a
  // config.json, a schedule) read as one has a length made of text or other data, far past the
  // file's end: say what the file is not, rather than quote that length.
  if (n > m.size - 8 && m.size > 8 && m.data[8] != '{')
    fail(file, "not a safetensors file (expected an 8-byte header length, then a JSON header starting with '{'); "
               "give a checkpoint folder or its .safetensors file");
  if (n > m.size - 8)
    fail(file, "header length ", n, " exceeds the ", m.size - 8, " bytes after the length field (file truncated?)");
  if (n > limits::kMaxTextBytes) fail(file, "header length ", n, " is over the limit of ", limits::kMaxTextBytes, " bytes");
  const json header = parse_json(file, "the JSON header", {reinterpret_cast<const char*>(m.data) + 8, n});
  if (!header.is_object()) fail(file, "JSON header must be an object, found ", header.type_name());
  const uint8_t* data = m.data + 8 + n;
  const uint64_t data_size = m.size - 8 - n;
  std::vector<CheckpointTensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(file, "__metadata__ must be an object, found ", it->type_name());
      continue;
    }
    out.push_back(parse_entry(file, it.key(), *it, data, data_size));
  }
  check_no_overlap(file, out);
  return out;
}

json read_json_file(const fs::path& file) {
  std::string text;
  try {
    text = io::read_input_file(file, limits::kMaxTextBytes);
  } catch (const io::InputError& e) {
    fail(file, e.what());
  }
  return parse_json(file, "the index", text);
}

// A shard named in an index must be a file inside the checkpoint folder: a relative path
// without "..", so that an index cannot make the runtime map files elsewhere.
void check_shard_name(const fs::path& index, const std::string& shard) {
  const fs::path p(shard);
  bool escapes = p.is_absolute() || p.has_root_name() || p.has_root_directory() || shard.find('\0') != std::string::npos;
  for (const fs::path& part : p)
    if (part == "..") escapes = true;
  if (escapes) fail(index, "weight_map: shard '", shard, "' is not a file name inside the checkpoint folder");
}

// shard file name -> keys the index puts there
std::map<std::string, std::vector<std::string>> read_index(const fs::path& index) {
  const json j = read_json_file(index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index, "expected an object with a \"weight_map\" object (key -> shard file name)");
  std::map<std::string, std::vector<std::string>> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string() || it->get<std::string>().empty())
      fail(index, "weight_map: key '", it.key(), "' must map to a shard file name, found ", it->dump());
    check_shard_name(index, it->get<std::string>());
    shards[it->get<std::string>()].push_back(it.key());
  }
  return shards;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  else if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

// Raw little-endian loads: the data area has no alignment guarantee.
uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

struct Checkpoint::Derived {
  std::mutex mutex;
  std::map<std::string, std::vector<float>> f32;                  // data(key, f32)
  std::map<std::string, std::optional<uint64_t>> float8_nan;      // first_float8_nan(key)
};

Checkpoint::Checkpoint() : derived_(std::make_unique<Derived>()) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::open(const fs::path& path) {
  Checkpoint c;
  c.root_ = path;
  // Maps and parses one file, adding its tensors; returns the keys it held.
  auto add_file = [&](const fs::path& file) {
    c.maps_.push_back(std::make_unique<Mapping>());
    map_file(file, *c.maps_.back());
    std::set<std::string> keys;
    for (CheckpointTensor& t : parse_safetensors(*c.maps_.back())) {
      if (auto old = c.tensors_.find(t.key); old != c.tensors_.end())
        fail(file, "tensor '", t.key, "' is also in ", old->second.file.string());
      keys.insert(t.key);
      c.tensors_.emplace(t.key, std::move(t));
    }
    return keys;
  };

  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    add_file(path);
  } else if (fs::is_directory(path, ec)) {
    const fs::path index = path / "model.safetensors.index.json";
    const fs::path single = path / "model.safetensors";
    if (fs::exists(index, ec)) {
      for (const auto& [shard, keys] : read_index(index)) {
        const fs::path file = path / shard;
        if (!fs::is_regular_file(file, ec))
          fail(index, "shard '", shard, "' (holding '", keys.front(), "') not found: ", file.string());
        const std::set<std::string> present = add_file(file);
        for (const std::string& k : keys)
          if (!present.count(k)) fail(index, "key '", k, "' is mapped to shard '", shard, "' but that file lacks it");
      }
    } else if (fs::exists(single, ec)) {
      add_file(single);
    } else {
      fail(path, "folder has neither model.safetensors.index.json nor model.safetensors");
    }
  } else {
    fail(path, "no such file or folder");
  }
  for (auto& [key, t] : c.tensors_) {
    t.stored_dtype = t.dtype;
    t.stored_bytes = t.bytes;
    if (t.dtype != "F16" && t.dtype != "F32") continue;
    const std::vector<float> values = c.to_float(key);
    auto& out = *c.converted_.emplace_back(std::make_unique<std::vector<uint8_t>>(2 * values.size()));
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = f32_to_bf16(values[i]);
      out[2 * i] = static_cast<uint8_t>(b & 0xff);
      out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
    t.dtype = "BF16";
    t.bytes = std::span<const uint8_t>(out.data(), out.size());
  }
  return c;
}

const CheckpointTensor* Checkpoint::find(const std::string& key) const {
  auto it = tensors_.find(key);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<float> Checkpoint::to_float(const std::string& key) const {
  const CheckpointTensor* t = find(key);
  if (!t) fail(root_, "missing key '", key, "'");
  const std::string& dtype = t->stored_dtype;  // open() fills it before it converts anything
  const std::span<const uint8_t> bytes = t->stored_bytes;
  const uint8_t* p = bytes.data();
  std::vector<float> out;
  if (dtype == "BF16" || dtype == "F16") {
    out.resize(bytes.size() / 2);
    const bool bf = dtype == "BF16";
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf ? bf16_to_f32(load_u16(p + 2 * i)) : f16_to_f32(load_u16(p + 2 * i));
  } else if (dtype == "F32") {
    out.resize(bytes.size() / 4);
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::bit_cast<float>(load_u32(p + 4 * i));
  } else if (dtype == "F8_E4M3") {
    out.resize(bytes.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = f8e4m3_to_f32(p[i]);
  } else {
    fail(t->file, "tensor '", key, "': cannot convert ", dtype, " to float (BF16, F16, F32 and F8_E4M3 only)");
  }
  return out;
}

std::span<const uint8_t> Checkpoint::data(const std::string& key, schedule::DType dtype) const {
  const CheckpointTensor* t = find(key);
  if (!t) fail(root_, "missing key '", key, "'");
  if (dtype == schedule::DType::bf16) return t->bytes;
  if (dtype == schedule::DType::f8e4m3) return t->stored_bytes;
  if (dtype != schedule::DType::f32) fail(t->file, "tensor '", key, "': no weight is read as ", schedule::dtype_name(dtype));
  std::lock_guard<std::mutex> lock(derived_->mutex);
  auto it = derived_->f32.find(key);
  if (it == derived_->f32.end()) it = derived_->f32.emplace(key, to_float(key)).first;
  return {reinterpret_cast<const uint8_t*>(it->second.data()), it->second.size() * sizeof(float)};
}

std::optional<uint64_t> Checkpoint::first_float8_nan(const std::string& key) const {
  const CheckpointTensor* t = find(key);
  if (!t) fail(root_, "missing key '", key, "'");
  std::lock_guard<std::mutex> lock(derived_->mutex);
  if (auto it = derived_->float8_nan.find(key); it != derived_->float8_nan.end()) return it->second;
  // A block at a time with no branch inside (it vectorizes: gigabytes of weights at memory speed),
  // the element found only in a block that holds one.
  const std::span<const uint8_t> b = t->stored_bytes;
  std::optional<uint64_t> found;
  for (size_t begin = 0; begin < b.size() && !found; begin += 4096) {
    const size_t end = std::min(b.size(), begin + 4096);
    bool any = false;
    for (size_t i = begin; i < end; ++i) any |= f8e4m3_is_nan(b[i]);
    if (any)
      for (size_t i = begin; !found; ++i)
        if (f8e4m3_is_nan(b[i])) found = i;
  }
  derived_->float8_nan.emplace(key, found);
  return found;
}

void check_weights(const schedule::Schedule& s, const Checkpoint& ckpt) {
  for (const schedule::Tensor& st : s.tensors) {
    if (st.role != schedule::Role::weight) continue;
    const bool f8 = st.dtype == schedule::DType::f8e4m3, f32 = st.dtype == schedule::DType::f32;
    const std::string expected = (f8 ? "F8_E4M3 " : f32 ? "F32 " : "BF16 ") + shape_string(st.shape);
    if (st.key.empty()) fail(ckpt.path(), "schedule tensor '", st.name, "' has no safetensors key");
    const CheckpointTensor* t = ckpt.find(st.key);
    if (!t)
      fail(ckpt.path(), "missing key '", st.key, "' (schedule tensor '", st.name, "', expected ", expected, ")");
    // A scale of a single value may be stored as a scalar (shape []) or a [1, 1].
    uint64_t n = 1;
    for (uint64_t d : t->shape) n = d > 0 && n <= std::numeric_limits<uint64_t>::max() / d ? n * d : 0;
    const bool single = f32 && st.shape == std::vector<uint32_t>{1} && n == 1;
    const bool same_shape = single || std::equal(t->shape.begin(), t->shape.end(), st.shape.begin(), st.shape.end(),
                                                 [](uint64_t a, uint32_t b) { return a == b; });
    // Scales of per-row layout are published as [rows, 1].
    const bool row_scales = f32 && st.shape.size() == 1 && t->shape.size() == 2 && t->shape[0] == st.shape[0] && t->shape[1] == 1;
    const bool dtype_ok = f8 ? t->stored_dtype == "F8_E4M3"
                          : f32 ? t->stored_dtype == "F32" || t->stored_dtype == "BF16" || t->stored_dtype == "F16"
                                : t->dtype == "BF16";
    if (!dtype_ok || !(same_shape || row_scales))
      fail(t->file, "key '", st.key, "' (schedule tensor '", st.name, "') is ", t->stored_dtype, " ", shape_string(t->shape),
           ", expected ", expected,
           f8 && t->stored_dtype == "F8_E5M2" ? " (e5m2 weights are not supported: e4m3 only)"
           : f8 || f32                       ? ""
                                             : " (F16 and F32 are converted at load)");
    if (f8)  // e4m3 has no infinity; S.1111.111 is NaN, which no quantizer writes
      if (const std::optional<uint64_t> i = ckpt.first_float8_nan(st.key))
        fail(t->file, "key '", st.key, "': element ", *i, " is a float8 NaN (byte 0x", std::hex, int{t->stored_bytes[*i]},
             std::dec, "); a quantized weight is finite");
    if (f32) {  // the copy the backends then read (Checkpoint::data)
      const std::span<const uint8_t> bytes = ckpt.data(st.key, schedule::DType::f32);
      const float* v = reinterpret_cast<const float*>(bytes.data());
      for (size_t i = 0; i < bytes.size() / sizeof(float); ++i)
        if (!std::isfinite(v[i])) fail(t->file, "key '", st.key, "': scale ", i, " is ", v[i], "; scales must be finite");
    }
  }
}

void write_safetensors(const fs::path& file, const std::vector<NewTensor>& tensors) {
  json header = json::object();  // nlohmann objects are std::map: keys come out sorted
  uint64_t offset = 0;
  for (const NewTensor& t : tensors) {
    uint64_t n = 0;
    if (t.key.empty() || t.key == "__metadata__") fail(file, "invalid tensor key '", t.key, "'");
    if (header.contains(t.key)) fail(file, "tensor '", t.key, "' given twice");
    const uint64_t eb = safetensors_dtype_bytes(t.dtype), have = t.dtype == "BF16" ? t.bf16.size() : t.raw.size() / std::max<uint64_t>(eb, 1);
    if (eb == 0 || (t.dtype != "BF16" && t.raw.size() % eb)) fail(file, "tensor '", t.key, "': cannot write dtype ", t.dtype);
    if (!checked_elements(t.shape, n) || n != have)
      fail(file, "tensor '", t.key, "': shape ", shape_string(t.shape), " does not match ", have, " values");
    header[t.key] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + eb * n}}};
    offset += eb * n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data area 8-byte aligned

  try {
    io::OutputFile f(file);  // readers never see a half-written file
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
    f.write(len, 8);
    f.write(text);
    for (const NewTensor& t : tensors) {
      if (t.dtype != "BF16") {
        f.write(t.raw.data(), t.raw.size());
        continue;
      }
      if constexpr (std::endian::native == std::endian::little) {
        f.write(t.bf16.data(), 2 * t.bf16.size());
      } else {
        std::vector<uint8_t> le;
        for (uint16_t v : t.bf16) le.push_back(static_cast<uint8_t>(v & 0xff)), le.push_back(static_cast<uint8_t>(v >> 8));
        f.write(le.data(), le.size());
      }
    }
    f.commit();
  } catch (const io::OutputError& e) {
    throw WeightError(e.what());
  }
}

namespace {

// Standard normal samples from a 64-bit Mersenne Twister via Box-Muller; unlike
// std::normal_distribution, the sequence is the same with every standard library.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1p-53;  // (0, 1]: log is finite
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * 3.14159265358979323846 * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

std::vector<uint16_t> random_values(const NewTensor& t, Normal& normal) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  std::vector<uint16_t> v(n);
  if (t.shape.size() <= 1 && t.key.ends_with(".bias")) {  // biases: of the order of the projections
    for (auto& x : v) x = f32_to_bf16(static_cast<float>(0.5 * normal()));
    return v;
  }
  if (t.shape.size() <= 1) {  // norm weights: scale factors near 1
    for (auto& x : v) x = f32_to_bf16(static_cast<float>(1.0 + 0.1 * normal()));
    return v;
  }
  // Embeddings: unit variance rows. Matrices: std 1/sqrt(fan-in) keeps activations O(1).
  const bool embed = t.key.find("embed") != std::string::npos;
  const double scale = embed ? 1.0 : 1.0 / std::sqrt(static_cast<double>(std::max<uint64_t>(t.shape.back(), 1)));
  for (auto& x : v) x = f32_to_bf16(static_cast<float>(scale * normal()));
  return v;
}

// An f8e4m3 weight w drawn as random_values draws a matrix, then quantized: each scale (of the
// layout its shape gives: [1], [rows] or 128 x 128 blocks) the largest magnitude it covers over
// 448, each value rounded to the nearest e4m3 of value / scale.
void quantize_random(NewTensor& w, NewTensor& scale, Normal& normal) {
  NewTensor drawn{w.key, w.shape, {}};
  const std::vector<uint16_t> v = random_values(drawn, normal);
  const uint64_t rows = w.shape[0], cols = w.shape[1];
  uint64_t count = 1;
  for (uint64_t d : scale.shape) count *= d;
  const bool block = scale.shape.size() == 2, row = !block && count == rows && rows > 1;
  const uint64_t cbs = (cols + 127) / 128;
  auto index = [&](uint64_t r, uint64_t c) { return block ? r / 128 * cbs + c / 128 : row ? r : 0; };
  std::vector<float> amax(count, 0.0f);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) amax[index(r, c)] = std::max(amax[index(r, c)], std::fabs(bf16_to_f32(v[r * cols + c])));
  std::vector<float> s(count);
  for (uint64_t i = 0; i < count; ++i) s[i] = amax[i] > 0 ? amax[i] / 448.0f : 1.0f;
  w.raw.resize(rows * cols);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) w.raw[r * cols + c] = f32_to_f8e4m3(bf16_to_f32(v[r * cols + c]) / s[index(r, c)]);
  scale.raw.resize(4 * count);
  std::memcpy(scale.raw.data(), s.data(), scale.raw.size());  // little-endian host (as write_safetensors' BF16)
}

}  // namespace

void write_random_checkpoint(const schedule::Schedule& s, const fs::path& dir, uint64_t seed) {
  // One entry per key, in schedule order; tied weights share a key and are written once.
  std::vector<NewTensor> tensors;
  std::map<std::string, std::pair<size_t, std::string>> seen;  // key -> (index, first tensor name)
  for (const schedule::Tensor& st : s.tensors) {
    if (st.role != schedule::Role::weight) continue;
    if (st.key.empty()) fail(dir, "schedule tensor '", st.name, "' has no safetensors key");
    std::vector<uint64_t> shape(st.shape.begin(), st.shape.end());
    if (auto it = seen.find(st.key); it != seen.end()) {
      const NewTensor& first = tensors[it->second.first];
      if (first.shape != shape)
        fail(dir, "key '", st.key, "' is shared by schedule tensors '", it->second.second, "' ",
             shape_string(first.shape), " and '", st.name, "' ", shape_string(shape), " of different shapes");
      continue;
    }
    seen[st.key] = {tensors.size(), st.name};
    tensors.push_back({st.key, std::move(shape), {}});
    if (st.dtype == schedule::DType::f8e4m3) tensors.back().dtype = "F8_E4M3";
    if (st.dtype == schedule::DType::f32) tensors.back().dtype = "F32";  // scales: after their weight (format.hpp)
  }
  Normal normal(seed);
  for (NewTensor& t : tensors)
    if (t.dtype == "BF16") t.bf16 = random_values(t, normal);
  for (size_t i = 0; i + 1 < tensors.size(); ++i)
    if (tensors[i].dtype == "F8_E4M3") quantize_random(tensors[i], tensors[i + 1], normal);

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create folder: ", ec.message());
  write_safetensors(dir / "model.safetensors", tensors);
  try {
    // A config.json already there (the checkpoint of an imported config) is the model's: kept.
    if (!fs::exists(dir / "config.json", ec))
      io::write_file(dir / "config.json", json{{"mk_generated", true}, {"seed", seed}}.dump(2) + "\n");
  } catch (const io::OutputError& e) {
    throw WeightError(e.what());
  }
}

}  // namespace mk::device
