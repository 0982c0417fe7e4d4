/* protocol/_fastwire.c - runs the message decoders and encoders of protocol/_codegen.py
 * compiled.
 *
 * Owns no wire format. protocol/_codegen.py reads each message's JSON definition once and
 * makes two things from it: the Python decoder and encoder source (the reference, and
 * what the tests compare against) and a *plan* for each, nested tuples naming each
 * field's kind in wire order (_codegen.decode_plan, encode_plan). This module walks a
 * plan over the bytes and builds the same objects the Python decoder builds, with the
 * same values: a generated struct made with object.__new__, its present fields in order,
 * the fields absent from the version set to their defaults, then ``_unknown_tags`` and
 * the tagged fields of a flexible version; or walks an object and writes the bytes (and
 * chunks) the Python encoder writes (layout of the encoding plan further down).
 *
 * It also makes each generated class's ``_new`` (struct_new, StructNew below): the hot
 * handlers' way to make an answer, taking what the generated Python ``_new`` takes.
 *
 * Errors: it never reports one itself. On anything it does not accept (a truncated field,
 * a length past the end, invalid UTF-8, a varint over 5 bytes, a negative length where
 * null is not allowed; an object the Python encoder would refuse or write in a way not
 * planned here) it discards what it built and calls the plan's Python function on the
 * same input, which returns the same result or raises the error with its message.
 * ``fallbacks()`` counts those calls (the tests check that valid input never needs one);
 * built with -DFASTWIRE_TRACE, each one is also printed to stderr with its message class.
 *
 * Plan of a struct: (class, fields, defaults, flexible, tagged, unknown_tags)
 *   fields:   ops in wire order
 *   defaults: ((attr, mode, value), ...) mode 0: value as is, 1: a new empty list,
 *             2: value() (a default struct instance)
 *   tagged:   {tag: op} or None
 *   unknown_tags: the class's attribute for ``_unknown_tags``
 * An attribute ("attr") is the class's member descriptor of that __slots__ field, which
 * set_field writes through directly (or a name, set with setattr).
 * Op: (kind, attr, a, b, c)
 *   K_FIXED (attr: tuple of attributes, a: struct format chars of consecutive fixed
 *            fields, b: their size in bytes)
 *   K_STRING / K_BYTES / K_RECORDS (a: compact length, b: nullable)
 *   K_UUID
 *   K_STRUCT (a: nullable (int8 marker), b: struct plan)
 *   K_ARRAY_STRUCT (a: compact, b: nullable, c: struct plan)
 *   K_ARRAY_FIXED (a: compact, b: nullable, c: format char)
 *   K_ARRAY_SCALAR (a: compact, b: nullable, c: element kind, K_STRING/K_BYTES/K_RECORDS/K_UUID)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include "_pyint.h"
#include "_mvslice.h"

enum { K_FIXED = 0, K_STRING, K_BYTES, K_RECORDS, K_UUID, K_STRUCT, K_ARRAY_STRUCT, K_ARRAY_FIXED, K_ARRAY_SCALAR };

static PyObject *uuid_cls;      /* uuid.UUID */
static PyObject *str_bytes;     /* "bytes" */
static PyObject *str_int;       /* "int" */
/* the uuid.UUID of each 16 bytes decoded lately (a UUID is immutable, so one object
 * serves every request naming that topic id): uuid.UUID(bytes=...) runs Python code,
 * about 2 us a Fetch v13+ request; emptied when it reaches UUID_CACHE_MAX entries */
static PyObject *uuid_cache;
#define UUID_CACHE_MAX 4096
static PyObject *empty_tuple;
static Py_ssize_t fallback_count;
/* the str of each short ASCII string decoded lately, by a hash of its bytes: topic
 * names, client ids and group ids come again in every request, and decoding one anew
 * (PyUnicode_DecodeUTF8) costs about 450 instructions, its hash again when it is looked
 * up; a str is immutable, so one object serves every request that names it. A slot
 * holds the last string that hashed to it; bytes that match it exactly give it back. */
#define STR_CACHE_SLOTS 512
#define STR_CACHE_MAX_LEN 128
static PyObject *str_cache[STR_CACHE_SLOTS];

typedef struct {
    PyObject *obj;          /* the buffer object (memoryview or bytes): records are sliced from it */
    const unsigned char *p;
    Py_ssize_t end;
} In;

/* every helper returns 0 on success, -1 on failure (with or without a Python error set:
 * the caller falls back either way) */

static int read_uvarint(const In *in, Py_ssize_t *pos, uint64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= in->end) return -1;
        unsigned char b = in->p[(*pos)++];
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (shift > 28) return -1;
    }
    *out = value;
    return 0;
}

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t be64(const unsigned char *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

static Py_ssize_t fixed_size(char c) {
    switch (c) {
    case '?': case 'b': return 1;
    case 'h': case 'H': return 2;
    case 'i': case 'I': return 4;
    case 'q': case 'd': return 8;
    }
    return -1;
}

/* the value of one fixed-width field at p, as struct.unpack gives it */
static PyObject *fixed_value(char c, const unsigned char *p) {
    switch (c) {
    case '?': return PyBool_FromLong(p[0] != 0);
    case 'b': return PyLong_FromLong((int8_t)p[0]);
    case 'h': return PyLong_FromLong((int16_t)be16(p));
    case 'H': return PyLong_FromLong(be16(p));
    case 'i': return PyLong_FromLong((int32_t)be32(p));
    case 'I': return PyLong_FromUnsignedLong(be32(p));
    case 'q': return PyLong_FromLongLong((int64_t)be64(p));
    case 'd': {
        uint64_t u = be64(p);
        double d;
        memcpy(&d, &u, sizeof d);
        return PyFloat_FromDouble(d);
    }
    }
    return NULL;
}

/* a length: compact (uvarint - 1), else int16 (strings) or int32 */
static int read_len(const In *in, Py_ssize_t *pos, int compact, int wide, int64_t *n) {
    if (compact) {
        uint64_t u;
        if (read_uvarint(in, pos, &u) < 0) return -1;
        *n = (int64_t)u - 1;
    } else if (wide) {
        if (in->end - *pos < 4) return -1;
        *n = (int32_t)be32(in->p + *pos);
        *pos += 4;
    } else {
        if (in->end - *pos < 2) return -1;
        *n = (int16_t)be16(in->p + *pos);
        *pos += 2;
    }
    return 0;
}

static PyObject *decode_struct(PyObject *plan, const In *in, Py_ssize_t *pos);

/* the str of n bytes of UTF-8 at s (new reference), NULL on failure: from the cache
 * when those bytes are the slot's string's */
static PyObject *decode_str(const char *s, Py_ssize_t n) {
    if (n > STR_CACHE_MAX_LEN) return PyUnicode_DecodeUTF8(s, n, NULL);
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    PyObject **slot = &str_cache[(h ^ (h >> 16)) & (STR_CACHE_SLOTS - 1)];
    PyObject *c = *slot;
    if (c != NULL && PyUnicode_GET_LENGTH(c) == n && memcmp(PyUnicode_DATA(c), s, (size_t)n) == 0)
        return Py_NewRef(c);  /* a cached str is compact ASCII: its data are its bytes */
    PyObject *v = PyUnicode_DecodeUTF8(s, n, NULL);
    if (v != NULL && PyUnicode_IS_COMPACT_ASCII(v)) Py_XSETREF(*slot, Py_NewRef(v));
    return v;
}

/* a string, bytes, records or uuid value (new reference), NULL on failure */
static PyObject *decode_scalar(int kind, int compact, int nullable, const In *in, Py_ssize_t *pos) {
    if (kind == K_UUID) {
        if (in->end - *pos < 16) return NULL;
        PyObject *b = PyBytes_FromStringAndSize((const char *)in->p + *pos, 16);
        if (b == NULL) return NULL;
        PyObject *u = PyDict_GetItemWithError(uuid_cache, b);
        if (u != NULL) {
            Py_INCREF(u);
            Py_DECREF(b);
            *pos += 16;
            return u;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(b);
            return NULL;
        }
        PyObject *kw = PyDict_New();
        if (kw == NULL || PyDict_SetItem(kw, str_bytes, b) < 0) {
            Py_XDECREF(kw);
            Py_DECREF(b);
            return NULL;
        }
        u = PyObject_Call(uuid_cls, empty_tuple, kw);
        Py_DECREF(kw);
        if (u != NULL) {
            if (PyDict_GET_SIZE(uuid_cache) >= UUID_CACHE_MAX) PyDict_Clear(uuid_cache);
            if (PyDict_SetItem(uuid_cache, b, u) < 0) {
                Py_DECREF(u);
                u = NULL;
            } else {
                *pos += 16;
            }
        }
        Py_DECREF(b);
        return u;
    }
    int64_t n;
    if (read_len(in, pos, compact, kind != K_STRING, &n) < 0) return NULL;
    if (n < 0) {
        if (!nullable || n != -1) return NULL;
        Py_RETURN_NONE;
    }
    if (n > in->end - *pos) return NULL;
    PyObject *v;
    const char *s = (const char *)in->p + *pos;
    if (kind == K_STRING) {
        v = decode_str(s, (Py_ssize_t)n);
    } else if (kind == K_BYTES) {
        v = PyBytes_FromStringAndSize(s, (Py_ssize_t)n);
    } else {  /* records: a slice of the input object itself, as buf[pos:pos + n] */
        v = mv_slice(in->obj, *pos, *pos + (Py_ssize_t)n);
    }
    if (v != NULL) *pos += (Py_ssize_t)n;
    return v;
}

/* obj.<attr> = v, stealing v. ``attr`` is the class's member descriptor of a __slots__
 * field (what the plan holds): the slot is written directly, as the descriptor's
 * __set__ would; anything else goes through setattr with the descriptor's name. */
static int set_field(PyObject *obj, PyObject *attr, PyObject *v) {
    if (Py_IS_TYPE(attr, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)attr)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY) &&
            PyObject_TypeCheck(obj, PyDescr_TYPE(attr))) {
            PyObject **slot = (PyObject **)((char *)obj + m->offset);
            Py_XSETREF(*slot, v);
            return 0;
        }
        attr = PyDescr_NAME(attr);
    }
    int r = PyObject_SetAttr(obj, attr, v);
    Py_DECREF(v);
    return r;
}

static inline long op_int(PyObject *op, Py_ssize_t i) { return (long)pyint_as_ll(PyTuple_GET_ITEM(op, i)); }

/* one op's value (new reference); for K_FIXED use decode_fixed instead */
static PyObject *decode_value(PyObject *op, const In *in, Py_ssize_t *pos) {
    long kind = op_int(op, 0);
    switch (kind) {
    case K_STRING: case K_BYTES: case K_RECORDS: case K_UUID:
        return decode_scalar((int)kind, (int)op_int(op, 2), (int)op_int(op, 3), in, pos);
    case K_STRUCT: {
        if (op_int(op, 2)) {  /* nullable: an int8 marker, negative for null */
            if (*pos >= in->end) return NULL;
            int8_t m = (int8_t)in->p[(*pos)++];
            if (m < 0) Py_RETURN_NONE;
        }
        return decode_struct(PyTuple_GET_ITEM(op, 3), in, pos);
    }
    case K_ARRAY_STRUCT: case K_ARRAY_FIXED: case K_ARRAY_SCALAR: {
        int64_t n;
        if (read_len(in, pos, (int)op_int(op, 2), 1, &n) < 0) return NULL;
        if (n < 0) {
            if (!op_int(op, 3) || n != -1) return NULL;
            Py_RETURN_NONE;
        }
        if (n > in->end - *pos) return NULL;
        /* sized up front only for fixed-width elements, whose bytes are checked first; a
         * count of structs or strings is only bounded by the bytes left, so that list
         * grows as its elements decode (a forged count fails at the end of the input
         * without a list of that size ever made) */
        PyObject *list = PyList_New(kind == K_ARRAY_FIXED ? (Py_ssize_t)n : 0);
        if (list == NULL) return NULL;
        PyObject *arg = PyTuple_GET_ITEM(op, 4);
        char fc = 0;
        Py_ssize_t fsize = 0;
        long ekind = 0;
        if (kind == K_ARRAY_FIXED) {
            const char *f = PyUnicode_AsUTF8(arg);
            if (f == NULL) goto fail;
            fc = f[0];
            fsize = fixed_size(fc);
            if (fsize < 0 || fsize * n > in->end - *pos) goto fail;
        } else if (kind == K_ARRAY_SCALAR) {
            ekind = (long)pyint_as_ll(arg);
        }
        for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
            PyObject *e;
            if (kind == K_ARRAY_STRUCT) {
                e = decode_struct(arg, in, pos);
            } else if (kind == K_ARRAY_FIXED) {
                e = fixed_value(fc, in->p + *pos);
                *pos += fsize;
            } else {
                e = decode_scalar((int)ekind, (int)op_int(op, 2), 0, in, pos);
            }
            if (e == NULL) goto fail;
            if (kind == K_ARRAY_FIXED) {
                PyList_SET_ITEM(list, i, e);
            } else {
                int r = PyList_Append(list, e);
                Py_DECREF(e);
                if (r < 0) goto fail;
            }
        }
        return list;
    fail:
        Py_DECREF(list);
        return NULL;
    }
    }
    return NULL;
}

/* consecutive fixed-width fields (one struct.unpack_from in the Python decoder) */
static int decode_fixed(PyObject *obj, PyObject *op, const In *in, Py_ssize_t *pos) {
    PyObject *names = PyTuple_GET_ITEM(op, 1);
    const char *fmt = PyUnicode_AsUTF8(PyTuple_GET_ITEM(op, 2));
    if (fmt == NULL) return -1;
    if (in->end - *pos < op_int(op, 3)) return -1;  /* the run's size, from the plan */
    Py_ssize_t at = *pos;
    for (Py_ssize_t i = 0; fmt[i]; i++) {
        PyObject *v = fixed_value(fmt[i], in->p + at);
        if (v == NULL || set_field(obj, PyTuple_GET_ITEM(names, i), v) < 0) return -1;
        at += fixed_size(fmt[i]);
    }
    *pos = at;
    return 0;
}

static int decode_op_into(PyObject *obj, PyObject *op, const In *in, Py_ssize_t *pos) {
    if (op_int(op, 0) == K_FIXED) return decode_fixed(obj, op, in, pos);
    PyObject *v = decode_value(op, in, pos);
    if (v == NULL) return -1;
    return set_field(obj, PyTuple_GET_ITEM(op, 1), v);
}

static int set_defaults(PyObject *obj, PyObject *defaults) {
    Py_ssize_t nd = PyTuple_GET_SIZE(defaults);
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *d = PyTuple_GET_ITEM(defaults, i);
        long mode = PyLong_AsLong(PyTuple_GET_ITEM(d, 1));
        PyObject *v;
        if (mode == 0) {
            v = Py_NewRef(PyTuple_GET_ITEM(d, 2));
        } else if (mode == 1) {
            v = PyList_New(0);
        } else {
            v = PyObject_CallNoArgs(PyTuple_GET_ITEM(d, 2));
        }
        if (v == NULL || set_field(obj, PyTuple_GET_ITEM(d, 0), v) < 0) return -1;
    }
    return 0;
}

static int decode_tags(PyObject *obj, PyObject *tagged, PyObject *unknown_attr, const In *in, Py_ssize_t *pos) {
    uint64_t nt;
    if (read_uvarint(in, pos, &nt) < 0) return -1;
    if (nt == 0) return 0;
    if ((int64_t)nt > in->end - *pos) return -1;
    PyObject *unknown = NULL;
    for (uint64_t k = 0; k < nt; k++) {
        uint64_t tag, size;
        if (read_uvarint(in, pos, &tag) < 0 || read_uvarint(in, pos, &size) < 0) goto fail;
        if ((int64_t)size > in->end - *pos) goto fail;
        Py_ssize_t tend = *pos + (Py_ssize_t)size;
        PyObject *op = NULL;
        if (tagged != Py_None) {
            PyObject *key = PyLong_FromUnsignedLongLong(tag);
            if (key == NULL) goto fail;
            op = PyDict_GetItemWithError(tagged, key);
            Py_DECREF(key);
            if (op == NULL && PyErr_Occurred()) goto fail;
        }
        if (op != NULL) {
            if (decode_op_into(obj, op, in, pos) < 0 || *pos > tend) goto fail;
        } else {
            if (unknown == NULL) {
                unknown = PyDict_New();
                if (unknown == NULL || set_field(obj, unknown_attr, Py_NewRef(unknown)) < 0) goto fail;
            }
            PyObject *key = PyLong_FromUnsignedLongLong(tag);
            PyObject *val = PyBytes_FromStringAndSize((const char *)in->p + *pos, (Py_ssize_t)size);
            int r = (key == NULL || val == NULL) ? -1 : PyDict_SetItem(unknown, key, val);
            Py_XDECREF(key);
            Py_XDECREF(val);
            if (r < 0) goto fail;
        }
        *pos = tend;
    }
    Py_XDECREF(unknown);
    return 0;
fail:
    Py_XDECREF(unknown);
    return -1;
}

static PyObject *decode_struct(PyObject *plan, const In *in, Py_ssize_t *pos) {
    PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(plan, 0);
    PyObject *obj = PyBaseObject_Type.tp_new(cls, empty_tuple, NULL);
    if (obj == NULL) return NULL;
    PyObject *fields = PyTuple_GET_ITEM(plan, 1);
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (decode_op_into(obj, PyTuple_GET_ITEM(fields, i), in, pos) < 0) goto fail;
    }
    if (set_defaults(obj, PyTuple_GET_ITEM(plan, 2)) < 0) goto fail;
    PyObject *unknown_attr = PyTuple_GET_ITEM(plan, 5);
    if (set_field(obj, unknown_attr, Py_NewRef(Py_None)) < 0) goto fail;
    if (PyTuple_GET_ITEM(plan, 3) == Py_True) {
        if (decode_tags(obj, PyTuple_GET_ITEM(plan, 4), unknown_attr, in, pos) < 0) goto fail;
    }
    return obj;
fail:
    Py_DECREF(obj);
    return NULL;
}

/* decode(plan, fallback, buf, pos) -> (obj, end) */
static PyObject *fw_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "decode(plan, fallback, buf, pos)");
        return NULL;
    }
    PyObject *plan = args[0], *fallback = args[1], *buf = args[2];
    Py_ssize_t pos = PyLong_AsSsize_t(args[3]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    PyObject *result = NULL;
    Py_buffer view;
    if (PyTuple_Check(plan) && pos >= 0 && PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) == 0) {
        In in = {buf, (const unsigned char *)view.buf, view.len};
        Py_ssize_t at = pos;
        PyObject *obj = decode_struct(plan, &in, &at);
        PyBuffer_Release(&view);
        if (obj != NULL) {
            PyObject *end = PyLong_FromSsize_t(at);
            result = end == NULL ? NULL : PyTuple_Pack(2, obj, end);
            Py_DECREF(obj);
            Py_XDECREF(end);
            if (result != NULL) return result;
        }
    }
#ifdef FASTWIRE_TRACE
    PyErr_Print();
    fprintf(stderr, "FASTWIRE decode fallback %s\n", ((PyTypeObject *)PyTuple_GET_ITEM(plan, 0))->tp_name);
#endif
    PyErr_Clear();
    fallback_count++;
    return PyObject_CallFunctionObjArgs(fallback, buf, args[3], NULL);
}


/* ====================================================================================
 * Encoding. Plan of a struct: (fields, flexible, tagged, unknown_tags)
 *   fields: ops in wire order, as for decoding (nested plans are encoding plans).
 *           Records outside tagged fields that are not bytes-like or longer than
 *           inline_max get a chunk of their own, as the generated encoder gives them.
 *   tagged: ((tag, op, mode, value), ...) by tag; the field is written when
 *           mode 0: it is not None, 1: it is true (a non-empty list), 2: it != value,
 *           3: it is a struct that is not None and not a default one, value being the
 *           test (unknown_tags attr, ((attr, D_EQUAL / D_NONE / D_EMPTY / D_STRUCT, value), ...))
 *           of _codegen._EncPlanGen.default_test
 * encode(plan, fallback, inline_max, obj, out, chunks) -> out, as the generated encoder.
 */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *np = PyMem_Realloc(b->p, (size_t)cap);
    if (np == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *data, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_byte(Buf *b, unsigned char c) { return buf_put(b, &c, 1); }

static int buf_uvarint(Buf *b, uint64_t v) {
    if (v > 0xFFFFFFFFu) return -1;
    unsigned char tmp[5];
    int n = 0;
    while (v > 0x7F) {
        tmp[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    tmp[n++] = (unsigned char)v;
    return buf_put(b, tmp, n);
}

static int put_be(Buf *b, uint64_t v, int size) {
    unsigned char tmp[8];
    for (int i = size - 1; i >= 0; i--) {
        tmp[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
    return buf_put(b, tmp, size);
}

/* a length: compact (n + 1) or int16/int32 */
static int put_len(Buf *b, Py_ssize_t n, int compact, int wide) {
    if (compact) return buf_uvarint(b, (uint64_t)n + 1);
    if (wide) return n > INT32_MAX ? -1 : put_be(b, (uint32_t)(int32_t)n, 4);
    return n > INT16_MAX ? -1 : put_be(b, (uint16_t)(int16_t)n, 2);
}

static int put_null(Buf *b, int compact, int wide) {
    if (compact) return buf_byte(b, 0);
    return wide ? put_be(b, 0xFFFFFFFFu, 4) : put_be(b, 0xFFFF, 2);
}

/* obj.<attr> (new reference), NULL when unset */
static PyObject *get_field(PyObject *obj, PyObject *attr) {
    if (Py_IS_TYPE(attr, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)attr)->d_member;
        if (m->type == T_OBJECT_EX && PyObject_TypeCheck(obj, PyDescr_TYPE(attr))) {
            PyObject *v = *(PyObject **)((char *)obj + m->offset);
            if (v == NULL) return NULL;
            return Py_NewRef(v);
        }
        attr = PyDescr_NAME(attr);
    }
    return PyObject_GetAttr(obj, attr);
}

/* one fixed-width value as struct.pack packs it (ranges checked, ints by __index__) */
static int put_fixed(Buf *b, char c, PyObject *v) {
    if (c == '?') {
        int t = PyObject_IsTrue(v);
        return t < 0 ? -1 : buf_byte(b, (unsigned char)t);
    }
    if (c == 'd') {
        if (!PyFloat_Check(v) && !PyLong_Check(v)) return -1;
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        uint64_t u;
        memcpy(&u, &d, sizeof u);
        return put_be(b, u, 8);
    }
    if (!PyLong_Check(v)) return -1;  /* struct.pack takes no floats for integer codes */
    if (c == 'I' || c == 'H') {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        if (c == 'H') return u > 0xFFFF ? -1 : put_be(b, u, 2);
        return u > 0xFFFFFFFFull ? -1 : put_be(b, u, 4);
    }
    long long x = pyint_as_ll(v);  /* out of 64 bits: OverflowError, and the fallback */
    if (x == -1 && PyErr_Occurred()) return -1;
    switch (c) {
    case 'b': return (x < INT8_MIN || x > INT8_MAX) ? -1 : put_be(b, (uint8_t)(int8_t)x, 1);
    case 'h': return (x < INT16_MIN || x > INT16_MAX) ? -1 : put_be(b, (uint16_t)(int16_t)x, 2);
    case 'i': return (x < INT32_MIN || x > INT32_MAX) ? -1 : put_be(b, (uint32_t)(int32_t)x, 4);
    case 'q': return put_be(b, (uint64_t)x, 8);
    }
    return -1;
}

typedef struct {
    Buf buf;           /* bytes not yet handed to ``out`` */
    PyObject *out;     /* the current output bytearray (borrowed from the caller or owned) */
    PyObject *chunks;  /* the caller's chunk list */
    Py_ssize_t inline_max;
    int own_out;
} Enc;

/* move the pending bytes into ``out`` */
static int enc_flush(Enc *e) {
    if (e->buf.len == 0) return 0;
    Py_ssize_t n = PyByteArray_GET_SIZE(e->out);
    if (PyByteArray_Resize(e->out, n + e->buf.len) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(e->out) + n, e->buf.p, (size_t)e->buf.len);
    e->buf.len = 0;
    return 0;
}

static int encode_struct_into(PyObject *plan, PyObject *obj, Enc *e, Buf *b);

/* string, bytes, records, uuid; ``e`` only for records that may become their own chunk */
static int put_scalar(long kind, int compact, int nullable, PyObject *v, Buf *b, Enc *e) {
    if (kind == K_UUID) {
        if (Py_TYPE(v) == (PyTypeObject *)uuid_cls) {
            /* its 128-bit int, written big-endian: what UUID.bytes (a Python property)
             * returns, without running Python code */
            PyObject *n = PyObject_GetAttr(v, str_int);
            if (n == NULL || !PyLong_CheckExact(n)) {
                Py_XDECREF(n);
                return -1;
            }
            unsigned char raw[16];
#if PY_VERSION_HEX >= 0x030D0000
            int bad = _PyLong_AsByteArray((PyLongObject *)n, raw, 16, 0, 0, 1);
#else
            int bad = _PyLong_AsByteArray((PyLongObject *)n, raw, 16, 0, 0);
#endif
            Py_DECREF(n);
            if (bad < 0) return -1;
            return buf_put(b, (const char *)raw, 16);
        }
        PyObject *raw = PyObject_GetAttr(v, str_bytes);
        if (raw == NULL || !PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) != 16) {
            Py_XDECREF(raw);
            return -1;
        }
        int r = buf_put(b, PyBytes_AS_STRING(raw), 16);
        Py_DECREF(raw);
        return r;
    }
    int wide = kind != K_STRING;
    if (v == Py_None) return nullable ? put_null(b, compact, wide) : -1;
    if (kind == K_STRING) {
        if (!PyUnicode_Check(v)) return -1;
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s == NULL || put_len(b, n, compact, 0) < 0) return -1;
        return buf_put(b, s, n);
    }
    if (kind == K_RECORDS && e != NULL) {
        int byteslike = PyBytes_Check(v) || PyByteArray_Check(v) || PyMemoryView_Check(v);
        Py_ssize_t n = PyObject_Length(v);
        if (n < 0 || put_len(b, n, compact, 1) < 0) return -1;
        if (!byteslike || n > e->inline_max) {  /* a chunk of its own, sent as it is */
            if (enc_flush(e) < 0 || PyList_Append(e->chunks, e->out) < 0 || PyList_Append(e->chunks, v) < 0)
                return -1;
            PyObject *fresh = PyByteArray_FromStringAndSize(NULL, 0);
            if (fresh == NULL) return -1;
            if (e->own_out) Py_DECREF(e->out);
            e->out = fresh;
            e->own_out = 1;
            return 0;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0) return -1;
    int r = (kind == K_RECORDS && e != NULL) ? 0 : put_len(b, view.len, compact, 1);
    if (r == 0) r = buf_put(b, view.buf, view.len);
    PyBuffer_Release(&view);
    return r;
}

/* one op's field of obj (``e`` NULL inside a tagged field) */
static int put_op(PyObject *op, PyObject *obj, Buf *b, Enc *e) {
    long kind = op_int(op, 0);
    if (kind == K_FIXED) {
        PyObject *names = PyTuple_GET_ITEM(op, 1);
        const char *fmt = PyUnicode_AsUTF8(PyTuple_GET_ITEM(op, 2));
        if (fmt == NULL) return -1;
        for (Py_ssize_t i = 0; fmt[i]; i++) {
            PyObject *v = get_field(obj, PyTuple_GET_ITEM(names, i));
            if (v == NULL) return -1;
            int r = put_fixed(b, fmt[i], v);
            Py_DECREF(v);
            if (r < 0) return -1;
        }
        return 0;
    }
    PyObject *v = get_field(obj, PyTuple_GET_ITEM(op, 1));
    if (v == NULL) return -1;
    int r = -1;
    switch (kind) {
    case K_STRING: case K_BYTES: case K_RECORDS: case K_UUID:
        r = put_scalar(kind, (int)op_int(op, 2), (int)op_int(op, 3), v, b, e);
        break;
    case K_STRUCT:
        if (v == Py_None) {
            r = op_int(op, 2) ? buf_byte(b, 0xFF) : -1;
        } else {
            r = op_int(op, 2) ? buf_byte(b, 0x01) : 0;
            if (r == 0) r = encode_struct_into(PyTuple_GET_ITEM(op, 3), v, e, b);
        }
        break;
    case K_ARRAY_STRUCT: case K_ARRAY_FIXED: case K_ARRAY_SCALAR: {
        int compact = (int)op_int(op, 2);
        if (v == Py_None) {
            r = op_int(op, 3) ? put_null(b, compact, 1) : -1;
            break;
        }
        if (!PyList_Check(v)) break;
        Py_ssize_t n = PyList_GET_SIZE(v);
        if (put_len(b, n, compact, 1) < 0) break;
        PyObject *arg = PyTuple_GET_ITEM(op, 4);
        const char *fc = kind == K_ARRAY_FIXED ? PyUnicode_AsUTF8(arg) : NULL;
        long ekind = kind == K_ARRAY_SCALAR ? (long)pyint_as_ll(arg) : 0;
        if (kind == K_ARRAY_FIXED && fc == NULL) break;
        r = 0;
        for (Py_ssize_t i = 0; i < n && r == 0; i++) {
            PyObject *x = PyList_GET_ITEM(v, i);
            Py_INCREF(x);
            if (kind == K_ARRAY_STRUCT) {
                r = x == Py_None ? -1 : encode_struct_into(arg, x, e, b);
            } else if (kind == K_ARRAY_FIXED) {
                r = put_fixed(b, fc[0], x);
            } else {
                r = put_scalar(ekind, compact, 0, x, b, e);
            }
            Py_DECREF(x);
            if (PyList_GET_SIZE(v) != n) r = -1;  /* changed under us */
        }
        break;
    }
    }
    Py_DECREF(v);
    return r;
}

enum { D_EQUAL = 0, D_NONE, D_EMPTY, D_STRUCT };

/* 1: ``v`` holds the default of every field and no unknown tags; 0: not; -1: error */
static int is_default_struct(PyObject *v, PyObject *test) {
    PyObject *tests = PyTuple_GET_ITEM(test, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(tests);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(tests, i);
        PyObject *a = get_field(v, PyTuple_GET_ITEM(t, 0));
        if (a == NULL) return -1;
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
        int ok;
        if (kind == D_NONE) ok = a == Py_None;
        else if (kind == D_EMPTY) ok = PyList_Check(a) ? PyList_GET_SIZE(a) == 0 : -1;
        else if (kind == D_STRUCT) ok = a == Py_None ? 0 : is_default_struct(a, PyTuple_GET_ITEM(t, 2));
        else ok = PyObject_RichCompareBool(a, PyTuple_GET_ITEM(t, 2), Py_EQ);
        Py_DECREF(a);
        if (ok <= 0) return ok;
    }
    PyObject *u = get_field(v, PyTuple_GET_ITEM(test, 0));
    if (u == NULL) return -1;
    int has = PyObject_IsTrue(u);
    Py_DECREF(u);
    return has < 0 ? -1 : !has;
}

/* the tagged fields section: known tagged fields with non-default values and unknown tags */
static int put_tags(PyObject *plan, PyObject *obj, Buf *b) {
    PyObject *tagged = PyTuple_GET_ITEM(plan, 2);
    PyObject *unknown = get_field(obj, PyTuple_GET_ITEM(plan, 3));
    if (unknown == NULL) return -1;
    int has_unknown = PyObject_IsTrue(unknown);
    if (has_unknown < 0 || (has_unknown && !PyDict_Check(unknown))) {
        Py_DECREF(unknown);
        return -1;
    }
    PyObject *items = NULL;  /* [(tag, data)] when there is anything to write */
    int r = -1;
    if (has_unknown) {
        items = PyDict_Items(unknown);
        if (items == NULL) goto done;
    }
    Py_ssize_t nt = PyTuple_GET_SIZE(tagged);
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyObject *t = PyTuple_GET_ITEM(tagged, i);
        PyObject *op = PyTuple_GET_ITEM(t, 1);
        long mode = PyLong_AsLong(PyTuple_GET_ITEM(t, 2));
        PyObject *attr = PyTuple_GET_ITEM(op, 1);
        PyObject *v = get_field(obj, op_int(op, 0) == K_FIXED ? PyTuple_GET_ITEM(attr, 0) : attr);
        if (v == NULL) goto done;
        int write;
        if (mode == 0) write = v != Py_None;
        else if (mode == 1) write = PyObject_IsTrue(v);
        else if (mode == 2) write = PyObject_RichCompareBool(v, PyTuple_GET_ITEM(t, 3), Py_NE);
        else if (v == Py_None) write = 0;
        else {
            int d = is_default_struct(v, PyTuple_GET_ITEM(t, 3));
            write = d < 0 ? -1 : !d;
        }
        Py_DECREF(v);
        if (write < 0) goto done;
        if (!write) continue;
        Buf tb = {NULL, 0, 0};
        if (put_op(op, obj, &tb, NULL) < 0) {
            PyMem_Free(tb.p);
            goto done;
        }
        PyObject *data = PyBytes_FromStringAndSize(tb.p ? tb.p : "", tb.len);
        PyMem_Free(tb.p);
        PyObject *pair = data == NULL ? NULL : Py_BuildValue("(OO)", PyTuple_GET_ITEM(t, 0), data);
        Py_XDECREF(data);
        if (pair == NULL) goto done;
        if (items == NULL && (items = PyList_New(0)) == NULL) {
            Py_DECREF(pair);
            goto done;
        }
        int a = PyList_Append(items, pair);
        Py_DECREF(pair);
        if (a < 0) goto done;
    }
    if (items == NULL || PyList_GET_SIZE(items) == 0) {
        r = buf_byte(b, 0);
        goto done;
    }
    if (PyList_Sort(items) < 0) goto done;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (buf_uvarint(b, (uint64_t)n) < 0) goto done;
    long long last = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(items, i);
        long long tag = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0));
        if ((tag == -1 && PyErr_Occurred()) || tag < 0 || tag == last) goto done;
        last = tag;
        Py_buffer view;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(pair, 1), &view, PyBUF_SIMPLE) < 0) goto done;
        int w = buf_uvarint(b, (uint64_t)tag) < 0 || buf_uvarint(b, (uint64_t)view.len) < 0 ||
                buf_put(b, view.buf, view.len) < 0;
        PyBuffer_Release(&view);
        if (w) goto done;
    }
    r = 0;
done:
    Py_XDECREF(items);
    Py_DECREF(unknown);
    return r;
}

static int encode_struct_into(PyObject *plan, PyObject *obj, Enc *e, Buf *b) {
    /* records chunks are only split out of the main buffer */
    if (e != NULL && b != &e->buf) e = NULL;
    PyObject *fields = PyTuple_GET_ITEM(plan, 0);
    Py_ssize_t nf = PyTuple_GET_SIZE(fields);
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (put_op(PyTuple_GET_ITEM(fields, i), obj, b, e) < 0) return -1;
    }
    if (PyTuple_GET_ITEM(plan, 1) == Py_True) return put_tags(plan, obj, b);
    return 0;
}

/* encode(plan, fallback, inline_max, obj, out, chunks) -> out */
static PyObject *fw_encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "encode(plan, fallback, inline_max, obj, out, chunks)");
        return NULL;
    }
    PyObject *plan = args[0], *fallback = args[1], *obj = args[3], *out = args[4], *chunks = args[5];
    if (!PyByteArray_Check(out) || !PyList_Check(chunks) || !PyTuple_Check(plan)) goto fall;
    Py_ssize_t out_len = PyByteArray_GET_SIZE(out), chunks_len = PyList_GET_SIZE(chunks);
    Enc e = {{NULL, 0, 0}, out, chunks, PyLong_AsSsize_t(args[2]), 0};
    if (e.inline_max < 0) goto fall;
    if (encode_struct_into(plan, obj, &e, &e.buf) == 0 && enc_flush(&e) == 0) {
        PyMem_Free(e.buf.p);
        return e.own_out ? e.out : Py_NewRef(e.out);
    }
    PyMem_Free(e.buf.p);
    if (e.own_out) Py_DECREF(e.out);
    /* back to the state the caller gave, for the Python encoder */
    if (PyByteArray_Resize(out, out_len) < 0 || PyList_SetSlice(chunks, chunks_len, PY_SSIZE_T_MAX, NULL) < 0)
        return NULL;
fall:
#ifdef FASTWIRE_TRACE
    PyErr_Print();
    fprintf(stderr, "FASTWIRE encode fallback %s\n", Py_TYPE(obj)->tp_name);
#endif
    PyErr_Clear();
    fallback_count++;
    return PyObject_CallFunctionObjArgs(fallback, obj, out, chunks, NULL);
}

/* ---- StructNew: a generated class's _new compiled --------------------------------------
 * struct_new(cls, fields, unknown_attr) -> a callable taking what the generated Python
 * ``_new`` takes (protocol/_codegen.py _class_source): the fields by position in the order
 * of ``_fields`` or by keyword, then ``_unknown_tags``; an absent field gets its default.
 * fields: ((attr, mode, value, name), ...) in the order of ``_fields``, mode and value as
 * in a plan's defaults (0: value as is, 1: a new empty list, 2: value()). Made with
 * object.__new__ and written through set_field, as decode makes a struct. */
#define SN_MAX_FIELDS 64

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *fields;
    PyObject *unknown_attr;
    /* where each field (the last: _unknown_tags) sits in the object when every attr is a
     * writable T_OBJECT_EX slot of cls (``direct``), and each field's default mode */
    int direct;
    Py_ssize_t offsets[SN_MAX_FIELDS + 1];
    long modes[SN_MAX_FIELDS];
} StructNew;

/* the offset of ``attr``'s slot in an instance of ``cls``, or -1 when it is not a
 * writable object slot of cls (set_field's direct case) */
static Py_ssize_t slot_offset_of(PyTypeObject *cls, PyObject *attr) {
    if (!Py_IS_TYPE(attr, &PyMemberDescr_Type))
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)attr)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY) || !PyType_IsSubtype(cls, PyDescr_TYPE(attr)))
        return -1;
    return m->offset;
}

static PyObject *sn_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    StructNew *sn = (StructNew *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nf = PyTuple_GET_SIZE(sn->fields);
    PyObject *given[SN_MAX_FIELDS + 1]; /* borrowed; the last: _unknown_tags */
    if (nargs > nf + 1) {
        PyErr_Format(PyExc_TypeError, "_new() takes from 0 to %zd positional arguments but %zd were given", nf + 1,
                     nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        given[i] = args[i];
    for (Py_ssize_t i = nargs; i <= nf; i++)  /* only the entries this class has (nf <= SN_MAX_FIELDS) */
        given[i] = NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t at = -1;
        for (Py_ssize_t i = 0; i < nf && at < 0; i++) {
            PyObject *name = PyTuple_GET_ITEM(PyTuple_GET_ITEM(sn->fields, i), 3);
            if (name == key || PyUnicode_Compare(name, key) == 0)
                at = i;
        }
        if (at < 0 && PyUnicode_CompareWithASCIIString(key, "_unknown_tags") == 0)
            at = nf;
        if (at < 0) {
            PyErr_Format(PyExc_TypeError, "_new() got an unexpected keyword argument '%U'", key);
            return NULL;
        }
        if (given[at]) {
            PyErr_Format(PyExc_TypeError, "_new() got multiple values for argument '%U'", key);
            return NULL;
        }
        given[at] = args[nargs + k];
    }
    /* object.__new__(cls): the generated classes are not abstract, so its tp_alloc */
    PyObject *obj = sn->direct ? sn->cls->tp_alloc(sn->cls, 0) : PyBaseObject_Type.tp_new(sn->cls, empty_tuple, NULL);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *f = PyTuple_GET_ITEM(sn->fields, i), *v;
        if (given[i]) {
            v = Py_NewRef(given[i]);
        } else {
            long mode = sn->modes[i];
            v = mode == 0 ? Py_NewRef(PyTuple_GET_ITEM(f, 2))
                : mode == 1 ? PyList_New(0) : PyObject_CallNoArgs(PyTuple_GET_ITEM(f, 2));
        }
        if (v == NULL) {
            Py_DECREF(obj);
            return NULL;
        }
        if (sn->direct) {
            Py_XSETREF(*(PyObject **)((char *)obj + sn->offsets[i]), v);
        } else if (set_field(obj, PyTuple_GET_ITEM(f, 0), v) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    PyObject *tags = Py_NewRef(given[nf] ? given[nf] : Py_None);
    if (sn->direct) {
        Py_XSETREF(*(PyObject **)((char *)obj + sn->offsets[nf]), tags);
    } else if (set_field(obj, sn->unknown_attr, tags) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

static void sn_dealloc(StructNew *sn) {
    Py_XDECREF(sn->cls);
    Py_XDECREF(sn->fields);
    Py_XDECREF(sn->unknown_attr);
    PyObject_Free(sn);
}

static PyTypeObject StructNewType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "protocol._fastwire.StructNew",
    .tp_basicsize = sizeof(StructNew),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A generated class's _new, compiled (see struct_new).",
    .tp_vectorcall_offset = offsetof(StructNew, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)sn_dealloc,
};

static PyObject *fw_struct_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "struct_new(cls, fields, unknown_attr)");
        return NULL;
    }
    Py_ssize_t nf = PyTuple_GET_SIZE(args[1]);
    if (nf > SN_MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "struct_new: %zd fields, at most %d", nf, SN_MAX_FIELDS);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        PyObject *f = PyTuple_GET_ITEM(args[1], i);
        if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 4 || !PyLong_Check(PyTuple_GET_ITEM(f, 1))
            || !PyUnicode_Check(PyTuple_GET_ITEM(f, 3))) {
            PyErr_SetString(PyExc_TypeError, "struct_new: each field is (attr, mode, value, name)");
            return NULL;
        }
    }
    StructNew *sn = PyObject_New(StructNew, &StructNewType);
    if (sn == NULL)
        return NULL;
    sn->vectorcall = sn_vectorcall;
    sn->cls = (PyTypeObject *)Py_NewRef(args[0]);
    sn->fields = Py_NewRef(args[1]);
    sn->unknown_attr = Py_NewRef(args[2]);
    sn->direct = !(sn->cls->tp_flags & Py_TPFLAGS_IS_ABSTRACT);
    for (Py_ssize_t i = 0; i <= nf; i++) {
        PyObject *attr = i < nf ? PyTuple_GET_ITEM(PyTuple_GET_ITEM(args[1], i), 0) : args[2];
        if ((sn->offsets[i] = slot_offset_of(sn->cls, attr)) < 0)
            sn->direct = 0;
        if (i < nf)
            sn->modes[i] = PyLong_AsLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(args[1], i), 1));
    }
    return (PyObject *)sn;
}

/* ---- a request's header and body, a response with its header: one call each -------------
 * The codec's tables of the pairs it has met, keyed by api_key << 16 | api_version:
 *   requests:  (header plan, body plan)
 *   responses: (plan, inline_max, flexible header, class)
 * An (api key, version) not in its table, or anything not accepted, answers None, and the
 * caller takes protocol/codec.py's functions, which fill the tables and name every error. */

static PyObject *table_entry(PyObject *table, long api_key, long api_version, Py_ssize_t size) {
    PyObject *key = PyLong_FromLong((api_key << 16) | (api_version & 0xFFFF));
    if (key == NULL) return NULL;
    PyObject *entry = PyDict_GetItemWithError(table, key);  /* borrowed */
    Py_DECREF(key);
    if (entry != NULL && (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != size)) {
        PyErr_SetString(PyExc_TypeError, "a codec table entry of the wrong shape");
        return NULL;
    }
    return entry;
}

/* decode_request(requests, frame) -> (header, body_offset, request or None) | None */
static PyObject *fw_decode_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_request(requests, frame): requests a dict");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    if (view.len < 4) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const unsigned char *p = view.buf;
    PyObject *entry = table_entry(args[0], (int16_t)be16(p), (int16_t)be16(p + 2), 2);
    if (entry == NULL) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        goto done;
    }
    In in = {args[1], p, view.len};
    Py_ssize_t at = 0;
    PyObject *header = decode_struct(PyTuple_GET_ITEM(entry, 0), &in, &at);
    if (header == NULL) {  /* the Python path names the problem */
        PyErr_Clear();
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t body_at = at;
    PyObject *body = decode_struct(PyTuple_GET_ITEM(entry, 1), &in, &at);
    if (body == NULL) {
        PyErr_Clear();
        body = Py_NewRef(Py_None);
    }
    PyObject *offset = PyLong_FromSsize_t(body_at);
    if (offset != NULL) result = PyTuple_Pack(3, header, offset, body);
    Py_DECREF(header);
    Py_DECREF(body);
    Py_XDECREF(offset);
done:
    PyBuffer_Release(&view);
    return result;
}

/* encode_response(responses, api_key, api_version, correlation_id, body) -> chunks | None,
 * as codec.encode_response makes them: the first a bytearray starting with the size prefix
 * (counting every chunk) and the correlation id */
static PyObject *fw_encode_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "encode_response(responses, api_key, api_version, correlation_id, body)");
        return NULL;
    }
    long api_key = PyLong_AsLong(args[1]), api_version = PyLong_AsLong(args[2]), correlation_id = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (api_key < 0 || api_key > 0x7FFF || api_version < 0 || api_version > 0x7FFF || correlation_id < INT32_MIN
        || correlation_id > INT32_MAX)
        Py_RETURN_NONE;
    PyObject *entry = table_entry(args[0], api_key, api_version, 4), *body = args[4];
    if (entry == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if ((PyObject *)Py_TYPE(body) != PyTuple_GET_ITEM(entry, 3)) Py_RETURN_NONE;  /* codec checks the body */
    Py_ssize_t inline_max = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1)), head = 8 + (PyTuple_GET_ITEM(entry, 2) == Py_True);
    if (inline_max < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, head), *chunks = PyList_New(0), *result = NULL;
    if (out == NULL || chunks == NULL) goto fail;
    memset(PyByteArray_AS_STRING(out), 0, (size_t)head);
    Enc e = {{NULL, 0, 0}, out, chunks, inline_max, 0};
    int ok = encode_struct_into(PyTuple_GET_ITEM(entry, 0), body, &e, &e.buf) == 0 && enc_flush(&e) == 0;
    PyMem_Free(e.buf.p);
    PyObject *last = e.out;  /* the bytearray written last: ``out``, or one made after a chunk */
    if (!ok) {
        if (e.own_out) Py_DECREF(last);
        PyErr_Clear();
        result = Py_NewRef(Py_None);  /* codec.encode_response falls back and names the problem */
        goto fail;
    }
    uint32_t total;
    if (PyList_GET_SIZE(chunks) == 0) {
        total = (uint32_t)PyByteArray_GET_SIZE(out);
        result = PyList_New(1);
        if (result != NULL) PyList_SET_ITEM(result, 0, Py_NewRef(out));
    } else {
        if (PyByteArray_GET_SIZE(last) && PyList_Append(chunks, last) < 0) {
            if (e.own_out) Py_DECREF(last);
            goto fail;
        }
        if (e.own_out) Py_DECREF(last);
        Py_ssize_t sum = 0;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(chunks); i++) {
            Py_ssize_t n = PyObject_Length(PyList_GET_ITEM(chunks, i));
            if (n < 0) goto fail;
            sum += n;
        }
        if (PyList_GET_ITEM(chunks, 0) != out) {  /* the size goes in the bytearray made here */
            PyErr_SetString(PyExc_RuntimeError, "encode_response: the first chunk is not the header's");
            goto fail;
        }
        total = (uint32_t)sum;
        result = Py_NewRef(chunks);
    }
    if (result != NULL) {
        unsigned char *h = (unsigned char *)PyByteArray_AS_STRING(out);
        uint32_t size = total - 4, corr = (uint32_t)correlation_id;
        h[0] = size >> 24; h[1] = size >> 16; h[2] = size >> 8; h[3] = size;
        h[4] = corr >> 24; h[5] = corr >> 16; h[6] = corr >> 8; h[7] = corr;
    }
fail:
    Py_XDECREF(out);
    Py_XDECREF(chunks);
    return result;
}

static PyObject *fw_fallbacks(PyObject *self, PyObject *noargs) {
    return PyLong_FromSsize_t(fallback_count);
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))fw_decode, METH_FASTCALL,
     "decode(plan, fallback, buf, pos) -> (obj, end): the plan's message decoded from buf[pos:], or "
     "fallback(buf, pos) when the bytes are not accepted"},
    {"encode", (PyCFunction)(void (*)(void))fw_encode, METH_FASTCALL,
     "encode(plan, fallback, inline_max, obj, out, chunks) -> out: the plan's message encoded as the "
     "generated encoder does, or fallback(obj, out, chunks) when it cannot"},
    {"decode_request", (PyCFunction)(void (*)(void))fw_decode_request, METH_FASTCALL,
     "decode_request(requests, frame) -> (header, body_offset, request or None) | None: a request frame "
     "(without its size) of a pair in the codec's table"},
    {"encode_response", (PyCFunction)(void (*)(void))fw_encode_response, METH_FASTCALL,
     "encode_response(responses, api_key, api_version, correlation_id, body) -> chunks | None: "
     "codec.encode_response for a pair in the codec's table"},
    {"fallbacks", fw_fallbacks, METH_NOARGS, "how many decodes and encodes were handed to the Python code"},
    {"struct_new", (PyCFunction)(void (*)(void))fw_struct_new, METH_FASTCALL,
     "struct_new(cls, fields, unknown_attr) -> callable: the generated class's _new, compiled"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_fastwire", "Compiled runner of the generated message decoders (see protocol/_codegen.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastwire(void) {
    if (PyType_Ready(&StructNewType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    PyObject *uuid_mod = PyImport_ImportModule("uuid");
    if (uuid_mod == NULL) return NULL;
    uuid_cls = PyObject_GetAttrString(uuid_mod, "UUID");
    Py_DECREF(uuid_mod);
    str_bytes = PyUnicode_InternFromString("bytes");
    str_int = PyUnicode_InternFromString("int");
    empty_tuple = PyTuple_New(0);
    uuid_cache = PyDict_New();
    if (uuid_cls == NULL || str_bytes == NULL || str_int == NULL || empty_tuple == NULL || uuid_cache == NULL)
        return NULL;
    return m;
}
