// Sentencepiece BPE encoding of a whole batch in one call (built by `make spm-bpe`), for
// dataforge.tokenization.native_bpe.
//
// The algorithm is sentencepiece's bpe::Model::SampleEncode without dropout, step for step:
// the text is split into characters (a user-defined symbol, longest match first, is one
// frozen symbol); every adjacent pair whose concatenation is a piece goes on a queue
// ordered by the piece's score, then by leftmost position; the best pair is merged, stale
// entries are skipped by the same size test, and the new neighbours are queued. The only
// change is how a pair is found: sentencepiece hashes the concatenated string, here a table
// maps (left symbol, right symbol) to the merged piece, built once from every split of
// every piece into two symbols (pieces, or single characters of pieces). Unknown
// characters become byte pieces (byte_fallback) or <unk>, as sentencepiece's processor does.
// The batch arrives as one UTF-8 buffer with offsets (spaces already spelled U+2581) and
// leaves as flat ids with offsets; the GIL is released while it runs.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

const char kCapsule[] = "dataforge.spm_bpe.Model";

inline int CharLen(unsigned char lead) {
  static const int kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// The merges of each left symbol, as a sorted run of (right symbol, merged symbol): most
// symbols merge with one to three right neighbours, so a lookup reads the run's bounds and
// a few entries (a 16k vocabulary's table is ~300 KB, read where the text's symbols are)
// instead of probing a hash table spread over all of it.
class MergeTable {
 public:
  void Build(std::vector<std::pair<uint64_t, int32_t>> entries, size_t num_symbols) {
    std::sort(entries.begin(), entries.end());
    begin_.assign(num_symbols + 1, 0);
    right_.resize(entries.size());
    merged_.resize(entries.size());
    for (size_t k = 0; k < entries.size(); ++k) {
      ++begin_[(entries[k].first >> 32) + 1];
      right_[k] = static_cast<int32_t>(entries[k].first & 0xFFFFFFFFu);
      merged_[k] = entries[k].second;
    }
    for (size_t i = 0; i < num_symbols; ++i) begin_[i + 1] += begin_[i];
  }
  // The merged symbol of (left, right), -1 if they do not merge.
  int32_t Find(int32_t left, int32_t right) const {
    const int32_t *first = right_.data() + begin_[left];
    const int32_t *last = right_.data() + begin_[left + 1];
    if (last - first > 16) {
      const int32_t *at = std::lower_bound(first, last, right);
      return at != last && *at == right ? merged_[at - right_.data()] : -1;
    }
    for (const int32_t *at = first; at != last; ++at) {
      if (*at == right) return merged_[at - right_.data()];
    }
    return -1;
  }
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

 private:
  std::vector<int32_t> begin_;   // symbol -> first entry of its run (num_symbols + 1)
  std::vector<int32_t> right_;   // sorted within each run
  std::vector<int32_t> merged_;
};

struct Model {
  std::unordered_map<std::string, int32_t> symbol_of;  // piece or single character -> symbol
  std::vector<int32_t> symbol_of_char;                 // code point -> symbol (-1: none)
  std::vector<int32_t> piece_of_symbol;                // symbol -> piece id, -1: not a piece
  std::vector<float> score_of_symbol;                  // the score of its piece
  MergeTable merges;                                   // (l, r) -> merged symbol
  std::vector<std::string> user_defined;               // matched first, longest first
  bool first_byte_user[256] = {};
  int32_t byte_ids[256];
  int32_t unk_id = 0;
  bool byte_fallback = false;
};

struct Symbol {
  int32_t prev, next, symbol;  // symbol -1: a character no piece holds
  uint32_t begin, size;        // bytes of the text
  bool freeze;
};

struct Pair {
  int32_t left, right, symbol;
  float score;
  uint32_t size;
};

struct PairOrder {  // sentencepiece's SymbolPairComparator: best score, then leftmost
  bool operator()(const Pair &a, const Pair &b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// The code point of one UTF-8 character of ``size`` bytes (0x110000 if malformed).
inline uint32_t CodePoint(const char *p, uint32_t size) {
  const auto *u = reinterpret_cast<const unsigned char *>(p);
  switch (size) {
    case 1:
      return u[0] < 0x80 ? u[0] : 0x110000;
    case 2:
      return ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    case 3:
      return ((u[0] & 0x0F) << 12) | ((u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    case 4:
      return ((u[0] & 0x07) << 18) | ((u[1] & 0x3F) << 12) | ((u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    default:
      return 0x110000;
  }
}


void FreeModel(PyObject *capsule) {
  delete static_cast<Model *>(PyCapsule_GetPointer(capsule, kCapsule));
}

// load(pieces: list[str], scores: list[float], kinds: bytes, unk_id, byte_fallback)
// kinds: 0 normal, 1 user-defined, 2 byte, 3 other (control, unknown: never text)
PyObject *LoadModel(PyObject *args);

PyObject *Load(PyObject *, PyObject *args) {
  try {  // no C++ exception may cross into Python
    return LoadModel(args);
  } catch (const std::bad_alloc &) {
    return PyErr_NoMemory();
  } catch (const std::exception &e) {
    PyErr_Format(PyExc_ValueError, "cannot build the BPE tables: %s", e.what());
    return nullptr;
  }
}

PyObject *LoadModel(PyObject *args) {
  PyObject *pieces, *scores;
  const char *kinds;
  Py_ssize_t num_kinds;
  int unk_id, byte_fallback;
  if (!PyArg_ParseTuple(args, "O!O!y#ip", &PyList_Type, &pieces, &PyList_Type, &scores, &kinds,
                        &num_kinds, &unk_id, &byte_fallback)) {
    return nullptr;
  }
  Py_ssize_t n = PyList_GET_SIZE(pieces);
  if (PyList_GET_SIZE(scores) != n || num_kinds != n) {
    PyErr_SetString(PyExc_ValueError, "pieces, scores and kinds differ in length");
    return nullptr;
  }
  std::unique_ptr<Model> owner(new Model());  // freed on any early return
  Model *model = owner.get();
  model->unk_id = unk_id;
  model->byte_fallback = byte_fallback;
  for (int b = 0; b < 256; ++b) model->byte_ids[b] = unk_id;
  std::vector<std::string> text(n);
  std::vector<float> score(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(pieces, i), &len);
    if (!utf8) {
      return nullptr;
    }
    text[i].assign(utf8, len);
    score[i] = static_cast<float>(PyFloat_AsDouble(PyList_GET_ITEM(scores, i)));
    if (PyErr_Occurred()) {
      return nullptr;
    }
  }
  // Symbols: every normal or user-defined piece, then the single characters of pieces that
  // are not pieces themselves (sentencepiece merges them by string all the same).
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (kinds[i] == 2 && text[i].size() == 6 && text[i].compare(0, 3, "<0x") == 0) {
      const unsigned long byte = std::strtoul(text[i].substr(3, 2).c_str(), nullptr, 16);
      if (byte < 256) model->byte_ids[byte] = static_cast<int32_t>(i);  // "<0xAB>"
    }
    if (kinds[i] > 1) continue;
    model->symbol_of.emplace(text[i], static_cast<int32_t>(model->piece_of_symbol.size()));
    model->piece_of_symbol.push_back(static_cast<int32_t>(i));
    if (kinds[i] == 1) {
      model->user_defined.push_back(text[i]);
      model->first_byte_user[static_cast<unsigned char>(text[i][0])] = true;
    }
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (kinds[i] > 1) continue;
    for (size_t at = 0; at < text[i].size(); at += CharLen(text[i][at])) {
      std::string ch = text[i].substr(at, CharLen(text[i][at]));
      if (model->symbol_of.emplace(ch, static_cast<int32_t>(model->piece_of_symbol.size()))
              .second) {
        model->piece_of_symbol.push_back(-1);
      }
    }
  }
  std::unordered_map<uint64_t, int32_t> merges;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (kinds[i] > 1) continue;
    const std::string &p = text[i];
    for (size_t cut = CharLen(p[0]); cut < p.size(); cut += CharLen(p[cut])) {
      auto left = model->symbol_of.find(p.substr(0, cut));
      auto right = model->symbol_of.find(p.substr(cut));
      if (left == model->symbol_of.end() || right == model->symbol_of.end()) continue;
      merges[MergeTable::Key(left->second, right->second)] = model->symbol_of[p];
    }
  }
  const size_t num_symbols = model->piece_of_symbol.size();
  model->merges.Build({merges.begin(), merges.end()}, num_symbols);
  model->score_of_symbol.assign(num_symbols, 0.0f);
  for (size_t k = 0; k < num_symbols; ++k) {
    if (model->piece_of_symbol[k] >= 0) model->score_of_symbol[k] = score[model->piece_of_symbol[k]];
  }
  model->symbol_of_char.assign(0x110000, -1);
  for (const auto &entry : model->symbol_of) {
    const std::string &t = entry.first;
    if (!t.empty() && static_cast<size_t>(CharLen(t[0])) == t.size()) {
      const uint32_t cp = CodePoint(t.data(), static_cast<uint32_t>(t.size()));
      if (cp < 0x110000) model->symbol_of_char[cp] = entry.second;
    }
  }
  std::sort(model->user_defined.begin(), model->user_defined.end(),
            [](const std::string &a, const std::string &b) { return a.size() > b.size(); });
  PyObject *capsule = PyCapsule_New(model, kCapsule, FreeModel);
  if (capsule) owner.release();
  return capsule;
}

class Buffer {
 public:
  Buffer() { view_.obj = nullptr; }
  ~Buffer() {
    if (view_.obj) PyBuffer_Release(&view_);
  }
  bool Get(PyObject *obj, const char *name, Py_ssize_t itemsize, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &view_, flags) != 0) {
      view_.obj = nullptr;
      PyErr_Format(PyExc_TypeError, "%s: need a contiguous%s buffer", name,
                   writable ? " writable" : "");
      return false;
    }
    if (view_.len % itemsize) {
      PyErr_Format(PyExc_TypeError, "%s: need %zd-byte items", name, itemsize);
      return false;
    }
    return true;
  }
  Py_ssize_t size(Py_ssize_t itemsize) const { return view_.len / itemsize; }
  void *data() const { return view_.buf; }

 private:
  Py_buffer view_;
};

// sentencepiece's loop over its queue, on the symbols [start, stop) (linked by next).
void MergeByQueue(const Model &m, std::vector<Symbol> &symbols, int32_t start, int32_t stop,
                  std::priority_queue<Pair, std::vector<Pair>, PairOrder> &agenda) {
  auto maybe_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol &l = symbols[left], &r = symbols[right];
    if (l.freeze || r.freeze || l.symbol < 0 || r.symbol < 0) return;
    const int32_t merged = m.merges.Find(l.symbol, r.symbol);
    if (merged < 0) return;
    agenda.push(Pair{left, right, merged, m.score_of_symbol[merged], l.size + r.size});
  };
  for (int32_t i = start + 1; i < stop; ++i) maybe_add(i - 1, i);
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol &l = symbols[top.left];
    Symbol &r = symbols[top.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != top.size) continue;  // stale
    l.size += r.size;
    l.symbol = top.symbol;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    r.size = 0;
    maybe_add(l.prev, top.left);
    maybe_add(top.left, l.next);
  }
}

// Encodes text[begin, end) onto out; returns the ids written.
size_t EncodeOne(const Model &m, const char *text, uint32_t begin, uint32_t end, int32_t *out,
                 std::vector<Symbol> &symbols,
                 std::priority_queue<Pair, std::vector<Pair>, PairOrder> &agenda) {
  symbols.clear();
  for (uint32_t at = begin; at < end;) {
    Symbol s{static_cast<int32_t>(symbols.size()) - 1, -1, -1, at, 0, false};
    const unsigned char lead = static_cast<unsigned char>(text[at]);
    if (m.first_byte_user[lead]) {
      for (const std::string &u : m.user_defined) {  // longest first
        if (u.size() <= end - at && std::memcmp(text + at, u.data(), u.size()) == 0) {
          s.size = static_cast<uint32_t>(u.size());
          s.freeze = true;
          break;
        }
      }
    }
    if (!s.freeze) {
      s.size = std::min<uint32_t>(CharLen(lead), end - at);
      const uint32_t cp = CodePoint(text + at, s.size);
      s.symbol = cp < 0x110000 ? m.symbol_of_char[cp] : -1;
    } else {  // a user-defined piece: always a symbol
      auto it = m.symbol_of.find(std::string(text + at, s.size));
      s.symbol = it != m.symbol_of.end() ? it->second : -1;
    }
    at += s.size;
    symbols.push_back(s);
  }
  const int32_t count = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i + 1 < count; ++i) symbols[i].next = i + 1;
  MergeByQueue(m, symbols, 0, count, agenda);
  size_t written = 0;
  for (int32_t i = 0; i < count; ++i) {
    const Symbol &s = symbols[i];
    if (s.size == 0) continue;  // merged into the symbol on its left
    const int32_t piece = s.symbol >= 0 ? m.piece_of_symbol[s.symbol] : -1;
    if (piece >= 0) {
      out[written++] = piece;
    } else if (m.byte_fallback) {
      for (uint32_t k = 0; k < s.size; ++k) {
        out[written++] = m.byte_ids[static_cast<unsigned char>(text[s.begin + k])];
      }
    } else {
      out[written++] = m.unk_id;
    }
  }
  return written;
}

// encode(model, data: UTF-8 bytes, offsets: int64[n + 1], out: int32[len(data)],
//        out_offsets: int64[n + 1]) -> number of ids
PyObject *Encode(PyObject *, PyObject *args) {
  PyObject *capsule, *data_obj, *offsets_obj, *out_obj, *out_offsets_obj;
  if (!PyArg_ParseTuple(args, "OOOOO", &capsule, &data_obj, &offsets_obj, &out_obj,
                        &out_offsets_obj)) {
    return nullptr;
  }
  auto *model = static_cast<Model *>(PyCapsule_GetPointer(capsule, kCapsule));
  if (!model) return nullptr;
  Buffer data, offsets, out, out_offsets;
  if (!data.Get(data_obj, "data", 1, false) || !offsets.Get(offsets_obj, "offsets", 8, false) ||
      !out.Get(out_obj, "out", 4, true) || !out_offsets.Get(out_offsets_obj, "out_offsets", 8, true)) {
    return nullptr;
  }
  const Py_ssize_t n = offsets.size(8) - 1;
  const auto *off = static_cast<const int64_t *>(offsets.data());
  const Py_ssize_t data_size = data.size(1);
  if (n < 0 || out_offsets.size(8) != n + 1 || out.size(4) < data_size ||
      data_size > 0xffffffffLL) {
    PyErr_SetString(PyExc_ValueError, "offsets, out or out_offsets have the wrong size");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (off[i] < 0 || off[i] > off[i + 1] || off[i + 1] > data_size ||
        off[i + 1] - off[i] > 0x7fffffff) {
      PyErr_Format(PyExc_ValueError, "offsets: bad range at text %zd", i);
      return nullptr;
    }
  }
  const char *text = static_cast<const char *>(data.data());
  auto *ids = static_cast<int32_t *>(out.data());
  auto *out_off = static_cast<int64_t *>(out_offsets.data());
  size_t written = 0;
  Py_BEGIN_ALLOW_THREADS
  std::vector<Symbol> symbols;
  std::priority_queue<Pair, std::vector<Pair>, PairOrder> agenda;
  out_off[0] = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    // A text's ids are never more than its bytes: the output fits in len(data).
    written += EncodeOne(*model, text, static_cast<uint32_t>(off[i]),
                         static_cast<uint32_t>(off[i + 1]), ids + written, symbols, agenda);
    out_off[i + 1] = static_cast<int64_t>(written);
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromSize_t(written);
}

PyMethodDef kMethods[] = {
    {"load", Load, METH_VARARGS, "load(pieces, scores, kinds, unk_id, byte_fallback) -> model"},
    {"encode", Encode, METH_VARARGS, "encode(model, data, offsets, out, out_offsets) -> ids"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_spm_bpe",
                       "Sentencepiece BPE encoding of a batch (see native_bpe).", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__spm_bpe(void) { return PyModule_Create(&kModule); }
