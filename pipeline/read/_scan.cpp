// Compiled stage 1 of extract: Chrome/Kineto trace JSON -> columns of its complete ("X") events,
// without a Python object per event (README, "The compiled extractor").
//
// scan(data: bytes) -> dict | None.  None means "fallback": the input holds something this scanner
// is not certain to read exactly as the reference (pipeline/read/decode.py + extract.py, msgspec) does:
// an unexpected type, a missing or out-of-range time, a number written with an exponent or as a
// string, a duplicate key, malformed JSON, the bare-array form...  The caller then runs the Python
// extractor on the file, so every error message is the reference's by construction.
//
// Every value of the document is visited (On-Demand validates only what it reads), so a malformed
// value anywhere, even in a field nobody uses, is a fallback, as msgspec refuses the whole file.
//
// Written against the plain CPython C API (no numpy / pybind11 headers at build time): int columns
// come back as bytes of native int64 (np.frombuffer), strings dictionary-encoded (int32 codes into
// a list of distinct str; -1 is null).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

using namespace simdjson;

namespace {

constexpr int64_t NONE = INT64_MIN;  // extract.NONE: "absent" in int columns
constexpr int64_t INT64_MAX_ = INT64_MAX;

struct Fallback {};  // thrown anywhere: the file goes to the reference extractor

template <typename T>
inline T must(simdjson_result<T> &&r) {
  T v;
  if (std::move(r).get(v)) throw Fallback{};
  return v;
}

// Distinct strings -> codes.  Views point into the parser's string buffer, valid while it lives.
struct Dict {
  std::unordered_map<std::string_view, int32_t> codes;
  std::vector<std::string_view> items;
  int32_t code(std::string_view s) {
    auto it = codes.find(s);
    if (it != codes.end()) return it->second;
    int32_t c = (int32_t)items.size();
    codes.emplace(s, c);
    items.push_back(s);
    return c;
  }
};

// pid / tid: int or str; one code space, canonical per value.
struct Ids {
  std::unordered_map<int64_t, int32_t> ints;
  std::unordered_map<std::string_view, int32_t> strs;
  std::vector<std::pair<bool, std::pair<int64_t, std::string_view>>> items;  // (is_str, (int, str))
  int32_t of_int(int64_t v) {
    auto it = ints.find(v);
    if (it != ints.end()) return it->second;
    int32_t c = (int32_t)items.size();
    ints.emplace(v, c);
    items.push_back({false, {v, {}}});
    return c;
  }
  int32_t of_str(std::string_view s) {
    auto it = strs.find(s);
    if (it != strs.end()) return it->second;
    int32_t c = (int32_t)items.size();
    strs.emplace(s, c);
    items.push_back({true, {0, s}});
    return c;
  }
};

struct Out {
  std::vector<int64_t> index, ts, dur, corr, stream, device, rare;  // rare: (position, start, end, Rare bits)
  std::vector<int32_t> cat, name, pid, tid;
  Dict cats, names;
  Ids ids;
  int64_t num_events = 0;
  // header
  bool has_rank = false, has_world = false, has_base = false;
  int64_t rank = 0, world_size = 0, base_time = 0;
  bool has_backend = false, has_nccl = false, has_host = false;
  std::string_view backend, nccl_version, host;
  std::vector<std::string_view> device_names;  // non-empty deviceProperties names, in order
  // ingest's two byte pre-scans (pipeline/execute/ingest.py FRACTIONAL_TS, vocabulary.category_scan),
  // answered from the keys as written, so that the file's bytes are not searched twice more
  bool fractional_ts = false;   // some key "ts" has a number written -?digits.  (HTA then rounds to µs)
  bool device_category = false; // some key "cat" has a string that is one of device_categories, any ASCII case
  std::vector<std::string> device_categories;  // lower-cased
};

// -- the pre-scans' answers ----------------------------------------------------------------------
// The byte regexes match `"ts"\s*:\s*-?\d+\.` and `"cat"\s*:\s*"(?i:c1|c2|...)"` anywhere in the
// raw JSON.  In valid JSON (the scanner validates every byte) `"ts"` followed by a colon is a key
// whose text as written ends with `"ts`: `ts` itself or a key ending in an escaped quote and `ts`
// (a quote inside a string is always escaped), and the text after the colon is the value's.

inline bool key_ends(std::string_view key, std::string_view name) {  // key == name, or ends with `"` + name
  if (key == name) return true;
  return key.size() > name.size() && key.substr(key.size() - name.size()) == name &&
         key[key.size() - name.size() - 1] == '"';
}

inline bool written_fractional(std::string_view t) {  // -?digits.
  size_t i = 0;
  if (i < t.size() && t[i] == '-') i++;
  size_t digits = i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') i++;
  return i > digits && i < t.size() && t[i] == '.';
}

inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

inline bool written_device_category(std::string_view t, const std::vector<std::string> &categories) {
  if (t.empty() || t[0] != '"') return false;  // not a string
  size_t end = 1;
  while (end < t.size() && t[end] != '"') end += (t[end] == '\\') ? 2 : 1;
  std::string_view text = t.substr(1, end - 1);  // as written: an escape never matches the byte regex
  for (const std::string &c : categories) {
    if (c.size() != text.size()) continue;
    size_t k = 0;
    while (k < c.size() && ascii_lower(text[k]) == c[k]) k++;
    if (k == c.size()) return true;
  }
  return false;
}

// Every field of every object goes through here: ``raw``, where its key's text starts (taken before the
// key is unescaped, which consumes it), and ``key`` as key_of or unescaped_key gave it.  A key whose
// text as written ends in "ts" or "cat" decodes to one that does too, so any other is passed at the
// cost of two byte compares.  The key as written runs from ``raw`` to its closing quote, the first
// quote before the value (only spaces and the colon lie between).
inline void note_field(ondemand::field &field, const char *raw, std::string_view key, Out &out) {
  size_t n = key.size();
  bool ts = n >= 2 && key[n - 1] == 's' && key[n - 2] == 't';
  bool cat = !ts && n >= 3 && key[n - 1] == 't' && key[n - 2] == 'a' && key[n - 3] == 'c';
  if (!(ts && !out.fractional_ts) && !(cat && !out.device_category)) return;
  std::string_view value = field.value().raw_json_token();
  const char *end = value.data();
  do end--; while (*end != '"');
  std::string_view written(raw, (size_t)(end - raw));
  if (ts && key_ends(written, "ts")) out.fractional_ts = written_fractional(value);
  if (cat && key_ends(written, "cat")) out.device_category = written_device_category(value, out.device_categories);
}

// Values nested deeper than this are a fallback: the walk below recurses once per level, and a
// million nested arrays (2 MB of JSON) would overflow the C stack.  The reference extractor then
// refuses the file with one line (decode.py: MAX_DEPTH, msgspec's own recursion limit).  Kineto
// traces nest about six levels deep (Input Dims of a list of tensors: four).
constexpr int MAX_DEPTH = 256;

void walk(ondemand::value v, Out &out, int depth = 0);  // validate a value nobody uses

void walk_object(ondemand::object o, Out &out, int depth) {
  for (auto f : o) {
    ondemand::field field = must(std::move(f));
    const char *raw = field.key().raw();
    note_field(field, raw, must(field.unescaped_key()), out);
    walk(field.value(), out, depth);
  }
}

void walk(ondemand::value v, Out &out, int depth) {
  if (++depth > MAX_DEPTH) throw Fallback{};
  switch (must(v.type())) {
    case ondemand::json_type::object:
      walk_object(must(v.get_object()), out, depth);
      break;
    case ondemand::json_type::array:
      for (auto e : must(v.get_array())) walk(must(std::move(e)), out, depth);
      break;
    case ondemand::json_type::string:
      must(v.get_string());
      break;
    case ondemand::json_type::number:
      must(v.get_number());
      break;
    case ondemand::json_type::boolean:
      must(v.get_bool());
      break;
    case ondemand::json_type::null:
      if (!must(v.is_null())) throw Fallback{};
      break;
    default:
      throw Fallback{};
  }
}

inline bool is_null(ondemand::value &v) { return must(v.type()) == ondemand::json_type::null && must(v.is_null()); }

// A nullable str: true and the text when a string, false when null; anything else falls back.
inline bool opt_str(ondemand::value v, std::string_view &out) {
  if (is_null(v)) return false;
  if (must(v.type()) != ondemand::json_type::string) throw Fallback{};
  out = must(v.get_string());
  return true;
}

// A nullable int that must fit int64 (and not be the NONE sentinel extract rejects).
inline bool opt_int(ondemand::value v, int64_t &out) {
  // get_int64 refuses a fraction, an exponent, a leading zero, a value beyond int64, a non-number
  if (!v.get_int64().get(out)) {
    if (out == NONE) throw Fallback{};
    return true;
  }
  if (is_null(v)) return false;
  throw Fallback{};
}

// int | str | null (Args' IntOrStr): only validated; these fields are read in Python (rare events).
inline void int_or_str(ondemand::value v) {
  if (is_null(v)) return;
  auto t = must(v.type());
  if (t == ondemand::json_type::string) {
    must(v.get_string());
    return;
  }
  int64_t ignored;
  if (t != ondemand::json_type::number || !opt_int(v, ignored)) throw Fallback{};
}

// µs written as a plain JSON decimal (-?digits(.digits)?) -> ns truncated toward zero, like
// int(Decimal(text).scaleb(3)).  Exponents, long or out-of-range values fall back.
inline int64_t ns_from_us(ondemand::value v, bool allow_negative) {
  std::string_view t = v.raw_json_token();  // the grammar below is stricter than JSON's numbers
  size_t i = 0, n = t.size();
  bool negative = false;
  if (i < n && t[i] == '-') {
    if (!allow_negative) throw Fallback{};
    negative = true;
    i++;
  }
  size_t int_start = i;
  while (i < n && t[i] >= '0' && t[i] <= '9') i++;
  size_t int_digits = i - int_start;
  if (int_digits == 0 || int_digits > 17 || (int_digits > 1 && t[int_start] == '0')) throw Fallback{};
  __int128 ns = 0;
  for (size_t k = int_start; k < i; k++) ns = ns * 10 + (t[k] - '0');
  int frac = 0, taken = 0;
  if (i < n && t[i] == '.') {
    i++;
    size_t frac_start = i;
    while (i < n && t[i] >= '0' && t[i] <= '9') {
      if (taken < 3) {
        frac = frac * 10 + (t[i] - '0');
        taken++;
      }
      i++;
    }
    if (i == frac_start || i - frac_start > 40) throw Fallback{};
  }
  for (; taken < 3; taken++) frac *= 10;
  // what follows the number must be whitespace (the token runs to the next structural character)
  for (; i < n; i++)
    if (t[i] != ' ' && t[i] != '\t' && t[i] != '\n' && t[i] != '\r') throw Fallback{};
  ns = ns * 1000 + frac;
  if (ns > INT64_MAX_) throw Fallback{};
  return negative ? -(int64_t)ns : (int64_t)ns;
}

// A key as written when it has no escape (the usual case: no copy); else unescaped.
inline std::string_view key_of(ondemand::field &field) {
  const char *start = field.key().raw(), *end = start;
  while (*end != '"') {
    if (*end == '\\') return must(field.unescaped_key());
    end++;
  }
  return std::string_view(start, (size_t)(end - start));
}

enum EventKey : unsigned { K_PH = 1, K_CAT = 2, K_NAME = 4, K_PID = 8, K_TID = 16, K_TS = 32, K_DUR = 64, K_ARGS = 128 };

inline void once(unsigned &seen, unsigned key) {
  if (seen & key) throw Fallback{};  // duplicate key: msgspec and On-Demand may pick different ones
  seen |= key;
}

// columns.py's RARE_* (the same values): why Python decodes an event's text
enum Rare : int64_t { RARE_COLLECTIVE = 1, RARE_SHAPES = 2, RARE_SYNC = 4 };

struct ArgsRead {
  int64_t corr = NONE, stream = NONE, device = NONE;
  int64_t rare = 0;  // Rare bits: collective metadata, a sync wait or recorded shapes, decoded in Python from the event's text
};

void read_args(ondemand::object o, ArgsRead &a, Out &out) {
  unsigned seen = 0;
  for (auto f : o) {
    ondemand::field field = must(std::move(f));
    const char *raw = field.key().raw();
    std::string_view key = key_of(field);
    note_field(field, raw, key, out);
    ondemand::value v = field.value();
    int64_t x;
    std::string_view s;
    if (key == "correlation") {
      once(seen, 1);
      if (opt_int(v, x)) a.corr = x;
    } else if (key == "stream") {
      once(seen, 2);
      if (opt_int(v, x)) a.stream = x;
    } else if (key == "device") {
      once(seen, 4);
      if (opt_int(v, x)) a.device = x;
    } else if (key == "Collective name") {
      once(seen, 8);
      if (opt_str(v, s)) a.rare |= RARE_COLLECTIVE;
    } else if (key == "Process Group Name") {
      once(seen, 16);
      if (!is_null(v)) a.rare |= RARE_COLLECTIVE;
      int_or_str(v);
    } else if (key == "In msg nelems") {
      once(seen, 32);
      if (!is_null(v)) a.rare |= RARE_COLLECTIVE;
      int_or_str(v);
    } else if (key == "External id") {
      once(seen, 64);
      int_or_str(v);
    } else if (key == "Out msg nelems") {
      once(seen, 128);
      int_or_str(v);
    } else if (key == "Group size") {
      once(seen, 256);
      int_or_str(v);
    } else if (key == "Seq") {
      once(seen, 512);
      int_or_str(v);
    } else if (key == "dtype") {
      once(seen, 1024);
      opt_str(v, s);
    } else if (key == "Process Group Description") {
      once(seen, 2048);
      opt_str(v, s);
    } else if (key == "Input Dims") {
      once(seen, 4096);
      a.rare |= RARE_SHAPES;
      walk(v, out);
    } else if (key == "Input type") {
      once(seen, 8192);
      walk(v, out);
    } else if (key == "Concrete Inputs") {
      once(seen, 16384);
      walk(v, out);
    } else if (key == "wait_on_stream") {  // a CUDA sync event's wait (Kineto, enable_cuda_sync_events)
      once(seen, 32768);
      if (!is_null(v)) a.rare |= RARE_SYNC;
      int_or_str(v);
    } else if (key == "wait_on_cuda_event_record_corr_id") {
      once(seen, 65536);
      if (!is_null(v)) a.rare |= RARE_SYNC;
      int_or_str(v);
    } else {
      walk(v, out);
    }
  }
}

void read_event(ondemand::document &doc, ondemand::value ev, const char *base, Out &out) {
  const char *start = must(ev.current_location());
  ondemand::object o = must(ev.get_object());
  unsigned seen = 0;
  bool complete = false, has_ts = false, has_dur = false;
  int32_t cat = -1, name = -1, pid = -1, tid = -1;
  ArgsRead a;
  for (auto f : o) {
    ondemand::field field = must(std::move(f));
    const char *raw = field.key().raw();
    std::string_view key = key_of(field);
    note_field(field, raw, key, out);
    ondemand::value v = field.value();
    std::string_view s;
    if (key == "ph") {
      once(seen, K_PH);
      if (must(v.type()) != ondemand::json_type::string) throw Fallback{};
      complete = must(v.get_string()) == "X";
    } else if (key == "cat") {
      once(seen, K_CAT);
      if (opt_str(v, s)) cat = out.cats.code(s);
    } else if (key == "name") {
      once(seen, K_NAME);
      if (opt_str(v, s)) name = out.names.code(s);
    } else if (key == "pid" || key == "tid") {
      once(seen, key == "pid" ? K_PID : K_TID);
      int32_t code = -1;
      if (!is_null(v)) {
        auto t = must(v.type());
        if (t == ondemand::json_type::string) {
          code = out.ids.of_str(must(v.get_string()));
        } else {
          int64_t x;
          if (t != ondemand::json_type::number || !opt_int(v, x)) throw Fallback{};
          code = out.ids.of_int(x);
        }
      }
      (key == "pid" ? pid : tid) = code;
    } else if (key == "ts" || key == "dur") {
      bool is_ts = key == "ts";
      once(seen, is_ts ? K_TS : K_DUR);
      if (!is_null(v)) {
        (is_ts ? has_ts : has_dur) = true;
        // converted (and checked as strictly as a plain decimal) for every event: a refused value
        // on an event the reference never converts only costs a fallback
        int64_t ns = ns_from_us(v, is_ts);
        if (is_ts)
          out.ts.push_back(ns);
        else
          out.dur.push_back(ns);
      }
    } else if (key == "args") {
      once(seen, K_ARGS);
      if (!is_null(v)) {
        if (must(v.type()) != ondemand::json_type::object) throw Fallback{};
        read_args(must(v.get_object()), a, out);
      }
    } else {
      walk(v, out);
    }
  }
  int64_t index = out.num_events++;
  if (!complete) {  // the times pushed above belong to no row
    if (has_ts) out.ts.pop_back();
    if (has_dur) out.dur.pop_back();
    return;
  }
  if (!has_ts || !has_dur) throw Fallback{};  // the reference names the missing field
  out.index.push_back(index);
  out.cat.push_back(cat);
  out.name.push_back(name);
  out.pid.push_back(pid);
  out.tid.push_back(tid);
  out.corr.push_back(a.corr);
  out.stream.push_back(a.stream);
  out.device.push_back(a.device);
  if (a.rare) {
    const char *end = must(doc.current_location());
    out.rare.push_back((int64_t)out.index.size() - 1);
    out.rare.push_back(start - base);
    out.rare.push_back(end - base);
    out.rare.push_back(a.rare);
  }
}

void read_header_dist(ondemand::value v, Out &out) {
  if (is_null(v)) return;
  if (must(v.type()) != ondemand::json_type::object) throw Fallback{};
  unsigned seen = 0;
  for (auto f : must(v.get_object())) {
    ondemand::field field = must(std::move(f));
    const char *raw = field.key().raw();
    std::string_view key = must(field.unescaped_key());
    note_field(field, raw, key, out);
    ondemand::value x = field.value();
    if (key == "rank") {
      once(seen, 1);
      out.has_rank = opt_int(x, out.rank);
    } else if (key == "world_size") {
      once(seen, 2);
      out.has_world = opt_int(x, out.world_size);
    } else if (key == "backend") {
      once(seen, 4);
      out.has_backend = opt_str(x, out.backend);
    } else if (key == "nccl_version") {
      once(seen, 8);
      out.has_nccl = opt_str(x, out.nccl_version);
    } else {
      walk(x, out);
    }
  }
}

void read_devices(ondemand::value v, Out &out) {
  if (is_null(v)) return;
  if (must(v.type()) != ondemand::json_type::array) throw Fallback{};
  for (auto e : must(v.get_array())) {
    ondemand::value d = must(std::move(e));
    if (must(d.type()) != ondemand::json_type::object) throw Fallback{};
    bool seen = false;
    for (auto f : must(d.get_object())) {
      ondemand::field field = must(std::move(f));
      const char *raw = field.key().raw();
      std::string_view key = must(field.unescaped_key());
      note_field(field, raw, key, out);
      std::string_view s;
      if (key == "name") {
        if (seen) throw Fallback{};
        seen = true;
        if (opt_str(field.value(), s) && !s.empty()) out.device_names.push_back(s);
      } else {
        walk(field.value(), out);
      }
    }
  }
}

void scan_document(ondemand::document &doc, const char *base, Out &out) {
  if (must(doc.type()) != ondemand::json_type::object) throw Fallback{};  // bare array: reference
  unsigned seen = 0;
  for (auto f : must(doc.get_object())) {
    ondemand::field field = must(std::move(f));
    const char *raw = field.key().raw();
    std::string_view key = must(field.unescaped_key());
    note_field(field, raw, key, out);
    ondemand::value v = field.value();
    if (key == "traceEvents") {
      once(seen, 1);
      if (must(v.type()) != ondemand::json_type::array) throw Fallback{};
      for (auto e : must(v.get_array())) {
        ondemand::value ev = must(std::move(e));
        if (must(ev.type()) != ondemand::json_type::object) throw Fallback{};
        read_event(doc, ev, base, out);
      }
    } else if (key == "distributedInfo") {
      once(seen, 2);
      read_header_dist(v, out);
    } else if (key == "deviceProperties") {
      once(seen, 4);
      read_devices(v, out);
    } else if (key == "baseTimeNanoseconds") {
      once(seen, 8);
      out.has_base = opt_int(v, out.base_time);
    } else if (key == "host_name") {
      once(seen, 16);
      out.has_host = opt_str(v, out.host);
    } else {
      walk(v, out);
    }
  }
  if (!(seen & 1)) throw Fallback{};  // no traceEvents: the reference's error
  const char *rest;
  if (!doc.current_location().get(rest)) throw Fallback{};  // something after the document
}

// -- to Python ------------------------------------------------------------------------------------

// A column's bytes, its vector freed at once: a trace's columns then never exist twice in full (the
// vectors, up to 2 x their size while they grow, and their copies), only one column at a time.
template <typename T>
PyObject *as_bytes(std::vector<T> &v) {
  PyObject *bytes = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(v.data()), (Py_ssize_t)(v.size() * sizeof(T)));
  std::vector<T>().swap(v);
  return bytes;
}

PyObject *as_str(std::string_view s) { return PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "strict"); }

PyObject *str_list(const std::vector<std::string_view> &items) {
  PyObject *list = PyList_New((Py_ssize_t)items.size());
  if (!list) return nullptr;
  for (size_t i = 0; i < items.size(); i++) {
    PyObject *s = as_str(items[i]);
    if (!s) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, s);
  }
  return list;
}

PyObject *id_list(const Ids &ids) {
  PyObject *list = PyList_New((Py_ssize_t)ids.items.size());
  if (!list) return nullptr;
  for (size_t i = 0; i < ids.items.size(); i++) {
    const auto &item = ids.items[i];
    PyObject *x = item.first ? as_str(item.second.second) : PyLong_FromLongLong(item.second.first);
    if (!x) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, x);
  }
  return list;
}

PyObject *opt_int_obj(bool has, int64_t v) {
  if (has) return PyLong_FromLongLong(v);
  Py_RETURN_NONE;
}

PyObject *opt_str_obj(bool has, std::string_view s) {
  if (has) return as_str(s);
  Py_RETURN_NONE;
}

bool put(PyObject *dict, const char *key, PyObject *value) {
  if (!value) return false;
  int rc = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return rc == 0;
}

PyObject *to_python(Out &out) {
  PyObject *d = PyDict_New();
  if (!d) return nullptr;
  bool ok = put(d, "num_events", PyLong_FromLongLong(out.num_events)) && put(d, "index", as_bytes(out.index)) &&
            put(d, "ts", as_bytes(out.ts)) && put(d, "dur", as_bytes(out.dur)) &&
            put(d, "correlation", as_bytes(out.corr)) && put(d, "stream", as_bytes(out.stream)) &&
            put(d, "device", as_bytes(out.device)) && put(d, "rare", as_bytes(out.rare)) &&
            put(d, "cat", as_bytes(out.cat)) && put(d, "cats", str_list(out.cats.items)) &&
            put(d, "name", as_bytes(out.name)) && put(d, "names", str_list(out.names.items)) &&
            put(d, "pid", as_bytes(out.pid)) && put(d, "tid", as_bytes(out.tid)) &&
            put(d, "ids", id_list(out.ids)) && put(d, "rank", opt_int_obj(out.has_rank, out.rank)) &&
            put(d, "world_size", opt_int_obj(out.has_world, out.world_size)) &&
            put(d, "backend", opt_str_obj(out.has_backend, out.backend)) &&
            put(d, "nccl_version", opt_str_obj(out.has_nccl, out.nccl_version)) &&
            put(d, "base_time_ns", opt_int_obj(out.has_base, out.base_time)) &&
            put(d, "host", opt_str_obj(out.has_host, out.host)) &&
            put(d, "device_names", str_list(out.device_names)) &&
            put(d, "fractional_ts", PyBool_FromLong(out.fractional_ts)) &&
            put(d, "device_category", PyBool_FromLong(out.device_category));
  if (!ok) {
    Py_DECREF(d);
    return nullptr;
  }
  return d;
}

PyObject *scan(PyObject *, PyObject *args) {
  // scan(buffer[, length[, device_categories]]): the JSON is the buffer's first `length` bytes (default:
  // all of it); device_categories: what the "cat" pre-scan (device_category) looks for.  When the
  // buffer holds SIMDJSON_PADDING readable bytes past `length`, simdjson reads it in place; otherwise it
  // is copied into a padded string first (a second copy of the trace in memory).
  PyObject *arg, *categories = nullptr;
  Py_ssize_t length = -1;
  if (!PyArg_ParseTuple(args, "O|nO", &arg, &length, &categories)) return nullptr;
  Out out;
  if (categories && categories != Py_None) {  // the device categories the "cat" pre-scan looks for
    PyObject *seq = PySequence_Fast(categories, "device categories: a sequence of str");
    if (!seq) return nullptr;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
      Py_ssize_t size;
      const char *text = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(seq, i), &size);
      if (!text) {
        Py_DECREF(seq);
        return nullptr;
      }
      std::string c(text, (size_t)size);
      for (char &ch : c) ch = ascii_lower(ch);
      out.device_categories.push_back(std::move(c));
    }
    Py_DECREF(seq);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return nullptr;
  if (length < 0 || length > view.len) length = view.len;
  const bool in_place = (size_t)(view.len - length) >= SIMDJSON_PADDING;
  bool fallback = false;
  ondemand::parser parser;
  padded_string padded;
  Py_BEGIN_ALLOW_THREADS;
  try {
    const char *json = static_cast<const char *>(view.buf);
    ondemand::document doc;
    if (in_place) {
      if (parser.iterate(json, (size_t)length, (size_t)view.len).get(doc)) throw Fallback{};
    } else {
      padded = padded_string(json, (size_t)length);
      json = padded.data();
      if (parser.iterate(padded).get(doc)) throw Fallback{};
    }
    scan_document(doc, json, out);
  } catch (Fallback &) {
    fallback = true;
  } catch (std::exception &) {  // bad_alloc and the like: the reference reports what it can
    fallback = true;
  }
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(&view);
  if (fallback) Py_RETURN_NONE;
  PyObject *result = to_python(out);
  if (!result && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {  // cannot happen after the UTF-8 check
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return result;
}

PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data[, length[, device_categories]]) -> dict of columns of the trace's complete events, or None when the Python "
     "extractor must read the file (anything unusual)."},
    {nullptr, nullptr, 0, nullptr},
};

// The On-Demand code below is compiled for the kernel the compiler flags allow (portable flags: simdjson's
// "fallback" kernel; the library's own stage 1 dispatches at run time).  An AVX2 build of this module
// ("haswell" kernel) measured no faster on this project's machine, so there is one portable build.
PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Compiled stage 1 of extract (simdjson On-Demand).", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit__scan(void) {
  PyObject *m = PyModule_Create(&module);
  if (!m) return nullptr;
  // the kernel this module's On-Demand code was compiled for
  if (PyModule_AddStringConstant(m, "KERNEL", SIMDJSON_STRINGIFY(SIMDJSON_BUILTIN_IMPLEMENTATION)) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  std::string version = std::to_string(SIMDJSON_VERSION_MAJOR) + "." + std::to_string(SIMDJSON_VERSION_MINOR) +
                        "." + std::to_string(SIMDJSON_VERSION_REVISION);
  // what scan() takes and returns, as pipeline/read/columns.py INTERFACE expects it: 2 = the device
  // categories in, fractional_ts and device_category out
  if (PyModule_AddIntConstant(m, "INTERFACE", 2) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  if (PyModule_AddIntConstant(m, "PADDING", SIMDJSON_PADDING) != 0) {  // bytes scan() wants past the JSON
    Py_DECREF(m);
    return nullptr;
  }
  if (PyModule_AddStringConstant(m, "SIMDJSON_VERSION", version.c_str()) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
