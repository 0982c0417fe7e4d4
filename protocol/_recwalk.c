/* protocol/_recwalk.c - the compiled record walker behind protocol/record_walk.py, and
 * the produce validator's common case in one call each (scan_v2, assign_v2; at the end,
 * see storage/validator.py, whose Python steps are their reference).
 *
 * Walks the records of one v2 batch (Kafka's DefaultRecord layout) without copying
 * anything: every length and varint must stay inside its record, each record must end
 * exactly where its length says, and the batch must hold exactly the declared number of
 * records.  It computes what the produce path needs from the records themselves: the
 * largest timestamp (Kafka's LogValidator rule: strictly greater than the running max,
 * starting from -1), whether the offset deltas run 0..count-1, the indexes of records
 * outside the CreateTime window and of records without a key.
 *
 * The walker is resumable: ``feed`` may be called with any split of the bytes (the output
 * of a streaming decompressor), so a compressed batch is walked chunk by chunk and never
 * held whole.  A record that lies entirely inside one chunk is parsed by a straight-line
 * fast path; a record split across chunks goes through a byte-wise state machine.
 *
 * Semantics are those of protocol/record_walk.py's PyRecordWalker (the reference, which
 * the tests cross-check against this module): 32-bit varints take at most 5 bytes,
 * 64-bit varints at most 10, values wrap as Java ints and longs do.
 *
 * Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 * keyLength varint (<0 = null), key, valueLength varint (<0 = null), value,
 * headerCount varint, headers (keyLength varint >= 0, key, valueLength varint, value).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include "_pyint.h"

static PyObject *WalkError;

enum {
    S_LEN = 0, S_ATTR, S_TSD, S_OFFD, S_KLEN, S_KEY, S_VLEN, S_VAL, S_NH, S_HK, S_HKEY, S_HV, S_HVAL
};

typedef struct {
    PyObject_HEAD
    int64_t count;
    int64_t done;
    int64_t base_ts;
    int lat;              /* LogAppendTime batch: no window check, timestamps are the header's */
    int check_window;
    int64_t now, before, after;
    int collect_null_keys;
    /* results */
    int64_t max_ts;
    int64_t index_of_max;
    int deltas_ok;
    PyObject *bad_ts;     /* list of (index, timestamp) or NULL */
    PyObject *null_keys;  /* list of indexes or NULL */
    /* streaming state */
    int state;
    uint64_t acc;
    int nvar;             /* bytes of the varint read so far */
    int64_t rec_len;
    int64_t rec_left;
    int64_t skip;
    int64_t hdr_left;
    int64_t tsd;
    int32_t offd;
    int keynull;
    int failed;
    int64_t fed;
} Walker;

/* ------------------------------------------------------------------ errors */

static int fail(Walker *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (msg) {
        PyErr_SetObject(WalkError, msg);
        Py_DECREF(msg);
    }
    w->failed = 1;
    return -1;
}

/* ------------------------------------------------------------------ per record */

static inline int64_t wrap_add(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

static inline int64_t wrap_sub(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a - (uint64_t)b);
}

static int finish_record(Walker *w, int64_t tsd, int32_t offd, int keynull) {
    int64_t index = w->done;
    if (offd != index)
        w->deltas_ok = 0;
    if (!w->lat) {
        int64_t ts = wrap_add(w->base_ts, tsd);
        if (w->check_window && ts != -1) {
            int64_t diff = wrap_sub(w->now, ts);
            if (diff > w->before || wrap_sub(0, diff) > w->after) {
                if (!w->bad_ts && !(w->bad_ts = PyList_New(0)))
                    return -1;
                PyObject *item = Py_BuildValue("(LL)", (long long)index, (long long)ts);
                if (!item || PyList_Append(w->bad_ts, item) < 0) {
                    Py_XDECREF(item);
                    return -1;
                }
                Py_DECREF(item);
            }
        }
        if (ts > w->max_ts) {
            w->max_ts = ts;
            w->index_of_max = index;
        }
    }
    if (keynull && w->collect_null_keys) {
        if (!w->null_keys && !(w->null_keys = PyList_New(0)))
            return -1;
        PyObject *item = PyLong_FromLongLong(index);
        if (!item || PyList_Append(w->null_keys, item) < 0) {
            Py_XDECREF(item);
            return -1;
        }
        Py_DECREF(item);
    }
    w->done++;
    return 0;
}

/* ------------------------------------------------------------------ fast path */

/* A varint of at most ``maxb`` bytes at *pp, still zig-zag encoded.
 * 1: value read; 0: ran past ``end``; -1: too long */
static inline int rd_raw(const uint8_t **pp, const uint8_t *end, int maxb, uint64_t *raw) {
    const uint8_t *p = *pp;
    uint64_t acc = 0;
    for (int i = 0; i < maxb; i++) {
        if (p >= end)
            return 0;
        uint8_t b = *p++;
        acc |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *raw = acc;
            *pp = p;
            return 1;
        }
    }
    return -1;
}

/* varint (5 bytes, Java int wrap: bits past 32 dropped) and varlong (10 bytes) */
static inline int rd_v32(const uint8_t **pp, const uint8_t *end, int32_t *out) {
    uint64_t raw;
    int r = rd_raw(pp, end, 5, &raw);
    if (r == 1) {
        uint32_t u = (uint32_t)raw;
        *out = (int32_t)((u >> 1) ^ (uint32_t)(-(int32_t)(u & 1)));
    }
    return r;
}

static inline int rd_v64(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    uint64_t raw;
    int r = rd_raw(pp, end, 10, &raw);
    if (r == 1)
        *out = (int64_t)((raw >> 1) ^ (uint64_t)(-(int64_t)(raw & 1)));
    return r;
}

#define RD32(var, what)                                                                   \
    do {                                                                                  \
        int r_ = rd_v32(&p, rend, &(var));                                                \
        if (r_ <= 0)                                                                      \
            return r_ < 0 ? fail(w, "record %lld: %s varint is longer than 5 bytes",     \
                                 (long long)w->done, what)                                \
                          : fail(w, "record %lld: %s runs past the record's length %d",   \
                                 (long long)w->done, what, len);                          \
    } while (0)

/* past a field of n bytes (none when n <= 0: null) that must end in the record */
#define SKIP(n, what)                                                                     \
    do {                                                                                  \
        if ((n) > 0) {                                                                    \
            if (rend - p < (n))                                                           \
                return fail(w, "record %lld: %s length %d runs past the record's length %d", \
                            (long long)w->done, what, (n), len);                          \
            p += (n);                                                                     \
        }                                                                                 \
    } while (0)

/* Parse one whole record at *pp if it lies inside [*pp, end).  Returns 1 parsed,
 * 0 not entirely present (nothing consumed), -1 error. */
static int fast_record(Walker *w, const uint8_t **pp, const uint8_t *end) {
    const uint8_t *p = *pp;
    int32_t len;
    int r = rd_v32(&p, end, &len);
    if (r == 0)
        return 0;
    if (r < 0)
        return fail(w, "record %lld: length varint is longer than 5 bytes", (long long)w->done);
    if (len < 0)
        return fail(w, "record %lld: invalid record length %d", (long long)w->done, len);
    if (end - p < len)
        return 0;
    const uint8_t *rend = p + len;
    if (p >= rend)
        return fail(w, "record %lld: invalid record size: length %d leaves no room for the attributes",
                    (long long)w->done, len);
    p++; /* attributes */
    int64_t tsd;
    {
        int r_ = rd_v64(&p, rend, &tsd);
        if (r_ <= 0)
            return r_ < 0 ? fail(w, "record %lld: timestamp delta varlong is longer than 10 bytes",
                                 (long long)w->done)
                          : fail(w, "record %lld: timestamp delta runs past the record's length %d",
                                 (long long)w->done, len);
    }
    int32_t offd, klen, vlen, nh;
    RD32(offd, "offset delta");
    RD32(klen, "key length");
    SKIP(klen, "key");
    RD32(vlen, "value length");
    SKIP(vlen, "value");
    RD32(nh, "header count");
    if (nh < 0)
        return fail(w, "record %lld: invalid number of record headers %d", (long long)w->done, nh);
    if (nh > rend - p)
        return fail(w, "record %lld: invalid number of record headers %d: larger than the %lld bytes left in the record",
                    (long long)w->done, nh, (long long)(rend - p));
    for (int32_t h = 0; h < nh; h++) {
        int32_t hk, hv;
        RD32(hk, "header key length");
        if (hk < 0)
            return fail(w, "record %lld: invalid negative header key size %d", (long long)w->done, hk);
        SKIP(hk, "header key");
        RD32(hv, "header value length");
        SKIP(hv, "header value");
    }
    if (p != rend)
        return fail(w, "record %lld: invalid record size: expected %d bytes in record payload, read %lld",
                    (long long)w->done, len, (long long)(len - (rend - p)));
    if (finish_record(w, tsd, offd, klen < 0) < 0)
        return -1;
    *pp = p;
    return 1;
}

/* ------------------------------------------------------------------ byte-wise path */

static int end_of_headers_or_next(Walker *w);

static int end_record(Walker *w) {
    if (w->rec_left != 0)
        return fail(w, "record %lld: invalid record size: expected %lld bytes in record payload, read %lld",
                    (long long)w->done, (long long)w->rec_len, (long long)(w->rec_len - w->rec_left));
    if (finish_record(w, w->tsd, w->offd, w->keynull) < 0)
        return -1;
    w->state = S_LEN;
    return 0;
}

static int end_of_headers_or_next(Walker *w) {
    w->hdr_left--;
    if (w->hdr_left == 0)
        return end_record(w);
    w->state = S_HK;
    return 0;
}

static int start_skip(Walker *w, int64_t n, int skip_state, int next_state, const char *what) {
    if (n > w->rec_left)
        return fail(w, "record %lld: %s %lld runs past the record's length %lld",
                    (long long)w->done, what, (long long)n, (long long)w->rec_len);
    if (n > 0) {
        w->skip = n;
        w->state = skip_state;
        return 0;
    }
    w->state = next_state;
    if (next_state == -1)
        return end_of_headers_or_next(w);
    return 0;
}

static int field_done(Walker *w, int64_t v) {
    switch (w->state) {
    case S_LEN:
        if (v < 0)
            return fail(w, "record %lld: invalid record length %lld", (long long)w->done, (long long)v);
        w->rec_len = w->rec_left = v;
        w->state = S_ATTR;
        return 0;
    case S_TSD:
        w->tsd = v;
        w->state = S_OFFD;
        return 0;
    case S_OFFD:
        w->offd = (int32_t)v;
        w->state = S_KLEN;
        return 0;
    case S_KLEN:
        w->keynull = v < 0;
        return start_skip(w, v, S_KEY, S_VLEN, "key length");
    case S_VLEN:
        return start_skip(w, v, S_VAL, S_NH, "value length");
    case S_NH:
        if (v < 0)
            return fail(w, "record %lld: invalid number of record headers %lld", (long long)w->done, (long long)v);
        if (v > w->rec_left)
            return fail(w, "record %lld: invalid number of record headers %lld: larger than the %lld bytes left in the record",
                        (long long)w->done, (long long)v, (long long)w->rec_left);
        w->hdr_left = v;
        if (v == 0)
            return end_record(w);
        w->state = S_HK;
        return 0;
    case S_HK:
        if (v < 0)
            return fail(w, "record %lld: invalid negative header key size %lld", (long long)w->done, (long long)v);
        return start_skip(w, v, S_HKEY, S_HV, "header key length");
    case S_HV:
        return start_skip(w, v, S_HVAL, -1, "header value length");
    }
    return fail(w, "record walker in an impossible state %d", w->state);
}

static const char *field_name(int state) {
    switch (state) {
    case S_LEN: return "length";
    case S_TSD: return "timestamp delta";
    case S_OFFD: return "offset delta";
    case S_KLEN: return "key length";
    case S_VLEN: return "value length";
    case S_NH: return "header count";
    case S_HK: return "header key length";
    case S_HV: return "header value length";
    }
    return "field";
}

/* consume bytes one field at a time until a record ends (state back to S_LEN with no
 * partial varint) or the input runs out */
static int slow_until_boundary(Walker *w, const uint8_t **pp, const uint8_t *end) {
    const uint8_t *p = *pp;
    while (p < end) {
        int st = w->state;
        if (st == S_KEY || st == S_VAL || st == S_HKEY || st == S_HVAL) {
            int64_t take = end - p;
            if (take > w->skip)
                take = w->skip;
            p += take;
            w->skip -= take;
            w->rec_left -= take;
            if (w->skip == 0) {
                int rc = 0;
                if (st == S_KEY) w->state = S_VLEN;
                else if (st == S_VAL) w->state = S_NH;
                else if (st == S_HKEY) w->state = S_HV;
                else rc = end_of_headers_or_next(w);
                if (rc < 0)
                    return -1;
                if (w->state == S_LEN)
                    break;
            }
            continue;
        }
        if (st == S_LEN && w->nvar == 0 && w->done >= w->count)
            return fail(w, "incorrect declared batch size: bytes remain after the %lld records the header declares",
                        (long long)w->count);
        if (st != S_LEN) {
            if (w->rec_left <= 0)
                return fail(w, "record %lld: %s runs past the record's length %lld",
                            (long long)w->done, st == S_ATTR ? "attributes" : field_name(st),
                            (long long)w->rec_len);
            w->rec_left--;
        }
        uint8_t b = *p++;
        if (st == S_ATTR) {
            w->state = S_TSD;
            continue;
        }
        int maxb = (st == S_TSD) ? 10 : 5;
        w->acc |= (uint64_t)(b & 0x7f) << (7 * w->nvar);
        w->nvar++;
        if (b & 0x80) {
            if (w->nvar >= maxb)
                return fail(w, "record %lld: %s varint is longer than %d bytes",
                            (long long)w->done, field_name(st), maxb);
            continue;
        }
        int64_t v;
        if (st == S_TSD) {
            uint64_t raw = w->acc;
            v = (int64_t)((raw >> 1) ^ (uint64_t)(-(int64_t)(raw & 1)));
        } else {
            uint32_t raw = (uint32_t)w->acc;
            v = (int32_t)((raw >> 1) ^ (uint32_t)(-(int32_t)(raw & 1)));
        }
        w->acc = 0;
        w->nvar = 0;
        if (field_done(w, v) < 0)
            return -1;
        if (w->state == S_LEN)
            break;
    }
    *pp = p;
    return 0;
}

/* ------------------------------------------------------------------ the type */

static int Walker_init(Walker *w, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"count", "base_timestamp", "log_append_time", "now", "before", "after",
                             "check_window", "collect_null_keys", NULL};
    long long count, base_ts, now = 0, before = 0, after = 0;
    int lat = 0, check = 0, nulls = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "LL|pLLLpp", kwlist, &count, &base_ts, &lat, &now,
                                     &before, &after, &check, &nulls))
        return -1;
    w->count = count;
    w->done = 0;
    w->base_ts = base_ts;
    w->lat = lat;
    w->now = now;
    w->before = before;
    w->after = after;
    w->check_window = check;
    w->collect_null_keys = nulls;
    w->max_ts = -1;
    w->index_of_max = -1;
    w->deltas_ok = 1;
    Py_CLEAR(w->bad_ts);
    Py_CLEAR(w->null_keys);
    w->state = S_LEN;
    w->acc = 0;
    w->nvar = 0;
    w->failed = 0;
    w->fed = 0;
    if (count < 0) {
        PyErr_Format(WalkError, "invalid record count %lld in the batch header", count);
        return -1;
    }
    return 0;
}

static void Walker_dealloc(Walker *w) {
    Py_CLEAR(w->bad_ts);
    Py_CLEAR(w->null_keys);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *Walker_feed(Walker *w, PyObject *arg) {
    if (w->failed) {
        PyErr_SetString(WalkError, "the record walker already failed");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    const uint8_t *end = p + view.len;
    int rc = 0;
    while (p < end) {
        if (w->state == S_LEN && w->nvar == 0) {
            if (w->done >= w->count) {
                rc = fail(w, "incorrect declared batch size: %lld bytes remain after the %lld records the header declares",
                          (long long)(end - p), (long long)w->count);
                break;
            }
            int r = fast_record(w, &p, end);
            if (r < 0) {
                rc = -1;
                break;
            }
            if (r == 1)
                continue;
        }
        if (slow_until_boundary(w, &p, end) < 0) {
            rc = -1;
            break;
        }
    }
    w->fed += view.len;
    PyBuffer_Release(&view);
    if (rc < 0) {
        w->failed = 1;
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Walker_finish(Walker *w, PyObject *Py_UNUSED(ignored)) {
    if (w->failed) {
        PyErr_SetString(WalkError, "the record walker already failed");
        return NULL;
    }
    if (w->state != S_LEN || w->nvar != 0) {
        fail(w, "record data underflow: the batch ends inside record %lld (of %lld declared)",
             (long long)w->done, (long long)w->count);
        return NULL;
    }
    if (w->done != w->count) {
        fail(w, "record data underflow: the batch holds %lld records but its header declares %lld",
             (long long)w->done, (long long)w->count);
        return NULL;
    }
    PyObject *bad = w->bad_ts ? w->bad_ts : Py_None;
    PyObject *nulls = w->null_keys ? w->null_keys : Py_None;
    return Py_BuildValue("(LLOOO)", (long long)w->max_ts, (long long)w->index_of_max,
                         w->deltas_ok ? Py_True : Py_False, bad, nulls);
}

static PyObject *Walker_get_done(Walker *w, void *closure) {
    return PyLong_FromLongLong(w->done);
}

static PyObject *Walker_get_fed(Walker *w, void *closure) {
    return PyLong_FromLongLong(w->fed);
}

static PyMethodDef Walker_methods[] = {
    {"feed", (PyCFunction)Walker_feed, METH_O,
     "feed(bytes_like): walk the next bytes of the batch's (decompressed) records."},
    {"finish", (PyCFunction)Walker_finish, METH_NOARGS,
     "finish() -> (max_timestamp, index_of_max, deltas_ok, bad_timestamps, null_key_indexes)."},
    {NULL}
};

static PyGetSetDef Walker_getset[] = {
    {"records", (getter)Walker_get_done, NULL, "records walked so far", NULL},
    {"bytes_fed", (getter)Walker_get_fed, NULL, "bytes fed so far", NULL},
    {NULL}
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "protocol._recwalk.RecordWalker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Resumable walker over the records of one v2 batch (see protocol/record_walk.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Walker_init,
    .tp_dealloc = (destructor)Walker_dealloc,
    .tp_methods = Walker_methods,
    .tp_getset = Walker_getset,
};

/* ------------------------------------------------------------------ whole-request scan */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t be16(const uint8_t *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline void put64(uint8_t *p, int64_t v) {
    for (int i = 7; i >= 0; i--, v = (int64_t)((uint64_t)v >> 8))
        p[i] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for small regions, here: a
 * one-record batch is ~70-200 bytes, and calling the crc32c package through a memoryview
 * costs ~1,900 instructions, ten times the sum itself. By the CPU's CRC32 instruction
 * where it has one (crc32c_hw below), else slicing by 8 over the tables here. Regions of
 * SMALL_CRC_MAX bytes or more go to the package (hardware CRC, ~13 GB/s). The tests
 * check both against the package (protocol._recwalk.crc32c_small, crc32c_table). */
#define SMALL_CRC_MAX 2048
static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c_sw(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF]
            ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]]
            ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

/* The same sum by the CPU's CRC32 instruction (SSE4.2, which computes CRC-32C), when it
 * has one (checked once at import): about a tenth of the table's instructions, and no
 * 8 KiB of tables to bring into the cache on a cold path. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define CRC_HW_BUILT 1
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__)
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);  /* little-endian, as the reflected CRC reads bytes */
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
#endif
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c ^ 0xFFFFFFFFu;
}
#else
#define CRC_HW_BUILT 0
static uint32_t crc32c_hw(const uint8_t *p, size_t n) { return crc32c_sw(p, n); }
#endif
static int crc_hw;  /* the CPU has it: crc32c_hw, else crc32c_sw */

static inline uint32_t crc32c_region(const uint8_t *p, size_t n) {
    return crc_hw ? crc32c_hw(p, n) : crc32c_sw(p, n);
}

static PyObject *crc_of(PyObject *arg, uint32_t (*fn)(const uint8_t *, size_t)) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = fn((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static uint32_t crc32c_region_fn(const uint8_t *p, size_t n) { return crc32c_region(p, n); }

/* crc32c_small(data) -> int: the CRC scan_v2 and assign_v2 use below 2 KiB (for the tests) */
static PyObject *crc32c_small(PyObject *self, PyObject *arg) { return crc_of(arg, crc32c_region_fn); }

/* crc32c_table(data) -> int: the table CRC, whether or not the CPU has the instruction */
static PyObject *crc32c_table(PyObject *self, PyObject *arg) { return crc_of(arg, crc32c_sw); }

/* the CRC-32C of the batch at b of ``size`` bytes (attributes to its end): the table for
 * a small batch, else the crc32c package's function (hardware CRC); -1 with an
 * exception set on failure */
static int batch_crc(PyObject *crc_fn, const uint8_t *b, Py_ssize_t size, uint32_t *out) {
    if (size - 21 < SMALL_CRC_MAX) {
        *out = crc32c_region(b + 21, (size_t)(size - 21));
        return 0;
    }
    PyObject *region = PyMemoryView_FromMemory((char *)(b + 21), size - 21, PyBUF_READ);
    if (!region)
        return -1;
    PyObject *got = PyObject_CallOneArg(crc_fn, region);
    Py_DECREF(region);
    if (!got)
        return -1;
    unsigned long long crc = PyLong_AsUnsignedLongLong(got);
    Py_DECREF(got);
    if (crc == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint32_t)crc;
    return 0;
}

/* the batch's CRC-32C recomputed and stored */
static int rewrite_crc(PyObject *crc_fn, uint8_t *b, Py_ssize_t size) {
    uint32_t crc;
    if (batch_crc(crc_fn, b, size, &crc) < 0)
        return -1;
    put32(b + 17, crc);
    return 0;
}

/* An instance of the tuple subclass ``type`` (a NamedTuple) holding the n ``items``,
 * whose references it steals (all of them, also on failure); NULL with an exception set
 * when an item is NULL or the allocation fails. Made in place, without building a plain
 * tuple to copy from (Py_BuildValue and tuple.__new__ cost ~1,000 instructions each). */
static PyObject *struct_of(PyObject *type, Py_ssize_t n, PyObject **items) {
    PyObject *obj = NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!items[i])
            goto fail;
    obj = type == (PyObject *)&PyTuple_Type ? PyTuple_New(n) : ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
    if (!obj)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(obj, i, items[i]);
    return obj;
fail:
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(items[i]);
    return NULL;
}

/* METH_FASTCALL argument helpers: 0 on success, -1 with an exception set */
static int arg_ll(PyObject *o, long long *out) {
    *out = pyint_as_ll(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int arg_bool(PyObject *o, int *out) {
    *out = PyObject_IsTrue(o);
    return *out < 0 ? -1 : 0;
}

/* a partition leader epoch argument: None (leave it) or an int */
static int arg_epoch(PyObject *o, int *has_epoch, long *epoch) {
    *has_epoch = o != Py_None;
    *epoch = 0;
    if (*has_epoch && (*epoch = (long)pyint_as_ll(o)) == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

static int is_tuple_type(PyObject *t) {
    return PyType_Check(t) && PyType_IsSubtype((PyTypeObject *)t, &PyTuple_Type);
}

/* One uncompressed batch's records walked in one go; 1 = every record well formed and
 * nothing the reference path would report (no timestamp outside the window, no null key
 * on a compacted topic, offset deltas 0..count-1); 0 = anything else (no error set). */
static int scan_records(Walker *w, const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        if (w->done >= w->count)
            return 0;
        int r = fast_record(w, &p, end);
        if (r != 1) {
            if (r < 0)
                PyErr_Clear();
            return 0;
        }
        if (w->bad_ts || w->null_keys || !w->deltas_ok)
            return 0;
    }
    return w->done == w->count;
}

#define HDR 61
#define LOG_OVERHEAD 12

/* A v2 batch header's fields, read by scan_batch */
typedef struct {
    int64_t base_offset, base_ts, max_ts, pid;
    int32_t length, ple, lod, base_seq, count;
    uint32_t crc;
    int16_t attrs, pepoch;
    int8_t magic;
} V2Header;

/* The topic's validation rules, as scan_v2 and validate_v2 take them */
typedef struct {
    long long max_message_bytes, now, before, after;
    int lat_topic, check_window, compact;
} ScanRules;

enum { SCAN_ERROR = -1, SCAN_OTHER = 0, SCAN_TAKEN = 1, SCAN_END = 2 };

/* The batch at ``b`` (``avail`` bytes from it to the buffer's end), the validator's steps
 * 1-4 for it in the common case: SCAN_TAKEN with ``h`` and ``*true_max`` (the max
 * timestamp the reference computes: -1 on a LogAppendTime topic) filled; SCAN_END where
 * the reference stops reading (fewer than 17 bytes, a partial trailing batch); SCAN_OTHER
 * for anything out of the common case (nothing set); SCAN_ERROR with an exception set. */
static int scan_batch(const uint8_t *b, Py_ssize_t avail, const ScanRules *r, PyObject *crc_fn, V2Header *h,
                      int64_t *true_max) {
    int32_t length = be32(b + 8);
    if (length < 14)
        return SCAN_OTHER;
    Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
    if (avail < LOG_OVERHEAD + 5)
        return SCAN_END;
    int8_t magic = (int8_t)b[16];
    if (magic < 0 || magic > 2)
        return SCAN_OTHER;
    if (avail < size)
        return SCAN_END; /* a partial trailing batch: trimmed, as the reference does */
    if (magic != 2 || size < HDR)
        return SCAN_OTHER;
    h->length = length;
    h->magic = magic;
    h->base_offset = be64(b);
    h->ple = be32(b + 12);
    h->crc = (uint32_t)be32(b + 17);
    h->attrs = be16(b + 21);
    h->lod = be32(b + 23);
    h->base_ts = be64(b + 27);
    h->max_ts = be64(b + 35);
    h->pid = be64(b + 43);
    h->pepoch = be16(b + 51);
    h->base_seq = be32(b + 53);
    h->count = be32(b + 57);
    if (h->base_offset != 0 || size > r->max_message_bytes)
        return SCAN_OTHER;
    /* the per-batch checks (_check_batch), then what this path leaves to the reference */
    if (h->lod < 0 || h->count <= 0 || h->count != (int64_t)h->lod + 1 || (h->attrs & 0x20)
        || (h->pid >= 0 && h->base_seq < 0))
        return SCAN_OTHER;
    if ((h->attrs & 0x07) != 0 || (h->attrs & 0x08))
        return SCAN_OTHER;
    uint32_t crc_now;
    if (batch_crc(crc_fn, b, size, &crc_now) < 0)
        return SCAN_ERROR;
    if (crc_now != h->crc)
        return SCAN_OTHER;
    Walker w;
    memset(&w, 0, sizeof w);
    w.count = h->count;
    w.base_ts = h->base_ts;
    w.lat = r->lat_topic;
    w.now = r->now;
    w.before = r->before;
    w.after = r->after;
    w.check_window = r->check_window;
    w.collect_null_keys = r->compact;
    w.max_ts = -1;
    w.index_of_max = -1;
    w.deltas_ok = 1;
    int ok = scan_records(&w, b + HDR, b + size);
    Py_CLEAR(w.bad_ts);
    Py_CLEAR(w.null_keys);
    if (!ok)
        return SCAN_OTHER;
    *true_max = r->lat_topic ? -1 : w.max_ts;
    return SCAN_TAKEN;
}

/* ``rules``, the topic's validation rules as storage.validator.rules_of gives them
 * (log_append_time_topic, before, after, check_window, compact, max_message_bytes,
 * segment_bytes or None), and ``now``, into ``r`` and ``*segment_bytes`` (-1 for None),
 * for scan_v2 and validate_v2; -1 with an exception set */
static int scan_rules(PyObject *rules, PyObject *now, ScanRules *r, long long *segment_bytes) {
    if (!PyTuple_Check(rules) || PyTuple_GET_SIZE(rules) != 7) {
        PyErr_SetString(PyExc_TypeError, "rules must be the 7-tuple of storage.validator.rules_of");
        return -1;
    }
    PyObject *seg_obj = PyTuple_GET_ITEM(rules, 6);
    *segment_bytes = -1;
    if (arg_bool(PyTuple_GET_ITEM(rules, 0), &r->lat_topic) < 0 || arg_ll(PyTuple_GET_ITEM(rules, 1), &r->before) < 0
        || arg_ll(PyTuple_GET_ITEM(rules, 2), &r->after) < 0
        || arg_bool(PyTuple_GET_ITEM(rules, 3), &r->check_window) < 0
        || arg_bool(PyTuple_GET_ITEM(rules, 4), &r->compact) < 0
        || arg_ll(PyTuple_GET_ITEM(rules, 5), &r->max_message_bytes) < 0
        || (seg_obj != Py_None && arg_ll(seg_obj, segment_bytes) < 0) || arg_ll(now, &r->now) < 0)
        return -1;
    return 0;
}

/* scan_v2(buf, rules, now, header_type, crc32c)
 *
 * ``rules`` as scan_rules reads them (its segment_bytes is not this step's).
 * The produce validator's steps 1-4 (storage/validator.py) for the common case, in one
 * call: v2 batches, uncompressed, without the LogAppendTime attribute, every check
 * passing.  Returns (spans, fixes, maxes) exactly as the reference path computes them,
 * or None when anything is out of that case (an error to report, a compressed batch, a
 * batch to rebuild): the caller then runs the reference path, which names the problem.
 * Batches are read as they are; nothing is written. */
static PyObject *scan_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    ScanRules rules;
    long long segment_bytes;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "scan_v2 takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *header_type = args[3], *crc_fn = args[4];
    if (scan_rules(args[1], args[2], &rules, &segment_bytes) < 0)
        return NULL;
    if (!is_tuple_type(header_type)) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple subclass");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    PyObject *spans = PyList_New(0), *fixes = PyList_New(0), *maxes = PyList_New(0);
    PyObject *result = NULL;
    if (!spans || !fixes || !maxes)
        goto done;
    while (end - pos >= LOG_OVERHEAD) {
        V2Header h;
        int64_t true_max;
        int rc = scan_batch(buf + pos, end - pos, &rules, crc_fn, &h, &true_max);
        if (rc == SCAN_END)
            break;
        if (rc == SCAN_OTHER)
            goto fallback;
        if (rc == SCAN_ERROR)
            goto done;
        PyObject *fields[13] = {
            PyLong_FromLongLong(h.base_offset), PyLong_FromLong(h.length), PyLong_FromLong(h.ple),
            PyLong_FromLong((unsigned char)h.magic), PyLong_FromUnsignedLong(h.crc), PyLong_FromLong(h.attrs),
            PyLong_FromLong(h.lod), PyLong_FromLongLong(h.base_ts), PyLong_FromLongLong(h.max_ts),
            PyLong_FromLongLong(h.pid), PyLong_FromLong(h.pepoch), PyLong_FromLong(h.base_seq),
            PyLong_FromLong(h.count)};
        PyObject *hdr = struct_of(header_type, 13, fields);
        if (!hdr)
            goto done;
        PyObject *span_items[2] = {PyLong_FromSsize_t(pos), hdr};
        PyObject *span = struct_of((PyObject *)&PyTuple_Type, 2, span_items);
        if (!span || PyList_Append(spans, span) < 0) {
            Py_XDECREF(span);
            goto done;
        }
        Py_DECREF(span);
        PyObject *fix = (rules.lat_topic || true_max == h.max_ts) ? Py_NewRef(Py_None) : PyLong_FromLongLong(true_max);
        PyObject *mx = PyLong_FromLongLong(true_max);
        int bad = !fix || !mx || PyList_Append(fixes, fix) < 0 || PyList_Append(maxes, mx) < 0;
        Py_XDECREF(fix);
        Py_XDECREF(mx);
        if (bad)
            goto done;
        pos += (Py_ssize_t)h.length + LOG_OVERHEAD;
    }
    if (PyList_GET_SIZE(spans) == 0)
        goto fallback;
    result = PyTuple_Pack(3, spans, fixes, maxes);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(spans);
    Py_XDECREF(fixes);
    Py_XDECREF(maxes);
    return result;
}

/* Step 5 for the batch at ``b`` (``size`` bytes, writable): base offset ``offset``, the
 * leader epoch when ``has_epoch``, on a LogAppendTime topic the attribute bit and
 * maxTimestamp = ``append_time``, elsewhere maxTimestamp = ``fix`` when ``has_fix``; the
 * CRC recomputed where the header changed. ``*bmax``: the batch's max timestamp (the
 * append time, else ``scanned_max``). 0, or -1 with an exception set. */
static int assign_batch(uint8_t *b, Py_ssize_t size, int64_t offset, int has_epoch, long epoch, int lat_topic,
                        int64_t append_time, int has_fix, int64_t fix, int64_t scanned_max, PyObject *crc_fn,
                        int64_t *bmax) {
    put64(b, offset);
    if (has_epoch)
        put32(b + 12, (uint32_t)epoch);
    if (lat_topic) {
        b[22] |= 0x08; /* the attributes' low byte */
        put64(b + 35, append_time);
        if (rewrite_crc(crc_fn, b, size) < 0)
            return -1;
        *bmax = append_time;
        return 0;
    }
    if (has_fix && (be64(b + 35) != fix || (b[22] & 0x08))) {
        b[22] &= (uint8_t)~0x08;
        put64(b + 35, fix);
        if (rewrite_crc(crc_fn, b, size) < 0)
            return -1;
    }
    *bmax = scanned_max;
    return 0;
}

/* info_type(position, size, base_offset, last_offset, max_timestamp, last_offset) */
static PyObject *batch_info(PyObject *info_type, Py_ssize_t pos, Py_ssize_t size, int64_t offset, int64_t last,
                            int64_t bmax) {
    PyObject *items[6] = {PyLong_FromSsize_t(pos), PyLong_FromSsize_t(size), PyLong_FromLongLong(offset),
                          PyLong_FromLongLong(last), PyLong_FromLongLong(bmax), PyLong_FromLongLong(last)};
    return struct_of(info_type, 6, items);
}

/* result_type(buf, next_offset, last_offset, max_timestamp, offset_of_max, append_time, count, infos)
 * (steals infos) */
static PyObject *validated(PyObject *result_type, PyObject *buf, int64_t next_offset, int64_t offset, int64_t max_ts,
                           int64_t off_of_max, int64_t append_time, int64_t count, PyObject *infos) {
    PyObject *out[8] = {Py_NewRef(buf), PyLong_FromLongLong(next_offset), PyLong_FromLongLong(offset - 1),
                        PyLong_FromLongLong(max_ts), PyLong_FromLongLong(off_of_max),
                        PyLong_FromLongLong(append_time), PyLong_FromLongLong(count), infos};
    return struct_of(result_type, 8, out);
}

/* assign_v2(buf, spans, fixes, maxes, next_offset, partition_leader_epoch, log_append_time_topic,
 *           append_time, info_type, crc32c, result_type)
 *   -> result_type(buf, next_offset, last_offset, max_timestamp, offset_of_max, append_time, count, infos)
 *
 * The validator's step 5 (Analysis.assign, storage/validator.py) over the batches in
 * ``buf`` (writable, patched in place): base offsets from ``next_offset``, the leader
 * epoch when not None, on LogAppendTime topics the attribute bit and maxTimestamp =
 * ``append_time``, elsewhere a corrected maxTimestamp (``fixes``), with the CRC
 * recomputed where the header changed; ``infos`` are ``info_type(position, size,
 * base_offset, last_offset, max_timestamp, last_offset)`` per batch. */
static PyObject *assign_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    long long next_offset, append_time;
    int lat_topic;
    if (nargs != 11) {
        PyErr_Format(PyExc_TypeError, "assign_v2 takes 11 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *spans = args[1], *fixes = args[2], *maxes = args[3], *epoch_obj = args[5], *info_type = args[8],
             *crc_fn = args[9], *result_type = args[10];
    if (!is_tuple_type(result_type)) {
        PyErr_SetString(PyExc_TypeError, "assign_v2: result_type must be a tuple subclass");
        return NULL;
    }
    if (!PyList_Check(spans) || !PyList_Check(fixes) || !PyList_Check(maxes)) {
        PyErr_SetString(PyExc_TypeError, "assign_v2: spans, fixes and maxes must be lists");
        return NULL;
    }
    if (arg_ll(args[4], &next_offset) < 0 || arg_bool(args[6], &lat_topic) < 0 || arg_ll(args[7], &append_time) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *infos = NULL, *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(spans);
    if (PyList_GET_SIZE(fixes) != n || PyList_GET_SIZE(maxes) != n || !is_tuple_type(info_type)) {
        PyErr_SetString(PyExc_TypeError, "assign_v2: spans, fixes and maxes differ in length, or info_type is not a tuple subclass");
        goto done;
    }
    int has_epoch;
    long epoch;
    if (arg_epoch(epoch_obj, &has_epoch, &epoch) < 0)
        goto done;
    if (!(infos = PyList_New(n)))
        goto done;
    uint8_t *buf = (uint8_t *)view.buf;
    int64_t offset = next_offset, max_ts = -1, off_of_max = -1, count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *span = PyList_GET_ITEM(spans, i);
        if (!PyTuple_Check(span) || PyTuple_GET_SIZE(span) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(span, 1))
            || PyTuple_GET_SIZE(PyTuple_GET_ITEM(span, 1)) < 13) {
            PyErr_SetString(PyExc_TypeError, "assign_v2: a span is not (position, header)");
            goto done;
        }
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(span, 0));
        if (pos == -1 && PyErr_Occurred())
            goto done;
        if (pos < 0 || view.len - pos < HDR) {
            PyErr_SetString(PyExc_ValueError, "assign_v2: a batch lies outside the buffer");
            goto done;
        }
        uint8_t *b = buf + pos;
        Py_ssize_t size = (Py_ssize_t)be32(b + 8) + LOG_OVERHEAD;
        if (size < HDR || view.len - pos < size) {
            PyErr_SetString(PyExc_ValueError, "assign_v2: a batch lies outside the buffer");
            goto done;
        }
        int64_t lod = be32(b + 23), records = be32(b + 57);
        int64_t last = offset + lod, bmax = -1, scanned_max = -1, fix = 0;
        PyObject *fix_obj = PyList_GET_ITEM(fixes, i);
        if (!lat_topic) {
            scanned_max = pyint_as_ll(PyList_GET_ITEM(maxes, i));
            if (scanned_max == -1 && PyErr_Occurred())
                goto done;
            if (fix_obj != Py_None && (fix = pyint_as_ll(fix_obj)) == -1 && PyErr_Occurred())
                goto done;
        }
        if (assign_batch(b, size, offset, has_epoch, epoch, lat_topic, append_time, fix_obj != Py_None, fix,
                         scanned_max, crc_fn, &bmax) < 0)
            goto done;
        if (bmax > max_ts) {
            max_ts = bmax;
            off_of_max = last;
        }
        PyObject *info = batch_info(info_type, pos, size, offset, last, bmax);
        if (!info)
            goto done;
        PyList_SET_ITEM(infos, i, info);
        count += records;
        offset = last + 1;
    }
    result = validated(result_type, args[0], next_offset, offset, max_ts, off_of_max, append_time, count, infos);
    infos = NULL; /* stolen */
done:
    PyBuffer_Release(&view);
    Py_XDECREF(infos);
    return result;
}

/* at most this many batches in one validate_v2 call (one per partition is the rule from
 * Produce v3 on); more go to the two-call path */
#define FUSED_MAX_BATCHES 16

/* what validate_v2 passes on but never changes: the crc32c package's function (batches of
 * 2 KiB and more) and the NamedTuple types of its results, set once by validate_v2_setup */
static PyObject *v2_crc_fn, *v2_info_type, *v2_result_type;

/* validate_v2_setup(crc32c, info_type, result_type) */
static PyObject *validate_v2_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "validate_v2_setup takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!is_tuple_type(args[1]) || !is_tuple_type(args[2])) {
        PyErr_SetString(PyExc_TypeError, "validate_v2_setup: info_type and result_type must be tuple subclasses");
        return NULL;
    }
    Py_XSETREF(v2_crc_fn, Py_NewRef(args[0]));
    Py_XSETREF(v2_info_type, Py_NewRef(args[1]));
    Py_XSETREF(v2_result_type, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* validate_v2(buf, rules, now, next_offset, last_append_time_ms=-1, partition_leader_epoch=None,
 *             max_batches=FUSED_MAX_BATCHES)
 *   -> result_type(buf, ...) as assign_v2, or None
 *
 * ``rules`` as scan_rules reads them. scan_v2 and assign_v2 in one call, for a writable ``buf`` made
 * entirely of batches scan_v2 takes (no trailing partial batch, at most ``max_batches``
 * of them, itself at most FUSED_MAX_BATCHES, in all at most ``segment_bytes``): what
 * Analysis.assign returns for it with ``in_place``, the append time
 * max(now, last_append_time_ms) on a LogAppendTime topic.
 * None, with ``buf`` untouched, for anything else: the two-call path then runs (and
 * names any problem). The storage validator calls it as validate_common, its
 * positional signature. */
static PyObject *validate_v2(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    ScanRules rules;
    long long segment_bytes, next_offset, last_append_time = -1, max_batches = FUSED_MAX_BATCHES;
    if (nargs < 4 || nargs > 7) {
        PyErr_Format(PyExc_TypeError, "validate_v2 takes 4 to 7 arguments (%zd given)", nargs);
        return NULL;
    }
    if (v2_result_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "validate_v2: validate_v2_setup was not called");
        return NULL;
    }
    if (scan_rules(args[1], args[2], &rules, &segment_bytes) < 0 || arg_ll(args[3], &next_offset) < 0
        || (nargs > 4 && arg_ll(args[4], &last_append_time) < 0)
        || (nargs > 6 && arg_ll(args[6], &max_batches) < 0))
        return NULL;
    if (max_batches < 1 || max_batches > FUSED_MAX_BATCHES) {
        PyErr_Format(PyExc_ValueError, "validate_v2: max_batches %lld is not in [1, %d]", max_batches,
                     FUSED_MAX_BATCHES);
        return NULL;
    }
    PyObject *crc_fn = v2_crc_fn, *info_type = v2_info_type, *result_type = v2_result_type;
    int has_epoch;
    long epoch;
    if (arg_epoch(nargs > 5 ? args[5] : Py_None, &has_epoch, &epoch) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) {  /* read-only: the two-call path copies */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    struct { Py_ssize_t pos, size; int64_t true_max, header_max; } spans[FUSED_MAX_BATCHES];
    Py_ssize_t n = 0, pos = 0, end = view.len;
    PyObject *infos = NULL, *result = NULL;
    uint8_t *buf = (uint8_t *)view.buf;
    while (end - pos >= LOG_OVERHEAD) {
        V2Header h;
        int64_t true_max;
        int rc = scan_batch(buf + pos, end - pos, &rules, crc_fn, &h, &true_max);
        if (rc == SCAN_ERROR)
            goto done;
        if (rc != SCAN_TAKEN || n == max_batches)
            goto other;
        spans[n].pos = pos;
        spans[n].size = (Py_ssize_t)h.length + LOG_OVERHEAD;
        spans[n].true_max = true_max;
        spans[n].header_max = h.max_ts;
        pos += spans[n].size;
        n++;
    }
    if (n == 0 || pos != end || (segment_bytes >= 0 && pos > segment_bytes))
        goto other;
    int64_t append_time = rules.lat_topic ? (rules.now > last_append_time ? rules.now : last_append_time) : -1;
    if (!(infos = PyList_New(n)))
        goto done;
    int64_t offset = next_offset, max_ts = -1, off_of_max = -1, count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *b = buf + spans[i].pos;
        int64_t lod = be32(b + 23), last = offset + lod, bmax;
        count += be32(b + 57);
        int has_fix = !rules.lat_topic && spans[i].true_max != spans[i].header_max;
        if (assign_batch(b, spans[i].size, offset, has_epoch, epoch, rules.lat_topic, append_time, has_fix,
                         spans[i].true_max, spans[i].true_max, crc_fn, &bmax) < 0)
            goto done;
        if (bmax > max_ts) {
            max_ts = bmax;
            off_of_max = last;
        }
        PyObject *info = batch_info(info_type, spans[i].pos, spans[i].size, offset, last, bmax);
        if (!info)
            goto done;
        PyList_SET_ITEM(infos, i, info);
        offset = last + 1;
    }
    result = validated(result_type, args[0], next_offset, offset, max_ts, off_of_max, append_time, count, infos);
    infos = NULL; /* stolen */
    goto done;
other:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    Py_XDECREF(infos);
    return result;
}

/* ------------------------------------------------------------------ batch search */

/* find_batch(buf, position, end, offset): the search of LogSegment.translate_offset over
 * one chunk of a segment file.  ``buf`` holds the file's bytes from ``position``; the
 * segment ends at ``end``.  Walks whole v2 batches from the start of ``buf`` and returns
 * (last offset, position, size) of the first whose last offset >= ``offset``; an int, the
 * file position to read the next chunk from, when the next header is not whole in
 * ``buf``; None where the walk stops: a header past ``end``, a magic other than 2, a
 * batchLength below 49, a batch past ``end``.  Reference: record_walk.py_find_batch. */
static PyObject *find_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "find_batch(buf, position, end, offset) takes 4 arguments");
        return NULL;
    }
    long long position = PyLong_AsLongLong(args[1]);
    long long end = PyLong_AsLongLong(args[2]);
    long long target = PyLong_AsLongLong(args[3]);
    if ((position == -1 || end == -1 || target == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len, rel = 0;
    PyObject *result = NULL;
    for (;;) {
        long long pos = position + rel;
        if (pos + 61 > end)
            break;
        if (rel + 61 > n) {
            result = PyLong_FromLongLong(pos);
            goto done;
        }
        const uint8_t *h = b + rel;
        int32_t length = be32(h + 8);
        if (h[16] != 2 || length < 49)
            break;
        long long size = (long long)length + 12;
        if (pos + size > end)
            break;
        __int128 last = (__int128)be64(h) + be32(h + 23);  /* exact, as Python adds them */
        if (last >= target) {
            if (last > INT64_MAX || last < INT64_MIN) {
                PyObject *base = PyLong_FromLongLong(be64(h)), *delta = PyLong_FromLong(be32(h + 23));
                PyObject *sum = base && delta ? PyNumber_Add(base, delta) : NULL;
                Py_XDECREF(base);
                Py_XDECREF(delta);
                result = sum ? Py_BuildValue("(NLL)", sum, pos, size) : NULL;
            } else {
                result = Py_BuildValue("(LLL)", (long long)last, pos, size);
            }
            goto done;
        }
        rel += (Py_ssize_t)size;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef module_methods[] = {
    {"scan_v2", (PyCFunction)(void (*)(void))scan_v2, METH_FASTCALL,
     "scan_v2(buf, rules, now, header_type, crc32c) -> (spans, fixes, maxes) or None "
     "(see storage/validator.py)."},
    {"assign_v2", (PyCFunction)(void (*)(void))assign_v2, METH_FASTCALL,
     "assign_v2(buf, spans, fixes, maxes, next_offset, partition_leader_epoch, log_append_time_topic, "
     "append_time, info_type, crc32c, result_type) -> result_type(buf, next_offset, last_offset, max_timestamp, "
     "offset_of_max, append_time, count, infos)."},
    {"validate_v2", (PyCFunction)(void (*)(void))validate_v2, METH_FASTCALL,
     "validate_v2(buf, rules, now, next_offset, last_append_time_ms=-1, partition_leader_epoch=None, "
     "max_batches=16) -> result_type(...) as assign_v2, or None (see storage/validator.py)."},
    {"validate_v2_setup", (PyCFunction)(void (*)(void))validate_v2_setup, METH_FASTCALL,
     "validate_v2_setup(crc32c, info_type, result_type): what validate_v2 uses and returns."},
    {"find_batch", (PyCFunction)(void (*)(void))find_batch, METH_FASTCALL,
     "find_batch(buf, position, end, offset) -> (last_offset, position, size), the next position to read "
     "from, or None (see storage/segment.py LogSegment.translate_offset)."},
    {"crc32c_small", crc32c_small, METH_O,
     "crc32c_small(data) -> int: the CRC-32C scan_v2 and assign_v2 use below 2 KiB (for the tests)."},
    {"crc32c_table", crc32c_table, METH_O,
     "crc32c_table(data) -> int: the table CRC-32C, used below 2 KiB when the CPU has no CRC32 instruction "
     "(for the tests)."},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_recwalk", "Compiled record walker (see protocol/record_walk.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__recwalk(void) {
    crc_init();
#if CRC_HW_BUILT
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") != 0;
#endif
    if (PyType_Ready(&WalkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    WalkError = PyErr_NewException("protocol._recwalk.WalkError", PyExc_ValueError, NULL);
    if (!WalkError || PyModule_AddObject(m, "WalkError", WalkError) < 0) {
        Py_XDECREF(WalkError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(WalkError);
    Py_INCREF(&WalkerType);
    if (PyModule_AddObject(m, "RecordWalker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(&WalkerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "CRC_HW", crc_hw) < 0) {  /* small CRCs by the CPU's instruction */
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
