// JSON lines parsed a block at a time, with the GIL released (built by `make jsonl-reader`),
// for dataforge.io.jsonl_fast.
//
// scan(block, pos, max_lines, text_key, id_key, meta_keys, key_prefix, line_prefix,
//      first_lineno, limit, max_doc_chars)
//   -> (consumed, lines, status, id_offsets, id_data, text_offsets, text_data, meta_offsets,
//       meta_data)
//
// Reads up to `max_lines` lines of `block` from byte `pos` (a line ends at "\n"; the block's
// last bytes without one are a line of their own: the caller cuts blocks after a "\n" or at
// the end of the file). Per line, one status byte:
//
//   0  a record: the object's `text_key` string and its id, `id_key`'s string (or integer
//      literal) after `key_prefix`, or, without an id key, `line_prefix` + its line number;
//      its meta: json.dumps({k: obj[k] for k in meta_keys if k in obj}, ensure_ascii=False,
//      sort_keys=True) (`meta_keys` sorted, distinct, neither the text nor the id key);
//   1  too long: the line has `limit` characters or more (its id is the line's), or the text
//      has more than `max_doc_chars` (the key's id); text empty;
//   2  empty: the text is empty or only whitespace as Python's str.isspace says; text empty;
//   3  anything else, left to the Python reader, which decides it exactly as before: a line
//      that is not strict UTF-8, holds a "\r" before its end (universal newlines split
//      there; a "\r\n" ending is read here), is not one
//      JSON object as json.loads reads it, lacks the text or id, has a non-string text, a
//      key with escapes, a repeated text or id key, a lone surrogate escape, NaN/Infinity,
//      an integer json.loads would refuse (over 4,300 digits), nesting deeper than 400, or a
//      meta value that is a float (Python's repr), an array or an object.
//
// Everything accepted here is accepted by json.loads with the same values, so statuses 0-2
// give the rows the per-line reader gives. Ids, texts and metas come back as Arrow string buffers
// (int32 offsets, `lines + 1` of them, and the bytes): no Python object per record.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

enum Status : uint8_t { kRecord = 0, kTooLong = 1, kEmpty = 2, kPython = 3 };

constexpr int kMaxDepth = 400;        // json.loads hits the recursion limit far deeper
constexpr size_t kMaxIntDigits = 4300;  // sys.int_info.default_max_str_digits

// Strict UTF-8 as Python's decoder reads it (no overlongs, surrogates or > U+10FFFF).
// Returns the number of characters, or -1.
int64_t Utf8Chars(const uint8_t *p, const uint8_t *end) {
  int64_t chars = 0;
  while (p < end) {
    uint8_t c = *p;
    if (c < 0x80) {
      ++p;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (end - p < 2 || (p[1] & 0xC0) != 0x80) return -1;
      p += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return -1;
      if (c == 0xE0 && p[1] < 0xA0) return -1;
      if (c == 0xED && p[1] > 0x9F) return -1;
      p += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
          (p[3] & 0xC0) != 0x80)
        return -1;
      if (c == 0xF0 && p[1] < 0x90) return -1;
      if (c == 0xF4 && p[1] > 0x8F) return -1;
      p += 4;
    } else {
      return -1;
    }
    ++chars;
  }
  return chars;
}

// Python's str.isspace (Unicode White_Space plus the ASCII separators 0x1C-0x1F).
bool IsPySpace(uint32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Whether valid UTF-8 `s` is empty or all whitespace.
bool AllSpace(const std::string &s, size_t from) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(s.data()) + from;
  const uint8_t *end = reinterpret_cast<const uint8_t *>(s.data()) + s.size();
  while (p < end) {
    uint32_t c = *p;
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (n == 2) c = ((c & 0x1F) << 6) | (p[1] & 0x3F);
    if (n == 3) c = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (n == 4) c = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (!IsPySpace(c)) return false;
    p += n;
  }
  return true;
}

int64_t Utf8Length(const std::string &s, size_t from) {
  int64_t n = 0;
  for (size_t i = from; i < s.size(); ++i) n += (static_cast<uint8_t>(s[i]) & 0xC0) != 0x80;
  return n;
}

void AppendUtf8(std::string *out, uint32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// `p`..`end` as the inside of a JSON string, as json.dumps(s, ensure_ascii=False) writes it.
void AppendEscaped(std::string *out, const char *p, const char *end) {
  static const char kHex[] = "0123456789abcdef";
  while (p < end) {
    const char *run = p;
    while (p < end && static_cast<uint8_t>(*p) >= 0x20 && *p != '"' && *p != '\\') ++p;
    out->append(run, static_cast<size_t>(p - run));
    if (p >= end) break;
    char c = *p++;
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        out->append("\\u00");
        out->push_back(kHex[(c >> 4) & 0xF]);
        out->push_back(kHex[c & 0xF]);
    }
  }
}

// One line (valid UTF-8, no "\n" or "\r"), parsed as json.loads would, keeping only the two
// wanted keys' values. Any doubt returns false (the Python reader decides the line).
class Line {
 public:
  Line(const char *p, const char *end) : p_(p), end_(end) {}

  // Parses the object; on success `text` (and `id` when an id key is given) are appended to.
  // `meta_keys` (sorted, distinct, none the text or id key): their values, as json.dumps
  // writes them, go to `meta` ("" for a key not in the object).
  bool Parse(const std::string &text_key, const std::string *id_key,
             const std::vector<std::string> &meta_keys, std::string *text, std::string *id,
             bool *id_found, std::vector<std::string> *meta) {
    SkipSpace();
    if (!Eat('{')) return false;
    bool text_found = false;
    *id_found = false;
    SkipSpace();
    if (Eat('}')) return false;  // {} has no text: the reader says missing_text
    while (true) {
      SkipSpace();
      const char *key = p_;
      if (!Eat('"')) return false;
      while (p_ < end_ && *p_ != '"') {
        if (*p_ == '\\' || static_cast<uint8_t>(*p_) < 0x20) return false;
        ++p_;
      }
      if (p_ >= end_) return false;
      size_t key_len = static_cast<size_t>(p_ - key - 1);
      ++p_;
      SkipSpace();
      if (!Eat(':')) return false;
      SkipSpace();
      bool is_text = key_len == text_key.size() && !std::memcmp(key + 1, text_key.data(), key_len);
      bool is_id = id_key && key_len == id_key->size() && !std::memcmp(key + 1, id_key->data(), key_len);
      size_t m = 0;
      while (m < meta_keys.size() && (meta_keys[m].size() != key_len ||
                                      std::memcmp(key + 1, meta_keys[m].data(), key_len)))
        ++m;
      if (m < meta_keys.size()) {
        if (!(*meta)[m].empty() || !MetaValue(&(*meta)[m])) return false;
      } else if (is_text) {
        if (text_found || p_ >= end_ || *p_ != '"') return false;
        text_found = true;
        ++p_;
        if (!String(text)) return false;
      } else if (is_id) {
        if (*id_found) return false;
        *id_found = true;
        if (!IdValue(id)) return false;
      } else if (!Value(0)) {
        return false;
      }
      SkipSpace();
      if (Eat(',')) continue;
      if (Eat('}')) break;
      return false;
    }
    return Finish() && text_found && (!id_key || *id_found);
  }

 private:
  bool Finish() {
    SkipSpace();
    return p_ == end_;
  }
  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool Eat(char c) {
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool Hex4(uint32_t *out) {
    if (end_ - p_ < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = Hex(p_[i]);
      if (h < 0) return false;
      v = v * 16 + static_cast<uint32_t>(h);
    }
    p_ += 4;
    *out = v;
    return true;
  }
  // After the opening quote: the string's value appended to `out` (nullptr: only checked).
  bool String(std::string *out) {
    while (p_ < end_) {
      const char *run = p_;
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<uint8_t>(*p_) >= 0x20) ++p_;
      if (out) out->append(run, static_cast<size_t>(p_ - run));
      if (p_ >= end_ || static_cast<uint8_t>(*p_) < 0x20) return false;
      if (*p_ == '"') {
        ++p_;
        return true;
      }
      ++p_;  // backslash
      if (p_ >= end_) return false;
      char e = *p_++;
      uint32_t c;
      switch (e) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case '/': c = '/'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
          if (!Hex4(&c)) return false;
          if (c >= 0xDC00 && c <= 0xDFFF) return false;  // lone low surrogate
          if (c >= 0xD800 && c <= 0xDBFF) {
            uint32_t low;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;  // lone high
            p_ += 2;
            if (!Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
            c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
          }
          break;
        }
        default:
          return false;
      }
      if (out) AppendUtf8(out, c);
    }
    return false;
  }
  // A JSON number as Python's scanner reads it; `digits_only`: no fraction or exponent.
  bool Number(bool *digits_only, size_t *int_digits) {
    Eat('-');
    const char *start = p_;
    if (Eat('0')) {
    } else if (p_ < end_ && *p_ >= '1' && *p_ <= '9') {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    } else {
      return false;  // includes -Infinity
    }
    *int_digits = static_cast<size_t>(p_ - start);
    *digits_only = true;
    if (end_ - p_ >= 2 && *p_ == '.' && p_[1] >= '0' && p_[1] <= '9') {
      *digits_only = false;
      ++p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      const char *e = p_ + 1;
      if (e < end_ && (*e == '+' || *e == '-')) ++e;
      if (e < end_ && *e >= '0' && *e <= '9') {
        *digits_only = false;
        p_ = e;
        while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      }
    }
    return true;
  }
  bool Literal(const char *word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n)) return false;
    p_ += n;
    return true;
  }
  // Any value, checked and skipped.
  bool Value(int depth) {
    if (p_ >= end_) return false;
    char c = *p_;
    if (c == '"') {
      ++p_;
      return String(nullptr);
    }
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth) return false;
      char close = c == '{' ? '}' : ']';
      ++p_;
      SkipSpace();
      if (Eat(close)) return true;
      while (true) {
        SkipSpace();
        if (c == '{') {
          if (!Eat('"') || !String(nullptr)) return false;
          SkipSpace();
          if (!Eat(':')) return false;
          SkipSpace();
        }
        if (!Value(depth + 1)) return false;
        SkipSpace();
        if (Eat(',')) continue;
        return Eat(close);
      }
    }
    if (c == 't') return Literal("true");
    if (c == 'f') return Literal("false");
    if (c == 'n') return Literal("null");
    bool digits_only;
    size_t int_digits;
    if (!Number(&digits_only, &int_digits)) return false;
    return !digits_only || int_digits <= kMaxIntDigits;
  }
  // A meta key's value as json.dumps writes it after json.loads: a string (re-escaped), an
  // integer literal, true, false or null; floats (repr) and containers go to Python.
  bool MetaValue(std::string *out) {
    if (p_ >= end_) return false;
    if (*p_ == '"') {
      ++p_;
      std::string value;
      if (!String(&value)) return false;
      out->push_back('"');
      AppendEscaped(out, value.data(), value.data() + value.size());
      out->push_back('"');
      return true;
    }
    const char *start = p_;
    if (Literal("true") || Literal("false") || Literal("null")) {
      out->append(start, static_cast<size_t>(p_ - start));
      return true;
    }
    return IntLiteral(out);
  }
  // The id key's value: a non-empty string, or an integer literal (str(int) of it is the
  // same digits; -0 and anything else are left to Python).
  bool IdValue(std::string *id) {
    if (p_ >= end_) return false;
    if (*p_ == '"') {
      ++p_;
      size_t before = id->size();
      return String(id) && id->size() > before;
    }
    return IntLiteral(id);
  }
  // An integer literal, appended as it is: str(int) of it is the same digits (-0, floats,
  // and over 64 digits are left to Python).
  bool IntLiteral(std::string *out) {
    const char *start = p_;
    bool digits_only;
    size_t int_digits;
    if (!Number(&digits_only, &int_digits) || !digits_only || int_digits > 64) return false;
    if (start[0] == '-' && start[1] == '0') return false;
    out->append(start, static_cast<size_t>(p_ - start));
    return true;
  }

  const char *p_;
  const char *end_;
};

struct Output {
  std::vector<uint8_t> status;
  std::vector<int32_t> id_offsets{0};
  std::string ids;
  std::vector<int32_t> text_offsets{0};
  std::string texts;
  std::vector<int32_t> meta_offsets{0};
  std::string metas;
  bool overflow = false;  // more than 2 GiB of ids or texts: the caller reads another way
};

struct Args {
  const char *block;
  Py_ssize_t size;
  Py_ssize_t pos;
  Py_ssize_t max_lines;
  std::string text_key;
  std::string id_key;
  bool has_id_key;
  std::vector<std::string> meta_keys;
  std::string key_prefix;
  std::string line_prefix;
  long long first_lineno;
  long long limit;
  long long max_doc_chars;
};

// Fills `out` line by line; returns the bytes consumed.
Py_ssize_t ScanLines(const Args &a, Output *out) {
  Py_ssize_t pos = a.pos;
  long long lineno = a.first_lineno;
  std::vector<std::string> meta(a.meta_keys.size());
  while (pos < a.size && static_cast<Py_ssize_t>(out->status.size()) < a.max_lines) {
    const char *start = a.block + pos;
    const char *nl = static_cast<const char *>(std::memchr(start, '\n', static_cast<size_t>(a.size - pos)));
    const char *end = nl ? nl : a.block + a.size;
    pos = nl ? pos + (nl - start) + 1 : a.size;
    // Universal newlines: "\r\n" (or a last "\r") ends the line like "\n"; any other "\r"
    // splits it, which only the per-line reader does.
    if (end > start && end[-1] == '\r') --end;
    ++lineno;
    uint8_t status = kPython;
    size_t id_before = out->ids.size(), text_before = out->texts.size();
    size_t meta_before = out->metas.size();
    bool has_cr = std::memchr(start, '\r', static_cast<size_t>(end - start)) != nullptr;
    int64_t chars = has_cr ? -1 : Utf8Chars(reinterpret_cast<const uint8_t *>(start),
                                             reinterpret_cast<const uint8_t *>(end));
    if (chars >= a.limit) {
      status = kTooLong;
      out->ids += a.line_prefix;
      out->ids += std::to_string(lineno);
      out->metas += "{}";
    } else if (chars >= 0) {
      bool id_found = false;
      out->ids += a.has_id_key ? a.key_prefix : a.line_prefix;
      Line line(start, end);
      for (auto &value : meta) value.clear();
      if (line.Parse(a.text_key, a.has_id_key ? &a.id_key : nullptr, a.meta_keys, &out->texts,
                     &out->ids, &id_found, &meta)) {
        if (!a.has_id_key) out->ids += std::to_string(lineno);
        // json.dumps({k: obj[k] ...}, ensure_ascii=False, sort_keys=True): keys come sorted.
        out->metas.push_back('{');
        bool first = true;
        for (size_t m = 0; m < meta.size(); ++m) {
          if (meta[m].empty()) continue;
          if (!first) out->metas += ", ";
          first = false;
          out->metas.push_back('"');
          AppendEscaped(&out->metas, a.meta_keys[m].data(),
                        a.meta_keys[m].data() + a.meta_keys[m].size());
          out->metas += "\": ";
          out->metas += meta[m];
        }
        out->metas.push_back('}');
        if (Utf8Length(out->texts, text_before) > a.max_doc_chars) {
          status = kTooLong;
        } else if (AllSpace(out->texts, text_before)) {
          status = kEmpty;
        } else {
          status = kRecord;
        }
      }
    }
    if (status != kRecord) out->texts.resize(text_before);
    if (status == kPython) {
      out->ids.resize(id_before);
      out->metas.resize(meta_before);
    }
    if (out->ids.size() > INT32_MAX || out->texts.size() > INT32_MAX ||
        out->metas.size() > INT32_MAX) {
      out->overflow = true;
      return pos;
    }
    out->status.push_back(status);
    out->id_offsets.push_back(static_cast<int32_t>(out->ids.size()));
    out->text_offsets.push_back(static_cast<int32_t>(out->texts.size()));
    out->meta_offsets.push_back(static_cast<int32_t>(out->metas.size()));
  }
  return pos - a.pos;
}

bool GetBytes(PyObject *obj, const char *name, std::string *out) {
  if (!PyBytes_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s: need bytes, got %s", name, Py_TYPE(obj)->tp_name);
    return false;
  }
  out->assign(PyBytes_AS_STRING(obj), static_cast<size_t>(PyBytes_GET_SIZE(obj)));
  return true;
}

PyObject *Scan(PyObject *, PyObject *args) {
  PyObject *block_obj, *text_key, *id_key, *meta_keys, *key_prefix, *line_prefix;
  Args a;
  if (!PyArg_ParseTuple(args, "OnnOOO!OOLLL", &block_obj, &a.pos, &a.max_lines, &text_key,
                        &id_key, &PyTuple_Type, &meta_keys, &key_prefix, &line_prefix,
                        &a.first_lineno, &a.limit, &a.max_doc_chars))
    return nullptr;
  a.meta_keys.resize(static_cast<size_t>(PyTuple_GET_SIZE(meta_keys)));
  for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(meta_keys); ++m) {
    if (!GetBytes(PyTuple_GET_ITEM(meta_keys, m), "meta_keys", &a.meta_keys[m])) return nullptr;
  }
  a.has_id_key = id_key != Py_None;
  if (!GetBytes(text_key, "text_key", &a.text_key) ||
      (a.has_id_key && !GetBytes(id_key, "id_key", &a.id_key)) ||
      !GetBytes(key_prefix, "key_prefix", &a.key_prefix) ||
      !GetBytes(line_prefix, "line_prefix", &a.line_prefix))
    return nullptr;
  Py_buffer view;
  if (PyObject_GetBuffer(block_obj, &view, PyBUF_C_CONTIGUOUS) != 0) return nullptr;
  a.block = static_cast<const char *>(view.buf);
  a.size = view.len;
  if (a.pos < 0 || a.pos > a.size || a.max_lines < 1 || a.limit < 1 || a.max_doc_chars < 0) {
    PyBuffer_Release(&view);
    PyErr_Format(PyExc_ValueError, "scan: pos %zd (block of %zd bytes), max_lines %zd, limit "
                 "%lld or max_doc_chars %lld out of range", a.pos, a.size, a.max_lines, a.limit,
                 a.max_doc_chars);
    return nullptr;
  }
  Output out;
  Py_ssize_t consumed = 0;
  Py_BEGIN_ALLOW_THREADS
  try {
    consumed = ScanLines(a, &out);
  } catch (const std::bad_alloc &) {
    consumed = -1;
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (consumed < 0) return PyErr_NoMemory();
  if (out.overflow) {
    PyErr_SetString(PyExc_OverflowError, "scan: a block's ids, texts or metas pass 2 GiB");
    return nullptr;
  }
  Py_ssize_t lines = static_cast<Py_ssize_t>(out.status.size());
  return Py_BuildValue(
      "nny#y#y#y#y#y#y#", consumed, lines, reinterpret_cast<const char *>(out.status.data()),
      lines, reinterpret_cast<const char *>(out.id_offsets.data()),
      static_cast<Py_ssize_t>(out.id_offsets.size() * sizeof(int32_t)), out.ids.data(),
      static_cast<Py_ssize_t>(out.ids.size()),
      reinterpret_cast<const char *>(out.text_offsets.data()),
      static_cast<Py_ssize_t>(out.text_offsets.size() * sizeof(int32_t)), out.texts.data(),
      static_cast<Py_ssize_t>(out.texts.size()),
      reinterpret_cast<const char *>(out.meta_offsets.data()),
      static_cast<Py_ssize_t>(out.meta_offsets.size() * sizeof(int32_t)), out.metas.data(),
      static_cast<Py_ssize_t>(out.metas.size()));
}


// dump(keys, columns) -> bytes: one JSON object per row and "\n", as
// json.dumps(row, ensure_ascii=False) writes it ('{"k": "v", "k2": null}'). `columns`: per key,
// (validity bitmap or None, int32 offsets, data, array offset, raw); a string is escaped as
// json.dumps does (", \, \b \f \n \r \t, other controls as \u00xx), a raw column's values
// are already JSON and go in as they are, a null is null.
struct Column {
  Py_buffer validity, offsets, data;
  bool has_validity = false;
  Py_ssize_t offset = 0;
  bool raw = false;
};

void DumpRows(const std::vector<std::string> &keys, const std::vector<Column> &columns,
              Py_ssize_t rows, std::string *out) {
  for (Py_ssize_t r = 0; r < rows; ++r) {
    out->push_back('{');
    for (size_t k = 0; k < columns.size(); ++k) {
      const Column &col = columns[k];
      if (k) out->append(", ");
      out->append(keys[k]);
      out->append(": ");
      Py_ssize_t i = col.offset + r;
      if (col.has_validity) {
        const uint8_t *bits = static_cast<const uint8_t *>(col.validity.buf);
        if (!((bits[i >> 3] >> (i & 7)) & 1)) {
          out->append("null");
          continue;
        }
      }
      const int32_t *offsets = static_cast<const int32_t *>(col.offsets.buf);
      const char *data = static_cast<const char *>(col.data.buf);
      if (col.raw) {
        out->append(data + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i]));
      } else {
        out->push_back('"');
        AppendEscaped(out, data + offsets[i], data + offsets[i + 1]);
        out->push_back('"');
      }
    }
    out->append("}\n");
  }
}

// Checks one column's buffers against `rows` rows from its offset; false with an error set.
bool CheckColumn(const Column &col, Py_ssize_t rows, Py_ssize_t k) {
  Py_ssize_t need = col.offset + rows;
  if (col.offset < 0 || col.offsets.len < (need + 1) * 4 ||
      (col.has_validity && col.validity.len * 8 < need)) {
    PyErr_Format(PyExc_ValueError, "dump: column %zd's buffers hold fewer than %zd rows", k, rows);
    return false;
  }
  const int32_t *offsets = static_cast<const int32_t *>(col.offsets.buf);
  for (Py_ssize_t i = col.offset; i < need; ++i) {
    if (offsets[i] < 0 || offsets[i + 1] < offsets[i] || offsets[i + 1] > col.data.len) {
      PyErr_Format(PyExc_ValueError, "dump: column %zd's offset %zd is out of order or past "
                   "its data", k, i);
      return false;
    }
  }
  return true;
}

PyObject *Dump(PyObject *, PyObject *args) {
  PyObject *keys_obj, *columns_obj;
  Py_ssize_t rows;
  if (!PyArg_ParseTuple(args, "nO!O!", &rows, &PyList_Type, &keys_obj, &PyList_Type, &columns_obj))
    return nullptr;
  Py_ssize_t n = PyList_GET_SIZE(keys_obj);
  if (PyList_GET_SIZE(columns_obj) != n || rows < 0) {
    PyErr_SetString(PyExc_ValueError, "dump: need one column per key and rows >= 0");
    return nullptr;
  }
  std::vector<std::string> keys(static_cast<size_t>(n));
  std::vector<Column> columns(static_cast<size_t>(n));
  Py_ssize_t held = 0;  // columns whose buffers are held
  bool ok = true;
  for (Py_ssize_t k = 0; ok && k < n; ++k) {
    PyObject *key = PyList_GET_ITEM(keys_obj, k);
    if (!GetBytes(key, "key", &keys[k])) {
      ok = false;
      break;
    }
    PyObject *validity, *offsets, *data;
    int raw;
    Column &col = columns[k];
    if (!PyArg_ParseTuple(PyList_GET_ITEM(columns_obj, k), "OOOnp", &validity, &offsets, &data,
                          &col.offset, &raw)) {
      ok = false;
      break;
    }
    col.raw = raw;
    col.has_validity = validity != Py_None;
    if (col.has_validity && PyObject_GetBuffer(validity, &col.validity, PyBUF_SIMPLE) != 0) {
      ok = false;
      break;
    }
    if (PyObject_GetBuffer(offsets, &col.offsets, PyBUF_SIMPLE) != 0) {
      if (col.has_validity) PyBuffer_Release(&col.validity);
      ok = false;
      break;
    }
    if (PyObject_GetBuffer(data, &col.data, PyBUF_SIMPLE) != 0) {
      if (col.has_validity) PyBuffer_Release(&col.validity);
      PyBuffer_Release(&col.offsets);
      ok = false;
      break;
    }
    ++held;
    ok = CheckColumn(col, rows, k);
  }
  std::string out;
  if (ok) {
    // '"key": ' once per column, escaped as json.dumps escapes keys.
    for (auto &key : keys) {
      std::string quoted = "\"";
      AppendEscaped(&quoted, key.data(), key.data() + key.size());
      key = quoted + "\"";
    }
    Py_BEGIN_ALLOW_THREADS
    try {
      DumpRows(keys, columns, rows, &out);
    } catch (const std::bad_alloc &) {
      ok = false;
    }
    Py_END_ALLOW_THREADS
    if (!ok) PyErr_NoMemory();
  }
  for (Py_ssize_t k = 0; k < held; ++k) {
    if (columns[k].has_validity) PyBuffer_Release(&columns[k].validity);
    PyBuffer_Release(&columns[k].offsets);
    PyBuffer_Release(&columns[k].data);
  }
  if (!ok) return nullptr;
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

PyMethodDef kMethods[] = {
    {"scan", Scan, METH_VARARGS,
     "scan(block, pos, max_lines, text_key, id_key, meta_keys, key_prefix, line_prefix, "
     "first_lineno, limit, max_doc_chars) -> (consumed, lines, status, id_offsets, id_data, "
     "text_offsets, text_data, meta_offsets, meta_data)"},
    {"dump", Dump, METH_VARARGS,
     "dump(rows, keys, columns) -> bytes: JSON lines as json.dumps(row, ensure_ascii=False) "
     "writes them; columns: (validity, offsets, data, offset, raw) per key"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_jsonl",
                       "JSON lines parsed a block at a time, and written (see _jsonl.cpp).", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__jsonl(void) { return PyModule_Create(&kModule); }
