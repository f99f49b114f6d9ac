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

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
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

// The text of each distinct string, owned: a view from the parser points into its string buffer, which
// the next part of a split file overwrites (a deque never moves what it holds).
struct Arena {
  std::deque<std::string> texts;
  std::string_view keep(std::string_view s) { return texts.emplace_back(s); }
};

// Distinct strings -> codes, in order of first sight.
struct Dict {
  std::unordered_map<std::string_view, int32_t> codes;
  std::vector<std::string_view> items;
  Arena arena;
  int32_t code(std::string_view s) {
    auto it = codes.find(s);
    if (it != codes.end()) return it->second;
    int32_t c = (int32_t)items.size();
    s = arena.keep(s);
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
  Arena arena;
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
    s = arena.keep(s);
    strs.emplace(s, c);
    items.push_back({true, {0, s}});
    return c;
  }
};

struct Out {
  std::vector<int64_t> index, ts, dur, corr, ext, stream, device, rare;  // rare: (position, start, end, Rare bits)
  std::vector<int32_t> cat, name, pid, tid;
  Dict cats, names;
  Ids ids;
  int64_t num_events = 0;
  // header
  bool has_rank = false, has_world = false, has_base = false;
  int64_t rank = 0, world_size = 0, base_time = 0;
  bool has_backend = false, has_nccl = false, has_host = false;
  std::string backend, nccl_version, host;
  std::vector<std::string> device_names;  // non-empty deviceProperties names, in order
  // the document's top-level keys (scan_document's bits) and how many came after traceEvents: what
  // tells a part of a split file whether it was cut where an event ends (see "Split files")
  unsigned top_keys = 0;
  int64_t keys_after_events = 0;
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

inline bool opt_str(ondemand::value v, std::string &out) {  // the same, the text owned
  std::string_view s;
  if (!opt_str(v, s)) return false;
  out.assign(s);
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
  int64_t ext = NONE, ext_2021 = NONE;  // "External id"; the 2021 schema's "external id" (used when the first is absent)
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
      if (opt_int(v, x)) a.ext = x;
    } else if (key == "external id") {
      once(seen, 131072);
      if (opt_int(v, x)) a.ext_2021 = x;
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
  out.ext.push_back(a.ext != NONE ? a.ext : a.ext_2021);
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
        if (opt_str(field.value(), s) && !s.empty()) out.device_names.emplace_back(s);
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
    if (seen & 1) out.keys_after_events++;
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
  out.top_keys = seen;
  const char *rest;
  if (!doc.current_location().get(rest)) throw Fallback{};  // something after the document
}

// -- split files ----------------------------------------------------------------------------------
// A large file is scanned in parts, one thread each (docs/ingest.md, "One large file"): its traceEvents
// array is cut at commas that look like the end of an event (`}` `,` `{`, whitespace aside), and each
// part becomes a document of its own:
//
//   first part:  the file from its start to the first cut, then `]}`
//   other parts: `{"traceEvents":[`, the bytes between their cuts, then `]}` (the last part: the rest of the file)
//
// scan_document reads each as it reads a whole file.  The guesses are proven by the scans: the first
// part starts where the file does, so it tokenizes as the file does; if its document is valid and no
// key follows traceEvents in it, its `]}` closed the traceEvents array and the top object, so the cut
// was a comma between two events of traceEvents (a cut inside a string leaves the string open; one
// inside an event or its args leaves an object open; one in another top-level array leaves a key
// after traceEvents).  The next part then starts as the file does there, and so on.  Any part that
// does not scan, or a top-level key in two parts (the whole file has it twice), and the whole file
// is scanned in one pass, which decides as the scanner always has.  The parts' columns are joined in
// file order, their strings re-coded in order of first sight: exactly the columns of one pass.

constexpr size_t NOT_FOUND = std::string_view::npos;
constexpr std::string_view PART_HEAD = "{\"traceEvents\":[", PART_TAIL = "]}";

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Where the traceEvents array opens, as written: the `[` after the first `"traceEvents"` and `:`.
size_t events_array(const char *json, size_t n) {
  std::string_view text(json, n), key = "\"traceEvents\"";
  for (size_t at = text.find(key); at != NOT_FOUND; at = text.find(key, at + 1)) {
    size_t i = at + key.size();
    while (i < n && is_space(json[i])) i++;
    if (i >= n || json[i] != ':') continue;
    for (i++; i < n && is_space(json[i]); i++) {
    }
    if (i < n && json[i] == '[') return i;
  }
  return NOT_FOUND;
}

// The first comma at or after `from` between a `}` and a `{` (whitespace aside).
size_t next_cut(const char *json, size_t n, size_t from) {
  const char *end = json + n;
  for (const char *p = json + from; p < end; p++) {
    p = static_cast<const char *>(std::memchr(p, '}', (size_t)(end - p)));
    if (!p) return NOT_FOUND;
    const char *q = p + 1;
    while (q < end && is_space(*q)) q++;
    if (q >= end || *q != ',') continue;
    const char *comma = q++;
    while (q < end && is_space(*q)) q++;
    if (q < end && *q == '{') return (size_t)(comma - json);
  }
  return NOT_FOUND;
}

// Cuts at least `part_bytes` apart, from the traceEvents array's start.
std::vector<size_t> cuts(const char *json, size_t n, size_t start, size_t part_bytes) {
  std::vector<size_t> found;
  for (size_t from = start + part_bytes; from < n;) {
    size_t comma = next_cut(json, n, from);
    if (comma == NOT_FOUND) break;
    found.push_back(comma);
    from = comma + part_bytes;
  }
  return found;
}

struct Part {
  size_t from = 0, to = 0;  // the file's bytes it holds
  bool first = true, last = true;
  Out out;
};

// One part, as a document of its own (in a copy: the file's buffer is read by other threads and hashed).
void scan_part(ondemand::parser &parser, const char *json, Part &part) {
  std::string_view head = part.first ? std::string_view() : PART_HEAD;
  std::string_view tail = part.last ? std::string_view() : PART_TAIL;
  size_t body = part.to - part.from;
  padded_string text(head.size() + body + tail.size());
  char *d = text.data();
  std::memcpy(d, head.data(), head.size());
  std::memcpy(d + head.size(), json + part.from, body);
  std::memcpy(d + head.size() + body, tail.data(), tail.size());
  ondemand::document doc;
  if (parser.iterate(text).get(doc)) throw Fallback{};
  scan_document(doc, d, part.out);
  if (!part.last && part.out.keys_after_events) throw Fallback{};  // not cut inside traceEvents
  const int64_t shift = (int64_t)part.from - (int64_t)head.size();  // the rare events' offsets: the file's
  for (size_t i = 0; i < part.out.rare.size(); i += 4) {
    part.out.rare[i + 1] += shift;
    part.out.rare[i + 2] += shift;
  }
}

// The parts on `threads` threads (this one among them); false when one does not scan.
bool scan_parts(const char *json, std::vector<Part> &parts, int threads) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto work = [&]() {
    ondemand::parser parser;
    for (size_t i; !failed && (i = next++) < parts.size();) {
      try {
        scan_part(parser, json, parts[i]);
      } catch (...) {  // Fallback, bad_alloc: the one-pass scan decides
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && (size_t)t < parts.size(); t++) {
    try {
      pool.emplace_back(work);
    } catch (std::exception &) {  // no thread to be had: fewer
      break;
    }
  }
  work();
  for (std::thread &t : pool) t.join();
  if (failed) return false;
  unsigned keys = 0;
  for (const Part &p : parts) {
    if (keys & p.out.top_keys & ~1u) return false;  // a top-level key in two parts: the file has it twice
    keys |= p.out.top_keys;
  }
  return true;
}

void whole_file(const char *json, size_t length, size_t allocated, Part &part) {
  ondemand::parser parser;
  padded_string padded;
  ondemand::document doc;
  if (allocated - length >= SIMDJSON_PADDING) {  // in place
    if (parser.iterate(json, length, allocated).get(doc)) throw Fallback{};
  } else {  // a copy with the padding simdjson reads past the end
    padded = padded_string(json, length);
    json = padded.data();
    if (parser.iterate(padded).get(doc)) throw Fallback{};
  }
  scan_document(doc, json, part.out);
}

// The file's parts, scanned (one part: the whole file in one pass); none when the scanner refuses the file.
std::vector<Part> scan_file(const char *json, size_t length, size_t allocated, const std::vector<std::string> &categories,
                            size_t part_bytes, int threads) {
  size_t start = part_bytes && length > part_bytes ? events_array(json, length) : NOT_FOUND;
  std::vector<size_t> at = start != NOT_FOUND ? cuts(json, length, start, part_bytes) : std::vector<size_t>();
  if (!at.empty()) {
    std::vector<Part> parts(at.size() + 1);
    for (size_t i = 0; i < parts.size(); i++) {
      parts[i].from = i ? at[i - 1] + 1 : 0;
      parts[i].to = i < at.size() ? at[i] : length;
      parts[i].first = i == 0;
      parts[i].last = i == at.size();
      parts[i].out.device_categories = categories;
    }
    if (scan_parts(json, parts, threads)) return parts;
  }
  std::vector<Part> whole(1);
  whole[0].out.device_categories = categories;
  try {
    whole_file(json, length, allocated, whole[0]);
  } catch (...) {  // Fallback, bad_alloc and the like: the reference reports what it can
    return {};
  }
  return whole;
}

// -- to Python ------------------------------------------------------------------------------------

PyObject *as_str(std::string_view s) { return PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "strict"); }

template <typename S>
PyObject *str_list(const std::vector<S> &items) {
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

// The parts' columns joined in file order: codes into the file's strings (numbered in order of first
// sight, as one pass numbers them), event indexes and rare rows' positions counted from the file's start.
struct Joined {
  std::vector<Part> &parts;
  Dict cats, names;
  Ids ids;
  std::vector<std::vector<int32_t>> cat_code, name_code, id_code;  // per part: its code -> the file's
  std::vector<int64_t> events_before, rows_before;

  explicit Joined(std::vector<Part> &p) : parts(p) {
    int64_t events = 0, rows = 0;
    for (Part &part : parts) {
      Out &o = part.out;
      cat_code.emplace_back();
      for (std::string_view s : o.cats.items) cat_code.back().push_back(cats.code(s));
      name_code.emplace_back();
      for (std::string_view s : o.names.items) name_code.back().push_back(names.code(s));
      id_code.emplace_back();
      for (const auto &item : o.ids.items)
        id_code.back().push_back(item.first ? ids.of_str(item.second.second) : ids.of_int(item.second.first));
      events_before.push_back(events);
      rows_before.push_back(rows);
      events += o.num_events;
      rows += (int64_t)o.index.size();
    }
  }

  // One column of every part, each value through `f(part, position in the part's column, value)`, as
  // bytes of native values; each part's column is freed once copied.
  template <typename T, typename F>
  PyObject *column(std::vector<T> Out::*member, F f) {
    size_t total = 0;
    for (Part &p : parts) total += (p.out.*member).size();
    PyObject *b = PyBytes_FromStringAndSize(nullptr, (Py_ssize_t)(total * sizeof(T)));
    if (!b) return nullptr;
    T *dst = reinterpret_cast<T *>(PyBytes_AS_STRING(b));
    for (size_t k = 0; k < parts.size(); k++) {
      std::vector<T> &src = parts[k].out.*member;
      for (size_t i = 0; i < src.size(); i++) *dst++ = f(k, i, src[i]);
      std::vector<T>().swap(src);
    }
    return b;
  }

  template <typename T>
  PyObject *column(std::vector<T> Out::*member) {
    return column(member, [](size_t, size_t, T v) { return v; });
  }

  PyObject *codes(std::vector<int32_t> Out::*member, const std::vector<std::vector<int32_t>> &code) {
    return column(member, [&code](size_t k, size_t, int32_t v) { return v < 0 ? v : code[k][(size_t)v]; });
  }
};

PyObject *to_python(std::vector<Part> &parts) {
  Joined j(parts);
  Out head;  // the header's facts, from whichever part read them (a key in two parts was refused)
  int64_t num_events = 0;
  for (Part &p : parts) {
    const Out &o = p.out;
    num_events += o.num_events;
    if (o.has_rank) head.has_rank = true, head.rank = o.rank;
    if (o.has_world) head.has_world = true, head.world_size = o.world_size;
    if (o.has_base) head.has_base = true, head.base_time = o.base_time;
    if (o.has_backend) head.has_backend = true, head.backend = o.backend;
    if (o.has_nccl) head.has_nccl = true, head.nccl_version = o.nccl_version;
    if (o.has_host) head.has_host = true, head.host = o.host;
    head.device_names.insert(head.device_names.end(), o.device_names.begin(), o.device_names.end());
    head.fractional_ts |= o.fractional_ts;
    head.device_category |= o.device_category;
  }
  PyObject *d = PyDict_New();
  if (!d) return nullptr;
  auto index = [&j](size_t k, size_t, int64_t v) { return v + j.events_before[k]; };
  auto rare = [&j](size_t k, size_t i, int64_t v) { return i % 4 == 0 ? v + j.rows_before[k] : v; };
  bool ok = put(d, "num_events", PyLong_FromLongLong(num_events)) && put(d, "index", j.column(&Out::index, index)) &&
            put(d, "ts", j.column(&Out::ts)) && put(d, "dur", j.column(&Out::dur)) &&
            put(d, "correlation", j.column(&Out::corr)) && put(d, "external_id", j.column(&Out::ext)) &&
            put(d, "stream", j.column(&Out::stream)) &&
            put(d, "device", j.column(&Out::device)) && put(d, "rare", j.column(&Out::rare, rare)) &&
            put(d, "cat", j.codes(&Out::cat, j.cat_code)) && put(d, "cats", str_list(j.cats.items)) &&
            put(d, "name", j.codes(&Out::name, j.name_code)) && put(d, "names", str_list(j.names.items)) &&
            put(d, "pid", j.codes(&Out::pid, j.id_code)) && put(d, "tid", j.codes(&Out::tid, j.id_code)) &&
            put(d, "ids", id_list(j.ids)) && put(d, "rank", opt_int_obj(head.has_rank, head.rank)) &&
            put(d, "world_size", opt_int_obj(head.has_world, head.world_size)) &&
            put(d, "backend", opt_str_obj(head.has_backend, head.backend)) &&
            put(d, "nccl_version", opt_str_obj(head.has_nccl, head.nccl_version)) &&
            put(d, "base_time_ns", opt_int_obj(head.has_base, head.base_time)) &&
            put(d, "host", opt_str_obj(head.has_host, head.host)) &&
            put(d, "device_names", str_list(head.device_names)) &&
            put(d, "fractional_ts", PyBool_FromLong(head.fractional_ts)) &&
            put(d, "device_category", PyBool_FromLong(head.device_category)) &&
            put(d, "parts", PyLong_FromSize_t(parts.size()));
  if (!ok) {
    Py_DECREF(d);
    return nullptr;
  }
  return d;
}

PyObject *scan(PyObject *, PyObject *args) {
  // scan(buffer[, length[, device_categories[, part_bytes[, threads]]]]): the JSON is the buffer's first
  // `length` bytes (default: all of it); device_categories: what the "cat" pre-scan (device_category)
  // looks for; part_bytes: a file larger than this is scanned in parts of about this size (0: never),
  // on `threads` threads.  When the buffer holds SIMDJSON_PADDING readable bytes past `length`, a
  // one-pass scan reads it in place; otherwise it is copied into a padded string first.
  PyObject *arg, *categories = nullptr;
  Py_ssize_t length = -1, part_bytes = 0, threads = 1;
  if (!PyArg_ParseTuple(args, "O|nOnn", &arg, &length, &categories, &part_bytes, &threads)) return nullptr;
  std::vector<std::string> wanted;
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
      wanted.push_back(std::move(c));
    }
    Py_DECREF(seq);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) return nullptr;
  if (length < 0 || length > view.len) length = view.len;
  std::vector<Part> parts;
  Py_BEGIN_ALLOW_THREADS;
  try {
    parts = scan_file(static_cast<const char *>(view.buf), (size_t)length, (size_t)view.len, wanted,
                      part_bytes > 0 ? (size_t)part_bytes : 0, threads > 1 ? (int)threads : 1);
  } catch (std::exception &) {  // bad_alloc while setting up the parts
    parts.clear();
  }
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(&view);
  if (parts.empty()) Py_RETURN_NONE;
  PyObject *result = to_python(parts);
  if (!result && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {  // cannot happen after the UTF-8 check
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return result;
}

PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data[, length[, device_categories[, part_bytes[, threads]]]]) -> dict of columns of the trace's complete events, "
     "or None when the Python "
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
  // categories in, fractional_ts and device_category out; 3 = part_bytes and threads in, parts out;
  // 4 = external_id out
  if (PyModule_AddIntConstant(m, "INTERFACE", 4) != 0) {
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
