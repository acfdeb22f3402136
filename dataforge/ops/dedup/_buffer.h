// Shared by dataforge/ops/dedup's compiled kernels (_verify.cpp, _shingles.cpp): a 1-d
// buffer of 8-byte integers taken from a Python object, and a check of document offsets.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>

namespace {

// A 1-d contiguous buffer of 8-byte integers, released by the destructor.
class Buffer {
 public:
  Buffer() { view_.obj = nullptr; }
  ~Buffer() {
    if (view_.obj) PyBuffer_Release(&view_);
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  // `formats`: the struct codes accepted; `four_too`: 4-byte items as well as 8-byte ones.
  bool Get(PyObject *obj, const char *name, const char *formats, bool four_too = false) {
    const char *sizes = four_too ? "4- or 8-byte" : "8-byte";
    if (PyObject_GetBuffer(obj, &view_, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      view_.obj = nullptr;
      if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Format(PyExc_TypeError, "%s: need a 1-d contiguous array of %s integers "
                     "(%s), got %s", name, sizes, formats, Py_TYPE(obj)->tp_name);
      }
      return false;
    }
    const char *format = view_.format ? view_.format : "B";
    if (*format == '<' || *format == '=' || *format == '@') ++format;
    bool format_ok = format[0] && !format[1] && std::strchr(formats, format[0]) != nullptr;
    bool size_ok = view_.itemsize == 8 || (four_too && view_.itemsize == 4);
    if (view_.ndim != 1 || !size_ok || !format_ok) {
      PyErr_Format(PyExc_TypeError, "%s: need a 1-d contiguous array of %s integers (%s)",
                   name, sizes, formats);
      return false;
    }
    return true;
  }
  Py_ssize_t itemsize() const { return view_.itemsize; }
  Py_ssize_t size() const { return view_.shape ? view_.shape[0] : view_.len / view_.itemsize; }
  template <typename T>
  const T *data() const { return static_cast<const T *>(view_.buf); }

 private:
  Py_buffer view_;
};

// Offsets of documents into `values` items: non-decreasing from 0..values, at least one.
bool CheckOffsets(const Buffer &offsets, const char *name, Py_ssize_t values) {
  const int64_t *at = offsets.data<int64_t>();
  Py_ssize_t n = offsets.size();
  if (n < 1) {
    PyErr_Format(PyExc_ValueError, "%s: empty (need documents + 1 offsets)", name);
    return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (at[i] < 0 || at[i] > values || (i > 0 && at[i] < at[i - 1])) {
      PyErr_Format(PyExc_ValueError, "%s: offset %zd out of order or past the %zd values",
                   name, i, values);
      return false;
    }
  }
  return true;
}

}  // namespace
