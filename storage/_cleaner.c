/* storage/_cleaner.c - the log cleaner's hot loops (storage/cleaner.py drives them).
 *
 * OffsetMap: Kafka's SkimpyOffsetMap idea. A fixed array of slots, each holding a
 * 128-bit hash of a record key (MurmurHash3 x64/128, seed 0; the key itself is never
 * kept), the offset of the record that wins for that key and, for the KIP-280
 * strategies, that record's version (its timestamp, or its header value). Open
 * addressing with linear probing; an empty slot has offset -1. Memory: 24 bytes a slot
 * (32 with versions); the cleaner sizes it from log.cleaner.dedupe.buffer.size.
 *
 * The loops walk v2 record batches as stored in a segment (Kafka's DefaultRecordBatch /
 * DefaultRecord layouts, documented in storage/segment.py and protocol/records.py):
 *
 *   map_batches / filter_batches  whole "plain" batches (no codec, neither control nor
 *                                 transactional) straight from a read buffer; they stop at
 *                                 any other batch and return its position, for Python to
 *                                 handle (decompression, transaction bookkeeping);
 *   map_records / filter_records  the records bytes of one batch (decompressed by Python).
 *
 * Semantics are those of storage/cleaner.py's reference functions (_py_map_records,
 * _py_filter_records), which the tests cross-check against this module; a record is kept
 * by Kafka's Cleaner.shouldRetainRecord rule, generalised to KIP-280 versions:
 *
 *   past the map's latest offset          -> kept
 *   no key                                -> dropped (counted invalid)
 *   not the winner for its key            -> dropped
 *   a tombstone whose batch's delete horizon has passed -> dropped
 *
 * where the winner is the highest offset (strategy offset) or the highest (version,
 * offset) pair (timestamp, header). A record of the clean part of the log that beats the
 * map's entry takes it over (so the newer-by-version record kept by an earlier clean still
 * wins over a later, older-version write).
 *
 * Retained records keep their stored key/value/header bytes; a batch that loses records,
 * or gains a delete horizon (KIP-534: a retained tombstone in a batch that has none), is
 * rebuilt: base timestamp = the horizon (attribute bit 6 set) or, without one, the first
 * retained record's timestamp; deltas re-encoded; lastOffsetDelta, producer fields and
 * codec kept; maxTimestamp = the retained records' maximum (LogAppendTime batches keep
 * theirs); CRC-32C recomputed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *CleanError;

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define ATTR_CODEC 0x07
#define ATTR_LAT 0x08
#define ATTR_TXN 0x10
#define ATTR_CONTROL 0x20
#define ATTR_HORIZON 0x40
#define ABSENT INT64_MIN

enum { STRAT_OFFSET = 0, STRAT_TIMESTAMP = 1, STRAT_HEADER = 2 };
enum { ST_END = 0, ST_PYTHON = 1, ST_FULL = 2 };

/* ------------------------------------------------------------------ byte helpers */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline void put64(uint8_t *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)u; u >>= 8; }
}
static inline void put32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)(u >> 24); p[1] = (uint8_t)(u >> 16); p[2] = (uint8_t)(u >> 8); p[3] = (uint8_t)u;
}
static inline void put16(uint8_t *p, int16_t v) {
    uint16_t u = (uint16_t)v;
    p[0] = (uint8_t)(u >> 8); p[1] = (uint8_t)u;
}

/* zig-zag varints: 0 on success; -1 when malformed or past end */
static inline int rd_varint(const uint8_t **pp, const uint8_t *end, int maxbytes, int64_t *out) {
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < maxbytes; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}
static inline int rd32(const uint8_t **pp, const uint8_t *end, int64_t *out) {
    int64_t v;
    if (rd_varint(pp, end, 5, &v) < 0) return -1;
    *out = (int64_t)(int32_t)v;
    return 0;
}
static inline int rd64(const uint8_t **pp, const uint8_t *end, int64_t *out) { return rd_varint(pp, end, 10, out); }

static inline int wr_varint(uint8_t *p, int64_t v) {
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 0;
    while (u >= 0x80) { p[n++] = (uint8_t)((u & 0x7F) | 0x80); u >>= 7; }
    p[n++] = (uint8_t)u;
    return n;
}

/* ------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];
static int have_sse42 = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8; n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8; n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

static uint32_t crc32c(const uint8_t *p, size_t n) {
#if defined(__x86_64__)
    if (have_sse42) return ~crc_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc_soft(0xFFFFFFFFu, p, n);
}

/* ------------------------------------------------------------------ MurmurHash3 x64/128 */

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
    return k;
}
static inline uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void murmur3_128(const uint8_t *data, size_t len, uint64_t out[2]) {
    const size_t nblocks = len / 16;
    uint64_t h1 = 0, h2 = 0;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = le64(data + i * 16), k2 = le64(data + i * 16 + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + nblocks * 16;
    uint64_t k1 = 0, k2 = 0;
    switch (len & 15) {
    case 15: k2 ^= (uint64_t)tail[14] << 48; /* fall through */
    case 14: k2 ^= (uint64_t)tail[13] << 40; /* fall through */
    case 13: k2 ^= (uint64_t)tail[12] << 32; /* fall through */
    case 12: k2 ^= (uint64_t)tail[11] << 24; /* fall through */
    case 11: k2 ^= (uint64_t)tail[10] << 16; /* fall through */
    case 10: k2 ^= (uint64_t)tail[9] << 8; /* fall through */
    case 9: k2 ^= (uint64_t)tail[8];
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2; /* fall through */
    case 8: k1 ^= (uint64_t)tail[7] << 56; /* fall through */
    case 7: k1 ^= (uint64_t)tail[6] << 48; /* fall through */
    case 6: k1 ^= (uint64_t)tail[5] << 40; /* fall through */
    case 5: k1 ^= (uint64_t)tail[4] << 32; /* fall through */
    case 4: k1 ^= (uint64_t)tail[3] << 24; /* fall through */
    case 3: k1 ^= (uint64_t)tail[2] << 16; /* fall through */
    case 2: k1 ^= (uint64_t)tail[1] << 8; /* fall through */
    case 1: k1 ^= (uint64_t)tail[0];
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= len; h2 ^= len;
    h1 += h2; h2 += h1;
    h1 = fmix64(h1); h2 = fmix64(h2);
    h1 += h2; h2 += h1;
    out[0] = h1; out[1] = h2;
}

/* ------------------------------------------------------------------ OffsetMap */

typedef struct {
    PyObject_HEAD
    uint64_t *hashes;   /* 2 per slot */
    int64_t *offsets;   /* -1: empty */
    int64_t *versions;  /* NULL unless versioned */
    Py_ssize_t slots;
    Py_ssize_t size;
    int versioned;
    int64_t latest_offset;
    int64_t lookups;
    int64_t probes;
} OffsetMap;

static PyTypeObject OffsetMapType;

static int map_init(OffsetMap *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"slots", "versioned", NULL};
    Py_ssize_t slots;
    int versioned = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|p", kw, &slots, &versioned)) return -1;
    if (slots < 1) {
        PyErr_SetString(PyExc_ValueError, "an offset map needs at least one slot");
        return -1;
    }
    PyMem_Free(self->hashes); PyMem_Free(self->offsets); PyMem_Free(self->versions);
    self->hashes = PyMem_Malloc((size_t)slots * 16);
    self->offsets = PyMem_Malloc((size_t)slots * 8);
    self->versions = versioned ? PyMem_Malloc((size_t)slots * 8) : NULL;
    if (!self->hashes || !self->offsets || (versioned && !self->versions)) {
        PyErr_NoMemory();
        return -1;
    }
    self->slots = slots;
    self->versioned = versioned;
    memset(self->offsets, 0xFF, (size_t)slots * 8);
    self->size = 0;
    self->latest_offset = -1;
    self->lookups = self->probes = 0;
    return 0;
}

static void map_dealloc(OffsetMap *self) {
    PyMem_Free(self->hashes); PyMem_Free(self->offsets); PyMem_Free(self->versions);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the slot of hash h: the one holding it, or the empty one where it would go; -1 when
 * every slot is taken by other hashes (the callers keep the map below its slot count) */
static inline Py_ssize_t slot_of(OffsetMap *m, const uint64_t h[2]) {
    Py_ssize_t i = (Py_ssize_t)(h[0] % (uint64_t)m->slots);
    m->lookups++;
    for (Py_ssize_t n = 0; n < m->slots; n++) {
        m->probes++;
        if (m->offsets[i] < 0) return i;
        if (m->hashes[2 * i] == h[0] && m->hashes[2 * i + 1] == h[1]) return i;
        if (++i == m->slots) i = 0;
    }
    return -1;
}

/* Kafka's put (the caller checked the size bound): a new key takes a slot; an existing
 * one is replaced when the record wins: always for strategy offset (offsets only grow),
 * when its version is at least the kept one's otherwise. */
static inline void map_put(OffsetMap *m, const uint64_t h[2], int64_t offset, int64_t version) {
    Py_ssize_t i = slot_of(m, h);
    if (i < 0) return; /* cannot happen: the callers' bound is below the slot count */
    if (m->offsets[i] < 0) {
        m->hashes[2 * i] = h[0];
        m->hashes[2 * i + 1] = h[1];
        m->offsets[i] = offset;
        if (m->versions) m->versions[i] = version;
        m->size++;
    } else if (!m->versions || version >= m->versions[i]) {
        m->offsets[i] = offset;
        if (m->versions) m->versions[i] = version;
    }
    m->latest_offset = offset;
}

static int key_hash(PyObject *key, uint64_t h[2]) {
    Py_buffer b;
    if (PyObject_GetBuffer(key, &b, PyBUF_SIMPLE) < 0) return -1;
    murmur3_128((const uint8_t *)b.buf, (size_t)b.len, h);
    PyBuffer_Release(&b);
    return 0;
}

static PyObject *map_py_put(OffsetMap *self, PyObject *args) {
    PyObject *key;
    long long offset, version = 0;
    if (!PyArg_ParseTuple(args, "OL|L", &key, &offset, &version)) return NULL;
    if (offset < 0) { PyErr_SetString(PyExc_ValueError, "offsets are >= 0"); return NULL; }
    uint64_t h[2];
    if (key_hash(key, h) < 0) return NULL;
    Py_ssize_t i = slot_of(self, h);
    if (i < 0) {
        PyErr_SetString(PyExc_OverflowError, "the offset map is full");
        return NULL;
    }
    map_put(self, h, offset, version);
    Py_RETURN_NONE;
}

static PyObject *map_py_get(OffsetMap *self, PyObject *key) {
    uint64_t h[2];
    if (key_hash(key, h) < 0) return NULL;
    Py_ssize_t i = slot_of(self, h);
    if (i < 0 || self->offsets[i] < 0) Py_RETURN_NONE;
    return Py_BuildValue("LL", (long long)self->offsets[i], (long long)(self->versions ? self->versions[i] : 0));
}

static PyObject *map_py_clear(OffsetMap *self, PyObject *unused) {
    memset(self->offsets, 0xFF, (size_t)self->slots * 8);
    self->size = 0;
    self->latest_offset = -1;
    self->lookups = self->probes = 0;
    Py_RETURN_NONE;
}

static PyObject *map_get_latest(OffsetMap *self, void *c) { return PyLong_FromLongLong(self->latest_offset); }
static int map_set_latest(OffsetMap *self, PyObject *v, void *c) {
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    self->latest_offset = x;
    return 0;
}
static PyObject *map_get_size(OffsetMap *self, void *c) { return PyLong_FromSsize_t(self->size); }
static PyObject *map_get_slots(OffsetMap *self, void *c) { return PyLong_FromSsize_t(self->slots); }
static PyObject *map_get_versioned(OffsetMap *self, void *c) { return PyBool_FromLong(self->versioned); }
static PyObject *map_get_probes(OffsetMap *self, void *c) {
    return Py_BuildValue("LL", (long long)self->lookups, (long long)self->probes);
}

static PyMethodDef map_methods[] = {
    {"put", (PyCFunction)map_py_put, METH_VARARGS, "put(key, offset, version=0): record that key's winner"},
    {"get", (PyCFunction)map_py_get, METH_O, "get(key) -> (offset, version) or None"},
    {"clear", (PyCFunction)map_py_clear, METH_NOARGS, "empty the map"},
    {NULL}};

static PyGetSetDef map_getset[] = {
    {"latest_offset", (getter)map_get_latest, (setter)map_set_latest, "offset of the last record mapped", NULL},
    {"size", (getter)map_get_size, NULL, "keys in the map", NULL},
    {"slots", (getter)map_get_slots, NULL, "capacity in keys", NULL},
    {"versioned", (getter)map_get_versioned, NULL, "whether versions are kept (KIP-280 strategies)", NULL},
    {"probe_stats", (getter)map_get_probes, NULL, "(lookups, probes)", NULL},
    {NULL}};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "storage._cleaner.OffsetMap",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OffsetMap(slots, versioned=False): bounded key-hash -> (offset, version) map",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)map_init,
    .tp_dealloc = (destructor)map_dealloc,
    .tp_methods = map_methods,
    .tp_getset = map_getset,
};

/* ------------------------------------------------------------------ records */

typedef struct {
    int attrs;
    int64_t ts_delta;
    int64_t off_delta;
    const uint8_t *key;  /* NULL: no key */
    int64_t klen;
    int has_value;
    const uint8_t *body; /* keyLength varint .. end of record */
    Py_ssize_t body_len;
    int64_t hdr_version; /* ABSENT unless the header strategy's header holds 8 bytes */
} Rec;

typedef struct {
    int strategy;
    const uint8_t *hname;
    Py_ssize_t hlen;
} Strategy;

/* parse the record at *pp (its length varint); 0 ok, -1 malformed (error set) */
static int parse_record(const uint8_t **pp, const uint8_t *end, const Strategy *st, Rec *r, int64_t index) {
    const uint8_t *p = *pp;
    int64_t len, v;
    if (rd32(&p, end, &len) < 0 || len < 0 || len > end - p) {
        PyErr_Format(CleanError, "record %lld: invalid record length", (long long)index);
        return -1;
    }
    const uint8_t *rend = p + len;
    if (p >= rend) goto bad;
    r->attrs = *p++;
    if (rd64(&p, rend, &r->ts_delta) < 0) goto bad;
    if (rd32(&p, rend, &r->off_delta) < 0) goto bad;
    r->body = p;
    if (rd32(&p, rend, &v) < 0) goto bad;
    if (v >= 0) {
        if (v > rend - p) goto bad;
        r->key = p; r->klen = v; p += v;
    } else {
        r->key = NULL; r->klen = -1;
    }
    if (rd32(&p, rend, &v) < 0) goto bad;
    r->has_value = v >= 0;
    if (v >= 0) {
        if (v > rend - p) goto bad;
        p += v;
    }
    int64_t nh;
    if (rd32(&p, rend, &nh) < 0 || nh < 0) goto bad;
    r->hdr_version = ABSENT;
    for (int64_t i = 0; i < nh; i++) {
        int64_t hk, hv;
        if (rd32(&p, rend, &hk) < 0 || hk < 0 || hk > rend - p) goto bad;
        const uint8_t *hkey = p;
        p += hk;
        if (rd32(&p, rend, &hv) < 0) goto bad;
        const uint8_t *hval = p;
        if (hv >= 0) {
            if (hv > rend - p) goto bad;
            p += hv;
        }
        if (st->strategy == STRAT_HEADER && hk == st->hlen && memcmp(hkey, st->hname, (size_t)hk) == 0)
            r->hdr_version = hv == 8 ? be64(hval) : ABSENT; /* the last occurrence counts */
    }
    if (p != rend) goto bad;
    r->body_len = rend - r->body;
    *pp = rend;
    return 0;
bad:
    PyErr_Format(CleanError, "record %lld: malformed (a length or varint runs past the record)", (long long)index);
    return -1;
}

static inline int64_t version_of(const Strategy *st, const Rec *r, int64_t ts) {
    if (st->strategy == STRAT_TIMESTAMP) return ts;
    if (st->strategy == STRAT_HEADER) return r->hdr_version;
    return 0;
}

typedef struct {
    int64_t base_offset, base_ts;
    int lat;            /* LogAppendTime: every record reads max_ts */
    int64_t max_ts;
} BatchCtx;

static inline int64_t rec_ts(const BatchCtx *b, const Rec *r) { return b->lat ? b->max_ts : b->base_ts + r->ts_delta; }

/* Records are taken WINDOW at a time: parsed and hashed first, their map slots
 * prefetched, then looked up in order, so the cache misses of a large map overlap
 * instead of being paid one after the other. */
#define WINDOW 32

typedef struct {
    Rec r;
    int64_t offset, ts;
    uint64_t h[2];
    int hashed;
} Item;

static inline void hash_and_prefetch(OffsetMap *m, Item *it) {
    murmur3_128(it->r.key, (size_t)it->r.klen, it->h);
    Py_ssize_t s = (Py_ssize_t)(it->h[0] % (uint64_t)m->slots);
    __builtin_prefetch(&m->offsets[s]);
    __builtin_prefetch(&m->hashes[2 * s]);
    if (m->versions) __builtin_prefetch(&m->versions[s]);
    it->hashed = 1;
}

/* parse up to WINDOW records from *pp (record index i0 on); -1 on error */
static int parse_window(const uint8_t **pp, const uint8_t *end, const Strategy *st, const BatchCtx *b, int64_t i0,
                        int64_t count, Item *items) {
    int n = 0;
    for (; n < WINDOW && i0 + n < count; n++) {
        Item *it = &items[n];
        if (parse_record(pp, end, st, &it->r, i0 + n) < 0) return -1;
        it->offset = b->base_offset + it->r.off_delta;
        it->ts = rec_ts(b, &it->r);
        it->hashed = 0;
    }
    return n;
}

/* map every keyed record at or past start_offset; 1 when the map filled (the record
 * that did not fit and those after it are not mapped), 0 when done, -1 on error */
static int map_payload(OffsetMap *m, const uint8_t *p, const uint8_t *end, int64_t count, const BatchCtx *b,
                       int64_t start_offset, const Strategy *st, Py_ssize_t max_entries, int64_t *read) {
    Item items[WINDOW];
    for (int64_t i = 0; i < count;) {
        int n = parse_window(&p, end, st, b, i, count, items);
        if (n < 0) return -1;
        for (int k = 0; k < n; k++)
            if (items[k].r.key && items[k].offset >= start_offset) hash_and_prefetch(m, &items[k]);
        for (int k = 0; k < n; k++) {
            Item *it = &items[k];
            if (it->hashed) {
                if (m->size >= max_entries) return 1;
                map_put(m, it->h, it->offset, version_of(st, &it->r, it->ts));
            }
            (*read)++;
        }
        i += n;
    }
    if (p != end) {
        PyErr_Format(CleanError, "%lld bytes after the %lld records the batch declares", (long long)(end - p),
                     (long long)count);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Out;

static int out_reserve(Out *o, size_t more) {
    if (o->len + more <= o->cap) return 0;
    size_t cap = o->cap ? o->cap : 65536;
    while (cap < o->len + more) cap *= 2;
    uint8_t *d = PyMem_Realloc(o->data, cap);
    if (!d) { PyErr_NoMemory(); return -1; }
    o->data = d;
    o->cap = cap;
    return 0;
}

/* decide the retention of one record (Kafka's shouldRetainRecord with KIP-280 versions) */
typedef struct {
    int64_t latest;        /* the map's latest offset */
    int has_horizon;       /* the batch already carries a delete horizon */
    int64_t horizon;
    int64_t now;
    Py_ssize_t invalid;    /* keyless records dropped */
} Decide;

static inline int retain(OffsetMap *m, const Strategy *st, Decide *d, const Item *it) {
    const Rec *r = &it->r;
    int64_t offset = it->offset, ts = it->ts;
    if (offset > d->latest) return 1;
    if (!r->key) { d->invalid++; return 0; }
    Py_ssize_t i = slot_of(m, it->h);
    int latest_for_key;
    if (i < 0 || m->offsets[i] < 0) {
        latest_for_key = 1;
    } else if (!m->versions) {
        latest_for_key = offset >= m->offsets[i];
    } else {
        int64_t v = version_of(st, r, ts), mv = m->versions[i], mo = m->offsets[i];
        latest_for_key = v > mv || (v == mv && offset >= mo);
        if (v > mv || (v == mv && offset > mo)) { /* a cleaned record still winning: it keeps the key */
            m->offsets[i] = offset;
            m->versions[i] = v;
        }
    }
    if (!latest_for_key) return 0;
    return r->has_value || !d->has_horizon || d->now < d->horizon;
}

/* Filter the records of one batch: decide every record once (the map is asked exactly
 * once per record: versioned take-overs mutate it), then, when ``rebuilt`` is given and
 * the batch must change (records dropped, or a horizon to set), append the retained
 * records re-encoded to it. ``horizon_candidate`` (INT64_MIN: none) becomes the batch's
 * delete horizon when it keeps a tombstone and has none yet. 0 / -1 (error). */
typedef struct {
    int64_t retained, tombstones, read;
    int64_t max_ts, first_ts;
    int all_retained;
    int rebuilt;         /* records were re-encoded into ``rebuilt`` */
    int64_t base_ts;     /* the rebuilt batch's base timestamp */
    int horizon_set;     /* the rebuilt batch gets the delete horizon flag (new or kept) */
} FilterRes;

static int filter_payload(OffsetMap *m, const Strategy *st, Decide *d, const uint8_t *p, const uint8_t *end,
                          int64_t count, const BatchCtx *b, int64_t horizon_candidate, Out *rebuilt, FilterRes *fr) {
    uint8_t stackbits[512];
    size_t nbits = (size_t)(count + 7) / 8;
    uint8_t *keep = nbits <= sizeof(stackbits) ? stackbits : PyMem_Malloc(nbits);
    if (!keep) { PyErr_NoMemory(); return -1; }
    memset(keep, 0, nbits);
    const uint8_t *start = p;
    Rec r;
    Item items[WINDOW];
    memset(fr, 0, sizeof(*fr));
    fr->max_ts = -1;
    fr->first_ts = INT64_MIN;
    for (int64_t i0 = 0; i0 < count;) {
        int n = parse_window(&p, end, st, b, i0, count, items);
        if (n < 0) goto fail;
        for (int k = 0; k < n; k++)
            if (items[k].r.key && items[k].offset <= d->latest) hash_and_prefetch(m, &items[k]);
        for (int k = 0; k < n; k++) {
            const Item *it = &items[k];
            int64_t i = i0 + k;
            fr->read++;
            if (retain(m, st, d, it)) {
                keep[i >> 3] |= (uint8_t)(1 << (i & 7));
                fr->retained++;
                if (!it->r.has_value) fr->tombstones++;
                if (fr->first_ts == INT64_MIN) fr->first_ts = it->ts;
                if (it->ts > fr->max_ts) fr->max_ts = it->ts;
            }
        }
        i0 += n;
    }
    if (p != end) {
        PyErr_Format(CleanError, "%lld bytes after the %lld records the batch declares", (long long)(end - p),
                     (long long)count);
        goto fail;
    }
    fr->all_retained = fr->retained == count;
    int set_new = horizon_candidate != INT64_MIN && fr->tombstones && !d->has_horizon;
    if (rebuilt && fr->retained && (!fr->all_retained || set_new)) {
        int64_t base_ts = set_new ? horizon_candidate : (d->has_horizon ? d->horizon : fr->first_ts);
        fr->rebuilt = 1;
        fr->base_ts = base_ts;
        fr->horizon_set = set_new || d->has_horizon;
        p = start;
        for (int64_t i = 0; i < count; i++) {
            parse_record(&p, end, st, &r, i); /* parsed once already: cannot fail */
            if (!(keep[i >> 3] & (1 << (i & 7)))) continue;
            int64_t offset = b->base_offset + r.off_delta, ts = rec_ts(b, &r);
            uint8_t tmp[1 + 10 + 10];
            int n = 0;
            tmp[n++] = (uint8_t)r.attrs;
            n += wr_varint(tmp + n, ts - base_ts);
            n += wr_varint(tmp + n, offset - b->base_offset);
            if (out_reserve(rebuilt, 10 + (size_t)n + (size_t)r.body_len) < 0) goto fail;
            rebuilt->len += (size_t)wr_varint(rebuilt->data + rebuilt->len, n + r.body_len);
            memcpy(rebuilt->data + rebuilt->len, tmp, (size_t)n);
            rebuilt->len += (size_t)n;
            memcpy(rebuilt->data + rebuilt->len, r.body, (size_t)r.body_len);
            rebuilt->len += (size_t)r.body_len;
        }
    }
    if (keep != stackbits) PyMem_Free(keep);
    return 0;
fail:
    if (keep != stackbits) PyMem_Free(keep);
    return -1;
}

/* ------------------------------------------------------------------ batch headers */

typedef struct {
    int64_t base_offset;
    int32_t length;
    int32_t ple;
    int8_t magic;
    int16_t attrs;
    int32_t last_delta;
    int64_t base_ts, max_ts, pid;
    int16_t epoch;
    int32_t base_seq, count;
} Hdr;

static inline void read_hdr(const uint8_t *p, Hdr *h) {
    h->base_offset = be64(p);
    h->length = be32(p + 8);
    h->ple = be32(p + 12);
    h->magic = (int8_t)p[16];
    h->attrs = be16(p + 21);
    h->last_delta = be32(p + 23);
    h->base_ts = be64(p + 27);
    h->max_ts = be64(p + 35);
    h->pid = be64(p + 43);
    h->epoch = be16(p + 51);
    h->base_seq = be32(p + 53);
    h->count = be32(p + 57);
}

static void write_hdr(uint8_t *p, const Hdr *h, int32_t length, int16_t attrs, int64_t base_ts, int64_t max_ts,
                      int32_t count) {
    put64(p, h->base_offset);
    put32(p + 8, length);
    put32(p + 12, h->ple);
    p[16] = 2;
    put16(p + 21, attrs);
    put32(p + 23, h->last_delta);
    put64(p + 27, base_ts);
    put64(p + 35, max_ts);
    put64(p + 43, h->pid);
    put16(p + 51, h->epoch);
    put32(p + 53, h->base_seq);
    put32(p + 57, count);
    put32(p + 17, (int32_t)crc32c(p + 21, (size_t)length + LOG_OVERHEAD - 21));
}

/* the whole v2 batch at pos: 1 (header in h), 0 (incomplete: need more bytes), -1 (error) */
static int batch_at(const uint8_t *buf, Py_ssize_t len, Py_ssize_t pos, Hdr *h) {
    if (len - pos < HEADER_SIZE) return 0;
    read_hdr(buf + pos, h);
    if (h->magic != 2) {
        PyErr_Format(CleanError, "batch at position %zd has magic %d, not 2", pos, (int)h->magic);
        return -1;
    }
    if (h->length < HEADER_SIZE - LOG_OVERHEAD) {
        PyErr_Format(CleanError, "batch at position %zd has batchLength %d", pos, (int)h->length);
        return -1;
    }
    if ((int64_t)h->length + LOG_OVERHEAD > len - pos) return 0;
    return 1;
}

static inline int is_plain(const Hdr *h) { return !(h->attrs & (ATTR_CODEC | ATTR_TXN | ATTR_CONTROL)); }

static int parse_strategy(int strategy, Py_buffer *hname, Strategy *st) {
    if (strategy < 0 || strategy > 2) {
        PyErr_Format(PyExc_ValueError, "unknown compaction strategy %d", strategy);
        return -1;
    }
    st->strategy = strategy;
    st->hname = hname && hname->buf ? (const uint8_t *)hname->buf : (const uint8_t *)"";
    st->hlen = hname && hname->buf ? hname->len : 0;
    return 0;
}

/* ------------------------------------------------------------------ module functions */

/* the error being raised, prefixed with the offset of the batch it is in */
static void name_batch(int64_t base_offset) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_Format(CleanError, "batch at offset %lld: %S", (long long)base_offset, v ? v : Py_None);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
}

/* map_batches(map, buf, pos, start_offset, strategy, header_name, max_entries)
 *   -> (pos, status, records_read, bytes_read) */
static PyObject *py_map_batches(PyObject *self, PyObject *args) {
    OffsetMap *m;
    Py_buffer buf, hname = {0};
    Py_ssize_t pos, max_entries;
    long long start_offset;
    int strategy;
    if (!PyArg_ParseTuple(args, "O!y*nLiy*n", &OffsetMapType, &m, &buf, &pos, &start_offset, &strategy, &hname,
                          &max_entries))
        return NULL;
    Strategy st;
    PyObject *res = NULL;
    int64_t read = 0, bytes = 0;
    int status = ST_END;
    if (parse_strategy(strategy, &hname, &st) < 0) goto done;
    if (m->versions == NULL && strategy != STRAT_OFFSET) {
        PyErr_SetString(PyExc_ValueError, "a KIP-280 strategy needs a versioned map");
        goto done;
    }
    const uint8_t *b = buf.buf;
    Hdr h;
    for (;;) {
        int got = batch_at(b, buf.len, pos, &h);
        if (got < 0) goto done;
        if (got == 0) { status = ST_END; break; }
        if (!is_plain(&h)) { status = ST_PYTHON; break; }
        BatchCtx bc = {h.base_offset, h.base_ts, (h.attrs & ATTR_LAT) != 0, h.max_ts};
        int64_t size = (int64_t)h.length + LOG_OVERHEAD;
        int r = map_payload(m, b + pos + HEADER_SIZE, b + pos + size, h.count, &bc, start_offset, &st, max_entries,
                            &read);
        if (r < 0) {
            name_batch(h.base_offset);
            goto done;
        }
        if (r == 1) { status = ST_FULL; break; }
        if (h.base_offset + h.last_delta >= start_offset) m->latest_offset = h.base_offset + h.last_delta;
        pos += size;
        bytes += size;
    }
    res = Py_BuildValue("niLL", pos, status, (long long)read, (long long)bytes);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&hname);
    return res;
}

/* map_records(map, data, count, base_offset, base_ts, lat, max_ts, start_offset, strategy, header_name,
 *             max_entries) -> (full, records_read) */
static PyObject *py_map_records(PyObject *self, PyObject *args) {
    OffsetMap *m;
    Py_buffer data, hname = {0};
    long long count, base_offset, base_ts, max_ts, start_offset;
    int lat, strategy;
    Py_ssize_t max_entries;
    if (!PyArg_ParseTuple(args, "O!y*LLLpLLiy*n", &OffsetMapType, &m, &data, &count, &base_offset, &base_ts, &lat,
                          &max_ts, &start_offset, &strategy, &hname, &max_entries))
        return NULL;
    PyObject *res = NULL;
    Strategy st;
    int64_t read = 0;
    if (parse_strategy(strategy, &hname, &st) < 0) goto done;
    BatchCtx bc = {base_offset, base_ts, lat, max_ts};
    const uint8_t *p = data.buf;
    int r = map_payload(m, p, p + data.len, count, &bc, start_offset, &st, max_entries, &read);
    if (r >= 0) res = Py_BuildValue("OL", r ? Py_True : Py_False, (long long)read);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&hname);
    return res;
}

/* filter_records(map, data, count, base_offset, base_ts, lat, max_ts, latest_offset, horizon, now,
 *                set_horizon, strategy, header_name)
 *   horizon: the batch's delete horizon or None; set_horizon: the horizon to give the batch
 *   if it keeps a tombstone and has none (or None: never).
 *   -> (retained, tombstones, all_retained, records_bytes or None (unchanged), base_ts, max_ts,
 *       horizon_flag, invalid) */
static PyObject *py_filter_records(PyObject *self, PyObject *args) {
    OffsetMap *m;
    Py_buffer data, hname = {0};
    long long count, base_offset, base_ts, max_ts, latest, now;
    int lat, strategy;
    PyObject *horizon_o, *set_o;
    if (!PyArg_ParseTuple(args, "O!y*LLLpLLOLOiy*", &OffsetMapType, &m, &data, &count, &base_offset, &base_ts, &lat,
                          &max_ts, &latest, &horizon_o, &now, &set_o, &strategy, &hname))
        return NULL;
    PyObject *res = NULL;
    Strategy st;
    Out rebuilt = {0};
    if (parse_strategy(strategy, &hname, &st) < 0) goto done;
    Decide d = {latest, horizon_o != Py_None, 0, now, 0};
    if (d.has_horizon) {
        d.horizon = PyLong_AsLongLong(horizon_o);
        if (d.horizon == -1 && PyErr_Occurred()) goto done;
    }
    BatchCtx bc = {base_offset, base_ts, lat, max_ts};
    const uint8_t *p = data.buf;
    FilterRes fr;
    int64_t cand = INT64_MIN;
    if (set_o != Py_None) {
        cand = PyLong_AsLongLong(set_o);
        if (cand == -1 && PyErr_Occurred()) goto done;
    }
    if (filter_payload(m, &st, &d, p, p + data.len, count, &bc, cand, &rebuilt, &fr) < 0) goto done;
    PyObject *payload;
    if (fr.rebuilt) {
        payload = PyBytes_FromStringAndSize((const char *)rebuilt.data, (Py_ssize_t)rebuilt.len);
        if (!payload) goto done;
    } else {
        payload = Py_NewRef(Py_None);
    }
    res = Py_BuildValue("LLONLLOn", (long long)fr.retained, (long long)fr.tombstones,
                        fr.all_retained ? Py_True : Py_False, payload, (long long)(fr.rebuilt ? fr.base_ts : base_ts),
                        (long long)(lat ? max_ts : fr.max_ts), fr.horizon_set ? Py_True : Py_False, d.invalid);
done:
    PyMem_Free(rebuilt.data);
    PyBuffer_Release(&data);
    PyBuffer_Release(&hname);
    return res;
}

/* filter_batches(map, buf, pos, now, delete_retention_ms, protected, upper_bound, strategy, header_name)
 *   Plain batches from pos on, into a new buffer of retained batches.
 *   protected: a set of batch last offsets kept even when empty (a producer's last batch);
 *   upper_bound: a batch ending just below it is kept even when empty (the round's last).
 *   -> (pos, status, out_bytes, [(out_pos, size, last_offset, max_ts), ...],
 *       (records_read, bytes_read, records_kept, bytes_kept, invalid), position of the last batch
 *       read or -1) */
static PyObject *py_filter_batches(PyObject *self, PyObject *args) {
    OffsetMap *m;
    Py_buffer buf, hname = {0};
    Py_ssize_t pos;
    long long now, retention, upper;
    PyObject *protect;
    int strategy;
    if (!PyArg_ParseTuple(args, "O!y*nLLOLiy*", &OffsetMapType, &m, &buf, &pos, &now, &retention, &protect, &upper,
                          &strategy, &hname))
        return NULL;
    PyObject *res = NULL, *infos = PyList_New(0);
    Out out = {0};
    Strategy st;
    int status = ST_END;
    int64_t read = 0, bytes_read = 0, kept = 0, bytes_kept = 0;
    Py_ssize_t invalid = 0, last_pos = -1;
    if (!infos || parse_strategy(strategy, &hname, &st) < 0) goto done;
    if (protect != Py_None && !PyAnySet_Check(protect)) {
        PyErr_SetString(PyExc_TypeError, "protected must be a set or None");
        goto done;
    }
    int64_t set_horizon = now > INT64_MAX - retention ? INT64_MAX : now + retention;
    const uint8_t *b = buf.buf;
    Hdr h;
    for (;;) {
        int got = batch_at(b, buf.len, pos, &h);
        if (got < 0) goto done;
        if (got == 0) { status = ST_END; break; }
        if (!is_plain(&h)) { status = ST_PYTHON; break; }
        last_pos = pos;
        int64_t size = (int64_t)h.length + LOG_OVERHEAD;
        int64_t last = h.base_offset + h.last_delta;
        const uint8_t *payload = b + pos + HEADER_SIZE, *pend = b + pos + size;
        BatchCtx bc = {h.base_offset, h.base_ts, (h.attrs & ATTR_LAT) != 0, h.max_ts};
        Decide d = {m->latest_offset, (h.attrs & ATTR_HORIZON) != 0, h.base_ts, now, 0};
        FilterRes fr;
        size_t at = out.len;
        if (out_reserve(&out, HEADER_SIZE) < 0) goto done;
        out.len += HEADER_SIZE;
        if (filter_payload(m, &st, &d, payload, pend, h.count, &bc, set_horizon, &out, &fr) < 0) {
            name_batch(h.base_offset);
            goto done;
        }
        invalid += d.invalid;
        read += fr.read;
        bytes_read += size;
        int64_t out_max;
        if (fr.retained == 0) {
            out.len = at;
            int keep_empty = last + 1 == upper;
            if (!keep_empty && h.pid >= 0 && protect != Py_None) {
                PyObject *k = PyLong_FromLongLong(last);
                if (!k) goto done;
                int c = PySet_Contains(protect, k);
                Py_DECREF(k);
                if (c < 0) goto done;
                keep_empty = c;
            }
            if (!keep_empty) { pos += size; continue; }
            if (out_reserve(&out, HEADER_SIZE) < 0) goto done;
            write_hdr(out.data + at, &h, HEADER_SIZE - LOG_OVERHEAD,
                      (int16_t)(h.attrs & (ATTR_LAT | ATTR_TXN | ATTR_CONTROL)), -1, h.max_ts, 0);
            out.len = at + HEADER_SIZE;
            out_max = h.max_ts;
        } else if (!fr.rebuilt) {
            out.len = at;
            if (out_reserve(&out, (size_t)size) < 0) goto done;
            memcpy(out.data + at, b + pos, (size_t)size);
            out.len += (size_t)size;
            out_max = h.max_ts;
        } else {
            int16_t attrs = (int16_t)((h.attrs & ~ATTR_HORIZON) | (fr.horizon_set ? ATTR_HORIZON : 0));
            out_max = bc.lat ? h.max_ts : fr.max_ts;
            write_hdr(out.data + at, &h, (int32_t)(out.len - at - LOG_OVERHEAD), attrs, fr.base_ts, out_max,
                      (int32_t)fr.retained);
        }
        kept += fr.retained;
        bytes_kept += (int64_t)(out.len - at);
        PyObject *info = Py_BuildValue("nnLL", (Py_ssize_t)at, (Py_ssize_t)(out.len - at), (long long)last,
                                       (long long)out_max);
        if (!info || PyList_Append(infos, info) < 0) { Py_XDECREF(info); goto done; }
        Py_DECREF(info);
        pos += size;
    }
    {
        PyObject *ob = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
        if (!ob) goto done;
        res = Py_BuildValue("niNO(LLLLn)n", pos, status, ob, infos, (long long)read, (long long)bytes_read,
                            (long long)kept, (long long)bytes_kept, invalid, last_pos);
    }
done:
    Py_XDECREF(infos);
    PyMem_Free(out.data);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&hname);
    return res;
}

/* key_hash(key) -> 16 bytes (the map's hash; tests and dump tools) */
static PyObject *py_key_hash(PyObject *self, PyObject *key) {
    uint64_t h[2];
    if (key_hash(key, h) < 0) return NULL;
    uint8_t out[16];
    memcpy(out, h, 16);
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

static PyObject *py_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c = crc32c(b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef module_methods[] = {
    {"map_batches", py_map_batches, METH_VARARGS, "map the keys of plain batches"},
    {"map_records", py_map_records, METH_VARARGS, "map the keys of one batch's records"},
    {"filter_batches", py_filter_batches, METH_VARARGS, "filter plain batches"},
    {"filter_records", py_filter_records, METH_VARARGS, "filter one batch's records"},
    {"key_hash", py_key_hash, METH_O, "the map's 128-bit key hash"},
    {"crc32c", py_crc32c, METH_O, "CRC-32C (the batches' checksum)"},
    {NULL}};

static struct PyModuleDef cleaner_module = {PyModuleDef_HEAD_INIT, "storage._cleaner",
                                            "The log cleaner's hot loops (see storage/cleaner.py).", -1,
                                            module_methods};

PyMODINIT_FUNC PyInit__cleaner(void) {
    crc_init();
    if (PyType_Ready(&OffsetMapType) < 0) return NULL;
    PyObject *m = PyModule_Create(&cleaner_module);
    if (!m) return NULL;
    CleanError = PyErr_NewException("storage._cleaner.CleanError", PyExc_ValueError, NULL);
    if (!CleanError || PyModule_AddObject(m, "CleanError", CleanError) < 0) return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) return NULL;
    PyModule_AddIntConstant(m, "ST_END", ST_END);
    PyModule_AddIntConstant(m, "ST_PYTHON", ST_PYTHON);
    PyModule_AddIntConstant(m, "ST_FULL", ST_FULL);
    return m;
}
