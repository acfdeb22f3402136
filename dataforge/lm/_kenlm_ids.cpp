// KenLM scoring of token ids, for dataforge.lm.score (built by `make kenlm-ids`).
//
// kenlm's Python module scores one space-separated string per call: KenLM splits it and
// hashes every word back to its vocabulary index. The perplexity op has the tokens as ids
// already, so it maps each tokenizer id to its KenLM index once per model (`index`) and
// scores a whole batch of lines from flat arrays (`score`), with the GIL released.
//
// Sums are accumulated exactly as kenlm's ScoreSentence does (a float, <s> context, one
// BaseScore per token, then </s>), so every line gets the value kenlm.Model.score gives
// its rendered string, to the bit.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

#include "lm/model.hh"
#include "lm/state.hh"
#include "lm/virtual_interface.hh"
#include "lm/vocab.hh"
#include "util/string_piece.hh"

namespace {

const char kCapsule[] = "dataforge.kenlm_ids.Model";

void FreeModel(PyObject *capsule) {
  delete static_cast<lm::base::Model *>(PyCapsule_GetPointer(capsule, kCapsule));
}

lm::base::Model *GetModel(PyObject *capsule) {
  return static_cast<lm::base::Model *>(PyCapsule_GetPointer(capsule, kCapsule));
}

// Vocabulary indexes are [0, bound): the two vocabulary types of KenLM's models.
uint32_t VocabBound(const lm::base::Vocabulary &vocab) {
  if (auto *probing = dynamic_cast<const lm::ngram::ProbingVocabulary *>(&vocab)) {
    return probing->Bound();
  }
  if (auto *sorted = dynamic_cast<const lm::ngram::SortedVocabulary *>(&vocab)) {
    return sorted->Bound();
  }
  return 0;
}

// A contiguous buffer of the given item size and format kind ('u'/'i' integer), released
// by the destructor.
class Buffer {
 public:
  Buffer() { view_.obj = nullptr; }
  ~Buffer() {
    if (view_.obj) PyBuffer_Release(&view_);
  }
  bool Get(PyObject *obj, const char *name, Py_ssize_t itemsize, const char *formats,
           bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &view_, flags) != 0) {
      view_.obj = nullptr;
      if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Format(PyExc_TypeError, "%s: need a 1-d contiguous%s array of %zd-byte items "
                     "(%s), got %s", name, writable ? " writable" : "", itemsize, formats,
                     Py_TYPE(obj)->tp_name);
      }
      return false;
    }
    const char *format = view_.format ? view_.format : "B";
    const char *format_text = format;
    if (*format == '<' || *format == '=' || *format == '@') ++format;
    bool format_ok = format[0] && !format[1] && std::string(formats).find(format[0]) !=
                                                    std::string::npos;
    if (view_.ndim != 1 || view_.itemsize != itemsize || !format_ok) {
      PyErr_Format(PyExc_TypeError, "%s: need a 1-d contiguous array of %zd-byte items (%s), got "
                   "format %s with %d dimensions", name, itemsize, formats, format_text, view_.ndim);
      return false;
    }
    return true;
  }
  Py_ssize_t size() const { return view_.shape ? view_.shape[0] : view_.len / view_.itemsize; }
  void *data() const { return view_.buf; }

 private:
  Py_buffer view_;
};

PyObject *Load(PyObject *, PyObject *args) {
  PyObject *path_obj;
  if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path_obj)) return nullptr;
  std::string path(PyBytes_AS_STRING(path_obj), PyBytes_GET_SIZE(path_obj));
  Py_DECREF(path_obj);
  lm::base::Model *model = nullptr;
  std::string error;
  Py_BEGIN_ALLOW_THREADS
  try {
    lm::ngram::Config config;  // load_method POPULATE_OR_READ, as kenlm.Model's default
    model = lm::ngram::LoadVirtual(path.c_str(), config);
  } catch (const std::exception &e) {
    error = e.what();
  }
  Py_END_ALLOW_THREADS
  if (!model) {
    for (char &c : error) {
      if (c == '\n') c = ' ';
    }
    PyErr_Format(PyExc_OSError, "cannot read KenLM model %s (%s)", path.c_str(), error.c_str());
    return nullptr;
  }
  if (VocabBound(model->BaseVocabulary()) == 0) {
    delete model;
    PyErr_Format(PyExc_OSError, "cannot read KenLM model %s (unknown vocabulary type)",
                 path.c_str());
    return nullptr;
  }
  PyObject *capsule = PyCapsule_New(model, kCapsule, FreeModel);
  if (!capsule) delete model;
  return capsule;
}

// index(model, words: list[str]) -> bytes of uint32 KenLM indexes (0, <unk>, for unknown)
PyObject *Index(PyObject *, PyObject *args) {
  PyObject *capsule, *words;
  if (!PyArg_ParseTuple(args, "OO!", &capsule, &PyList_Type, &words)) return nullptr;
  lm::base::Model *model = GetModel(capsule);
  if (!model) return nullptr;
  const lm::base::Vocabulary &vocab = model->BaseVocabulary();
  Py_ssize_t n = PyList_GET_SIZE(words);
  PyObject *out = PyBytes_FromStringAndSize(nullptr, n * sizeof(uint32_t));
  if (!out) return nullptr;
  uint32_t *indexes = reinterpret_cast<uint32_t *>(PyBytes_AS_STRING(out));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(words, i), &length);
    if (!utf8) {
      Py_DECREF(out);
      return nullptr;
    }
    indexes[i] = vocab.Index(StringPiece(utf8, length));
  }
  return out;
}

// score(model, indexes: uint32[n], offsets: int64[lines + 1], out: float64[lines]) -> None
PyObject *Score(PyObject *, PyObject *args) {
  PyObject *capsule, *ids_obj, *offsets_obj, *out_obj;
  if (!PyArg_ParseTuple(args, "OOOO", &capsule, &ids_obj, &offsets_obj, &out_obj)) return nullptr;
  lm::base::Model *model = GetModel(capsule);
  if (!model) return nullptr;
  Buffer ids, offsets, out;
  if (!ids.Get(ids_obj, "indexes", 4, "IL", false) ||
      !offsets.Get(offsets_obj, "offsets", 8, "qlQ", false) ||
      !out.Get(out_obj, "out", 8, "d", true)) {
    return nullptr;
  }
  Py_ssize_t lines = out.size();
  if (offsets.size() != lines + 1) {
    PyErr_Format(PyExc_ValueError, "offsets: need len(out) + 1 = %zd values, got %zd", lines + 1,
                 offsets.size());
    return nullptr;
  }
  const uint32_t *word = static_cast<const uint32_t *>(ids.data());
  const int64_t *offset = static_cast<const int64_t *>(offsets.data());
  double *result = static_cast<double *>(out.data());
  const Py_ssize_t num_ids = ids.size();
  const lm::base::Vocabulary &vocab = model->BaseVocabulary();
  const uint32_t bound = VocabBound(vocab);
  if (offset[0] != 0 || offset[lines] != num_ids) {
    PyErr_Format(PyExc_ValueError, "offsets: need 0 first and %zd (the indexes) last, got %lld "
                 "and %lld", num_ids, static_cast<long long>(offset[0]),
                 static_cast<long long>(offset[lines]));
    return nullptr;
  }
  for (Py_ssize_t line = 0; line < lines; ++line) {
    if (offset[line] > offset[line + 1]) {
      PyErr_Format(PyExc_ValueError, "offsets: decrease at line %zd", line);
      return nullptr;
    }
  }
  for (Py_ssize_t i = 0; i < num_ids; ++i) {
    if (word[i] >= bound) {  // KenLM reads tables at the index: never pass it one outside
      PyErr_Format(PyExc_ValueError, "indexes: %u at %zd is outside the vocabulary [0, %u)",
                   word[i], i, bound);
      return nullptr;
    }
  }
  const lm::WordIndex end = vocab.EndSentence();
  Py_BEGIN_ALLOW_THREADS
  lm::ngram::State states[2];
  for (Py_ssize_t line = 0; line < lines; ++line) {
    lm::ngram::State *state = &states[0], *next = &states[1];
    model->BeginSentenceWrite(state);
    float total = 0.0f;  // as kenlm's ScoreSentence: a float sum
    for (int64_t j = offset[line]; j < offset[line + 1]; ++j) {
      total += model->BaseScore(state, word[j], next);
      std::swap(state, next);
    }
    total += model->BaseScore(state, end, next);
    result[line] = total;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject *Bound(PyObject *, PyObject *capsule) {
  lm::base::Model *model = GetModel(capsule);
  if (!model) return nullptr;
  return PyLong_FromUnsignedLong(VocabBound(model->BaseVocabulary()));
}

PyMethodDef kMethods[] = {
    {"load", Load, METH_VARARGS, "load(path) -> model capsule (KenLM binary or ARPA)"},
    {"index", Index, METH_VARARGS, "index(model, words) -> bytes of uint32 vocabulary indexes"},
    {"score", Score, METH_VARARGS,
     "score(model, indexes uint32, offsets int64, out float64): log10 p of each line"},
    {"bound", Bound, METH_O, "bound(model) -> vocabulary size (indexes are below it)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_kenlm_ids",
                       "KenLM scoring of token ids (see dataforge.lm.native).", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__kenlm_ids(void) { return PyModule_Create(&kModule); }
