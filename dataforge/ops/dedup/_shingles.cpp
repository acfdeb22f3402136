// Shingle hashes of dataforge.ops.dedup.shingles in one pass each (built by
// `make dedup-verify`), the GIL released.
//
// The hash of a range v[s:e) of 64-bit values is the one the module's numpy code computes
// from prefix sums: mix64((sum_j v[s + j] * P^j) ^ ((e - s) * L)), every product and sum
// modulo 2^64, with P odd (invertible modulo 2^64). numpy needs the prefix sums, a table
// of P^i and P^-i per position and five temporary arrays per range set; here:
//
// * windows(values, offsets, n): per document d (values[offsets[d]:offsets[d + 1]], length
//   len), the hashes of its ranges of min(len, n) consecutive values starting at 0, 1, ...,
//   len - min(len, n) (none for an empty document): a rolling sum, h' = (h - v[s]) * P^-1
//   + v[s + m] * P^(m - 1), two multiplications per window whatever n is.
// * spans(values, starts, ends): the hash of each range [starts[i], ends[i]).
//
// Both return a bytearray of uint64 in that order; the values are identical to numpy's.

#include "_buffer.h"

namespace {

constexpr uint64_t kP = 0x9E3779B97F4A7C15ull;  // odd: its own | 1
constexpr uint64_t kLength = 0xD6E8FEB86659FD93ull;

constexpr uint64_t Inverse(uint64_t p) {  // Newton's iteration modulo 2^64 (p odd)
  uint64_t x = p;
  for (int i = 0; i < 6; ++i) x *= 2 - p * x;
  return x;
}
constexpr uint64_t kPInverse = Inverse(kP);
static_assert(kP * kPInverse == 1, "P must be odd");

inline uint64_t Mix(uint64_t x) {  // splitmix64's finalizer, as mix64 in shingles.py
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

inline uint64_t Finish(uint64_t sum, int64_t length) {
  return Mix(sum ^ (static_cast<uint64_t>(length) * kLength));
}

// sum_j v[first + j] * P^j over [first, last); `top` receives P^(last - first - 1).
inline uint64_t Sum(const uint64_t *v, int64_t first, int64_t last, uint64_t *top) {
  uint64_t sum = 0, power = 1;
  *top = 1;
  for (int64_t k = first; k < last; ++k) {
    sum += v[k] * power;
    *top = power;
    power *= kP;
  }
  return sum;
}

// A bytearray of n uint64 values, filled by fill(out) with the GIL released.
template <typename Fill>
PyObject *Hashes(Py_ssize_t n, Fill fill) {
  PyObject *result = PyByteArray_FromStringAndSize(nullptr, n * static_cast<Py_ssize_t>(8));
  if (result == nullptr) return nullptr;
  uint64_t *out = reinterpret_cast<uint64_t *>(PyByteArray_AS_STRING(result));
  Py_BEGIN_ALLOW_THREADS
  fill(out);
  Py_END_ALLOW_THREADS
  return result;
}

PyObject *Windows(PyObject *, PyObject *args) {
  PyObject *values_obj, *offsets_obj;
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "OOn", &values_obj, &offsets_obj, &n)) return nullptr;
  if (n < 1) {
    PyErr_Format(PyExc_ValueError, "n: %zd; valid: >= 1", n);
    return nullptr;
  }
  Buffer values, offsets;
  if (!values.Get(values_obj, "values", "QqLl") || !offsets.Get(offsets_obj, "offsets", "qlQL") ||
      !CheckOffsets(offsets, "offsets", values.size())) {
    return nullptr;
  }
  const int64_t *off = offsets.data<int64_t>();
  Py_ssize_t docs = offsets.size() - 1, total = 0;
  for (Py_ssize_t d = 0; d < docs; ++d) {
    int64_t length = off[d + 1] - off[d];
    if (length > 0) total += length > n ? length - n + 1 : 1;
  }
  const uint64_t *v = values.data<uint64_t>();
  return Hashes(total, [&](uint64_t *out) {
    for (Py_ssize_t d = 0; d < docs; ++d) {
      int64_t first = off[d], length = off[d + 1] - first;
      if (length == 0) continue;
      int64_t m = length < n ? length : n;
      uint64_t top;  // P^(m - 1)
      uint64_t sum = Sum(v, first, first + m, &top);
      for (int64_t s = first;; ++s) {
        *out++ = Finish(sum, m);
        if (s + m >= first + length) break;
        sum = (sum - v[s]) * kPInverse + v[s + m] * top;
      }
    }
  });
}

PyObject *Spans(PyObject *, PyObject *args) {
  PyObject *values_obj, *starts_obj, *ends_obj;
  if (!PyArg_ParseTuple(args, "OOO", &values_obj, &starts_obj, &ends_obj)) return nullptr;
  Buffer values, starts, ends;
  if (!values.Get(values_obj, "values", "QqLl") || !starts.Get(starts_obj, "starts", "qlQL") ||
      !ends.Get(ends_obj, "ends", "qlQL")) {
    return nullptr;
  }
  Py_ssize_t count = starts.size(), size = values.size();
  if (ends.size() != count) {
    PyErr_Format(PyExc_ValueError, "starts: %zd ranges, ends: %zd (need as many)", count,
                 ends.size());
    return nullptr;
  }
  const int64_t *s = starts.data<int64_t>(), *e = ends.data<int64_t>();
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (s[i] < 0 || s[i] > e[i] || e[i] > size) {
      PyErr_Format(PyExc_ValueError, "range %zd: [%lld, %lld) is not within the %zd values", i,
                   static_cast<long long>(s[i]), static_cast<long long>(e[i]), size);
      return nullptr;
    }
  }
  const uint64_t *v = values.data<uint64_t>();
  return Hashes(count, [&](uint64_t *out) {
    uint64_t top;
    for (Py_ssize_t i = 0; i < count; ++i) out[i] = Finish(Sum(v, s[i], e[i], &top), e[i] - s[i]);
  });
}

PyMethodDef kMethods[] = {
    {"windows", Windows, METH_VARARGS,
     "windows(values, offsets, n) -> bytearray of uint64: the hashes of each document's "
     "ranges of min(length, n) values"},
    {"spans", Spans, METH_VARARGS,
     "spans(values, starts, ends) -> bytearray of uint64: the hash of each range"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_shingles",
                       "Shingle hashes of dedup (see _shingles.cpp).", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__shingles(void) { return PyModule_Create(&kModule); }
