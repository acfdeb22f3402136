// The corpus-template kernels of dataforge.ops.dedup.template, one pass per document (built
// by `make dedup-verify`), the GIL released (the index shards run them side by side on
// threads). A pool of documents is (values, offsets): document d is
// values[offsets[d]:offsets[d + 1]], values of 8 bytes or 4, of which the low 32 bits count;
// `templated` is one bool per document (the template rule applies).
//
// * doc_ngrams(values, offsets, templated): per templated document, in document order, its
//   distinct values ascending; a bytearray of uint32. The module's numpy code gets the same
//   order from one sort of every position tagged with its document (O(N log N) over the
//   batch); here each (small) document is sorted alone, by radix.
// * template_set(template): the hash set of `template` (sorted uint32), made once.
// * residues(values, offsets, templated, set, run): per templated document, its values not
//   in the template of `set` (a template_set) that lie in runs of at least `run` consecutive
//   such positions, in text order; (bytearray of uint32, bytearray of int64 offsets).
//
// Both give the values of the numpy code, bit for bit (tested).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "_buffer.h"

namespace {

// One bool per document, as numpy's bool arrays export them (format '?').
class Flags {
 public:
  Flags() { view_.obj = nullptr; }
  ~Flags() {
    if (view_.obj) PyBuffer_Release(&view_);
  }
  Flags(const Flags &) = delete;
  Flags &operator=(const Flags &) = delete;
  bool Get(PyObject *obj, const char *name, Py_ssize_t documents) {
    if (PyObject_GetBuffer(obj, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      view_.obj = nullptr;
      if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Format(PyExc_TypeError, "%s: need a 1-d contiguous bool array, got %s", name,
                     Py_TYPE(obj)->tp_name);
      }
      return false;
    }
    const char *format = view_.format ? view_.format : "B";
    if (view_.ndim != 1 || view_.itemsize != 1 || format[0] != '?' || format[1]) {
      PyErr_Format(PyExc_TypeError, "%s: need a 1-d contiguous bool array (format '?')", name);
      return false;
    }
    if (view_.len != documents) {
      PyErr_Format(PyExc_ValueError, "%s: %zd flags for %zd documents (need one per document)",
                   name, view_.len, documents);
      return false;
    }
    return true;
  }
  bool operator[](Py_ssize_t d) const { return static_cast<const char *>(view_.buf)[d] != 0; }

 private:
  Py_buffer view_;
};

// A pool of documents with one flag each.
struct Pool {
  Buffer values, offsets;
  Flags templated;

  bool Parse(PyObject *v, PyObject *o, PyObject *t) {
    return values.Get(v, "values", "QqLlIi", true) && offsets.Get(o, "offsets", "qlQL") &&
           CheckOffsets(offsets, "offsets", values.size()) &&
           templated.Get(t, "templated", documents());
  }
  Py_ssize_t documents() const { return offsets.size() - 1; }
  int64_t begin(Py_ssize_t d) const { return offsets.data<int64_t>()[d]; }
  int64_t end(Py_ssize_t d) const { return offsets.data<int64_t>()[d + 1]; }
  bool wide() const { return values.itemsize() == 8; }
  // Positions in templated documents: what either kernel returns at most.
  Py_ssize_t templated_positions() const {
    Py_ssize_t n = 0;
    for (Py_ssize_t d = 0; d < documents(); ++d) n += templated[d] ? end(d) - begin(d) : 0;
    return n;
  }
  // fn(values) with values a uint32_t or uint64_t pointer.
  template <typename Fn>
  void WithValues(Fn fn) const {
    if (wide()) {
      fn(values.data<uint64_t>());
    } else {
      fn(values.data<uint32_t>());
    }
  }
};

// A set of 32-bit values (open addressing, linear probing, at most half full). The one value
// that cannot mark an empty slot is kept beside the table.
class TemplateSet {
 public:
  TemplateSet(const uint32_t *values, Py_ssize_t n) {
    size_t size = 16;
    while (size < 2 * static_cast<size_t>(n)) size <<= 1;
    slots_.assign(size, kEmpty);
    shift_ = 64 - __builtin_ctzll(size);
    for (Py_ssize_t i = 0; i < n; ++i) Insert(values[i]);
  }
  bool Contains(uint32_t v) const {
    if (v == kEmpty) return has_empty_;
    size_t mask = slots_.size() - 1;
    for (size_t at = Slot(v);; at = (at + 1) & mask) {
      if (slots_[at] == v) return true;
      if (slots_[at] == kEmpty) return false;
    }
  }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  void Insert(uint32_t v) {
    if (v == kEmpty) {
      has_empty_ = true;
      return;
    }
    size_t mask = slots_.size() - 1;
    size_t at = Slot(v);
    while (slots_[at] != kEmpty && slots_[at] != v) at = (at + 1) & mask;
    slots_[at] = v;
  }
  size_t Slot(uint32_t v) const { return (uint64_t{v} * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<uint32_t> slots_;
  int shift_ = 60;
  bool has_empty_ = false;
};

constexpr size_t kRadixFrom = 64;  // shorter runs: std::sort is faster than four passes

// Sorts a[0:n) ascending: least significant byte first, a pass skipped where every value
// has the same byte (std::sort below kRadixFrom values): a document's few hundred values
// sort 3x faster so than with std::sort.
void SortValues(uint32_t *a, size_t n, std::vector<uint32_t> &scratch) {
  if (n < kRadixFrom) {
    std::sort(a, a + n);
    return;
  }
  if (scratch.size() < n) scratch.resize(n);
  uint32_t counts[4][256] = {};
  for (size_t i = 0; i < n; ++i) {
    for (int pass = 0; pass < 4; ++pass) ++counts[pass][(a[i] >> (8 * pass)) & 255];
  }
  uint32_t *src = a, *dst = scratch.data();
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 8 * pass;
    uint32_t *next = counts[pass];
    if (next[(src[0] >> shift) & 255] == n) continue;
    uint32_t sum = 0;
    for (int b = 0; b < 256; ++b) sum += std::exchange(next[b], sum);
    for (size_t i = 0; i < n; ++i) dst[next[(src[i] >> shift) & 255]++] = src[i];
    std::swap(src, dst);
  }
  if (src != a) std::memcpy(a, src, n * sizeof(uint32_t));
}

// A bytearray of `n` items of `T`, or nullptr with the error set.
template <typename T>
PyObject *NewItems(Py_ssize_t n, T **data) {
  PyObject *out = PyByteArray_FromStringAndSize(nullptr, n * static_cast<Py_ssize_t>(sizeof(T)));
  if (out != nullptr) *data = reinterpret_cast<T *>(PyByteArray_AS_STRING(out));
  return out;
}

// Runs `fill()` (which returns how many uint32 values it wrote to `values`) with the GIL
// released, then cuts `values` (a bytearray with room for every position) to them.
template <typename Fill>
bool FillAndCut(PyObject *values, Fill fill) {
  Py_ssize_t written = 0;
  bool failed = false;
  Py_BEGIN_ALLOW_THREADS
  try {
    written = fill();
  } catch (...) {  // std::bad_alloc: no C++ exception crosses into Python
    failed = true;
  }
  Py_END_ALLOW_THREADS
  if (failed) {
    PyErr_NoMemory();
    return false;
  }
  return PyByteArray_Resize(values, written * static_cast<Py_ssize_t>(sizeof(uint32_t))) == 0;
}

PyObject *DocNgrams(PyObject *, PyObject *args) {
  PyObject *values_obj, *offsets_obj, *templated_obj;
  if (!PyArg_ParseTuple(args, "OOO", &values_obj, &offsets_obj, &templated_obj)) return nullptr;
  Pool pool;
  if (!pool.Parse(values_obj, offsets_obj, templated_obj)) return nullptr;
  uint32_t *out = nullptr;
  PyObject *result = NewItems(pool.templated_positions(), &out);
  if (result == nullptr) return nullptr;
  bool ok = FillAndCut(result, [&]() {
    uint32_t *next = out;
    std::vector<uint32_t> scratch;
    pool.WithValues([&](const auto *values) {
      for (Py_ssize_t d = 0; d < pool.documents(); ++d) {
        if (!pool.templated[d]) continue;
        uint32_t *first = next;
        for (int64_t k = pool.begin(d); k < pool.end(d); ++k) {
          *next++ = static_cast<uint32_t>(values[k]);
        }
        SortValues(first, static_cast<size_t>(next - first), scratch);
        next = std::unique(first, next);
      }
    });
    return static_cast<Py_ssize_t>(next - out);
  });
  if (!ok) {
    Py_DECREF(result);
    return nullptr;
  }
  return result;
}

// `template`: 4-byte unsigned values, ascending.
bool ParseTemplate(PyObject *obj, Buffer &buffer) {
  if (!buffer.Get(obj, "template", "I", true)) return false;
  const uint32_t *at = buffer.data<uint32_t>();
  for (Py_ssize_t i = 1; i < buffer.size(); ++i) {
    if (at[i] < at[i - 1]) {
      PyErr_Format(PyExc_ValueError, "template: value %zd is below the one before (need sorted)",
                   i);
      return false;
    }
  }
  return true;
}

// Document d's values in runs of at least `run` non-template positions, appended at `out`;
// returns the end of what it wrote.
template <typename T>
uint32_t *CutResidue(const T *values, int64_t first, int64_t last, const TemplateSet &tmpl,
                     int64_t run, uint32_t *out) {
  int64_t start = first;  // of the current run of own positions
  for (int64_t k = first; k <= last; ++k) {
    bool own = k < last && !tmpl.Contains(static_cast<uint32_t>(values[k]));
    if (own) continue;
    if (k - start >= run) {
      for (int64_t j = start; j < k; ++j) *out++ = static_cast<uint32_t>(values[j]);
    }
    start = k + 1;
  }
  return out;
}

constexpr const char *kSetName = "dataforge.dedup.TemplateSet";

void DestroySet(PyObject *capsule) {
  delete static_cast<TemplateSet *>(PyCapsule_GetPointer(capsule, kSetName));
}

// The hash set of a template, made once for many `residues` calls (a shard cuts its
// candidates block by block: a set per call cost more than the cutting).
PyObject *MakeTemplateSet(PyObject *, PyObject *args) {
  PyObject *template_obj;
  if (!PyArg_ParseTuple(args, "O", &template_obj)) return nullptr;
  Buffer buffer;
  if (!ParseTemplate(template_obj, buffer)) return nullptr;
  TemplateSet *set = nullptr;
  Py_BEGIN_ALLOW_THREADS
  try {
    set = new TemplateSet(buffer.data<uint32_t>(), buffer.size());
  } catch (...) {  // std::bad_alloc: no C++ exception crosses into Python
    set = nullptr;
  }
  Py_END_ALLOW_THREADS
  if (set == nullptr) return PyErr_NoMemory();
  PyObject *capsule = PyCapsule_New(set, kSetName, DestroySet);
  if (capsule == nullptr) delete set;
  return capsule;
}

PyObject *Residues(PyObject *, PyObject *args) {
  PyObject *values_obj, *offsets_obj, *templated_obj, *set_obj;
  Py_ssize_t run;
  if (!PyArg_ParseTuple(args, "OOOOn", &values_obj, &offsets_obj, &templated_obj, &set_obj,
                        &run)) {
    return nullptr;
  }
  if (run < 1) {
    PyErr_Format(PyExc_ValueError, "run: %zd; valid: >= 1", run);
    return nullptr;
  }
  if (!PyCapsule_IsValid(set_obj, kSetName)) {
    PyErr_Format(PyExc_TypeError, "template: need a template_set(...), got %s",
                 Py_TYPE(set_obj)->tp_name);
    return nullptr;
  }
  const TemplateSet &tmpl = *static_cast<TemplateSet *>(PyCapsule_GetPointer(set_obj, kSetName));
  Pool pool;
  if (!pool.Parse(values_obj, offsets_obj, templated_obj)) return nullptr;
  uint32_t *out = nullptr;
  int64_t *offsets = nullptr;
  PyObject *hashes = NewItems(pool.templated_positions(), &out);
  if (hashes == nullptr) return nullptr;
  PyObject *cuts = NewItems(pool.documents() + 1, &offsets);
  if (cuts == nullptr) {
    Py_DECREF(hashes);
    return nullptr;
  }
  bool ok = FillAndCut(hashes, [&]() {
    uint32_t *next = out;
    offsets[0] = 0;
    pool.WithValues([&](const auto *values) {
      for (Py_ssize_t d = 0; d < pool.documents(); ++d) {
        if (pool.templated[d]) next = CutResidue(values, pool.begin(d), pool.end(d), tmpl, run, next);
        offsets[d + 1] = next - out;
      }
    });
    return static_cast<Py_ssize_t>(next - out);
  });
  if (!ok) {
    Py_DECREF(hashes);
    Py_DECREF(cuts);
    return nullptr;
  }
  return Py_BuildValue("(NN)", hashes, cuts);
}

PyMethodDef kMethods[] = {
    {"doc_ngrams", DocNgrams, METH_VARARGS,
     "doc_ngrams(values, offsets, templated) -> bytearray of uint32: each templated "
     "document's distinct values (low 32 bits), ascending"},
    {"template_set", MakeTemplateSet, METH_VARARGS,
     "template_set(template) -> capsule: the hash set of a template (sorted uint32) for "
     "residues"},
    {"residues", Residues, METH_VARARGS,
     "residues(values, offsets, templated, template_set, run) -> (bytearray of uint32, "
     "bytearray of int64 offsets): each templated document's runs of >= run non-template "
     "values"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_template",
                       "The corpus-template kernels of dedup (see _template.cpp).", -1,
                       kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__template(void) { return PyModule_Create(&kModule); }
