// Exact verification of candidate pairs, pair by pair (built by `make dedup-verify`), for
// dataforge.ops.dedup.verify.
//
// The same two measures as the module's numpy kernels, computed pair by pair with a small
// hash set of one document's values instead of by sorting every chunk's tagged shingles at
// once (O(n log n) over millions of 64-bit values, after copying them out of the pools):
//
// A side is a pool of documents (values, offsets: document d is
// values[offsets[d]:offsets[d + 1]]; values of 8 bytes, or of 4 as the planner ships
// them, read where they are) and one document number per pair (rows), so that no pair's
// shingles are copied out of the pool first.
//
// * jaccard(left, left_offsets, left_rows, right, right_offsets, right_rows): per pair i,
//   the distinct values (low 40 bits of each hash; 32 where a side has 4-byte values) of left document left_rows[i] and of
//   right document right_rows[i]; |common| / (|left| + |right| - |common|), 0 when both
//   are empty.
// * own(mine, mine_offsets, mine_rows, other, other_offsets, other_rows, block): per pair,
//   the share of mine's positions (text order, repeats kept) in runs of at least `block`
//   consecutive positions whose value the other side lacks; 0 for an empty side. `block`
//   is one int for every pair, or an array of 8-byte integers with one per pair.
//
// Both divide in double precision as numpy does, so the values are identical. The GIL is
// released while they run (the index shards verify side by side on threads).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "_buffer.h"

namespace {

constexpr uint64_t kHashBits = (uint64_t{1} << 40) - 1;

// Document numbers: each within [0, documents).
bool CheckRows(const Buffer &rows, const char *name, Py_ssize_t documents) {
  const int64_t *at = rows.data<int64_t>();
  for (Py_ssize_t i = 0; i < rows.size(); ++i) {
    if (at[i] < 0 || at[i] >= documents) {
      PyErr_Format(PyExc_ValueError, "%s: row %zd is %lld, not one of the %zd documents", name,
                   i, static_cast<long long>(at[i]), documents);
      return false;
    }
  }
  return true;
}

// A set of 40-bit values (open addressing, linear probing), cleared and sized per document:
// a document's few thousand values fit in L1/L2, where sorting them (then a binary search
// per position) cost 2-3x more on the benchmark corpus.
class ValueSet {
 public:
  // Empty, with room for `n` values at most half full.
  void Reset(size_t n) {
    size_t size = 16;
    while (size < 2 * n) size <<= 1;
    slots_.assign(size, kEmpty);
    shift_ = 64 - __builtin_ctzll(size);
    count_ = 0;
  }
  // Adds `v`; whether it was new.
  bool Insert(uint64_t v) {
    size_t mask = slots_.size() - 1;
    for (size_t at = Slot(v);; at = (at + 1) & mask) {
      if (slots_[at] == v) return false;
      if (slots_[at] == kEmpty) {
        slots_[at] = v;
        ++count_;
        return true;
      }
    }
  }
  bool Contains(uint64_t v) const {
    size_t mask = slots_.size() - 1;
    for (size_t at = Slot(v);; at = (at + 1) & mask) {
      if (slots_[at] == v) return true;
      if (slots_[at] == kEmpty) return false;
    }
  }
  size_t count() const { return count_; }
  // All of values[first:last] (their bits in `mask`).
  template <typename T>
  void Fill(const T *values, int64_t first, int64_t last, uint64_t mask) {
    Reset(static_cast<size_t>(last - first));
    for (int64_t k = first; k < last; ++k) Insert(values[k] & mask);
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // never a 40-bit value
  size_t Slot(uint64_t v) const { return (v * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<uint64_t> slots_;
  int shift_ = 60;
  size_t count_ = 0;
};

// One side of the pairs: documents (values, offsets) and, per pair, a document number.
struct Side {
  Buffer values, offsets, rows;

  bool Parse(PyObject *v, PyObject *o, PyObject *r, const char *name) {
    std::string prefix(name);
    if (!values.Get(v, (prefix + " values").c_str(), "QqLlIi", true) ||
        !offsets.Get(o, (prefix + " offsets").c_str(), "qlQL") ||
        !rows.Get(r, (prefix + " rows").c_str(), "qlQL")) {
      return false;
    }
    return CheckOffsets(offsets, (prefix + " offsets").c_str(), values.size()) &&
           CheckRows(rows, (prefix + " rows").c_str(), offsets.size() - 1);
  }
  // The values of pair i's document: [begin(i), end(i)).
  int64_t begin(Py_ssize_t i) const { return offsets.data<int64_t>()[rows.data<int64_t>()[i]]; }
  int64_t end(Py_ssize_t i) const { return offsets.data<int64_t>()[rows.data<int64_t>()[i] + 1]; }
  int64_t row(Py_ssize_t i) const { return rows.data<int64_t>()[i]; }
  template <typename T>
  const T *data() const { return values.data<T>(); }
  bool wide() const { return values.itemsize() == 8; }
};

// The bits of a value compared: the low 40, or 32 where a side has 4-byte values (the low
// 32 bits of the same hashes).
uint64_t CompareMask(const Side &a, const Side &b) {
  return a.wide() && b.wide() ? kHashBits : 0xFFFFFFFFull;
}

// fn(L{}, R{}) with L and R the value types of the two sides (uint32_t or uint64_t).
template <typename Fn>
void WithValueTypes(const Side &a, const Side &b, Fn fn) {
  if (a.wide() && b.wide()) {
    fn(uint64_t{}, uint64_t{});
  } else if (a.wide()) {
    fn(uint64_t{}, uint32_t{});
  } else if (b.wide()) {
    fn(uint32_t{}, uint64_t{});
  } else {
    fn(uint32_t{}, uint32_t{});
  }
}

// Both sides, with as many rows on each (one per pair).
bool ParseSides(Side &a, Side &b, PyObject *const *objs, const char *a_name, const char *b_name) {
  if (!a.Parse(objs[0], objs[1], objs[2], a_name) || !b.Parse(objs[3], objs[4], objs[5], b_name)) {
    return false;
  }
  if (a.rows.size() != b.rows.size()) {
    PyErr_Format(PyExc_ValueError, "%s rows: %zd pairs, %s rows: %zd (need as many)", a_name,
                 a.rows.size(), b_name, b.rows.size());
    return false;
  }
  return true;
}

PyObject *NewDoubles(Py_ssize_t n, double **data) {
  PyObject *out = PyByteArray_FromStringAndSize(nullptr, n * static_cast<Py_ssize_t>(sizeof(double)));
  if (out != nullptr) *data = reinterpret_cast<double *>(PyByteArray_AS_STRING(out));
  return out;
}

// Parses both sides from objs[0..5], then fills one double per pair with
// `fill(side_a, side_b, pairs, out)`, the GIL released; the result as a bytearray.
template <typename Fill>
PyObject *ForAllPairs(PyObject *const *objs, const char *a_name, const char *b_name, Fill fill) {
  Side a, b;
  if (!ParseSides(a, b, objs, a_name, b_name)) return nullptr;
  Py_ssize_t pairs = a.rows.size();
  double *out = nullptr;
  PyObject *result = NewDoubles(pairs, &out);
  if (result == nullptr) return nullptr;
  bool failed = false;
  Py_BEGIN_ALLOW_THREADS
  try {
    fill(a, b, pairs, out);
  } catch (...) {  // std::bad_alloc: no C++ exception crosses into Python
    failed = true;
  }
  Py_END_ALLOW_THREADS
  if (failed) {
    Py_DECREF(result);
    return PyErr_NoMemory();
  }
  return result;
}

template <typename L, typename R>
void FillJaccard(const Side &left, const Side &right, Py_ssize_t pairs, double *out) {
  ValueSet a, b;
  const R *values = right.data<R>();
  const uint64_t mask = CompareMask(left, right);
  int64_t held = -1;  // the left document in `a`: pairs come sorted by it, so it repeats
  for (Py_ssize_t i = 0; i < pairs; ++i) {
    if (left.row(i) != held) {
      a.Fill(left.data<L>(), left.begin(i), left.end(i), mask);
      held = left.row(i);
    }
    int64_t first = right.begin(i), last = right.end(i), common = 0;
    b.Reset(static_cast<size_t>(last - first));
    for (int64_t k = first; k < last; ++k) {
      uint64_t v = values[k] & mask;
      if (b.Insert(v) && a.Contains(v)) ++common;
    }
    int64_t sizes = static_cast<int64_t>(a.count() + b.count());
    double union_ = static_cast<double>(sizes - common);
    out[i] = union_ > 0 ? static_cast<double>(common) / union_ : 0.0;
  }
}

// The run length from which unshared positions are own content: one for all pairs, or one
// per pair.
struct Blocks {
  int64_t all = 0;
  const int64_t *each = nullptr;
  int64_t operator[](Py_ssize_t i) const { return each ? each[i] : all; }
};

template <typename M, typename O>
void FillOwn(const Side &mine, const Side &other, Py_ssize_t pairs, Blocks blocks, double *out) {
  ValueSet theirs;
  const M *values = mine.data<M>();
  const uint64_t mask = CompareMask(mine, other);
  int64_t held = -1;  // the other document in `theirs`, kept while the next pair has it too
  for (Py_ssize_t i = 0; i < pairs; ++i) {
    int64_t first = mine.begin(i), last = mine.end(i);
    if (last == first) {
      out[i] = 0.0;
      continue;
    }
    if (other.row(i) != held) {
      theirs.Fill(other.data<O>(), other.begin(i), other.end(i), mask);
      held = other.row(i);
    }
    const int64_t block = blocks[i];
    int64_t own = 0, run = 0;  // unshared positions in long runs; the current run
    for (int64_t k = first; k < last; ++k) {
      if (theirs.Contains(values[k] & mask)) {
        if (run >= block) own += run;
        run = 0;
      } else {
        ++run;
      }
    }
    if (run >= block) own += run;
    out[i] = static_cast<double>(own) / static_cast<double>(last - first);
  }
}

PyObject *Jaccard(PyObject *, PyObject *args) {
  PyObject *objs[6];
  if (!PyArg_ParseTuple(args, "OOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                        &objs[5])) {
    return nullptr;
  }
  return ForAllPairs(objs, "left", "right",
                     [](const Side &left, const Side &right, Py_ssize_t pairs, double *out) {
                       WithValueTypes(left, right, [&](auto l, auto r) {
                         FillJaccard<decltype(l), decltype(r)>(left, right, pairs, out);
                       });
                     });
}

// `block` (an int, or an array with one per pair of `pairs`) into `blocks`; each >= 1.
bool ParseBlocks(PyObject *block, Py_ssize_t pairs, Buffer &per_pair, Blocks &blocks) {
  if (PyLong_Check(block)) {
    blocks.all = PyLong_AsLongLong(block);
    if (blocks.all == -1 && PyErr_Occurred()) return false;
    if (blocks.all < 1) {
      PyErr_Format(PyExc_ValueError, "block: %lld; valid: >= 1", static_cast<long long>(blocks.all));
      return false;
    }
    return true;
  }
  if (!per_pair.Get(block, "block", "qlQL")) return false;
  if (per_pair.size() != pairs) {
    PyErr_Format(PyExc_ValueError, "block: %zd values for %zd pairs (need one per pair)",
                 per_pair.size(), pairs);
    return false;
  }
  blocks.each = per_pair.data<int64_t>();
  for (Py_ssize_t i = 0; i < pairs; ++i) {
    if (blocks.each[i] < 1) {
      PyErr_Format(PyExc_ValueError, "block: pair %zd has %lld; valid: >= 1", i,
                   static_cast<long long>(blocks.each[i]));
      return false;
    }
  }
  return true;
}

PyObject *Own(PyObject *, PyObject *args) {
  PyObject *objs[6];
  PyObject *block;
  if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                        &objs[5], &block)) {
    return nullptr;
  }
  Buffer rows, per_pair;  // the pair count (mine's rows), and the blocks' buffer if any
  if (!rows.Get(objs[2], "mine rows", "qlQL")) return nullptr;
  Blocks blocks;
  if (!ParseBlocks(block, rows.size(), per_pair, blocks)) return nullptr;
  return ForAllPairs(objs, "mine", "other",
                     [blocks](const Side &mine, const Side &other, Py_ssize_t pairs, double *out) {
                       WithValueTypes(mine, other, [&](auto m, auto o) {
                         FillOwn<decltype(m), decltype(o)>(mine, other, pairs, blocks, out);
                       });
                     });
}

PyMethodDef kMethods[] = {
    {"jaccard", Jaccard, METH_VARARGS,
     "jaccard(left, left_offsets, left_rows, right, right_offsets, right_rows) -> bytearray "
     "of float64 per pair"},
    {"own", Own, METH_VARARGS,
     "own(mine, mine_offsets, mine_rows, other, other_offsets, other_rows, block) -> "
     "bytearray of float64 per pair (block: an int, or one 8-byte integer per pair)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_verify",
                       "Exact verification of dedup candidate pairs (see _verify.cpp).", -1,
                       kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__verify(void) { return PyModule_Create(&kModule); }
